"""A serving result for a person (:func:`serving_table`): the deployment, its latency and
throughput, memory, power and cost; and each kind of iteration its steady state runs
(:func:`iteration_text`)."""

from __future__ import annotations

import math

from commodel.report.tables import counted, kernel_lines, layout_and_fit, offload_lines
from commodel.units import format_quantity, readable_number


def serving_table(result: dict) -> str:
    """A serving result for a person: the deployment, latency, throughput, memory, power and cost."""
    layout, fits = layout_and_fit(result)
    replicas = f"{counted(result['replicas'], 'replica')} of {layout}"
    if result.get("attention_dp"):
        replicas = f"{layout} with attention data parallelism: {result['replicas']} attention replicas"
    if result.get("ep_overlap") == "two-batch":
        replicas += "; two-batch overlap of the expert exchange"
    head = (
        f"{result['model']} on {counted(result['gpus'], 'GPU')} of {result['system']} "
        f"({replicas}), {result['dtype']} weights, "
        f"{result['kv_dtype']} KV cache, {result['prompt']} prompt + {result['output']} output tokens"
    )
    memory = f"  memory per GPU   {result['memory_per_gpu_bytes'] / 2**30:.1f} GiB ({fits}): " + ", ".join(
        f"{name.replace('_', ' ')} {result[f'memory_{name}_bytes'] / 2**30:.1f}"
        for name in ("weights", "activations", "kv_cache", "reserved")
    )
    if not result["fits"]:  # it cannot run: nothing to time, rate or charge
        in_flight = f"  in flight        {result['batch_in_flight']} requests per replica (at most {result['max_batch']} fit)"
        lines = [
            head,
            in_flight,
            memory,
            "  no latency or throughput: the deployment does not fit the GPUs' memory",
        ]
        return "\n".join(lines + [f"  note: {note}" for note in result.get("notes", [])])
    lines = [
        head,
        f"  in flight        {result['batch_in_flight']} requests per replica (at most {result['max_batch']})",
        *_latency_lines(result),
        f"  throughput       {readable_number(result['output_tokens_per_s'])} output tokens/s "
        f"({readable_number(result['output_tokens_per_s_per_gpu'])} per GPU), {result['requests_per_s']:.3g} requests/s"
        + (
            f", {readable_number(result['input_tokens_per_s'])} prompt tokens/s"
            if result.get("phase") == "prefill"
            else ""
        )
        + _mean_iteration(result),
        memory,
        f"  time shares      {100 * result['comm_share']:.1f}% communication, {100 * result['host_share']:.1f}% host",
        *offload_lines(result),
        f"  power            {result['gpu_power_W']:.0f} W per GPU, {format_quantity(1e3 * result['power_kW'], 'power')} facility",
        f"  energy, cost     {result['energy_per_token_J']:.3g} J per output token, " + _cost(result),
    ]
    lines += [f"  note: {note}" for note in result.get("notes", [])]
    return "\n".join(lines)


def _mean_iteration(result: dict) -> str:
    """Where continuous batching mixes prompts into the iterations, the mean one that sets the rates
    (a request's own token time is the iterations it decodes in, never its prompt's)."""
    both = result.get("phase", "both") == "both" and not result.get("prefill_gpus")
    iteration = result.get("iteration_s", math.nan)
    if not both or not math.isfinite(iteration) or iteration <= result["tpot_s"] * (1 + 1e-3):
        return ""
    return f", at a mean iteration of {1e3 * iteration:.4g} ms"


def _latency_lines(result: dict) -> list[str]:
    """First-token and per-token times, each where the phase the replicas run has it (a prefill-only
    pool gives no per-token time, a decode-only one no first token)."""
    phase, in_flight = result.get("phase", "both"), result["batch_in_flight"]
    lines = []
    if result.get("prefill_gpus"):
        lines.append(
            f"  first token      {1e3 * result['ttft_s']:.4g} ms once scheduled: a prefill-pool iteration "
            "and its KV cache's transfer to the decode pool"
        )
    elif phase != "decode":
        rides = phase == "both" and abs(result["ttft_s"] - result["tpot_s"]) <= 1e-9 * result["tpot_s"]
        chunks = result.get("prompt_chunks") or 1
        lines.append(
            f"  first token      {1e3 * result['ttft_s']:.4g} ms once scheduled, at {in_flight} in flight"
            + (" (its prefill rides one mixed iteration, as each decode step does)" if rides else "")
            + (
                f", its prompt in {chunks:.0f} chunks, one an iteration within --max-num-tokens"
                if chunks > 1
                else ""
            )
        )
    if phase != "prefill":
        lines.append(
            "  per output token none: a request's one output token is its first"
            if result["output"] == 1
            else f"  per output token {1e3 * result['tpot_s']:.4g} ms at {in_flight} in flight"
        )
    if phase != "both":
        lines.append(
            f"  phase            {phase} only, as a disaggregated pool whose other pool never falls behind"
        )
    return lines


def _cost(result: dict) -> str:
    """Cost per million output tokens, or how to get it where no GPU-hour price was given."""
    if result.get("price_per_gpu_hour", 0) > 0:
        return f"${result['cost_per_million_tokens_usd']:.3g} per million output tokens"
    return "cost per token: give --price-per-gpu-hour"


def iteration_text(result: dict) -> str:
    """A serving result's iterations (:func:`commodel.workloads.serving.continuous.iteration_table`): each
    kind's layer kernels with their rooflines, then the sum that makes its time; last, the mean
    iteration over how many prompt chunks iterations start."""
    blocks = []
    for it in result["kernels"]:
        chunked = it["chunk"] < it["prompt"]
        plural = "" if it["prompts"] == 1 else "s"
        prompts = (
            f"{it['prompts']:.3g} prompt chunk{plural} of {it['chunk']:.0f} tokens (of {it['prompt']:.0f}-token prompts)"
            if chunked
            else f"{it['prompts']:.3g} prompt{plural} of {it['prompt']:.0f} tokens"
        )
        carried = f"{it['queries']:.4g} decode queries" + (f" and {prompts}" if it["prompts"] else "")
        layer_ms = sum(r["ms"] for r in it["kernels"])
        stage = f"{it['stage_layers']} layers x {layer_ms:.4g} ms + logits {it['logits']['ms']:.4g} ms"
        stage = f"{it['pp']} stages x ({stage})" if it["pp"] > 1 else stage
        blocks.append("\n".join([
            f"an iteration {it['iteration']} ({_share(it['share'])} of them: {carried}); one layer of one "
            "micro-batch on one GPU (calls per layer):",
            *kernel_lines(it["kernels"], lambda r: f"{r['calls']:.3g}", {"ms": "ms"}),
            f"  iteration: {stage} + communication {it['comm_ms']:.4g} ms + host {it['host_ms']:.4g} ms "
            f"= {it['time_ms']:.4g} ms",
        ]))  # fmt: skip
    return "\n\n".join([*blocks, _starts_line(result["starts"], result["iteration_s"])])


def _starts_line(starts: list[dict], mean_s: float, most: int = 10) -> str:
    """The mean iteration as the counts of prompt chunks iterations start make it up: each count that
    starts at least 0.5% of them with its share and time, at most ``most`` entries (neighbouring
    counts grouped, at their mean time, where there are more)."""
    kept = [s for s in starts if s["share"] >= 0.005]
    width = -(-len(kept) // most)
    parts = []
    for group in (kept[i : i + width] for i in range(0, len(kept), width)):
        share = sum(s["share"] for s in group)
        time = sum(s["share"] * s["time_ms"] for s in group) / share
        label = "-".join(dict.fromkeys(str(s["chunks"]) for s in (group[0], group[-1])))
        parts.append(f"{label}: {_share(share)} at {time:.4g} ms")
    rest = 1 - sum(s["share"] for s in kept)
    others = f", other counts {_share(rest)}" if rest > 5e-4 else ""
    return (
        f"mean iteration {1e3 * mean_s:.4g} ms over the prompt chunks an iteration starts, as the slots end "
        f"(count: share of iterations at its time; the kinds above are the counts around the mean): "
        f"{', '.join(parts)}{others}"
    )


def _share(share: float) -> str:
    """A share of the iterations as a percentage: whole ones, or two significant figures below 1% (a
    prompt every thousand decode iterations is 0.1%, not 0%)."""
    return f"{100 * share:.0f}%" if share >= 0.01 or share == 0 else f"{100 * share:.2g}%"
