"""Read a Megatron-LM / Megatron-Bridge training log: the arguments block it prints at start-up and the
per-iteration reports.

The format (Megatron-LM ``training.py``, ``arguments.py``; a rank prefix such as ``[rank0]:`` is
allowed before any line)::

    ------------------------ arguments ------------------------
      tensor_model_parallel_size ...................... 2
      micro_batch_size ................................ 1
      ...
    -------------------- end of arguments ---------------------
     [2025-05-02 10:00:00] iteration       20/     100 | consumed samples: 40960 | elapsed time per
     iteration (ms): 19712.4 | throughput per GPU (TFLOP/s/GPU): 245.0 | ... | global batch size: 2048 |

The job is the arguments as commodel's training job reads them (:data:`SETTINGS`, :func:`job_settings`);
the measured step is the median elapsed time per iteration past warm-up
(:func:`~commodel.calibrate.measured.steady_median`), of the iterations at the job's global batch
(a ``--rampup-batch-size`` run's smaller ones left out); where the reports print their throughput
per GPU, its product with their time (the FLOPs of an iteration) must be one number. An argument the
job cannot express (FP32 training, the all-gather dispatcher, CUDA graphs of a whole layer with no
scope) is refused in one line naming it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from commodel.calibrate.measured import (
    MeasuredRun,
    described_model,
    fail,
    model_of,
    one_number,
    peak_memory,
    reported,
    setting,
    steady_median,
    training,
)
from commodel.workloads.training.host_issue import GRAPH_SCOPES

_PREFIX = r"^(?:\[[^\]]*\]:?\s*)*"
_ARGS_START = re.compile(_PREFIX + r"-+ arguments -+\s*$", re.MULTILINE)
_ARGS_END = re.compile(_PREFIX + r"-+ end of arguments -+\s*$", re.MULTILINE)
_ARG = re.compile(_PREFIX + r"\s*(\w+) \.+ (.*?)\s*$")
_MEMORY = re.compile(r"memory \(MB\).*?max allocated:\s*([0-9.]+)")
_THROUGHPUT = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*([^\s|]+)")
_BATCH = re.compile(r"global batch size:\s*(\d+)")
_ITERATION = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*([^\s|]+)")

#: Megatron's FP8 recipes -> commodel's training precision.
FP8_RECIPES = {"delayed": "fp8", "tensorwise": "fp8", "mxfp8": "mxfp8", "blockwise": "fp8-block"}

#: Megatron's dispatcher names (``moe_token_dispatcher_type``, ``moe_flex_dispatcher_backend``).
DISPATCHERS = {"alltoall": "alltoall", "deepep": "deepep", "hybridep": "hybridep"}


def arguments(path: Path, text: str) -> dict[str, str]:
    """The arguments block as ``{name: value text}``, or an error naming what is missing."""
    start, end = _ARGS_START.search(text), _ARGS_END.search(text)
    if start is None:
        raise fail(path, "no Megatron arguments block ('---- arguments ----'); not a Megatron-LM log")
    if end is None or end.start() < start.end():
        raise fail(path, "the arguments block never ends ('---- end of arguments ----'): a truncated log")
    found = {}
    for line in text[start.end() : end.start()].splitlines():
        match = _ARG.match(line)
        if match:
            found[match[1]] = match[2]
    if not found:
        raise fail(path, "the arguments block is empty")
    return found


def _list(value: str | None) -> list[str]:
    """A Python list argument (``['attn', 'moe_router']``) as strings; ``None`` is empty."""
    if value in (None, "None", ""):
        return []
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return [value]
    return [str(v) for v in parsed] if isinstance(parsed, list | tuple) else [str(parsed)]


def _dtype(path: Path, args: dict[str, str]) -> str:
    if args.get("fp8") not in (None, "None", "False"):
        recipe = args.get("fp8_recipe", "delayed")
        if recipe not in FP8_RECIPES:
            raise fail(path, f"fp8_recipe = {recipe}: commodel prices {', '.join(FP8_RECIPES)}")
        return FP8_RECIPES[recipe]
    if setting(path, args, "bf16", bool, False):
        return "bf16"
    if setting(path, args, "fp16", bool, False):
        return "fp16"
    raise fail(path, "FP32 training (neither bf16 nor fp16 nor fp8): commodel prices 16- and 8-bit training")


def _dispatcher(path: Path, args: dict[str, str]) -> str:
    kind = args.get("moe_token_dispatcher_type", "alltoall")
    if kind == "flex" or setting(path, args, "moe_enable_deepep", bool, False):
        kind = args.get("moe_flex_dispatcher_backend", "deepep")
    if kind not in DISPATCHERS:
        raise fail(path, f"moe_token_dispatcher_type = {kind}: commodel prices {', '.join(DISPATCHERS)}")
    return DISPATCHERS[kind]


def _cuda_graphs(path: Path, args: dict[str, str]) -> str:
    impl = args.get("cuda_graph_impl", "none")
    if impl == "none" and (setting(path, args, "enable_cuda_graph", bool, False)
                           or setting(path, args, "external_cuda_graph", bool, False)):  # fmt: skip
        impl = "local"
    if impl in ("none", "None"):
        return "none"
    scopes = _list(args.get("cuda_graph_scope"))
    if not scopes or scopes == ["full"]:
        raise fail(path, "cuda_graph_scope: CUDA graphs of whole layers (no scope) are not a setting; "
                         f"commodel prices the scopes {', '.join(GRAPH_SCOPES)}")  # fmt: skip
    return ",".join(scopes)


def _recompute(path: Path, args: dict[str, str]) -> dict[str, Any]:
    granularity = args.get("recompute_granularity", "None")
    if granularity in ("None", "none"):
        return {"recompute": "none"}
    if granularity == "full":
        return {"recompute": "full"}
    modules = _list(args.get("recompute_modules")) or ["core_attn"]
    return {"recompute": "selective", "recompute_modules": ",".join(modules)}


def _parallel(path: Path, args: dict[str, str]) -> dict[str, Any]:
    tp = setting(path, args, "tensor_model_parallel_size", int, 1)
    fsdp = setting(path, args, "use_megatron_fsdp", bool, False) or setting(
        path, args, "use_custom_fsdp", bool, False
    )
    distributed = setting(path, args, "use_distributed_optimizer", bool, False)
    return {
        "gpus": setting(path, args, "world_size"),
        "tp": tp,
        "pp": setting(path, args, "pipeline_model_parallel_size", int, 1),
        "cp": setting(path, args, "context_parallel_size", int, 1),
        "ep": setting(path, args, "expert_model_parallel_size", int, 1),
        "etp": setting(path, args, "expert_tensor_parallel_size", int, tp),
        "vpp": setting(path, args, "virtual_pipeline_model_parallel_size", int, 1),
        "zero": 3 if fsdp else 1 if distributed else 0,
        "sequence_parallel": setting(path, args, "sequence_parallel", bool, False),
        "tp_overlap": "userbuffers" if setting(path, args, "tp_comm_overlap", bool, False) else "none",
    }


def job_settings(path: Path, args: dict[str, str]) -> dict[str, Any]:
    """The training job's settings the arguments state."""
    moe = setting(path, args, "num_experts", int, 0) > 0
    layout = args.get("pipeline_model_parallel_layout", "None")
    out = (
        _parallel(path, args)
        | _recompute(path, args)
        | {
            "dtype": _dtype(path, args),
            "micro_batch": setting(path, args, "micro_batch_size"),
            "global_batch": setting(path, args, "global_batch_size"),
            "seq": setting(path, args, "seq_length"),
            "cuda_graphs": _cuda_graphs(path, args),
            "grad_reduce_in_fp32": not setting(path, args, "grad_reduce_in_bf16", bool, False)
            and setting(path, args, "accumulate_allreduce_grads_in_fp32", bool, True),
            "overlap": "sm-partition"
            if setting(path, args, "overlap_grad_reduce", bool, False)
            else "serial",
            "ends_as_layers": setting(path, args, "account_for_embedding_in_pipeline_split", bool, False),
            "fp8_param_gather": setting(path, args, "fp8_param_gather", bool, False),
        }
    )
    if layout not in ("None", ""):
        out["pipeline_layout"] = layout
    if moe:
        ep_overlap = setting(path, args, "overlap_moe_expert_parallel_comm", bool, False)
        shared = setting(path, args, "moe_shared_expert_overlap", bool, False)
        out |= {
            "dispatcher": _dispatcher(path, args),
            "permute_fusion": setting(path, args, "moe_permute_fusion", bool, False),
            "ep_overlap": "1f1b" if ep_overlap else "shared-experts" if shared else "none",
        }
    return out


def _shape(path: Path, args: dict[str, str]) -> dict[str, int]:
    experts = setting(path, args, "num_experts", int, 0)
    ffn = "moe_ffn_hidden_size" if experts else "ffn_hidden_size"
    return {
        "layers": setting(path, args, "num_layers"),
        "hidden": setting(path, args, "hidden_size"),
        "heads": setting(path, args, "num_attention_heads"),
        "ffn_hidden": setting(path, args, ffn),
        "experts": experts,
    }


def looks_like_megatron(text: str) -> bool:
    """Whether ``text`` has Megatron's arguments block."""
    return _ARGS_START.search(text) is not None


def _reports(path: Path, text: str, batch: int) -> tuple[list[tuple[int, float]], int]:
    """The iteration reports (iteration, ms per iteration) at the job's ``batch``, and how many ran a
    smaller one (``--rampup-batch-size`` grows the batch over the first samples: those iterations are
    not the job's)."""
    kept, done, ramped = [], [], 0
    for line in text.splitlines():
        report = _ITERATION.search(line)
        if report is None:
            continue
        size = _BATCH.search(line)
        if size is not None and int(size[1]) != batch:
            ramped += 1
            continue
        iteration = int(report[1])
        ms = reported(path, report[2], f"elapsed time per iteration (ms) at iteration {iteration}")
        kept.append((iteration, ms))
        rate = _THROUGHPUT.search(line)
        tflops = (
            None if rate is None else reported(path, rate[1], f"throughput per GPU at iteration {iteration}")
        )
        if tflops is not None and tflops > 0 and ms > 0:  # else: refused as not positive
            done.append((iteration, tflops * ms))
    one_number(path, done, "throughput per GPU times elapsed time (its FLOPs)")
    if ramped and not kept:
        raise fail(
            path,
            f"every iteration report runs a global batch other than global_batch_size {batch} (a batch "
            "ramp-up): run past it",
        )
    return kept, ramped


def parse_megatron(path: Path, text: str, system: str, model: str | None = None) -> MeasuredRun:
    """The run a Megatron log (``text``, read from ``path``) records, on ``system``: its job and
    median steady step time."""
    args = arguments(path, text)
    name = model_of(model, lambda: described_model(path, _shape(path, args)))
    settings = job_settings(path, args)
    reports, ramped = _reports(path, text, settings["global_batch"])
    step_ms, how = steady_median(
        path, [i for i, _ in reports], [t for _, t in reports], "elapsed time per iteration"
    )
    if ramped:
        how += f"; {ramped} report(s) at a smaller, ramped-up global batch left out"
    job = training(path, name, system, settings)
    peak = peak_memory(_MEMORY, text, 2**20)
    return MeasuredRun(path, job, "step_time_s", step_ms / 1e3, how, peak)
