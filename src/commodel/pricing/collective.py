"""The collective job (``commodel collective``'s options, the ``collective`` evaluator's inputs) and
its table pricing: one collective call per row, as nccl-tests reports it.

Rows give the collective, system, GPUs, size and the choice policy (``auto``: NCCL's own choice;
``best``: the fastest; or one algorithm), plus run settings (forced channels, launch mode, NVLS,
SHARP, partition). Outputs: time, algbw and busbw (nccl-tests conventions), the channels and chunk
size used, the chosen algorithm/protocol as text, and the fastest path the library offers there with
its time (``fastest``, ``fastest_time_s``: what a tuner plugin could take, where the choice trails it);
a choice the system cannot run (an algorithm it lacks) makes the row invalid with the reason in
``problem``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from commodel.comm.calls import run, unheld
from commodel.comm.collectives import ALGORITHMS, LIBRARIES, POLICIES
from commodel.comm.fabric import LAUNCH_MODES, Fabric, fabric_of
from commodel.comm.mpi import OPS
from commodel.comm.p2p import PROTOCOLS
from commodel.comm.tables import MAX_CHANNELS
from commodel.errors import CommodelError
from commodel.hardware import HardwareDB
from commodel.hardware import cluster as make_cluster
from commodel.hardware.cluster import Cluster
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import (
    FABRIC,
    MAX_GPUS,
    MAX_NODES,
    SYSTEM,
    Choices,
    Job,
    Oversubscription,
    PodGpus,
    TraysPerRack,
    cluster_shape,
)
from commodel.pricing.table import Columns, blank_outputs, groups, numbers, take


class CollectiveJob(Job):
    """A collective call as nccl-tests runs it: the operation, where, how large, and how chosen."""

    noun = "collective"
    op: Annotated[str, Choices("collective", OPS)] = Field(
        "allreduce", description="allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv."
    )
    system: Annotated[str, SYSTEM] = Field(
        "dgx-h100", description="System (node) name from the hardware database."
    )
    nodes: int = Field(1, ge=1, le=MAX_NODES, description="Nodes in the cluster.")
    gpus: int | None = Field(None, ge=1, le=MAX_GPUS, description="GPUs taking part (default: all of them).")
    fabric: Annotated[str, FABRIC] = Field(
        "", description="Scale-out fabric instead of the system's own (a link name)."
    )
    nics: int | None = Field(
        None, ge=1, description="NICs per node the run uses (NCCL_IB_HCA; default: all the node's NICs)."
    )
    size_bytes: float = Field(gt=0, le=2**50, description="Bytes per call (nccl-tests' size).")
    algo: Annotated[str, Choices("algorithm", (*POLICIES, *ALGORITHMS))] = Field(
        "auto",
        description="auto (NCCL's own choice), best (the fastest), or one of ring, tree, nvls, nvls-tree, "
        "collnet-direct, collnet-chain, pat, recursive-doubling, ...",
    )
    protocol: Annotated[str, Choices("protocol", ("auto", *PROTOCOLS))] = Field(
        "auto", description="auto, ll, ll128 or simple."
    )
    library: Annotated[str, Choices("library", LIBRARIES)] = Field(
        "nccl", description="Algorithms to choose from: nccl (what NCCL/RCCL implement) or all."
    )
    channels: int | None = Field(
        None, ge=1, le=MAX_CHANNELS, description="Force this many channels (CTAs), as a tuner plugin may."
    )
    launch: Annotated[str, Choices("launch mode", LAUNCH_MODES)] = Field(
        "stream", description="stream (a kernel launch per call, nccl-tests' default) or graph (CUDA graph)."
    )
    gpus_per_process: int = Field(
        1, ge=1, description="GPUs one process drives (nccl-tests -g); its launches serialize."
    )
    partition: int | None = Field(
        None, ge=1, description="GPUs per NVLink partition of a rack-scale domain (e.g. 4 on NVL72)."
    )
    pod_gpus: PodGpus = None
    oversubscription: Oversubscription = None
    trays_per_rack: TraysPerRack = None
    nvls: bool = Field(True, description="Allow NVLink SHARP (NVLS).")
    sharp: bool = Field(
        False, description="Let the scale-out switches reduce (CollNet/SHARP) where they can."
    )


OUTPUTS = (
    "time_s",
    "algbw_GBps",
    "busbw_GBps",
    "channels_used",
    "chunk_bytes",
    "chosen",
    "fastest",
    "fastest_time_s",
    "problem",
    "valid",
)
TEXT_OUTPUTS = ("chosen", "fastest", "problem")


def _optional(value: object) -> int | None:
    return None if value is None or value != value else int(value)


def cluster_and_fabric(job: Mapping[str, Any], db: HardwareDB | None = None) -> tuple[Cluster, Fabric]:
    """The cluster and fabric a collective job's settings describe (``job``: its fields; an unset
    optional one may be None or NaN), on ``db`` (default: the hardware database in use)."""
    where = make_cluster(
        job["system"], int(job["nodes"]), db, scale_out=job.get("fabric") or None,
        partition=_optional(job["partition"]), nics=_optional(job.get("nics")), **cluster_shape(job),
    )  # fmt: skip
    per_process, gpus = int(job["gpus_per_process"]), _optional(job["gpus"]) or where.total_gpus
    if gpus % per_process:
        raise CommodelError(
            f"--gpus-per-process {per_process} does not divide the {gpus} GPUs into processes (nccl-tests -g)"
        )
    fab = fabric_of(where, sharp=bool(job["sharp"]), launch=job["launch"], nvls=bool(job["nvls"]),
                    gpus_per_process=per_process)  # fmt: skip
    return where, fab


def price_collectives(columns: Columns) -> Columns:
    """The ``collective`` evaluator's pricing: every size of a group of rows that share their settings
    in one call of the collective model; a size whose buffer its GPUs cannot hold is refused
    (:func:`~commodel.comm.calls.unheld`)."""
    out = blank_outputs(len(columns["size_bytes"]), OUTPUTS, text=TEXT_OUTPUTS)
    settings = [name for name in CollectiveJob.model_fields if name != "size_bytes"]
    for key, rows in groups(columns, settings):
        try:
            where, fab = cluster_and_fabric(key)
            sizes = numbers(take(columns, "size_bytes", rows))
            held = sizes <= where.gpu.memory_capacity.value  # the rest: a buffer no GPU of it holds
            out["problem"][rows[~held]] = [unheld(where, size) for size in sizes[~held]]
            rows = rows[held]
            result = run(key["op"], where, sizes[held], _optional(key["gpus"]),
                         key["algo"], key["protocol"], key["library"], _optional(key["channels"]), fab)  # fmt: skip
        except CommodelError as exc:  # a choice this system cannot run
            out["problem"][rows] = str(exc)
            continue
        for name in ("time_s", "algbw_GBps", "busbw_GBps", "chunk_bytes", "fastest_time_s"):
            out[name][rows] = result[name].to_numpy(dtype=float)
        out["channels_used"][rows] = result["channels"].to_numpy(dtype=float)
        out["chosen"][rows] = (result.algo + "/" + result.protocol).to_numpy()
        out["fastest"][rows] = result.fastest.to_numpy()
        out["valid"][rows] = np.isfinite(result.time_s.to_numpy())
    return out


def collective() -> Evaluator:
    return Evaluator(
        "collective",
        "a collective call per row: time, algbw, busbw, channels, chunk, the chosen algorithm and the fastest",
        CollectiveJob,
        OUTPUTS,
        price_collectives,
        text=TEXT_OUTPUTS,
    )
