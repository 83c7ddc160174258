"""Cost of one training estimate: in-process, inside a batch, and from the shell.

Run: ``python benchmarks/bench_estimate.py`` (results in docs/benchmarks.md). The job is Llama 3 70B
on 64 H100 (tp 8, pp 4, sequence parallel), priced by :func:`commodel.pricing.run.train` (the scalar API, the training
evaluator on a one-row table), then as one row of a 2,000-job batch (one ``price_training`` call),
then by ``commodel train`` in a fresh process (start to table printed).
"""

from __future__ import annotations

import compileall
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from commodel.pricing.run import train
from commodel.pricing.training import price_training
from commodel.pricing.training_job import training_job

#: A job that fits (with sequence parallelism, as Megatron's recipes at tp 8 run): one that does not is
#: told what would make it fit, which prices its variants too.
JOB = {"model": "llama3-70b", "system": "dgx-h100", "gpus": 64, "tp": 8, "pp": 4, "sequence_parallel": True}


def in_process(calls: int = 10, repeats: int = 8) -> float:
    """Best seconds per scalar estimate over ``repeats`` loops of ``calls`` (after one warm-up)."""
    train(**JOB)
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            train(**JOB)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def in_batch(jobs: int = 2000, repeats: int = 5) -> float:
    """Best seconds per job when ``jobs`` distinct jobs (global batches 64, 128, ...) go in one call
    (after one warm-up call, as :func:`in_process`)."""
    rows = [dict(training_job(**JOB, global_batch=64 * (i + 1))) for i in range(jobs)]
    columns = {name: np.array([row[name] for row in rows], dtype=object) for name in rows[0]}
    price_training(columns)
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        price_training(columns)
        best = min(best, (time.perf_counter() - start) / jobs)
    return best


def from_shell(runs: int = 12) -> list[float]:
    """Wall seconds of ``commodel train`` for the same job, one fresh process per run, with the
    package's bytecode cached as Python leaves it after a first run (an editable install writes it
    on first import; where ``PYTHONDONTWRITEBYTECODE`` is set, as on this project's machines, every
    run would compile every module again, about 0.1 s more)."""
    import commodel

    command = shutil.which("commodel") or sys.exit("commodel is not installed: pip install -e .")
    compileall.compile_dir(Path(commodel.__file__).parent, quiet=1)
    flags = [f"--{k.replace('_', '-')}" if v is True else f"--{k}={v}" for k, v in JOB.items()]
    args = [command, "train", *flags]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    print(f"one scalar estimate in-process: {1e3 * in_process():.1f} ms (best of 8 x 10 calls)")
    print(f"one job inside a batch of 2,000: {1e3 * in_batch():.3f} ms")
    shell = from_shell()
    print(f"commodel train from the shell: median {statistics.median(shell):.2f} s, min {min(shell):.2f} s")


if __name__ == "__main__":
    main()
