"""A sweep's report as one self-contained HTML file (``report.html``): the study, its specification,
the Pareto front as a sortable table, the plot inline, the designs' uncertainty bands and the
objectives' sensitivity when the study asks for them, and where the models it used stand against
published measurements. No network, no external files: it opens from a mail attachment.

The table sorts by a click on a column header, or on load by ``#sort=COLUMN`` (``#sort=-COLUMN``
descending) in the address. When every image has loaded, the page sets ``data-images-loaded`` on
its body to the number that rendered, for anything checking it without a person.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

from commodel.report.sweep_text import sensitivity_text, title, uncertainty_table, uncertainty_text

#: The validation kinds each evaluator's models answer to.
MODEL_KINDS = {
    "training": ("training", "collective", "dispatch", "gemm", "memory", "power"),
    "serving": ("serving", "collective", "gemm", "memory"),
    "collective": ("collective",),
    "initiation": ("latency",),
    "moe_dispatch": ("dispatch", "latency"),
    "halo": ("latency",),
    "gemm": ("gemm",),
}

_SCRIPT = """
function sortBy(table, column, descending) {
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  const index = Array.from(table.tHead.rows[0].cells).findIndex(c => c.dataset.column === column);
  if (index < 0) return;
  const key = r => { const t = r.cells[index].dataset.value; const n = parseFloat(t); return isNaN(n) ? t : n; };
  rows.sort((a, b) => { const x = key(a), y = key(b); return (x < y ? -1 : x > y ? 1 : 0) * (descending ? -1 : 1); });
  rows.forEach(r => body.appendChild(r));
  table.dataset.sortedBy = (descending ? "-" : "") + column;
}
document.querySelectorAll("table.sortable th").forEach(th => th.addEventListener("click", () => {
  const table = th.closest("table");
  sortBy(table, th.dataset.column, table.dataset.sortedBy === th.dataset.column);
}));
const wanted = new URLSearchParams(location.hash.slice(1)).get("sort");
if (wanted) { const d = wanted.startsWith("-"); sortBy(document.querySelector("table.sortable"), wanted.replace(/^-/, ""), d); }
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  document.body.dataset.imagesLoaded = images.filter(i => i.complete && i.naturalWidth > 0).length;
});
"""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; } th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; }
th { background: #eee; cursor: pointer; } td.number { text-align: right; } pre { background: #f6f6f6; padding: 1em; }
img { max-width: 100%; } .holds { color: #176d1f; } .misses { color: #a31515; }
"""


def _cell(value: object) -> str:
    if isinstance(value, float):
        shown = f"{value:.4g}"
        return f'<td class="number" data-value="{value!r}">{shown}</td>'
    text = html.escape(str(value))
    return f'<td data-value="{text}">{text}</td>'


def _inline(path: Path) -> str:
    """A file's bytes as base64, for an inline image (empty when the file is missing)."""
    return base64.b64encode(path.read_bytes()).decode() if path.is_file() else ""


def front_table(front: pd.DataFrame, columns: list[str], table_id: str = "front") -> str:
    """The Pareto front as a sortable HTML table over ``columns``."""
    head = "".join(
        f'<th data-column="{html.escape(c)}">{html.escape(c.replace("_", " "))}</th>' for c in columns
    )
    rows = "".join(
        "<tr>" + "".join(_cell(row[c]) for c in columns) + "</tr>" for _, row in front[columns].iterrows()
    )
    return (
        f'<table class="sortable" id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
    )


def validation_section(evaluator: str, standing: tuple[pd.DataFrame, pd.DataFrame] | None) -> str:
    """Accuracy gates and per-kind errors of the models this evaluator uses, from ``standing``:
    ``commodel validate``'s per-kind summary and its gates (none given: the section says so)."""
    kinds = MODEL_KINDS.get(evaluator)
    if not kinds:
        return "<p>No published measurements bear on this evaluator's models.</p>"
    if standing is None:
        return "<p>Not compared with published measurements in this run (see <code>commodel validate</code>).</p>"
    stats, gates = standing
    stats = stats[stats.kind.isin(kinds)]
    lines = ["<table><tr><th>model class</th><th>rows</th><th>median error %</th><th>max error %</th></tr>"]
    for row in stats.itertuples():
        lines.append(f"<tr><td>{row.kind}</td><td>{row.rows}</td><td>{row.median_abs_err_pct:.3g}</td>"
                     f"<td>{row.max_abs_err_pct:.3g}</td></tr>")  # fmt: skip
    lines.append("</table><ul>")
    for row in gates.itertuples():
        verdict = "holds" if row.holds else "misses"
        lines.append(f'<li class="{verdict}">{html.escape(row.gate)}, {row.statistic}: {row.abs_err_pct:.3g}% '
                     f"(bound {row.bound_pct:g}%): {verdict}</li>")  # fmt: skip
    return "\n".join([*lines, "</ul>"])


def report_html(
    summary: dict, front: pd.DataFrame, plot: Path, standing: tuple[pd.DataFrame, pd.DataFrame] | None = None
) -> str:
    """The whole report as one HTML document."""
    name = title(summary)
    image = _inline(Path(plot))
    breakdown = Path(plot).with_name("breakdown.png")
    bars = f'<h2>Where the step time goes</h2>\n<img alt="breakdown" src="data:image/png;base64,{_inline(breakdown)}">'

    columns = [c for c in [*summary["variables"], *summary["objectives"]] if c in front]
    uncertainty = ""
    if summary.get("uncertainty") is not None and len(front):
        bands = uncertainty_table(summary, front)
        uncertainty = (f"<h2>Uncertainty</h2>\n<p>{html.escape(uncertainty_text(summary))}</p>\n"
                       f"{front_table(bands, list(bands.columns), 'bands')}")  # fmt: skip
    sensitivity_png = Path(plot).with_name("sensitivity.png")
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in summary.get("sensitivity_notes", []))
    sensitivity = (
        f"<h2>Sensitivity to the design choices</h2>\n<p>{html.escape(sensitivity_text(summary))}</p>\n"
        f'<img alt="sensitivity" src="data:image/png;base64,{_inline(sensitivity_png)}">'
        + (f"\n<ul>{notes}</ul>" if notes else "")
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(name)}</title>
<style>{_STYLE}</style></head>
<body>
<h1>{html.escape(name)}</h1>
<p>Evaluator <code>{summary["evaluator"]}</code>, method <code>{summary["method"]}</code>: {summary["points"]:,} points,
{summary["valid"]:,} valid, {summary["feasible"]:,} feasible, {summary["pareto"]:,} Pareto-optimal, hypervolume
{summary["hypervolume"]:.4f}, {summary["elapsed_s"]:.1f} s. Specification hash <code>{summary["spec_hash"]}</code>,
commodel {summary["commodel_version"]}.</p>
<h2>Pareto front</h2>
<img alt="Pareto front" src="data:image/png;base64,{image}">
<p>Click a column to sort.</p>
{front_table(front, columns)}
{uncertainty}
{sensitivity if sensitivity_png.is_file() else ""}
{bars if breakdown.is_file() else ""}
<h2>Where the models stand</h2>
{validation_section(summary["evaluator"], standing)}
<h2>Specification</h2>
<pre>{html.escape(summary["specification"])}</pre>
<script>{_SCRIPT}</script>
</body></html>
"""
