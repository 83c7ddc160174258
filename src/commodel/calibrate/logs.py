"""Every run-log format ``commodel calibrate train`` and ``serve`` read, told apart by their text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commodel.calibrate.measured import MeasuredRun, fail
from commodel.calibrate.megatron import looks_like_megatron, parse_megatron
from commodel.calibrate.serving_logs import parse_serving
from commodel.calibrate.torchtitan import looks_like_torchtitan, parse_torchtitan
from commodel.io import read_text

#: Training log formats: how each is recognized, and its parser.
TRAINING_FORMATS = {
    "megatron": (looks_like_megatron, parse_megatron),
    "torchtitan": (looks_like_torchtitan, parse_torchtitan),
}


def read_training(path: Path, system: str, model: str | None = None) -> MeasuredRun:
    """The run a Megatron-LM or torchtitan log records, on ``system``."""
    text = read_text(path, "training log")
    for looks_like, parse in TRAINING_FORMATS.values():
        if looks_like(text):
            return parse(path, text, system, model)
    raise fail(path, f"not a training log commodel reads ({', '.join(TRAINING_FORMATS)})")


def read_serving(
    path: Path, system: str, model: str | None = None, server: dict[str, Any] | None = None
) -> MeasuredRun:
    """The run a serving benchmark's output records (trtllm-bench, vLLM's throughput and serving
    benchmarks, SGLang's bench_serving: :data:`~commodel.calibrate.serving_logs.FORMATS`), on ``system``."""
    return parse_serving(path, read_text(path, "serving benchmark output"), system, model, server)
