"""Every run-log format ``commodel calibrate train`` and ``serve`` read, told apart by their text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from commodel.calibrate.measured import MeasuredRun, fail
from commodel.calibrate.megatron import looks_like_megatron, parse_megatron
from commodel.calibrate.serving_logs import parse_serving
from commodel.calibrate.torchtitan import looks_like_torchtitan, parse_torchtitan
from commodel.errors import CommodelError
from commodel.hardware import cluster
from commodel.hardware.cluster import job_size
from commodel.io import read_text
from commodel.pricing.training_job import TrainingJob
from commodel.workloads.model.catalog import model as get_model
from commodel.workloads.model.transformer import model_flops_per_token, parameters

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
            return within_peak(parse(path, text, system, model))
    raise fail(path, f"not a training log commodel reads ({', '.join(TRAINING_FORMATS)})")


def within_peak(run: MeasuredRun) -> MeasuredRun:
    """``run``, unless its measured rate needs more model FLOP/s per GPU than its GPU's densest tensor
    peak in any dtype: a run no such GPU can make, which a wrong GPU count or unit in the log usually
    explains, is an error naming the log, not a measurement to fit constants to. A training run needs
    :func:`~commodel.workloads.model.transformer.model_flops_per_token` (the MFU count) per token; a
    served output token at least ``2 x`` the model's active matmul parameters for each token it stands
    for: ``(prompt + output) / output`` with both phases, its prompt alone in a prefill-only run, itself
    in a decode-only one (attention and the output layer left out, so the bound is never too tight)."""
    job, net = run.job, get_model(run.job.model)
    try:
        c = cluster(job.system)
    except CommodelError:  # node groups: the check needs one kind of GPU
        return run
    gpu = c.gpu
    if isinstance(job, TrainingJob):
        seq = job.seq or net.seq
        per_token = float(model_flops_per_token(net, seq, mtp=job.mtp_layers))
        given = (np.asarray(np.nan if v is None else v, dtype=float) for v in (job.gpus, job.nodes))
        gpus = float(job_size(c, *given)[0])
        tokens_per_s = (
            run.value if run.metric == "tokens_per_s_per_gpu" else job.global_batch * seq / run.value / gpus
        )
    else:  # serving: output tokens per second over all the run's GPUs
        stands_for = {"both": (job.prompt + job.output) / job.output, "prefill": job.prompt, "decode": 1.0}
        per_token = 2 * parameters(net)["matmul_active"]
        tokens_per_s = run.value * stands_for[job.phase] / (job.gpus or job.tp * job.pp)
    rate, peak = tokens_per_s * per_token, max(p.value for p in gpu.peak_flops.values())
    if rate > peak:
        raise fail(run.path, f"its {run.metric} {run.value:,.4g} means {rate / 1e12:,.0f} model TFLOP/s per GPU "
                             f"({per_token / 1e9:.1f} GFLOP per token of {job.model}), {rate / peak:.1f}x the "
                             f"{peak / 1e12:,.0f} TFLOP/s peak of {gpu.description}: not a run these GPUs can make "
                             "(check the log's GPU count and units)")  # fmt: skip
    return run


def read_serving(
    path: Path, system: str, model: str | None = None, server: dict[str, Any] | None = None
) -> MeasuredRun:
    """The run a serving benchmark's output records (trtllm-bench, vLLM's throughput and serving
    benchmarks, SGLang's bench_serving: :data:`~commodel.calibrate.serving_logs.FORMATS`), on ``system``,
    if its GPUs can make it (:func:`within_peak`)."""
    return within_peak(
        parse_serving(path, read_text(path, "serving benchmark output"), system, model, server)
    )
