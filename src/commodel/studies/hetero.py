"""Study ``hetero``: joint training on AMD and NVIDIA GPUs (Hu et al., arXiv:2602.18007), on the
paper's testbed: one 8 x H200 node and one 8 x MI325X node, a two-stage pipeline with one stage per
vendor and the paper's uneven splits (:mod:`commodel.workloads.training.hetero`), activations and gradients
crossing by device-direct or CPU-forwarding transfers (:mod:`commodel.comm.cross_vendor`), against one
node of each vendor alone (TP1 PP2 DP4). The claims compare TFLOPs per GPU, the paper's metric, at
the reference point; the sweep shows the mixed cluster across transports, NICs and micro-batches.
"""

from __future__ import annotations

import pandas as pd

from commodel.comm.cross_vendor import HOST_STREAM_BPS
from commodel.compute.roofline import peak_flops
from commodel.explore.spec import SweepSpec
from commodel.hardware import default_db
from commodel.pricing.evaluator import evaluator
from commodel.studies.base import Claim, StudyResult, study_spec, study_table

NAMES = {"llama3-8b": "LLaMA-8B", "qwen2-7b": "Qwen2-7B"}


def arms(p: dict) -> pd.DataFrame:
    """TFLOPs per GPU of every arm at the reference point, per model: NVIDIA-only and AMD-only (one
    node, TP1 PP2 DP4), and the mixed cluster with the paper's split, device-direct over all the NICs,
    Gloo for all communication and CPU-forwarding over one NIC (DCBS's host path), and CPU-forwarding
    over all (MPDT)."""
    common = {"tp": 1, "pp": 2, "seq": 4096, "zero": 1, "micro_batch": p["reference_micro_batch"],
              "global_batch": 512 * p["reference_micro_batch"]}  # fmt: skip
    rows = []
    for model, split in p["splits"].items():
        mixed = {**common, "model": model, "system": p["mixed"], "gpus": 16, "stage_layers": split}
        rows += [
            {"arm": "nvidia-only", **common, "model": model, "system": p["nvidia"], "gpus": 8},
            {"arm": "amd-only", **common, "model": model, "system": p["amd"], "gpus": 8},
            {"arm": "device-direct", **mixed, "transport": "device-direct", "nics": p["reference_nics"]},
            *({"arm": arm_name(transport, nics), **mixed, "transport": transport, "nics": nics}
              for _, _, transport, nics in gloo_arms(p["reference_nics"])),
        ]  # fmt: skip
    return evaluator("training")(pd.DataFrame(rows)).reindex(columns=COLUMNS)


#: The columns of the study's table: each arm's (and each design of the sweep's) settings and figures.
COLUMNS = ["arm", "model", "system", "transport", "nics", "micro_batch", "stage_layers", "tflops_per_gpu",
           "step_time_s", "cross_vendor_s", "valid"]  # fmt: skip


def mixed_sweep(spec: SweepSpec, mixed: str) -> pd.DataFrame:
    """The study file's space on the mixed cluster (its single-vendor nodes have no transport or NICs
    to vary): one row per transport, NIC count and micro-batch, in the arms' columns."""
    table = study_table(spec)
    table = table[table.system == mixed].assign(arm="sweep", valid=lambda t: t.feasible)
    return table[COLUMNS]


def gloo_arms(nics: int) -> tuple[tuple[str, str, str, int], ...]:
    """The paper's three Gloo arms: (label, the paper's figure in the study's parameters, the model's
    transport and the NICs it uses)."""
    return (
        ("Gloo for all communication (model: 1 NIC)", "paper_gloo_tflops", "gloo", 1),
        ("one host path (DCBS; model: 1 NIC)", "paper_dcbs_tflops", "cpu-forwarding", 1),
        (f"one NIC per GPU (MPDT; model: {nics} NICs)", "paper_mpdt_tflops", "cpu-forwarding", nics),
    )


def arm_name(transport: str, nics: int) -> str:
    """A mixed-cluster arm's name in :func:`arms`' table ("cpu-forwarding, 8 NICs")."""
    return f"{transport}, {nics} NIC{'s' if nics > 1 else ''}"


def _gloo_reason(table: pd.DataFrame, p: dict) -> str:
    """Why the Gloo arms miss, in the model's own figures: the time the paper's shares leave to Gloo's
    transfers at the model's device-direct step, against what the model's host paths take."""
    t = table[table.model == "llama3-8b"].set_index("arm").step_time_s
    step, direct = float(t["device-direct"]), p["paper_device_direct_tflops"]
    everything, one_path, per_gpu = (
        (step * (direct / p[key] - 1), float(t[arm_name(transport, nics)]) - step)
        for _, key, transport, nics in gloo_arms(p["reference_nics"])
    )
    ratio = [paper / model for paper, model in (everything, one_path, per_gpu)]
    return (
        f"at the model's batch the paper's shares leave Gloo {one_path[0]:.0f} s (one host path), {per_gpu[0]:.0f} s "
        f"(a NIC per GPU) and {everything[0]:.0f} s (everything) of a {step:.1f} s device-direct step, "
        f"{min(ratio):.0f}-{max(ratio):.0f}x what the model's host paths take (Gloo streams of "
        f"{HOST_STREAM_BPS / 1e9:.1f} GB/s, as measured here, copies at PCIe rate): the paper's hosts and "
        "Gloo's path on them, which it does not describe, and its batch, which it does not give, decide these arms"
    )


def run() -> StudyResult:
    spec = study_spec("hetero")
    p = spec.parameters
    table = arms(p)
    tflops = table.set_index(["model", "arm"]).tflops_per_gpu

    def pct(model: str, arm: str, base: str) -> float:
        return 100 * float(tflops[model, arm] / tflops[model, base])

    db = default_db()
    amd, nvidia = (db.gpu(db.system(p[side]).gpu) for side in ("amd", "nvidia"))
    gemm = (
        f"the model's MI325X computes at {amd.efficiency('bf16'):.3f} of {peak_flops(amd, 'bf16') / 1e12:.0f} "
        "TFLOP/s (its measured best GEMM, ROCm's Max-Achievable FLOPs, measurement mi325x-maf-bf16) against "
        f"H200's {nvidia.efficiency('bf16'):.3f} of {peak_flops(nvidia, 'bf16') / 1e12:.0f}, so its AMD node "
        f"reaches {pct('llama3-8b', 'amd-only', 'nvidia-only'):.0f}% and {pct('qwen2-7b', 'amd-only', 'nvidia-only'):.0f}% "
        "of its NVIDIA node (the paper's: 97% and 92%), and the mixed run, paced by its NVIDIA stage, stays "
        "below AMD-only; the paper's AMD node trails its NVIDIA node by what its ROCm stack loses beyond the "
        "GEMM rate (attention and elementwise kernels, RCCL), which neither it nor the data breaks down"
    )
    level = (
        "TFLOPs per GPU at the study's assumed sequence (4096), precision (BF16) and batch (micro-batch 1, "
        "global 512), which the paper does not give; the model's GEMMs at each GPU's measured best rate"
    )
    claims = [
        Claim(f"{name} throughput, LLaMA-8B (TFLOPs per GPU)", p[key], float(tflops["llama3-8b", arm]), "TFLOP/s",
              "TFLOPs per GPU, the paper's metric: model FLOPs per step over GPUs and step time", level)
        for arm, name, key in (("nvidia-only", "NVIDIA-only", "paper_nvidia_tflops"),
                               ("amd-only", "AMD-only", "paper_amd_tflops"),
                               ("device-direct", "device-direct", "paper_device_direct_tflops"))
    ]  # fmt: skip
    claims += [
        Claim("AMD-only throughput, LLaMA-8B, % of NVIDIA-only (TFLOPs per GPU)",
              100 * p["paper_amd_tflops"] / p["paper_nvidia_tflops"], pct("llama3-8b", "amd-only", "nvidia-only"),
              "%", "TFLOPs per GPU of one MI325X node over one H200 node", gemm),
    ]  # fmt: skip
    claims += [
        Claim(f"device-direct throughput, {NAMES[m]}, % of NVIDIA-only", paper,
              pct(m, "device-direct", "nvidia-only"), "%", "TFLOPs per GPU, mixed over NVIDIA-only", gemm)
        for m, paper in (("llama3-8b", 98.2), ("qwen2-7b", 94.0))
    ]  # fmt: skip
    claims += [
        Claim(f"device-direct over AMD-only, {NAMES[m]}", paper,
              pct(m, "device-direct", "nvidia-only") - pct(m, "amd-only", "nvidia-only"), "points",
              "TFLOPs per GPU as % of NVIDIA-only: mixed minus AMD-only (the paper's 98.2 - 97.3 for LLaMA-8B)", gemm)
        for m, paper in (("llama3-8b", 0.9), ("qwen2-7b", 2.3))
    ]  # fmt: skip
    why = _gloo_reason(table, p)
    claims += [
        Claim(f"CPU-forwarding throughput, LLaMA-8B, % of device-direct, {arm}",
              100 * p[key] / p["paper_device_direct_tflops"],
              pct("llama3-8b", arm_name(transport, nics), "device-direct"), "%", "TFLOPs per GPU over device-direct's",
              why)
        for arm, key, transport, nics in gloo_arms(p["reference_nics"])
    ]  # fmt: skip
    notes = [
        f"testbed: {p['mixed']} (NVIDIA stage first, AMD stage with the output layer last), the paper's splits {p['splits']}; baselines one node of "
        f"{p['nvidia']} and of {p['amd']} (TP1 PP2 DP4, even split); sequence 4096, BF16, micro-batch "
        f"{p['reference_micro_batch']}, global batch 512 (assumed: the paper gives none)",
        "the sweep (study table) runs the mixed cluster over transports, 1 or 8 NICs and micro-batches 1-4",
    ]
    return StudyResult.of(
        spec, claims, pd.concat([table, mixed_sweep(spec, p["mixed"])], ignore_index=True), notes
    )
