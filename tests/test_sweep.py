"""The exploration engine: specs, chunked grids, resume, executors, Pareto and hypervolume, outputs."""

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import commodel.explore.evaluation as evaluation
import commodel.explore.sweep as sweep_module
from commodel.errors import CommodelError
from commodel.explore.expressions import evaluate_expression
from commodel.explore.pareto import hypervolume, nondominated
from commodel.explore.space import complete, grid_chunk, grid_size
from commodel.explore.spec import load_spec
from commodel.explore.sweep import evaluate_all, run_sweep
from commodel.report.sweep_report import write_reports

SMALL = """
[study]
name = "small"
evaluate = "training"
method = "{method}"
budget = {budget}
seed = 3
chunk_size = {chunk}
constraints = ["fits == true"]

[fixed]
model = "llama3-8b"
seq = 4096
global_batch = 64
zero = 1

[variables]
system = {{ choice = ["dgx-a100", "dgx-h100"] }}
nodes = {{ int = [1, 8], log = true }}
tp = {{ choice = [1, 2, 4, 8] }}
overlap = {{ choice = ["serial", "occupancy-shaped"] }}
pue = {{ real = [1.1, 1.5], points = 2 }}

[derived]
price_per_gpu_hour = {{ lookup = "system", values = {{ "dgx-a100" = 1.5, "dgx-h100" = 2.5 }} }}

[objectives]
time_to_train_days = "min"
cost_usd = "min"
"""


def write_spec(tmp_path: Path, method="grid", budget=0, chunk=16, text=SMALL) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text.format(method=method, budget=budget, chunk=chunk))
    return path


# --- Pareto filter and hypervolume against brute force -------------------------------------------


def brute_nondominated(points):
    n = len(points)
    return np.array(
        [
            not any(np.all(points[j] <= points[i]) and np.any(points[j] < points[i]) for j in range(n))
            for i in range(n)
        ]
    )


def brute_hypervolume(points, ref):
    """Exact dominated volume by coordinate compression: sum the grid cells some point dominates."""
    d = points.shape[1]
    axes = [np.unique(np.concatenate([points[:, k], [ref[k]]])) for k in range(d)]
    volume = 0.0
    for cell in itertools.product(*(range(len(a) - 1) for a in axes)):
        low = np.array([axes[k][c] for k, c in enumerate(cell)])
        high = np.array([axes[k][c + 1] for k, c in enumerate(cell)])
        if np.any(np.all(points <= low, axis=1)):
            volume += np.prod(high - low)
    return volume


@settings(max_examples=80, deadline=None)
@given(arrays(float, st.tuples(st.integers(1, 40), st.integers(2, 4)), elements=st.integers(0, 6).map(float)))
def test_nondominated_filter_matches_brute_force(points):
    assert np.array_equal(nondominated(points), brute_nondominated(points))


@settings(max_examples=60, deadline=None)
@given(
    arrays(float, st.tuples(st.integers(1, 7), st.integers(2, 3)), elements=st.floats(0, 1, allow_nan=False))
)
def test_hypervolume_matches_brute_force(points):
    ideal, nadir = np.zeros(points.shape[1]), np.ones(points.shape[1])
    expected = brute_hypervolume(points, np.full(points.shape[1], 1.1))
    assert hypervolume(points, ideal, nadir) == pytest.approx(expected, abs=1e-9)


# --- Specifications ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("tp = {{", "tpp = {{", "unknown input 'tpp' (did you mean 'tp'?)"),
        (
            'time_to_train_days = "min"',
            'time_to_trian_days = "min"',
            "unknown column 'time_to_trian_days' (did you mean 'time_to_train_days'?)",
        ),
        ("int = [1, 8]", "int = [8, 1]", "empty range"),
        ("real = [1.1, 1.5]", "real = [1.5, 1.5]", "empty range"),
        ('evaluate = "training"', 'evaluate = "trainign"', "did you mean 'training'"),
        ('method = "{method}"', 'method = "nsga4"', "method"),
        ('"fits == true"', '"fits === true"', "is not 'column OP value'"),
        ('"fits == true"', '"fitz == true"', "unknown column 'fitz'"),
        ('model = "llama3-8b"', 'modle = "llama3-8b"', "did you mean 'model'"),
        ("[derived]", '[derived]\ngpus = "nodes * __import__(1)"', "calls something other than"),
    ],
)
def test_bad_specs_name_the_key(tmp_path, old, new, message):
    text = SMALL.replace(old, new)
    assert text != SMALL
    with pytest.raises(CommodelError, match=None) as info:
        load_spec(write_spec(tmp_path, text=text))
    assert message in str(info.value)


def test_derived_expressions_and_lookups(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    frame = complete(spec, grid_chunk(spec, 0, grid_size(spec)))
    assert set(frame.price_per_gpu_hour) == {1.5, 2.5}
    values = evaluate_expression("ceil(nodes * 8 / tp) + max(tp, 2) ** 2", frame, "test")
    assert np.array_equal(values, np.ceil(frame.nodes * 8 / frame.tp) + np.maximum(frame.tp, 2) ** 2)


# --- Running ---------------------------------------------------------------------------------------


def test_chunking_does_not_change_results(tmp_path):
    small = evaluate_all(load_spec(write_spec(tmp_path, chunk=7)))
    whole = evaluate_all(load_spec(write_spec(tmp_path, chunk=10_000)))
    pd.testing.assert_frame_equal(small, whole)
    assert len(whole) <= grid_size(load_spec(write_spec(tmp_path)))


def test_outputs_are_complete_and_atomic(tmp_path):
    out = tmp_path / "out"
    summary = run_sweep(
        load_spec(write_spec(tmp_path)), out, write_csv=True, progress=False, reporter=write_reports
    )
    for name in ("results.parquet", "results.csv", "pareto.csv", "pareto.png", "summary.json", "report.md"):
        assert (out / name).is_file(), name
    assert not list(out.glob(".*tmp")) and not (out / ".chunks").exists()
    saved = json.loads((out / "summary.json").read_text())
    assert saved["spec_hash"] == summary["spec_hash"] and saved["pareto"] == len(
        pd.read_csv(out / "pareto.csv")
    )
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) == saved["valid"] and results.feasible.sum() == saved["feasible"]
    assert 0 < saved["hypervolume"] <= 1.1**2
    assert "Pareto front" in (out / "report.md").read_text()


def interrupted_at_chunk_3(spec, out, monkeypatch):
    """Run ``spec`` into ``out`` until chunk 3 raises KeyboardInterrupt; return the real chunk
    function (the patched one stays in place until the caller patches it again)."""
    real = sweep_module.evaluate_chunk

    def dies_at_chunk_3(spec_json, index):
        if index == 3:
            raise KeyboardInterrupt
        return real(spec_json, index)

    monkeypatch.setattr(sweep_module, "evaluate_chunk", dies_at_chunk_3)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, out, progress=False)
    return real


def test_resume_after_a_killed_sweep_gives_the_same_results(tmp_path, monkeypatch):
    spec = load_spec(write_spec(tmp_path))
    run_sweep(spec, tmp_path / "whole", progress=False)
    real = interrupted_at_chunk_3(spec, tmp_path / "resumed", monkeypatch)
    assert len(list((tmp_path / "resumed" / ".chunks").glob("0*.parquet"))) == 3
    calls = []
    monkeypatch.setattr(sweep_module, "evaluate_chunk", lambda s, i: calls.append(i) or real(s, i))
    run_sweep(spec, tmp_path / "resumed", resume=True, progress=False)
    assert 0 not in calls and 3 in calls
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "whole" / "results.parquet"),
        pd.read_parquet(tmp_path / "resumed" / "results.parquet"),
    )


def test_resume_refuses_a_changed_spec(tmp_path, monkeypatch):
    spec = load_spec(write_spec(tmp_path))
    monkeypatch.setattr(
        sweep_module,
        "evaluate_chunk",
        lambda s, i: (
            (_ for _ in ()).throw(KeyboardInterrupt)
            if i == 1
            else evaluation.finish(spec, evaluation.chunk_inputs(spec, i))
        ),
    )
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, tmp_path / "out", progress=False)
    changed = spec.model_copy(update={"objectives": {"cost_usd": "min"}})
    with pytest.raises(CommodelError, match="another specification"):
        run_sweep(changed, tmp_path / "out", resume=True, progress=False)


def test_dask_and_local_executors_agree(tmp_path):
    pytest.importorskip("dask.distributed")
    spec = load_spec(write_spec(tmp_path))
    run_sweep(spec, tmp_path / "local", progress=False)
    run_sweep(spec, tmp_path / "dask", executor="dask", progress=False)
    for name in ("results.parquet", "pareto.csv"):
        read = pd.read_parquet if name.endswith("parquet") else pd.read_csv
        pd.testing.assert_frame_equal(read(tmp_path / "local" / name), read(tmp_path / "dask" / name))


@pytest.mark.parametrize("method", ["sobol", "lhs"])
def test_quasi_random_samplers_take_the_budget(tmp_path, method):
    spec = load_spec(write_spec(tmp_path, method=method, budget=40))
    summary = run_sweep(spec, tmp_path / method, progress=False)
    assert summary["points"] == 40 and 0 < summary["valid"] <= 40


@pytest.mark.parametrize("method", ["nsga2", "nsga3"])
def test_optimizers_respect_the_budget_and_find_a_front(tmp_path, method):
    spec = load_spec(write_spec(tmp_path, method=method, budget=160))
    summary = run_sweep(spec, tmp_path / method, progress=False)
    assert summary["valid"] <= 160 and summary["pareto"] >= 1
    grid = run_sweep(load_spec(write_spec(tmp_path)), tmp_path / "grid", progress=False)
    best_grid = grid["best"]["time_to_train_days"]["time_to_train_days"]
    assert summary["best"]["time_to_train_days"]["time_to_train_days"] >= best_grid * (1 - 1e-9)


def test_nsga2_reaches_the_grid_front_with_five_percent_of_its_evaluations():
    """The sweep issue's target on the default study: with 5% of the grid's evaluations NSGA-II (and
    its refinement of the front's neighbours) reaches 0.99 of the grid front's hypervolume on average
    over seeds 0-4, and 0.98 on each. Seeds 0-9 are in docs/benchmarks.md: 7 of 10 reach 0.99, the
    other three miss the front's least-energy, least-cost corner (tp 2, pp 4 on 8 RoCE nodes), two
    grid steps from what they found."""
    from commodel.explore.pareto import bounds, objective_matrix, pareto_front
    from commodel.resources import resource_dir

    nominal = {"uncertainty": None, "sensitivity": None}  # the optimizer's reach, not the bands
    spec = load_spec(resource_dir("studies") / "default" / "study.toml").model_copy(update=nominal)
    grid = evaluate_all(spec)
    feasible = grid[grid.feasible]
    lo, hi = bounds(objective_matrix(feasible, spec.objectives))
    reference = hypervolume(
        objective_matrix(pareto_front(feasible, spec.objectives), spec.objectives), lo, hi
    )
    budget = int(0.05 * len(grid))
    reached = []
    for seed in range(5):
        study = spec.study.model_copy(update={"method": "nsga2", "budget": budget, "seed": seed})
        found = evaluate_all(spec.model_copy(update={"study": study}))
        found = found[found.feasible]
        assert len(found) <= budget
        front = objective_matrix(pareto_front(found, spec.objectives), spec.objectives)
        reached.append(hypervolume(front, lo, hi) / reference)
    assert np.mean(reached) >= 0.99 and min(reached) >= 0.98


def test_the_optimizer_ends_on_grid_values_and_real_bounds_next_to_what_it_found():
    """A real variable's bound is a grid value the evolution alone never reaches (PUE 1.1016 where the
    grid has 1.1): the refinement steps each front design one grid value, or a sixteenth of a real's
    range up to its bound, so the default study's optimized front holds designs at PUE 1.1."""
    from commodel.explore.pareto import pareto_front
    from commodel.resources import resource_dir

    nominal = {"uncertainty": None, "sensitivity": None}
    spec = load_spec(resource_dir("studies") / "default" / "study.toml").model_copy(update=nominal)
    study = spec.study.model_copy(update={"method": "nsga2", "budget": 540, "seed": 1})
    found = evaluate_all(spec.model_copy(update={"study": study}))
    front = pareto_front(found[found.feasible], spec.objectives)
    assert (front.pue == spec.variables["pue"].real[0]).any()


def test_no_feasible_design_still_writes_every_output(tmp_path):
    spec = load_spec(write_spec(tmp_path, text=SMALL.replace('"fits == true"', '"cost_usd <= 0"')))
    summary = run_sweep(spec, tmp_path / "out", progress=False, reporter=write_reports)
    assert summary["feasible"] == 0 and summary["pareto"] == 0 and summary["hypervolume"] == 0
    assert (tmp_path / "out" / "pareto.png").is_file() and (tmp_path / "out" / "report.md").is_file()


def test_constraint_values_must_match_the_column(tmp_path):
    spec = load_spec(write_spec(tmp_path, text=SMALL.replace('"fits == true"', '"fits == maybe"')))
    with pytest.raises(CommodelError, match="compared with true or false"):
        evaluate_all(spec)


def test_an_optimizer_reports_as_many_points_as_its_budget(tmp_path):
    spec = load_spec(write_spec(tmp_path, method="nsga2", budget=50))
    summary = run_sweep(spec, tmp_path / "out", progress=False)
    results = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert summary["points"] == 50 and summary["valid"] == len(results) <= 50
    assert results.point.max() < 50


def test_the_plot_sample_does_not_hold_whole_chunks(tmp_path):
    """The collector keeps every k-th feasible row for the plots as its own small copy: a strided
    view would keep each chunk's whole table alive, and a 10-million-point sweep's memory would grow
    with its size (about 17 MB per 50,000-point chunk)."""
    spec = load_spec(write_spec(tmp_path))
    frame = evaluate_all(spec)
    collector = sweep_module.Collector(spec, tmp_path / "results.parquet", keep_every=4)
    collector.add(frame)
    collector.close()
    (sample,) = collector.cloud
    assert 0 < len(sample) <= len(frame) // 4 + 1
    for name in spec.objectives:
        assert not np.shares_memory(sample[name].to_numpy(), frame[name].to_numpy())


def test_a_bad_variable_gets_its_own_kinds_error(tmp_path):
    """A variable is told by its key: a reversed range says so in one line, not as every kind's
    mismatch; a table that is no kind of variable says what the kinds are."""
    text = SMALL.replace("nodes = {{ int = [1, 8], log = true }}", "nodes = {{ int = [8, 1] }}")
    with pytest.raises(CommodelError) as reversed_range:
        load_spec(write_spec(tmp_path, text=text))
    assert str(reversed_range.value).endswith("field 'variables.nodes.int': empty range [8, 1]")
    assert "\n" not in str(reversed_range.value)
    text = SMALL.replace("pue = {{ real = [1.1, 1.5], points = 2 }}", "pue = {{ values = [1.1, 1.5] }}")
    with pytest.raises(CommodelError, match=r"'variables.pue': a variable is \{ choice"):
        load_spec(write_spec(tmp_path, text=text))


def test_a_space_without_a_valid_design_says_why(tmp_path, monkeypatch, capsys):
    """Every design invalid (tp 3 divides no head count): the sweep writes its empty outputs, the
    robust front included, skips the sensitivity (nothing to attribute), and the command names the
    commonest problem and exits 2."""
    from commodel.cli import main

    text = SMALL.replace("tp = {{ choice = [1, 2, 4, 8] }}", "tp = {{ choice = [3] }}")
    text += '\n[uncertainty]\nsamples = 4\nrobust = "p90"\n\n[sensitivity]\nsamples = 8\n'
    path = write_spec(tmp_path, text=text)
    monkeypatch.setattr("sys.argv", ["commodel", "sweep", str(path), "-o", str(tmp_path / "out"), "--quiet"])
    with pytest.raises(SystemExit) as done:
        main()
    out, err = capsys.readouterr()
    assert done.value.code == 2 and "0 valid" in out  # a space to fix: an error, its outputs kept
    assert err.startswith("error: no design is valid; the commonest reason") and "divisible by tp" in err
    assert (tmp_path / "out" / "pareto_robust.csv").is_file()


def test_a_space_with_some_invalid_designs_says_the_commonest_reason(tmp_path, monkeypatch, capsys):
    """A serving sweep over tp, ep and attention data parallelism: the layouts attention-DP cannot run
    are priced as their rows' problems, the rest are priced, and the command says how many were not
    valid and why most of them were not."""
    from commodel.cli import main

    path = tmp_path / "adp.toml"
    path.write_text(
        '[study]\nname = "adp"\nevaluate = "serving"\nmethod = "grid"\n\n'
        '[fixed]\nmodel = "deepseek-v3"\nsystem = "dgx-b200"\ngpus = 8\ndtype = "fp8"\n\n'
        "[variables]\ntp = { choice = [1, 2, 4, 8] }\nep = { choice = [1, 8] }\n"
        "attention_dp = { choice = [false, true] }\n\n"
        '[objectives]\noutput_tokens_per_s = "max"\ntpot_s = "min"\n'
    )
    monkeypatch.setattr("sys.argv", ["commodel", "sweep", str(path), "-o", str(tmp_path / "out")])
    main()
    out = capsys.readouterr().out
    assert "16 points, 4 valid" in out and "not valid: 12; the commonest reason (" in out


def test_a_mechanism_one_system_cannot_run_marks_its_rows_and_prices_the_rest():
    """CAIS needs a switch that reduces (NVLS): on DGX A100 its rows are invalid with that reason,
    while the same batch prices them on DGX H100; one incompatible combination loses nothing else."""
    from commodel.pricing.training import price_training
    from commodel.pricing.training_job import training_job

    jobs = [
        training_job(model="llama3-8b", system=system, tp=8, sequence_parallel=True, tp_overlap="cais")
        for system in ("dgx-a100", "dgx-h100")
    ]
    columns = {name: np.array([dict(job)[name] for job in jobs], dtype=object) for name, _ in jobs[0]}
    table = price_training(columns)
    assert list(table["valid"]) == [False, True]
    assert "cais needs a switch that reduces in the network" in table["problem"][0]
    assert np.isfinite(float(table["step_time_s"][1]))


def test_a_second_writer_is_refused_while_the_first_lives_and_takes_over_from_a_dead_one(tmp_path):
    import subprocess

    from commodel.io import LOCK_FILE

    spec = load_spec(write_spec(tmp_path))
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(["sleep", "30"])
    try:
        (out / LOCK_FILE).write_text(str(holder.pid))
        with pytest.raises(CommodelError, match=rf"another sweep \(process {holder.pid}\) is writing"):
            run_sweep(spec, out, progress=False)
    finally:
        holder.kill()
        holder.wait()
    run_sweep(spec, out, progress=False)  # its writer is gone: the lock is taken over
    assert (out / "summary.json").is_file() and not (out / LOCK_FILE).exists()


@pytest.mark.parametrize("damage", [b"", b"PAR1 not really parquet"])
def test_resume_recomputes_a_damaged_chunk_and_says_so(tmp_path, monkeypatch, damage):
    spec = load_spec(write_spec(tmp_path))
    run_sweep(spec, tmp_path / "whole", progress=False)
    real = interrupted_at_chunk_3(spec, tmp_path / "resumed", monkeypatch)
    (tmp_path / "resumed" / ".chunks" / "000001.parquet").write_bytes(damage)
    calls = []
    monkeypatch.setattr(sweep_module, "evaluate_chunk", lambda s, i: calls.append(i) or real(s, i))
    with pytest.warns(UserWarning, match="chunk 000001.parquet is damaged"):
        run_sweep(spec, tmp_path / "resumed", resume=True, progress=False)
    assert 1 in calls and 0 not in calls
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "whole" / "results.parquet"),
        pd.read_parquet(tmp_path / "resumed" / "results.parquet"),
    )
