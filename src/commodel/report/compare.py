"""Two training designs side by side (``commodel compare``): headline metrics, their ratio, and where
the step's time moved, component by component, from the same scalar model as ``commodel train``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commodel.errors import CommodelError
from commodel.pricing.run import train
from commodel.records import read_toml
from commodel.report.plots import breakdown_plot
from commodel.units import readable_number

#: Headline metrics: result key, label, unit, scale.
METRICS = (
    ("step_time_s", "step time", "s", 1.0),
    ("tokens_per_s", "throughput", "tokens/s", 1.0),
    ("mfu", "MFU", "%", 100.0),
    ("memory_per_gpu_bytes", "memory per GPU", "GiB", 2**-30),
    ("gpu_power_W", "power per GPU", "W", 1.0),
    ("energy_per_token_J", "energy per token", "J", 1.0),
    ("time_to_train_days", "time to train", "days", 1.0),
    ("cost_usd", "cost to train", "USD", 1.0),
)


def parse_design(text: str, option: str) -> dict[str, str]:
    """``"system=dgx-h100,tp=8"`` as fields (typed by the job declaration later), or a TOML file of them."""
    if text.endswith(".toml"):
        return dict(read_toml(Path(text)))
    fields = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise CommodelError(
                f"{option}: cannot read '{part}': write field=value pairs, e.g. system=dgx-h100,tp=8"
            )
        key = name.strip().replace("-", "_")
        if key in fields:
            raise CommodelError(f"{option}: '{key}' is given twice")
        fields[key] = value.strip()
    if not fields:
        raise CommodelError(f"{option}: an empty design; give field=value pairs or a TOML file")
    return fields


def compare(a: dict[str, Any], b: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """Price both designs (each over ``common``) and set them side by side. A design that does not fit
    has its memory and no other figure; a note says so, with what would make it fit."""
    results, priced, notes = {}, False, []
    for label, design in (("a", a), ("b", b)):
        job = {**common, **design}
        try:
            result = train(**job)
            if not result["fits"]:  # what would make it fit: the advice train gives such a job
                result = train(**job, advise=True)
                notes.append(f"{label.upper()} does not fit: " + "; ".join(result["notes"]))
        except CommodelError as exc:
            raise CommodelError(f"design {label.upper()}: {exc}") from None
        price = float(job.get("price_per_gpu_hour", 0) or 0)
        priced = priced or price > 0
        if "time_to_train_days" in result:
            result["cost_usd"] = price * result["gpus"] * result["time_to_train_days"] * 24
        results[label] = result
    if not priced:
        notes.append("cost to train: give price_per_gpu_hour (in --common or a design)")
    rows = []
    for key, label, unit, scale in METRICS:
        if key == "cost_usd" and not priced:
            continue
        va, vb = (results[side].get(key) for side in ("a", "b"))
        va, vb = (None if v is None else v * scale for v in (va, vb))
        ratio = vb / va if va and vb is not None else None
        rows.append({"metric": label, "unit": unit, "a": va, "b": vb, "b_over_a": ratio})
    steps = [results[side].get("breakdown") for side in ("a", "b")]
    breakdown = [
        {"component": name, "a_s": steps[0][name], "b_s": steps[1][name], "change_s": steps[1][name] - steps[0][name]}
        for name in steps[0]
    ] if all(steps) else []  # fmt: skip
    designs = {"a": {**common, **a}, "b": {**common, **b}}
    fits = {side: bool(results[side]["fits"]) for side in ("a", "b")}
    return {"designs": designs, "labels": labels(designs["a"], designs["b"]), "fits": fits, "metrics": rows,
            "breakdown": breakdown, "notes": notes}  # fmt: skip


def labels(a: dict[str, Any], b: dict[str, Any]) -> dict[str, str]:
    """Each design named by the fields in which it differs from the other (``tp=8 pp=2``), "defaults"
    where it leaves out what the other sets, "the same design" where they differ in none (the side,
    A or B, is the caller's to print)."""
    differ = [k for k in dict.fromkeys([*a, *b]) if str(a.get(k, "")) != str(b.get(k, ""))]

    def named(design: dict[str, Any]) -> str:
        text = " ".join(f"{k}={design[k]}" for k in differ if k in design)
        return text or ("defaults" if differ else "the same design")

    return {"a": named(a), "b": named(b)}


def compare_text(result: dict[str, Any]) -> str:
    """The comparison for a person: metrics with B / A, then the breakdown's changes, largest first."""
    names = result["labels"]
    fits = result.get("fits", {"a": True, "b": True})
    lines = [
        f"{side.upper()} ({names[side]}): {_design(result['designs'][side])}"
        + ("" if fits[side] else " -- DOES NOT FIT")
        for side in ("a", "b")
    ]
    lines += ["", f"{'':<26}{'A':>14}{'B':>14}{'B / A':>9}"]
    for row in result["metrics"]:
        ratio = f"{row['b_over_a']:.3g}" if row["b_over_a"] is not None else "-"
        name = f"{row['metric']} ({row['unit']})"
        a, b = (readable_number(v) if v is not None else "-" for v in (row["a"], row["b"]))
        lines.append(f"{name:<26}{a:>14}{b:>14}{ratio:>9}")
    if result["breakdown"]:
        lines += ["", "where the step's time moved (s, B - A):"]
    for row in sorted(result["breakdown"], key=lambda r: -abs(r["change_s"])):
        lines.append(
            f"  {row['component']:<12}{row['a_s']:>12.4g}{row['b_s']:>12.4g}{row['change_s']:>+12.4g}"
        )
    lines += [f"note: {note}" for note in result.get("notes", [])]
    return "\n".join(lines)


def compare_plot(result: dict[str, Any], path: str | Path) -> Path:
    """Stacked bars of each design's step time by component."""
    bars = {
        f"{side.upper()}: {result['labels'][side]}": {
            r["component"]: r[f"{side}_s"] for r in result["breakdown"]
        }
        for side in ("a", "b")
    }
    return breakdown_plot(bars, path)


def _design(fields: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in fields.items())
