"""Global sensitivity: SALib's estimators through commodel's path recover the Ishigami indices, give
an unused variable about 0, and rank a study's variables."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from commodel.errors import CommodelError
from commodel.explore.sensitivity import indices

STUDIES = Path(__file__).parents[1] / "studies"


def ishigami(x: np.ndarray) -> dict[str, np.ndarray]:
    """Ishigami (a = 7, b = 0.1) on [-pi, pi]^3, plus a fourth input it ignores."""
    z = -np.pi + 2 * np.pi * x
    y = np.sin(z[:, 0]) + 7 * np.sin(z[:, 1]) ** 2 + 0.1 * z[:, 2] ** 4 * np.sin(z[:, 0])
    return {"y": y}


def test_sobol_indices_of_the_ishigami_function():
    table = indices(ishigami, ["x1", "x2", "x3", "unused"], "sobol", samples=2048, seed=1).set_index(
        "variable"
    )
    expected_s1 = {"x1": 0.3139, "x2": 0.4424, "x3": 0.0, "unused": 0.0}
    expected_st = {"x1": 0.5576, "x2": 0.4424, "x3": 0.2437, "unused": 0.0}
    for name in expected_s1:
        assert table.S1[name] == pytest.approx(expected_s1[name], abs=0.05), name
        assert table.ST[name] == pytest.approx(expected_st[name], abs=0.05), name


@pytest.mark.parametrize("method", ["sobol", "morris"])
def test_the_same_seed_gives_the_same_indices_and_confidence_intervals(method):
    """Seed 0 too (SALib's Sobol analysis treats a seed of 0 as none and bootstraps unseeded)."""
    first, second = (
        indices(ishigami, ["x1", "x2", "x3", "unused"], method, samples=64, seed=0) for _ in range(2)
    )
    assert first.equals(second)


def test_morris_ranks_an_unused_input_last_and_bad_requests_are_errors():
    table = indices(ishigami, ["x1", "x2", "x3", "unused"], "morris", samples=200, seed=1).set_index(
        "variable"
    )
    assert table.mu_star["unused"] == pytest.approx(0.0, abs=1e-9)
    assert table.mu_star.idxmax() in ("x1", "x2")
    with pytest.raises(CommodelError, match="did you mean 'sobol'"):
        indices(ishigami, ["x1"], "sobl")
    with pytest.raises(CommodelError, match="at least one variable"):
        indices(ishigami, [], "sobol")


def test_a_choice_no_base_sample_varies_has_no_indices_not_zero_and_says_so():
    """Six two-valued choices, the output set by the sixth: at 16 base samples SALib's Sobol points
    draw the sixth in the same half for A and B every time, so it is never varied and its indices are
    NaN with a note (they read 0: "the choice does not matter"); at 64 it is varied and explains the
    output."""
    from commodel.explore.sensitivity import estimator_notes

    def output(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": 10.0 * (x[:, 5] >= 0.5) + 0.1 * x[:, 0]}

    names, halves = [f"c{i}" for i in range(6)], lambda x: np.floor(np.clip(x, 0, 1 - 1e-12) * 2)
    few = indices(output, names, "sobol", samples=16, seed=0, levels=halves).set_index("variable")
    assert np.isnan(few.S1["c5"]) and np.isnan(few.ST["c5"]) and np.isfinite(few.ST["c0"])
    notes = estimator_notes(few.reset_index(), 16)
    assert any(n.startswith("c5: no base sample's two draws give it different values") for n in notes)
    enough = indices(output, names, "sobol", samples=64, seed=0, levels=halves).set_index("variable")
    assert enough.ST["c5"] > 0.9 and enough.ST.idxmax() == "c5"


def test_a_studys_dominant_variable_ranks_first_and_a_study_without_variables_is_refused(
    tmp_path, capsys, monkeypatch
):
    from commodel.cli import main
    from commodel.explore.sensitivity import study_sensitivity
    from commodel.explore.spec import load_spec

    # the cais study varies model, system and tp_overlap: the model's size dominates step time
    table = study_sensitivity(load_spec(STUDIES / "cais" / "study.toml"), "sobol", 64).set_index("variable")
    assert table.ST["model"] > table.ST["tp_overlap"]
    # GPT-3 175B on 64 H100 and Llama 3 405B on 64 of either GPU do not fit: three of the space's
    # eight model-system pairs have no step
    assert (table.invalid_share > 0.25).all() and (table.invalid_share < 0.5).all()
    spec = tmp_path / "fixed.toml"
    spec.write_text('[study]\nname = "fixed"\nevaluate = "training"\n[fixed]\nmodel = "llama3-8b"\n'
                    'system = "dgx-h100"\n[objectives]\nstep_time_s = "min"\n')  # fmt: skip
    monkeypatch.setattr("sys.argv", ["commodel", "sensitivity", str(spec)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2 and "no variables" in capsys.readouterr().err


def test_a_space_no_design_of_which_runs_says_why(tmp_path, capsys, monkeypatch):
    """Llama 3 8B on 8 H100 without recomputation does not fit: the sensitivity says so, as the sweep
    does, where it said only that no design gave a value."""
    from commodel.cli import main

    spec = tmp_path / "unfit.toml"
    spec.write_text('[study]\nname = "unfit"\nevaluate = "training"\n[fixed]\nmodel = "llama3-8b"\n'
                    'system = "dgx-h100"\ngpus = 8\n[variables]\npue = { real = [1.1, 1.5] }\n'
                    '[objectives]\nstep_time_s = "min"\n')  # fmt: skip
    monkeypatch.setattr("sys.argv", ["commodel", "sensitivity", str(spec), "--samples", "8"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "no design of the space gives a value for step_time_s" in err
    assert "the commonest reason" in err and "does not fit" in err


def test_a_studys_sensitivity_is_the_same_chunked_or_whole_and_on_dask():
    from commodel.explore.sensitivity import study_sensitivity
    from commodel.explore.spec import load_spec

    spec = load_spec(STUDIES / "cais" / "study.toml")
    whole = study_sensitivity(spec, "morris", 8)
    chunked = spec.model_copy(update={"study": spec.study.model_copy(update={"chunk_size": 7})})
    pd.testing.assert_frame_equal(whole, study_sensitivity(chunked, "morris", 8))
    pytest.importorskip("dask.distributed")
    pd.testing.assert_frame_equal(whole, study_sensitivity(chunked, "morris", 8, executor="dask"))


def test_the_uncertain_numbers_of_one_design_rank_by_what_its_step_time_rests_on(tmp_path):
    from commodel.explore.sensitivity import study_sensitivity
    from commodel.explore.spec import load_spec

    spec = tmp_path / "fixed.toml"
    spec.write_text('[study]\nname = "fixed"\nevaluate = "training"\n[fixed]\nmodel = "llama3-70b"\n'
                    'system = "dgx-b200"\nnodes = 16\ntp = 8\npp = 4\nglobal_batch = 512\nseq = 8192\n'
                    '[objectives]\nstep_time_s = "min"\n')  # fmt: skip
    table = study_sensitivity(load_spec(spec), "morris", 8, parameters=True).set_index("variable")
    # B200's BF16 GEMM efficiency is assumed (x0.8-1.25): the step time rests on it; a doorbell write
    # (GPU-initiated communication only) does not enter a training step at all
    assert table.mu_star.idxmax() == "b200-sxm.matmul_efficiency.bf16"
    assert table.mu_star["dgx-b200.initiation.doorbell"] == 0.0


def test_sobol_notes_name_impossible_estimates_and_the_samples_to_resolve_them():
    from commodel.explore.sensitivity import RESOLVED_CONF, estimator_notes

    table = pd.DataFrame([
        {"output": "t", "variable": "a", "S1": 0.7, "S1_conf": 0.02, "ST": 0.72, "ST_conf": 0.03},
        {"output": "t", "variable": "b", "S1": 0.3, "S1_conf": 0.2, "ST": 0.2, "ST_conf": 0.1},
        {"output": "t", "variable": "c", "S1": -0.05, "S1_conf": 0.04, "ST": 0.01, "ST_conf": 0.01},
    ])  # fmt: skip
    notes = estimator_notes(table, 64)
    assert any("t / b" in n and "cannot exceed ST" in n for n in notes)
    assert any("t / c" in n for n in notes) and not any("t / a" in n for n in notes)
    assert notes[-1].endswith(f"±{RESOLVED_CONF}") and "about 1024 would" in notes[-1]  # 64 x (0.2 / 0.05)^2
    assert estimator_notes(table.iloc[:1], 64) == []
