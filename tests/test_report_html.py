"""report.html: self-contained, its table sorts and its image renders in a real browser (Chromium,
installed by .ci/run when missing)."""

import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from commodel.explore.spec import load_spec
from commodel.explore.sweep import run_sweep
from commodel.report.sweep_report import write_reports

STUDY = Path(__file__).parents[1] / "studies" / "default" / "study.toml"
BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    run_sweep(load_spec(STUDY), out, progress=False, reporter=write_reports)
    return out


def test_the_report_is_one_self_contained_file_with_the_front_and_the_models_standing(report):
    text = (report / "report.html").read_text()
    assert 'src="data:image/png;base64,' in text and not re.search(r'(src|href)="https?://', text)
    front = pd.read_csv(report / "pareto.csv")
    table = text[text.index('id="front"') : text.index("</table>", text.index('id="front"'))]
    assert table.count("<tr><td") == len(front)
    sections = ("Pareto front", "Uncertainty", "Sensitivity to the design choices", "Where the step time goes",
                "Where the models stand", "Specification")  # fmt: skip
    for section in sections:
        assert section in text
    for png in ("breakdown.png", "sensitivity.png"):
        assert (report / png).read_bytes()[:4] == b"\x89PNG"
    assert text.count("data:image/png;base64,") == 3


def test_the_default_studys_report_shows_each_front_designs_band_and_the_sensitivity(report):
    text = (report / "report.html").read_text()
    front = pd.read_csv(report / "pareto.csv")
    bands = text[text.index('id="bands"') : text.index("</table>", text.index('id="bands"'))]
    assert bands.count("<tr><td") == len(front) and "driven by" in bands
    assert (front.time_to_train_days_p10 <= front.time_to_train_days_p90).all()
    sensitivity = pd.read_csv(report / "sensitivity.csv")
    assert set(sensitivity.output) == {"time_to_train_days", "energy_MWh", "cost_usd"}
    # the price per GPU-hour follows the system: the system drives the cost more than the PUE does
    cost = sensitivity[sensitivity.output == "cost_usd"].set_index("variable").ST
    assert cost["system"] > cost["pue"]
    # what the estimate cannot say at the study's 64 base samples is in both reports, not left out
    assert (
        "the widest 95% interval is" in text
        and "the widest 95% interval is" in (report / "report.md").read_text()
    )


@pytest.mark.skipif(
    BROWSER is None, reason="no Chromium on this machine (.ci/run installs Debian's chromium)"
)
def test_in_a_real_browser_the_table_sorts_and_the_image_renders(report):
    def dom(fragment: str) -> str:
        url = (report / "report.html").as_uri() + fragment
        run = subprocess.run(
            [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000", "--dump-dom", url],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        return run.stdout

    page = dom("#sort=-cost_usd")
    assert 'data-images-loaded="3"' in page and 'data-sorted-by="-cost_usd"' in page
    body = page[page.index("<tbody>") : page.index("</tbody>")]
    header = page[page.index("<thead>") : page.index("</thead>")]
    column = re.findall(r'data-column="([^"]+)"', header).index("cost_usd")
    values = [float(re.findall(r'data-value="([^"]*)"', row)[column]) for row in body.split("<tr>")[1:]]
    assert len(values) >= 2 and len(set(values)) > 1 and values == sorted(values, reverse=True)
