"""Golden numbers: canonical outputs stored as CSV and compared tightly.

A change to any model number, or to a validation row's value or note, fails here; if it is deliberate, regenerate with
``COMMODEL_REGENERATE_GOLDEN=1 python -m pytest tests/test_golden.py`` and say why in the commit.
"""

import os
from pathlib import Path

import pandas as pd
import pytest

from commodel.comm.calls import run
from commodel.compute import attention, gemm, kernel_time
from commodel.hardware import cluster, default_db
from commodel.validate import validation_table

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("COMMODEL_REGENERATE_GOLDEN") == "1"
SIZES = [8, 65536, 2**20, 2**26, 2**30, 2**33]
CASES = [
    ("allreduce", "dgx-a100", 1, "nccl"),
    ("allreduce", "dgx-h100", 1, "nccl"),
    ("allreduce", "dgx-h100", 4, "nccl"),
    ("allreduce", "mi300x-8", 1, "all"),
    ("allgather", "frontier-node", 2, "all"),
    ("reducescatter", "dgx-b200", 2, "nccl"),
    ("alltoall", "dgx-h100", 2, "all"),
    ("broadcast", "a40-pcie-8", 1, "all"),
]


def collectives_frame() -> pd.DataFrame:
    frames = [
        run(op, cluster(system, nodes), SIZES, library=library).assign(system=system, library=library)
        for op, system, nodes, library in CASES
    ]
    return pd.concat(frames, ignore_index=True)


def roofline_frame() -> pd.DataFrame:
    rows = []
    for gpu in ("a100-sxm-80gb", "h100-sxm", "mi300x", "b200-sxm"):
        for label, kernel in {
            "gemm-8192": gemm(8192, 8192, 8192),
            "gemm-4096x512x4096": gemm(4096, 512, 4096),
            "attention-4x32x4096x128": attention(4, 32, 4096, 128),
        }.items():
            r = kernel_time(default_db().gpu(gpu), kernel)
            rows.append({"gpu": gpu, "kernel": label, "time_s": float(r.time_s), "bound": str(r.bound)})
    return pd.DataFrame(rows)


def validation_frame() -> pd.DataFrame:
    """``commodel validate``'s rows: what each is, the model's value and the note beside it (a move
    of the code, a refactor, must leave every one of them as it was)."""
    columns = ["id", "kind", "role", "measured", "model", "error_pct", "note", "experts"]
    return validation_table()[columns]


@pytest.mark.parametrize(
    ("name", "build"),
    [("collectives", collectives_frame), ("roofline", roofline_frame), ("validation", validation_frame)],
)
def test_golden(name, build):
    path = GOLDEN / f"{name}.csv"
    frame = build()
    if REGENERATE:
        frame.to_csv(path, index=False, float_format="%.12g")
    expected = pd.read_csv(path, keep_default_na=False, na_values=[""]).fillna({"note": ""})
    pd.testing.assert_frame_equal(frame, expected, check_dtype=False, rtol=1e-9, check_exact=False)
