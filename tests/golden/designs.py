"""Regenerate tests/golden/designs.toml: the project's own golden numbers, as `commodel check` reads
them. Run after a deliberate change to a model: python tests/golden/designs.py."""

from pathlib import Path

import pandas as pd

from commodel.pricing.evaluator import evaluator

#: Name -> (evaluator, the job, the outputs to hold).
DESIGNS = {
    "llama3-70b-h100-64": ("training", dict(model="llama3-70b", system="dgx-h100", gpus=64, tp=8, pp=2,
                           global_batch=512, micro_batch=1, sequence_parallel=True),
                           ["step_time_s", "mfu", "memory_per_gpu_bytes", "energy_per_token_J"]),
    "mixtral-h100-16": ("training", dict(model="mixtral-8x7b", system="dgx-h100", gpus=16, tp=2, ep=8,
                        global_batch=256, micro_batch=1, sequence_parallel=True), ["step_time_s", "mfu"]),
    "llama3-8b-serving-h100": ("serving", dict(model="llama3-8b", system="dgx-h100", gpus=1, prompt=1024,
                               output=256), ["output_tokens_per_s", "tpot_s"]),
    "allreduce-1gib-h100": ("collective", dict(op="allreduce", system="dgx-h100", size_bytes=2**30),
                            ["busbw_GBps", "time_s"]),
    "allgather-frontier-2": ("collective", dict(op="allgather", system="frontier-node", nodes=2,
                             size_bytes=2**26), ["busbw_GBps"]),
    "qwen3-30b-hybridep-gb200-64": ("training", dict(model="qwen3-30b-a3b", system="gb200-nvl72", gpus=64, ep=64,
                                    global_batch=512, seq=4096, dispatcher="hybridep"), ["step_time_s"]),
    "cpu-partition-power-saving": ("scheduling", dict(job_mix="hpc-cpu", load=0.8, policy="tres",
                                   method="simulation", jobs=2000, seed=1, suspend_after_min=5.0),
                                   ["mean_start_min", "energy_kWh_per_job", "boots_per_job"]),
    "stream-streamguard-40s": ("stream", dict(arm="streamguard", mttf_s=40.0, anomalies_per_crash=1.0, trials=200,
                               seed=1), ["impact_pct", "overhead_pct"]),
    "rl-rollout-rose-8b": ("rollout", dict(model="qwen3-8b", system="hgx-h800", policy="rose", rl_gpus=32,
                           samples=1024, median_response=1024, concurrency=16, hours=2),
                           ["samples_per_hour", "allocation_overhead_pct"]),
}  # fmt: skip

HEADER = """\
# The project's own golden numbers, checked by `commodel check` in its tests (tests/test_check.py):
# every bound is the model's value when it was stored, within 1e-6. After a deliberate change to a
# model, regenerate it: python tests/golden/designs.py.
"""


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return f'"{value}"' if isinstance(value, str) else repr(value)


def main() -> None:
    lines = [HEADER]
    for name, (kind, job, outputs) in DESIGNS.items():
        row = evaluator(kind)(pd.DataFrame([job])).iloc[0]
        assert row["valid"], (name, row.get("problem"))
        lines.append(f"[designs.{name}]")
        lines += [f'evaluate = "{kind}"'] if kind != "training" else []
        lines += [f"{key} = {toml_value(value)}" for key, value in job.items()]
        lines.append(f"[designs.{name}.expect]")
        lines += [f"{out} = {{ value = {float(row[out])!r}, rel = 1e-6 }}" for out in outputs]
        lines.append("")
    (Path(__file__).parent / "designs.toml").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
