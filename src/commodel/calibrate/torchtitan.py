"""Read a torchtitan training log: the configuration it prints at start-up and its step reports.

The format (torchtitan ``train.py`` with ``job.print_args``, ``components/metrics.py``; lines carry a
``[rank0]:[titan] <time> - root - INFO -`` prefix)::

    Running with args: {'job': {...}, 'model': {'name': 'llama3', 'flavor': '8B', 'converters': ['float8']},
        'training': {'local_batch_size': 2, 'seq_len': 8192, ...}, 'parallelism':
        {'data_parallel_shard_degree': -1, 'tensor_parallel_degree': 1, ...},
        'activation_checkpoint': {'mode': 'none'}, 'compile': {'enable': True, ...}, ...}
    Building 1-D device mesh with ['dp_shard'], [8]
    step: 10  loss:  7.1234  grad_norm:  1.2  memory: 58.21GiB(61.28%)  tps: 5,762  tflops: 301.23  mfu: 30.46%

Logs of torchtitan before 2025 read too: their step reports give ``wps`` where later ones give
``tps`` (tokens per second per GPU both), and their configuration keeps the parallel degrees in
``training`` (``tensor_parallel_degree``, ``data_parallel_replicate_degree``) and ``experimental``
(``pipeline_parallel_degree``, ``context_parallel_degree``, ``enable_async_tensor_parallel``), and
Float8 in ``float8.enable_float8_linear``; the terminal colours torchtitan prints are ignored.

The job: the model by ``name`` and ``flavor`` (``llama3`` ``8B`` is ``llama3-8b``), FSDP over the
sharded data-parallel ranks (``zero = 3``) reducing gradients in the dtype ``mixed_precision_reduce``
names (float32 by default), the precision its converters set (``float8``: FP8 with
tensor-wise scales; ``mx``: MXFP8), torch.compile's fused elementwise kernels or eager ones, and the
activation checkpointing mode. The GPUs are the device mesh's. The measured value is the median
tokens per second per GPU (``tps``) past warm-up; each report's ``tflops`` over its ``tps`` (the FLOPs
per token) must be one number. HSDP (replicas of shards) and the pipeline and
expert parallelism of torchtitan's experimental models are refused in one line.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path
from typing import Any

from commodel.calibrate.measured import (
    MeasuredRun,
    fail,
    model_of,
    named_model,
    one_number,
    peak_memory,
    reported,
    setting,
    steady_median,
    training,
)
from commodel.workloads.model.catalog import model as get_model

_ARGS = re.compile(r"Running with args:\s*(\{.*?)\s*$", re.MULTILINE)
_MESH = re.compile(r"Building \d+-D device mesh with \[([^\]]*)\], \[([\d, ]*)\]")
_MEMORY = re.compile(r"step:.*?memory:\s*([0-9.]+)GiB")
_STEP = re.compile(r"step:\s*(\d+)\s.*?[tw]ps:\s*(\S+)(?:\s+tflops:\s*(\S+))?")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")

#: Where torchtitan's configuration keeps the parallel degrees: ``parallelism`` since 2025, before it
#: ``training`` and ``experimental`` (the first section that has a key gives it).
PARALLELISM_SECTIONS = ("parallelism", "experimental", "training")

#: torchtitan's activation checkpointing modes (``selective`` by its ``selective_ac_option``:
#: :func:`checkpointing`).
CHECKPOINTING = ("none", "full", "selective")


def checkpointing(path: Path, cfg: dict[str, dict[str, Any]], layers: int) -> dict[str, Any]:
    """commodel's recomputation for torchtitan's ``activation_checkpoint`` section: ``none``,
    ``full``; ``selective`` with option ``op`` is its per-op policy (recompute module ``ops``), with
    a number ``n`` every ``n``-th block checkpointed whole (full recomputation of ``layers / n``)."""
    section = cfg.get("activation_checkpoint", {})
    mode = str(section.get("mode", "none"))
    if mode not in CHECKPOINTING:
        raise fail(path, f"activation_checkpoint.mode = {mode}: commodel prices {', '.join(CHECKPOINTING)}")
    if mode != "selective":
        return {"recompute": mode}
    option = str(section.get("selective_ac_option", "2"))
    if option == "op":
        return {"recompute": "none", "recompute_modules": "ops"}
    if not option.isdigit() or int(option) < 1:
        raise fail(
            path, f"activation_checkpoint.selective_ac_option = {option}: 'op' or a positive whole number"
        )
    return {"recompute": "full", "recompute_layers": layers // int(option)}


def config(path: Path, text: str) -> dict[str, dict[str, Any]]:
    """The configuration dictionary the log prints, or an error naming what is missing."""
    match = _ARGS.search(text)
    if match is None:
        raise fail(path, "no 'Running with args: {...}' line; not a torchtitan log run with job.print_args")
    try:
        found = ast.literal_eval(match[1])
    except (ValueError, SyntaxError):
        raise fail(path, "the 'Running with args' line is not a whole dictionary: a truncated log") from None
    if not isinstance(found, dict) or not all(isinstance(v, dict) for v in found.values()):
        raise fail(path, "the 'Running with args' line is not torchtitan's configuration of sections")
    return found


#: The device mesh's dimensions that are degrees the configuration states (torchtitan builds a
#: dimension for each degree above 1, ``pp``, ``dp_replicate``, ``dp_shard``, ``cp``, ``tp``).
MESH_DEGREES = {"tp": "tensor_parallel", "cp": "context_parallel"}


def _mesh(path: Path, text: str) -> dict[str, int]:
    """The device mesh the log builds: each named dimension's size (none: one GPU)."""
    match = _MESH.search(text)
    if match is None:
        raise fail(path, "no 'Building N-D device mesh' line: the GPUs the run used are not in the log")
    names = [n.strip().strip("'\"") for n in match[1].split(",") if n.strip()]
    sizes = [int(n) for n in match[2].split(",") if n.strip()]
    if len(names) != len(sizes):
        raise fail(
            path, f"the device mesh names {len(names)} dimensions and sizes {len(sizes)}: a damaged line"
        )
    return dict(zip(names, sizes, strict=True))


def _precision(path: Path, cfg: dict[str, dict[str, Any]]) -> str:
    converters = [str(c) for c in cfg.get("model", {}).get("converters", [])]
    unknown = [c for c in converters if c not in ("float8", "mx")]
    if unknown:
        raise fail(path, f"model.converters {unknown[0]!r}: commodel prices float8 and mx")
    if setting(path, cfg.get("float8", {}), "enable_float8_linear", bool, False):  # before converters
        converters.append("float8")
    return "mxfp8" if "mx" in converters else "fp8" if "float8" in converters else "bf16"


def _parallelism(cfg: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The parallelism settings, wherever the log's torchtitan keeps them (:data:`PARALLELISM_SECTIONS`)."""
    return {k: v for section in reversed(PARALLELISM_SECTIONS) for k, v in cfg.get(section, {}).items()}


def job_settings(
    path: Path, cfg: dict[str, dict[str, Any]], mesh: dict[str, int], layers: int
) -> dict[str, Any]:
    """The training job's settings the configuration states, on the GPUs of the device ``mesh`` (whose
    dimensions must be the degrees it states), for a model of ``layers`` blocks."""
    par, train = _parallelism(cfg), cfg.get("training", {})
    sizes = {k: setting(path, par, f"{k}_degree", int, 1) for k in ("tensor_parallel", "pipeline_parallel",
             "context_parallel", "expert_parallel", "data_parallel_replicate")}  # fmt: skip
    stated = {name: (degree, sizes[degree]) for name, degree in MESH_DEGREES.items()}
    if str(par.get("data_parallel_shard_degree")) not in ("None", "-1"):  # -1: the GPUs the others leave
        stated["dp_shard"] = ("data_parallel_shard", setting(path, par, "data_parallel_shard_degree", int))
    for name, (degree, size) in stated.items():
        if mesh.get(name, 1) != size:
            raise fail(path, f"{degree}_degree = {size} where the device mesh's '{name}' dimension is "
                             f"{mesh.get(name, 1)}: the configuration and the mesh are of two runs")  # fmt: skip
    gpus = math.prod(mesh.values())
    for name in ("pipeline_parallel", "expert_parallel", "data_parallel_replicate"):
        if sizes[name] > 1:
            raise fail(
                path, f"parallelism.{name}_degree = {sizes[name]}: not priced from torchtitan logs yet"
            )
    tp, cp = sizes["tensor_parallel"], sizes["context_parallel"]
    if gpus % (tp * cp):
        raise fail(path, f"the mesh's {gpus} GPUs are not a multiple of tp {tp} x cp {cp}")
    dp = gpus // (tp * cp)
    local = setting(path, train, "local_batch_size", int, setting(path, train, "batch_size", int, 1))
    steps = setting(path, train, "gradient_accumulation_steps", int, 1)
    compiled = setting(path, cfg.get("compile", {}), "enable", bool, False) or setting(
        path, train, "compile", bool, False
    )
    return {
        "gpus": gpus, "tp": tp, "cp": cp, "zero": 3 if dp > 1 else 1, "sequence_parallel": tp > 1,
        "dtype": _precision(path, cfg), "micro_batch": local,
        "global_batch": setting(path, train, "global_batch_size", int, local * dp * steps),
        "seq": setting(path, train, "seq_len"), **checkpointing(path, cfg, layers),
        "elementwise": "fused" if compiled else "eager", "overlap": "sm-partition",
        "tp_overlap": "async" if setting(path, par, "enable_async_tensor_parallel", bool, False) else "none",
        "grad_reduce_in_fp32": _reduces_in_fp32(path, train),
    }  # fmt: skip


#: torchtitan's FSDP reduce dtypes (``training.mixed_precision_reduce``; float32 its default).
REDUCE_DTYPES = {"float32": True, "bfloat16": False}


def _reduces_in_fp32(path: Path, train: dict[str, Any]) -> bool:
    """Whether FSDP reduce-scatters the gradients in FP32 (``training.mixed_precision_reduce``)."""
    dtype = str(train.get("mixed_precision_reduce", "float32"))
    if dtype not in REDUCE_DTYPES:
        raise fail(
            path, f"training.mixed_precision_reduce = {dtype}: commodel prices {', '.join(REDUCE_DTYPES)}"
        )
    return REDUCE_DTYPES[dtype]


def looks_like_torchtitan(text: str) -> bool:
    """Whether ``text`` has torchtitan's configuration line."""
    return "Running with args:" in text


def parse_torchtitan(path: Path, text: str, system: str, model: str | None = None) -> MeasuredRun:
    """The run a torchtitan log (``text``, read from ``path``) records, on ``system``: its job and
    median steady tokens/s per GPU."""
    text = _COLOUR.sub("", text)
    cfg = config(path, text)
    spec = cfg.get("model", {})
    name = model_of(model, lambda: named_model(path, f"{spec.get('name', '')}-{spec.get('flavor', '')}"))
    steps = [
        (
            int(m[1]),
            reported(path, m[2], f"tokens/s per GPU at iteration {m[1]}"),
            float("nan") if m[3] is None else reported(path, m[3], f"tflops at iteration {m[1]}"),
        )
        for m in _STEP.finditer(text)
    ]
    reports = [(step, tps) for step, tps, _ in steps]
    per_token = [(step, tflops / tps) for step, tps, tflops in steps if tps > 0 and tflops > 0]
    one_number(path, per_token, "tflops over tps (its FLOPs per token)")
    tps, how = steady_median(path, [i for i, _ in reports], [v for _, v in reports], "tokens/s per GPU")
    job = training(path, name, system, job_settings(path, cfg, _mesh(path, text), get_model(name).layers))
    return MeasuredRun(path, job, "tokens_per_s_per_gpu", tps, how, peak_memory(_MEMORY, text, 2**30))
