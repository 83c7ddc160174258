"""Evaluators of GPU-initiated communication (:mod:`commodel.comm.initiation`): one message per scheme
and fabric (``initiation``) and a stencil's halo exchange (``halo``, :mod:`commodel.workloads.hpc.stencil`);
a MoE layer's dispatch and combine is :mod:`commodel.pricing.dispatch`'s. A scheme a fabric's NIC
cannot run is a row with ``valid = False`` and the reason in ``problem``.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

from pydantic import Field

from commodel.comm.calls import require_held
from commodel.comm.initiation import SCHEMES, coordination_latency, message_rate, path_of, put_latency
from commodel.hardware import cluster, nodes_for
from commodel.hardware.cluster import Cluster
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import SYSTEM, Choices, Job
from commodel.workloads.hpc import stencil
from commodel.workloads.hpc.stencil import SEVEN_POINT, iteration_time, weak_efficiency


class MessageJob(Job):
    """One message between two nodes of a system, by one initiation scheme."""

    noun = "initiation"
    system: Annotated[str, SYSTEM] = Field("dgx-h100", description="System (node) name.")
    scheme: Annotated[str, Choices("initiation scheme", SCHEMES)] = Field(
        description="Who drives the message."
    )
    size_bytes: float = Field(8, gt=0, description="Message size, bytes.")


class HaloJob(Job):
    """One iteration of a 3-D stencil's halo exchange, weak scaling."""

    noun = "halo"
    system: Annotated[str, SYSTEM] = Field("frontier-node", description="System (node) name.")
    scheme: Annotated[str, Choices("halo-exchange scheme", stencil.SCHEMES)] = Field(
        description="Who drives the exchange."
    )
    n: int = Field(128, ge=1, description="Cells per side of each GPU's subdomain.")
    gpus: int = Field(ge=1, description="GPUs, one subdomain each.")
    halo: int = Field(1, ge=1, description="Halo depth, cells.")


def _cluster_of(system: str, gpus: int) -> Cluster:
    """Enough nodes of ``system`` for ``gpus`` GPUs (at least one)."""
    return cluster(system, nodes_for(system, gpus))


def _message(row: object) -> dict:
    pair = cluster(row.system, 2)
    require_held(pair, float(row.size_bytes), "a message's sender")
    path = path_of(pair)
    return {
        "put_us": 1e6 * float(put_latency(row.scheme, path, float(row.size_bytes))),
        "coordination_us": 1e6 * float(coordination_latency(row.scheme, path)),
        "messages_per_s": message_rate(row.scheme, path),
    }


def _halo(row: object) -> dict:
    c = _cluster_of(row.system, int(row.gpus))
    kernel = dataclasses.replace(SEVEN_POINT, halo=int(row.halo))
    r = iteration_time(row.scheme, c, int(row.n), int(row.gpus), kernel)
    return {"iteration_us": 1e6 * r["time_s"], "comm_us": 1e6 * r["comm_s"], "compute_us": 1e6 * r["compute_s"],
            "efficiency": weak_efficiency(row.scheme, c, int(row.n), int(row.gpus), kernel)}  # fmt: skip


MESSAGE_OUTPUTS = ("put_us", "coordination_us", "messages_per_s", "problem", "valid")
HALO_OUTPUTS = ("iteration_us", "comm_us", "compute_us", "efficiency", "problem", "valid")


def initiation() -> Evaluator:
    return Evaluator.row_by_row(
        "initiation",
        "one message between two nodes by an initiation scheme: put and coordination latency, message rate",
        MessageJob, MESSAGE_OUTPUTS, _message, ("problem",),
    )  # fmt: skip


def halo() -> Evaluator:
    return Evaluator.row_by_row(
        "halo",
        "a 3-D stencil's halo exchange per iteration (weak scaling): time, communication, efficiency",
        HaloJob, HALO_OUTPUTS, _halo, ("problem",),
    )  # fmt: skip
