"""Run a sweep: evaluate the design space chunk by chunk, keep what is finished on disk, then write the
results table, its Pareto front and a summary, and hand them to the caller's reporter.

Output folder: ``results.parquet`` (every valid point: inputs, outputs and ``feasible``),
``results.csv`` on request, ``pareto.csv``, with ``[uncertainty] robust`` ``pareto_robust.csv`` (the
front on the robust objectives; each front says whether its designs are on the other), with
``[sensitivity]`` ``sensitivity.csv``, ``summary.json``, and what the reporter writes
(``commodel sweep``: :func:`commodel.report.sweep_report.write_reports`). Every
file is written atomically. Finished chunks live in ``.chunks/`` until the sweep completes, so an
interrupted sweep resumes (``resume=True``) from them, provided the specification is unchanged.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

import commodel
from commodel.errors import CommodelError
from commodel.explore.evaluation import SAMPLED, chunk_count, evaluate_chunk
from commodel.explore.executors import execute
from commodel.explore.optimize import optimize
from commodel.explore.pareto import bounds, hypervolume, objective_matrix, pareto_front
from commodel.explore.robust import robust_objectives
from commodel.explore.sensitivity import estimator_notes, study_sensitivity
from commodel.explore.space import design_points
from commodel.explore.spec import SweepSpec
from commodel.io import atomic_path, output_folder, write_text, writer_lock

#: What writes a sweep's reports from its results (the caller's choice, e.g.
#: :func:`commodel.report.sweep_report.write_reports`): (folder, summary, front, plot sample). The
#: summary carries the specification as plain values (:meth:`SweepSpec.described`).
Reporter = Callable[[Path, dict, pd.DataFrame, pd.DataFrame], None]

#: Points a sweep runs without ``--max-points`` (about 8 minutes and 15 GB of results at the measured
#: 100,000 points/s end to end and ~300 bytes per stored row).
MAX_POINTS = 50_000_000

#: End-to-end throughput and stored bytes per point, for the size estimate (docs/benchmarks.md).
POINTS_PER_S, BYTES_PER_POINT = 1e5, 300
#: Points of the background cloud kept for the plot (the front is always drawn in full).
PLOT_SAMPLE = 20_000


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


class Collector:
    """Streams finished chunks into results.parquet and keeps the running front, bounds and counts."""

    def __init__(self, spec: SweepSpec, path: Path, keep_every: int):
        self.spec, self.path, self.keep_every = spec, path, max(keep_every, 1)
        self.front = pd.DataFrame()
        self.robust_front = pd.DataFrame()
        self.robust = robust_objectives(spec)
        self.cloud: list[pd.DataFrame] = []
        self.valid = self.feasible = 0
        self.lo = self.hi = None
        self.writer = None
        self.schema = None

    def add(self, frame: pd.DataFrame) -> None:
        self.valid += len(frame)
        if len(frame) == 0:
            return
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if self.writer is None:
            self.schema = table.schema
            self.writer = pq.ParquetWriter(self.path, self.schema)
        self.writer.write_table(table.cast(self.schema))
        good = frame[frame["feasible"]]
        self.feasible += len(good)
        if len(good):
            points = objective_matrix(good, self.spec.objectives)
            lo, hi = bounds(points)
            self.lo = lo if self.lo is None else np.minimum(self.lo, lo)
            self.hi = hi if self.hi is None else np.maximum(self.hi, hi)
            self.front = pareto_front(pd.concat([self.front, good], ignore_index=True), self.spec.objectives)
            if self.robust:
                both = pd.concat([self.robust_front, good], ignore_index=True)
                self.robust_front = pareto_front(both, self.robust)
            self.cloud.append(good.iloc[:: self.keep_every].copy())  # a view would keep all of `good`

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def run_sweep(
    spec: SweepSpec,
    out: str | Path,
    *,
    resume: bool = False,
    executor: str = "local",
    scheduler: str | None = None,
    write_csv: bool = False,
    progress: bool = True,
    force: bool = False,
    max_points: int = MAX_POINTS,
    reporter: Reporter | None = None,
) -> dict:
    """Run ``spec`` into the folder ``out`` and return its summary (:func:`prepare_output` guards the
    folder; ``force`` replaces another specification's results; more than ``max_points`` points is
    refused before any work starts)."""
    started = time.perf_counter()
    check_size(spec, max_points)
    out, created = prepare_output(out, spec, force)
    try:
        with writer_lock(out):
            return _run(spec, out, started, resume, executor, scheduler, write_csv, progress, reporter)
    except CommodelError:
        if created:  # a sweep that failed on its input leaves nothing behind (an interrupted one keeps
            shutil.rmtree(out, ignore_errors=True)  # its finished chunks for --resume)
        raise


def evaluate_all(spec: SweepSpec) -> pd.DataFrame:
    """Every valid point of a specification, evaluated in this process (no files): what studies use.
    A sampled space is evaluated chunk by chunk; an optimizer's evaluations are the points it tried."""
    if spec.study.method not in SAMPLED:
        return optimize(spec)
    spec_json = spec.model_dump_json()
    return pd.concat([evaluate_chunk(spec_json, i) for i in range(chunk_count(spec))], ignore_index=True)


def check_size(spec: SweepSpec, max_points: int) -> None:
    """Refuse a space larger than ``max_points``, saying its size and what it would cost."""
    points = design_points(spec)
    if points > max_points:
        hours = points / POINTS_PER_S / 3600
        raise CommodelError(
            f"the space has {points:,} points (about {hours:,.1f} hours and {points * BYTES_PER_POINT / 1e9:,.0f} GB "
            f"of results); the limit is {max_points:,}: narrow it, or raise the limit with --max-points"
        )


#: Files a sweep writes into its folder (summary.json records that it wrote them).
OUTPUT_FILES = ("results.parquet", "results.csv", "pareto.csv", "report.md", "report.html", "pareto.png")


def prepare_output(out: str | Path, spec: SweepSpec, force: bool = False) -> tuple[Path, bool]:
    """The output folder, made if missing (and whether it was made here). Refused: an empty name, a
    path that is a file, an unwritable place (:func:`~commodel.io.output_folder`), and unless
    ``force`` a folder holding another specification's results (its summary or interrupted chunks
    carry another spec hash) or results no sweep recorded writing (no summary or chunk manifest)."""
    if not str(out).strip():
        raise CommodelError("the output folder (-o) needs a name")
    out = Path(out)
    held = _held_hash(out) if out.is_dir() else None
    if held is not None and held != spec.digest() and not force:
        raise CommodelError(
            f"{out} holds the results of another specification (spec hash {held[:12]}, not {spec.digest()[:12]}); "
            "use another -o, or --force to replace them"
        )
    unrecorded = [name for name in OUTPUT_FILES if (out / name).exists()] if held is None else []
    if unrecorded and not force:
        raise CommodelError(
            f"{out} holds {', '.join(unrecorded)} that no sweep recorded writing (no summary.json); "
            "use another -o, or --force to replace them"
        )
    created = not out.exists()
    return output_folder(out), created


def _held_hash(out: Path) -> str | None:
    """The spec hash of the results (or interrupted chunks) already in ``out``, if any."""
    for record in (out / "summary.json", out / ".chunks" / "manifest.json"):
        if record.is_file():
            try:
                return json.loads(record.read_text()).get("spec_hash")
            except ValueError:
                return None
    return None


def _run(
    spec: SweepSpec, out: Path, started: float, resume: bool, executor: str, scheduler: str | None,
    write_csv: bool, progress: bool, reporter: Reporter | None,
) -> dict:  # fmt: skip
    chunks = out / ".chunks"
    spec_json = spec.model_dump_json()
    if spec.study.method in SAMPLED:
        n = chunk_count(spec)
        done = _resumable(chunks, spec, n) if resume else set()
        if not resume and chunks.exists():
            shutil.rmtree(chunks)
        chunks.mkdir(exist_ok=True)
        write_text(chunks / "manifest.json", json.dumps({"spec_hash": spec.digest(), "chunks": n}))
        todo = [i for i in range(n) if i not in done]
        any_valid = bool(done)  # resumed chunks are not read again here: assume they hold designs
        with _ChunkProgress(progress, n, len(done), spec.study.name) as advance:
            for index, frame in execute(executor, evaluate_chunk, spec_json, todo, scheduler):
                _write_parquet(frame, chunks / f"{index:06d}.parquet")
                any_valid |= len(frame) > 0
                advance()
        parts = (pd.read_parquet(chunks / f"{i:06d}.parquet") for i in range(n))
    else:
        parts = iter([optimize(spec, progress=progress)])
        n, any_valid = 1, True
    # Without a valid design there is nothing to attribute (the command says why none is valid).
    sensitivity = _sensitivity(spec, out, executor, scheduler) if any_valid else None
    summary = _write_outputs(spec, out, parts, n, write_csv, started, reporter, sensitivity)
    shutil.rmtree(chunks, ignore_errors=True)
    return summary


def _sensitivity(spec: SweepSpec, out: Path, executor: str, scheduler: str | None) -> dict | None:
    """With a ``[sensitivity]`` section: its indices in ``sensitivity.csv``, their main columns and
    what the estimate cannot say at its sample size (:func:`estimator_notes`)."""
    if spec.sensitivity is None:
        return None

    section = spec.sensitivity
    table = study_sensitivity(spec, section.method, section.samples, spec.study.seed, executor, scheduler)
    with atomic_path(out / "sensitivity.csv") as tmp:
        table.to_csv(tmp, index=False)
    shown = [c for c in ("output", "variable", "S1", "ST", "mu_star", "sigma") if c in table]
    notes = estimator_notes(table, section.samples) if section.method == "sobol" else []
    return {"sensitivity": json.loads(table[shown].to_json(orient="records")), "sensitivity_notes": notes}


def _resumable(chunks: Path, spec: SweepSpec, n: int) -> set[int]:
    """The chunks an interrupted run finished, each checked (a readable Parquet file with the
    specification's objective columns); a bad one is deleted, to be computed again, and named."""
    manifest = chunks / "manifest.json"
    if not manifest.is_file():
        return set()
    try:
        recorded = json.loads(manifest.read_text())
    except ValueError:
        recorded = {}
    if recorded.get("spec_hash") != spec.digest():
        raise CommodelError(
            f"{chunks.parent}: cannot resume, the specification changed since the interrupted run"
        )
    done = set()
    for path in sorted(chunks.glob("[0-9]*.parquet")):
        if not path.stem.isdigit() or int(path.stem) >= n:
            continue
        if _sound_chunk(path, spec):
            done.add(int(path.stem))
        else:
            warnings.warn(f"chunk {path.name} is damaged: computing it again", stacklevel=2)
            path.unlink(missing_ok=True)
    return done


def _sound_chunk(path: Path, spec: SweepSpec) -> bool:
    """Whether ``path`` is a readable Parquet chunk holding the specification's objectives."""
    try:
        names = set(pq.ParquetFile(path).schema_arrow.names)
    except Exception:  # any unreadable file is a damaged chunk
        return False
    return set(spec.objectives) <= names


class _ChunkProgress:
    """A rich progress bar over chunks (or nothing when quiet)."""

    def __init__(self, enabled: bool, total: int, completed: int, name: str):
        self.enabled, self.total, self.completed, self.name = enabled, total, completed, name

    def __enter__(self):
        if not self.enabled:
            return lambda: None

        self.bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            transient=True,
        )
        self.bar.start()
        task = self.bar.add_task(f"sweep {self.name} (chunks)", total=self.total, completed=self.completed)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.stop()


def _on_front(rows: pd.DataFrame, front: pd.DataFrame) -> np.ndarray:
    """Which of ``rows`` (design points) are on ``front`` (either may be empty)."""
    if rows.empty or front.empty:
        return np.zeros(len(rows), dtype=bool)
    return rows["point"].isin(front["point"]).to_numpy()


def _write_outputs(
    spec: SweepSpec,
    out: Path,
    parts,
    n_chunks: int,
    write_csv: bool,
    started: float,
    reporter: Reporter | None,
    sensitivity: dict | None = None,
) -> dict:
    keep_every = max(design_points(spec) // PLOT_SAMPLE, 1)
    with atomic_path(out / "results.parquet") as tmp:
        collector = Collector(spec, tmp, keep_every)
        try:
            for frame in parts:
                collector.add(frame)
        finally:
            collector.close()
        if collector.writer is None:
            pd.DataFrame().to_parquet(tmp)
    front, robust = collector.front, collector.robust_front
    points = objective_matrix(front, spec.objectives)
    hv = hypervolume(points, collector.lo, collector.hi) if len(front) else 0.0
    if collector.robust:
        front = front.assign(robust_front=_on_front(front, robust))
        robust = robust.assign(nominal_front=_on_front(robust, front))
        with atomic_path(out / "pareto_robust.csv") as tmp:
            robust.to_csv(tmp, index=False)
    with atomic_path(out / "pareto.csv") as tmp:
        front.to_csv(tmp, index=False)
    if write_csv:
        with atomic_path(out / "results.csv") as tmp:
            pd.read_parquet(out / "results.parquet").to_csv(tmp, index=False)
    cloud = pd.concat(collector.cloud, ignore_index=True) if collector.cloud else pd.DataFrame()
    best = {}
    for name, sense in spec.objectives.items():
        if len(front):
            row = front.loc[front[name].idxmin() if sense == "min" else front[name].idxmax()]
            best[name] = json.loads(row.to_json())
    summary = {
        "study": spec.study.name,
        "title": spec.study.title,
        "evaluator": spec.study.evaluate,
        "method": spec.study.method,
        "spec_hash": spec.digest(),
        "commodel_version": commodel.__version__,
        "points": design_points(spec),
        "chunks": n_chunks,
        "valid": collector.valid,
        "feasible": collector.feasible,
        "pareto": len(front),
        **(
            {"robust_pareto": len(robust), "off_robust_front": int((~front["robust_front"]).sum())}
            if collector.robust
            else {}
        ),
        "objectives": spec.objectives,
        **spec.described(),
        "hypervolume": hv,
        "ideal": None if collector.lo is None else collector.lo.tolist(),
        "nadir": None if collector.hi is None else collector.hi.tolist(),
        "best": best,
        "elapsed_s": time.perf_counter() - started,
    }
    summary |= sensitivity or {}
    write_text(out / "summary.json", json.dumps(summary, indent=2, default=str))
    if reporter is not None:
        reporter(out, summary, front, cloud)
    return summary
