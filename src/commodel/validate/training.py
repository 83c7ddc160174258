"""The end-to-end training runs behind the training rows: configured ones (``data/runs.toml``), and
Megatron-Bridge's performance-table recipes read from a row's own text (:func:`recipe_run`), with
the metric each source reports in its own FLOP convention (:func:`training_metric`)."""

from __future__ import annotations

from dataclasses import dataclass

from commodel.compute.roofline import peak_flops
from commodel.errors import CommodelError
from commodel.hardware import default_db
from commodel.pricing.training_job import TrainingJob, training_job
from commodel.validate.descriptions import RECIPE
from commodel.validate.runs import RecipeSettings, runs
from commodel.workloads.model.catalog import model as get_model
from commodel.workloads.model.recompute import module_bits
from commodel.workloads.model.transformer import model_flops_per_token, recompute_flops_per_token
from commodel.workloads.parallel.layout import RECOMPUTE


@dataclass(frozen=True)
class Run:
    """A published training run: the job as its source states it, the metric the source reports,
    whether the source counts attention FLOPs causally (half the square, as Megatron-Bridge does) or
    in full (Narayanan et al. 2021, Megatron-LM's README), and what the row says that the job reads
    otherwise."""

    job: TrainingJob
    metric: str
    causal: bool = True
    note: str = ""


def training_run(row_id: str, description: str, gpus: float, system: str, metric: str) -> Run:
    """The run a training row describes: the one ``data/runs.toml`` configures for ``row_id``, or the
    recipe its ``description`` states (:func:`recipe_run`) on ``gpus`` GPUs of ``system``."""
    configured = runs().training.get(row_id)
    if configured is not None:
        return Run(configured.job, configured.metric, configured.attention_flops == "causal")
    if gpus != gpus:  # NaN: the row gives no count
        raise CommodelError("the row gives no GPU count")
    return recipe_run(description, int(gpus), system, metric)


def recipe_run(description: str, gpus: int, system: str, metric: str) -> Run:
    """A training row described as Megatron-Bridge's performance tables give a recipe, ``train MODEL
    DTYPE [seqS] gbsG mbsM [fsdp] [full] [tpT ppP cpC vpV epE etpE dpD gaA] [NAME=VALUE...]``, as a
    job on ``gpus`` GPUs of ``system``, with the software settings it states (:data:`SOFTWARE`,
    ``pipeline_layout``; ``full``: full recomputation).

    The layout as stated: sizes not given are 1, the sequence the recipe's (``data/runs.toml``) or the
    model's own. A MoE model's expert tensor parallelism is 1 and its tokens are permuted by Transformer
    Engine's fused kernels, as Megatron-Bridge's MoE recipes and providers set
    ``expert_tensor_parallel_size`` and ``moe_permute_fusion`` (Qwen3, gpt-oss, DeepSeek-V3), where
    Megatron-Core's own defaults would be tp and unfused; routing is force-balanced, as its performance
    scripts set it for every MoE model. What ``data/runs.toml`` says the model's recipe sets. The
    distributed optimizer (or FSDP); gradients reduced in BF16 (the benchmark mode of the performance
    recipes sets ``grad_reduce_in_fp32 = False`` with every precision, ``perf_recipes/_common.py`` in
    0.6.2, which says it mirrors ``scripts/performance``; its training recipes keep FP32), unless
    the row states ``grad_reduce_in_fp32=true`` (torchtitan's FSDP2, whose ``mixed_precision_reduce``
    is float32);
    communication overlapped; sequence parallelism with tensor parallelism and Transformer Engine's
    userbuffers overlap of its communication (the recipes' ``tp_comm_overlap``, with NeMo's per-GPU
    userbuffers configurations); and the recomputation the recipe needs to fit (``auto``: the rows do
    not state it). A stated ``dp`` or ``ga`` that disagrees with the GPUs and batch sizes is noted; the
    job is the one the GPUs and batch sizes give."""
    stated = RECIPE.read(description)
    dtypes = runs().recipes.dtypes
    if stated["dtype"] not in dtypes:
        raise CommodelError(f"'{description}' is not '{RECIPE.form}' (DTYPE one of {', '.join(dtypes)})")
    sizes = {k: v for k, v in stated.items() if k in RECIPE.sizes}
    tp, pp, cp = (sizes.get(k, 1) for k in ("tp", "pp", "cp"))
    dp = max(gpus // (tp * pp * cp), 1)
    derived = {"dp": dp, "ga": sizes.get("gbs", 1024) // (sizes.get("mbs", 1) * dp)}
    off = {k: v for k, v in derived.items() if sizes.get(k, v) != v}
    config, notes = get_model(str(stated["model"])), []
    moe = config.moe
    if off:
        said = ", ".join(f"{k}{sizes[k]}" for k in off)
        given = ", ".join(f"{k}{v}" for k, v in off.items())
        notes.append(f"states {said} where its {gpus} GPUs and batch give {given}")
    if moe is not None and tp > 1 and "etp" not in sizes:  # where Megatron-Core's would split experts tp ways
        notes.append("reads etp1, Megatron-Bridge's MoE recipes' expert tensor parallelism")
    vp, ep = sizes.get("vp", 1), sizes.get("ep", 1)
    recipe = next(
        (r for name, r in runs().recipes.models.items() if get_model(name) is config), RecipeSettings()
    )
    layout = str(stated.get("pipeline_layout", recipe.layout(pp, vp)))
    if recipe.layouts and not layout:
        notes.append(f"its recipe has no pipeline layout for pp {pp} x vp {vp}")
    job = training_job(
        model=stated["model"], system=system, gpus=gpus, dtype=dtypes[str(stated["dtype"])], tp=tp, pp=pp, cp=cp,
        vpp=vp, pipeline_layout=layout, ep=ep, micro_batch=sizes.get("mbs", 1),
        etp=sizes.get("etp", 1 if moe is not None else None),
        global_batch=sizes.get("gbs", 1024), seq=sizes.get("seq", recipe.seq),
        sequence_parallel=tp > 1, recompute=_recompute(stated), overlap="sm-partition",
        tp_overlap="userbuffers" if tp > 1 else "none",
        ends_as_layers=recipe.ends_as_layers and pp > 1, bf16_moments=recipe.bf16_moments,
        permute_fusion=moe is not None,
        **{"zero": 3 if "fsdp" in stated else 1, "grad_reduce_in_fp32": False}
        | {name: stated[name] for name in SOFTWARE if name in stated},
    )  # fmt: skip
    return Run(job, metric, note="; ".join(notes))


#: The software settings a recipe row may state, passed to the job as they are named
#: (``recompute_modules`` also sets selective recomputation, as Megatron's
#: ``--recompute-modules`` runs under ``--recompute-granularity selective``).
SOFTWARE = (
    "dispatcher", "cuda_graphs", "ep_overlap", "recompute_modules", "zero", "elementwise", "ep_sms",
    "grad_reduce_in_fp32",
)  # fmt: skip


def _recompute(stated: dict) -> str:
    """The recomputation a recipe row states: ``full``, selective with its modules (none beside
    torchtitan's per-op policy, ``ops``, which saves attention's output), or ``auto`` (what fits: the
    row does not say)."""
    if stated.get("full"):
        return "full"
    if "recompute_modules" not in stated:
        return "auto"
    return "none" if stated["recompute_modules"] == "ops" else "selective"


def training_metric(run: Run, result: dict) -> float:
    """The metric a run's source reports, from the model's result, in the source's FLOP convention."""
    job = run.job
    if run.metric == "tokens_per_s_per_gpu":
        return result["tokens_per_s"] / result["gpus"]
    if run.metric == "step_time_s":
        return result["step_time_s"]
    net = get_model(job.model)
    seq = job.seq or net.seq
    flops = model_flops_per_token(net, seq, run.causal)
    if run.metric == "hw_tflops_per_gpu":
        code, modules = RECOMPUTE.index(result["recompute"]), module_bits(job.recompute_modules)
        flops = flops + recompute_flops_per_token(net, seq, code, run.causal, modules)
    tflops = result["tokens_per_s"] / result["gpus"] * flops / 1e12
    if run.metric == "mfu":
        return tflops * 1e12 / peak_flops(default_db().gpu(default_db().system(job.system).gpu), "bf16")
    return tflops
