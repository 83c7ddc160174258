"""The benchmark scripts stay runnable: each imports against the current package (they run by hand,
so an API change would otherwise break them unnoticed)."""

import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).parents[1] / "benchmarks").glob("bench_*.py"))


def test_there_are_benchmarks():
    assert len(BENCHMARKS) >= 5


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_script_imports(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.main)


def test_the_public_path_benchmark_runs_on_a_slice_of_its_space(capsys):
    """The script's own checks hold on a slice (its space once stopped at a job that did not fit,
    which an import alone does not see)."""
    spec = importlib.util.spec_from_file_location(
        "bench_public_path", BENCHMARKS[0].parent / "bench_public_path.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.measure(bench.jobs(global_batch=2048, zero=1).head(300), "slice", repeats=1)
    assert "layouts that fit" in capsys.readouterr().out
