"""Evaluators of GPU-initiated communication (:mod:`commodel.comm.initiation`): one message per scheme
and fabric (``initiation``), a stencil's halo exchange (``halo``, :mod:`commodel.workloads.stencil`) and
a MoE layer's dispatch and combine (``moe-dispatch``, :mod:`commodel.workloads.moe_dispatch`). A scheme
a fabric's NIC cannot run is a row with ``valid = False`` and the reason in ``problem``.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from commodel.comm.initiation import coordination_latency, message_rate, path_of, put_latency
from commodel.errors import CommodelError
from commodel.hardware import cluster
from commodel.hardware.cluster import Cluster
from commodel.pricing.evaluator import Evaluator, blank_outputs
from commodel.workloads.catalog import model as get_model
from commodel.workloads.moe_dispatch import dispatch_combine
from commodel.workloads.stencil import iteration_time, weak_efficiency


def _rows(frame: pd.DataFrame, outputs: tuple[str, ...], price: Callable[[object], dict]) -> pd.DataFrame:
    """``price`` each row; a :class:`CommodelError` makes the row invalid with its message."""
    out = blank_outputs(len(frame), outputs, text=tuple(n for n in ("problem", "binding") if n in outputs))
    for i, row in enumerate(frame.itertuples(index=False)):
        try:
            values = price(row)
        except CommodelError as exc:
            out["problem"][i] = str(exc)
            continue
        for name, value in values.items():
            out[name][i] = value
        out["valid"][i] = True
    return frame.assign(**out)


def _cluster_of(system: str, gpus: int) -> Cluster:
    """Enough nodes of ``system`` for ``gpus`` GPUs (at least one)."""
    return cluster(system, max(gpus // cluster(system).gpus_per_node, 1))


def _message(row: object) -> dict:
    path = path_of(cluster(row.system, 2))
    return {
        "put_us": 1e6 * float(put_latency(row.scheme, path, float(row.size_bytes))),
        "coordination_us": 1e6 * float(coordination_latency(row.scheme, path)),
        "messages_per_s": message_rate(row.scheme, path),
    }


def _halo_rows(frame: pd.DataFrame, outputs: tuple[str, ...]) -> pd.DataFrame:
    """Halo rows; a halo too deep for its subdomain is an input error, not an infeasible design."""
    bad = frame[2 * frame.halo.astype(int) >= frame.n.astype(int)]
    if len(bad):
        row = bad.iloc[0]
        raise CommodelError(f"a halo of {row.halo} cells does not fit a subdomain of {row.n} cells per side")
    return _rows(frame, outputs, _halo)


def _halo(row: object) -> dict:
    c = _cluster_of(row.system, int(row.gpus))
    r = iteration_time(row.scheme, c, int(row.n), int(row.gpus), int(row.halo))
    return {"iteration_us": 1e6 * r["time_s"], "comm_us": 1e6 * r["comm_s"], "compute_us": 1e6 * r["compute_s"],
            "efficiency": weak_efficiency(row.scheme, c, int(row.n), int(row.gpus), int(row.halo))}  # fmt: skip


def _moe(row: object) -> dict:
    c = _cluster_of(row.system, int(row.ep))
    r = dispatch_combine(row.mode, row.scheme, get_model(row.model), c, int(row.ep), float(row.tokens))
    return {"dispatch_us": 1e6 * r["dispatch_s"], "combine_us": 1e6 * r["combine_s"], "total_us": 1e6 * r["time_s"],
            "binding": r["binding"]}  # fmt: skip


def initiation() -> Evaluator:
    outputs = ("put_us", "coordination_us", "messages_per_s", "problem", "valid")
    return Evaluator(
        "initiation",
        "one message between two nodes by an initiation scheme: put and coordination latency, message rate",
        {"system": "dgx-h100", "scheme": None, "size_bytes": 8},
        outputs,
        lambda frame: _rows(frame, outputs, _message),
    )


def halo() -> Evaluator:
    outputs = ("iteration_us", "comm_us", "compute_us", "efficiency", "problem", "valid")
    return Evaluator(
        "halo",
        "a 3-D stencil's halo exchange per iteration (weak scaling): time, communication, efficiency",
        {"system": "frontier-node", "scheme": None, "n": 128, "gpus": None, "halo": 1},
        outputs,
        lambda frame: _halo_rows(frame, outputs),
    )


def moe_dispatch() -> Evaluator:
    outputs = ("dispatch_us", "combine_us", "total_us", "binding", "problem", "valid")
    return Evaluator(
        "moe_dispatch",
        "a MoE layer's DeepEP-style dispatch and combine per GPU over an initiation scheme",
        {
            "model": "deepseek-v3",
            "system": "dgx-h100",
            "scheme": None,
            "mode": "low-latency",
            "ep": None,
            "tokens": 128,
        },
        outputs,
        lambda frame: _rows(frame, outputs, _moe),
    )
