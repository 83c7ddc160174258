"""Text tables of results, one per job kind (training, kernels, initiation schemes), and the band and
hardware-record lines they share; serving prints in :mod:`commodel.report.serving_table`, collectives
as nccl-tests does (:mod:`commodel.report.collective_table`)."""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING

from pydantic import BaseModel

from commodel.hardware.schema import GemmTiles
from commodel.records import Sourced
from commodel.units import format_bytes, format_quantity, readable_number
from commodel.workloads.training.memory import CATEGORIES as MEMORY_CATEGORIES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import pandas as pd


def layout_and_fit(result: dict) -> tuple[str, str]:
    """A result's parallel layout (with its pipeline schedule unless 1F1B) and whether it fits (with
    the activations it keeps in CPU memory), as the tables print them."""
    layout = " ".join(f"{k}={v}" for k, v in result["layout"].items())
    if result.get("schedule", "1f1b") != "1f1b":
        layout += f" ({result['schedule']})"
    fits = "fits" if result["fits"] else "DOES NOT FIT"
    if result.get("offloaded_bytes", 0) > 0:
        fits += f"; {result['offloaded_bytes'] / 2**30:.1f} GiB of activations in CPU memory"
    if result.get("offloaded_state_bytes", 0) > 0:
        fits += f"; {result['offloaded_state_bytes'] / 2**30:.1f} GiB of {_states(result)} in CPU memory"
    return layout, fits


def _states(result: dict) -> str:
    """The model states a job keeps in CPU memory, as words (``optimizer and weights``)."""
    return " and ".join(result["offload"].split(","))


def offload_lines(result: dict) -> list[str]:
    """What keeping model states in CPU memory costs per step, and the host bandwidth that would hide it."""
    if not result.get("offload"):
        return []
    hide = result["offload_needed_Bps"]
    return [
        f"  offload          {_states(result)} in CPU memory: {result['breakdown']['offload']:.3g} s per step "
        "exposed"
        + (f"; the weights' fetches hide at {format_quantity(hide, 'bandwidth')} per GPU" if hide > 0 else "")
    ]


def _runs(listed: str) -> str:
    """Comma-separated counts with repeats folded: ``7,8,8,8,7`` -> ``7, 3 x 8, 7``."""
    runs = [(value, len(list(repeats))) for value, repeats in groupby(listed.split(","))]
    return ", ".join(value if count == 1 else f"{count} x {value}" for value, count in runs)


def counted(n: float, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is one: ``1 GPU``, ``8 GPUs``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def training_table(result: dict) -> str:
    """A training-step result for a person: headline metrics, then where the step's time goes."""
    layout, fits = layout_and_fit(result)
    nodes = result["nodes"]
    where = (
        f"node groups {result['system']}"
        if ":" in result["system"]
        else f"{counted(nodes, result['system'] + ' node')} of {result['gpus_per_node']}"
    )
    mechanisms = [
        f"{kind} {result[key]}"
        for kind, key in (("TP", "tp_overlap"), ("EP", "ep_overlap"))
        if result.get(key, "none") != "none"
    ]
    if result.get("dispatcher", "alltoall") != "alltoall":
        mechanisms.append(f"experts dispatched by {result['dispatcher']}")
    overlap = result["overlap"] + (f" ({', '.join(mechanisms)})" if mechanisms else "")
    modules = result.get("recompute_modules", "") if result["recompute"] != "full" else ""
    recompute = result["recompute"] + (f" (modules {modules})" if modules else "")
    software = []
    if result.get("zero") == 3:
        software.append(
            "ZeRO-3 (FSDP" + ("" if result["reshard_after_forward"] else ", no reshard after forward") + ")"
        )
    if result.get("elementwise") == "eager":
        software.append("eager elementwise")
    extra = "".join(f", {name}" for name in software)
    head = (
        f"{result['model']} on {counted(result['gpus'], 'GPU')} ({where}), {layout}, {result['dtype']}{extra}, "
        f"recompute {recompute}, overlap {overlap}"
    )
    memory = (
        f"  memory           {result['memory_per_gpu_bytes'] / 2**30:.1f} GiB per GPU ({fits}): "
        + ", ".join(
            f"{name} {result[f'memory_{name}_bytes'] / 2**30:.1f}"
            for name in MEMORY_CATEGORIES
            if result.get(f"memory_{name}_bytes")
        )
    )
    stages = (
        [f"  stages           {_runs(result['stage_layers'])} layers, first to last"]
        if result.get("stage_layers")
        else []
    )
    notes = [f"  note: {note}" for note in result.get("notes", [])]
    if not result["fits"]:  # a job that does not fit has no step, throughput, power or energy
        return "\n".join([head, memory, *stages, "  no step: the job does not fit the GPUs' memory", *notes])
    lines = [
        head,
        f"  step time        {result['step_time_s']:.4g} s",
        f"  throughput       {readable_number(result['tokens_per_s'])} tokens/s",
        f"  model TFLOP/s    {result['tflops_per_gpu']:.1f} per GPU (MFU {100 * result['mfu']:.1f}%)",
        f"  hardware TFLOP/s {result['hw_tflops_per_gpu']:.1f} per GPU (with recomputation)",
        memory,
        *stages,
        *offload_lines(result),
        f"  power            {result['gpu_power_W']:.0f} W per GPU, {format_quantity(1e3 * result['it_power_kW'], 'power')} IT",
        f"  energy           {result['energy_per_step_J'] / 1e6:.3g} MJ per step, {result['energy_per_token_J']:.3g} J per token",
        *(
            [
                f"  failures         goodput {100 * result['goodput']:.1f}% (job MTBF {result['job_mtbf_h']:.3g} h, "
                f"checkpoint every {result['checkpoint_interval_min']:.3g} min), "
                + (
                    f"{result['time_to_train_days']:.3g} days to train"
                    if "time_to_train_days" in result
                    else "never trains"
                )
            ]
            if "job_mtbf_h" in result
            else []
        ),
        "  breakdown (slowest pipeline stage):",
    ]
    step = result["step_time_s"]
    for name, seconds in result["breakdown"].items():
        lines.append(f"    {name:<10} {seconds:10.4g} s  {100 * seconds / step:5.1f}%")
    if result["layout"]["pp"] > 1:
        lines.append(f"  slowest pipeline stage {100 * result['stage_imbalance']:.1f}% above the mean")
    return "\n".join(lines + notes)


def kernel_lines(rows: list[dict], calls: Callable[[dict], str], times: dict[str, str]) -> list[str]:
    """Kernel rows as table lines (:func:`commodel.workloads.layer.kernel_rows.kernel_row`'s columns,
    ``calls`` per layer as text, then the ``times`` columns, header -> key, in ms) and their total."""
    name_width = max(24, 2 + max((len(r["kernel"]) for r in rows), default=0))
    widths = (name_width, 34, 7, 10, 10, 10, 10, 8, 8) + (9,) * len(times)
    head = (
        "kernel",
        "shape (m x n x k)",
        "dtype",
        "calls",
        "GFLOP",
        "MB",
        "  bound",
        "TFLOP/s",
        "GB/s",
        *times,
    )

    def line(cells: tuple[str, ...]) -> str:
        return "  " + "".join(
            c.ljust(w) if i in (0, 1, 2, 6) else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    lines = [line(head)]
    for r in rows:
        lines.append(line((
            r["kernel"], r["shape"], r["dtype"], calls(r), f"{r['gflop']:.4g}", f"{r['mb']:.4g}", f"  {r['bound']}",
            f"{r['tflops']:.0f}", f"{r['gbps']:.0f}", *(f"{r[key]:.4g}" for key in times.values()),
        )))  # fmt: skip
    totals = (f"{sum(r[key] for r in rows):.4g}" for key in times.values())
    lines.append(line(("total", *[""] * 8, *totals)))
    return lines


def kernel_text(result: dict) -> str:
    """A training result's layer kernels for one micro-batch (its ``kernels``:
    :func:`commodel.workloads.layer.kernel_rows.kernel_table`): calls per layer, the forward call's
    work and roofline, and milliseconds per layer."""
    return "\n".join([
        "one layer, one micro-batch on one GPU (recomputation aside; calls: forward/backward per layer):",
        *kernel_lines(result["kernels"], lambda r: f"{r['forward']:.3g}/{r['backward']:.3g}", {"fwd ms": "fwd_ms", "bwd ms": "bwd_ms"}),
    ])  # fmt: skip


def scheme_text(system: str, records: list[dict]) -> str:
    """The initiation-scheme table for a person (``commodel comm schemes``)."""
    sizes = list(records[0]["put_us"]) if records else []
    head = f"{'scheme':<18}{'calls':<14}{'builds':<12}{'triggers':<12}{'moves':<12}"
    head += "".join(f"{'put ' + format_bytes(n):>12}" for n in sizes)
    head += f"{'coord':>9}{'msg/s':>9}  where it wins"
    lines = [f"{system}: one message (us)", head]
    for r in records:
        line = f"{r['scheme']:<18}{r['calls']:<14}{r['builds']:<12}{r['triggers']:<12}{r['moves']:<12}"
        line += "".join(f"{r['put_us'][n]:12.2f}" for n in sizes)
        line += f"{r['coordination_us']:9.2f}{r['messages_per_s'] / 1e6:8.2f}M"
        if r["scheme"] == "host-driven":
            line += "  baseline"
        else:
            above = r["host_competitive_above_bytes"]
            rate = r["wins_above_per_s"]
            line += (
                f"  >{rate:,.0f} coordinations/s; host within 5% above {format_bytes(above)}"
                if rate
                else "  never faster"
            )
        lines.append(line)
    return "\n".join(lines)


def band_lines(result: dict) -> str:
    """A job result's bands for a person, after its table ("" without bands): the model class's
    band, the hardware's uncertain numbers' band, with what drives each, and the software regime's."""
    if "band_source" not in result:
        return f"\n  bands: {result['bands']}" if "bands" in result else ""
    pairs = [k[: -len("_p10")] for k in result if k.endswith("_p10") and "_params_" not in k]
    text = "; ".join(f"{k} {result[k + '_p10']:.4g} to {result[k + '_p90']:.4g}" for k in pairs)
    params = "; ".join(
        f"{k} {result[k + '_params_p10']:.4g} to {result[k + '_params_p90']:.4g}"
        + (f", driven by {result[k + '_params_driver']}" if k + "_params_driver" in result else "")
        for k in pairs
    )
    regime = ""
    if "regime_settings" in result:
        settings = result["regime_settings"] or "none: the job states every one"
        ranges = "; ".join(
            f"{k} {result[k + '_regime_low']:.4g} to {result[k + '_regime_high']:.4g}" for k in pairs
        )
        regime = f"\n  band (software settings left at their defaults, tuned: {settings}): {ranges}"
    return (f"\n  band (p10-p90, {result['band_source']}): {text}"
            f"\n  band (p10-p90, {result['params_source']}): {params}{regime}")  # fmt: skip


def band_note(frame: pd.DataFrame, at: str, key: str, name: str, unit: str) -> str:
    """The bands of a command's table (:func:`commodel.validate.bands.table_bands`) in two comment
    lines: the class band's factors on time, and the parameter band of ``key`` on its last row (``at``)."""
    fast, slow = frame.attrs["time_factors"]
    last = frame.iloc[-1]
    driver = f", driven by {last[f'{key}_params_driver']}" if last.get(f"{key}_params_driver") else ""
    return (f"# band p10-p90 from {frame.attrs['band_source']}: time x{fast:.3f} to x{slow:.3f}\n"
            f"# band p10-p90 from {frame.attrs['params_source']}: at {at} {name} "
            f"{readable_number(last[f'{key}_params_p10'])} to {readable_number(last[f'{key}_params_p90'])} {unit}{driver} "
            "(every row: --json)")  # fmt: skip


def record_lines(record: object, prefix: str = "") -> Iterator[str]:
    """A hardware record flattened into ``field = value unit  [source]`` lines, values in human units."""
    items = (
        record.items()
        if isinstance(record, dict)
        else ((k, getattr(record, k)) for k in type(record).model_fields)
    )
    for key, value in items:
        if isinstance(value, Sourced):
            yield f"  {prefix}{key} = {format_quantity(value.value, value.KIND)}  [{value.source}]"
        elif isinstance(value, GemmTiles):
            yield f"  {prefix}{key} = {', '.join(f'{r}x{c}' for r, c in value.value)}  [{value.source}]"
        elif isinstance(value, BaseModel | dict):
            yield from record_lines(value, f"{prefix}{key}.")
        elif value is not None:
            yield f"  {prefix}{key} = {value}"


def gemm_text(gpu: str, record: dict) -> str:
    """One GEMM's roofline (:func:`commodel.compute.roofline.gemm_summary`) in a line."""
    split = f", split-K {record['split_k']}" if record["split_k"] > 1 else ""
    waves = counted(record["waves"], "wave")
    return (
        f"GEMM {record['m']}x{record['n']}x{record['k']} {record['dtype']} on {gpu}: {record['time_s'] * 1e6:.1f} us, "
        f"{record['tflops']:.1f} TFLOP/s, {record['bound']}-bound "
        f"(intensity {record['intensity_flop_per_byte']:.0f} FLOP/B{split}; {counted(record['tiles'], 'tile')} of "
        f"{record['tile']}, {waves})"
    )
