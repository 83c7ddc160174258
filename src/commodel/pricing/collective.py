"""The ``collective`` evaluator: one collective call per row, as ``commodel collective`` prices it.

Rows give the collective, system, GPUs, size and the choice policy (``auto``: NCCL's own choice;
``best``: the fastest; or one algorithm), plus run settings (forced channels, launch mode, NVLS,
SHARP, partition). Outputs: time, algbw and busbw (nccl-tests conventions), the channels and chunk
size used, and the chosen algorithm/protocol as text.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from commodel.comm.collectives import run
from commodel.comm.fabric import fabric_of
from commodel.hardware import cluster as make_cluster
from commodel.pricing.evaluator import Evaluator, blank_outputs, categorical_groups

INPUTS: dict[str, object] = {
    "op": "allreduce",
    "system": None,
    "nodes": 1,
    "gpus": 0,
    "size_bytes": None,
    "algo": "auto",
    "protocol": "auto",
    "channels": 0,
    "launch": "stream",
    "nvls": True,
    "sharp": False,
    "partition": 0,
}
OUTPUTS = ("time_s", "algbw_GBps", "busbw_GBps", "channels_used", "chunk_bytes", "chosen", "valid")
SETTINGS = [
    "op",
    "system",
    "nodes",
    "gpus",
    "algo",
    "protocol",
    "channels",
    "launch",
    "nvls",
    "sharp",
    "partition",
]


def evaluate(frame: pd.DataFrame) -> pd.DataFrame:
    out = blank_outputs(len(frame), OUTPUTS, text=("chosen",))
    for key, rows in categorical_groups(frame, SETTINGS):
        where = make_cluster(key["system"], int(key["nodes"]), partition=int(key["partition"]) or None)
        fab = fabric_of(where, sharp=bool(key["sharp"]), launch=key["launch"], nvls=bool(key["nvls"]))
        sizes = frame["size_bytes"].to_numpy(dtype=float)[rows]
        result = run(
            key["op"], where, sizes, int(key["gpus"]) or None, key["algo"], key["protocol"],
            channels=int(key["channels"]) or None, fab=fab,
        )  # fmt: skip
        for name in ("time_s", "algbw_GBps", "busbw_GBps", "chunk_bytes"):
            out[name][rows] = result[name].to_numpy(dtype=float)
        out["channels_used"][rows] = result["channels"].to_numpy(dtype=float)
        out["chosen"][rows] = (result.algo + "/" + result.protocol).to_numpy()
        out["valid"][rows] = np.isfinite(result.time_s.to_numpy())
    return frame.assign(**out)


def collective() -> Evaluator:
    return Evaluator(
        "collective",
        "a collective call per row: time, algbw, busbw, channels, chunk and the chosen algorithm",
        INPUTS,
        OUTPUTS,
        evaluate,
    )
