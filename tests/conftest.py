"""Shared fixtures: a toy fabric with round numbers for hand-checked formulas; hypothesis profiles.

The property tests run derandomized by default, so a CI run checks the same examples every time and
never fails on a draw nobody has seen; ``pytest --hypothesis-profile=explore`` searches afresh (run it
when a model changes, and keep any failing example it finds with ``@example``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import settings

from commodel.comm.fabric import Fabric

settings.register_profile("deterministic", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile("deterministic")


def picker(seed: int, rows: int) -> Callable[..., np.ndarray]:
    """A function drawing ``rows`` of the values it is given, uniformly from one seeded generator:
    the columns of random jobs for property tests."""
    rng = np.random.default_rng(seed)
    return lambda *values: rng.choice(np.array(values, dtype=object), rows)


def make_fabric(**overrides: object) -> Fabric:
    """An 8-GPU Hopper switch domain with 100 GB/s per GPU, 8 NICs of 25 GB/s, no launch cost."""
    base = Fabric(
        library="nccl",
        arch="hopper",
        cpu="intel",
        topology="switch",
        domain=8,
        link_Bps=100e9,
        link_line_Bps=100e9,
        links_per_gpu=1,
        up_class="nvlink",
        nic_Bps=25e9,
        nic_line_Bps=25e9,
        nics_per_domain=8,
        net_latency_s=0.0,
        off_rail_s=0.0,
        nvls_Bps=None,
        sharp=False,
        reduce_Bps=1e15,
        start_s=0.0,
        host_s=0.0,
        ll128=True,
    )
    return dataclasses.replace(base, **overrides)


@pytest.fixture
def toy() -> Fabric:
    return make_fabric()


def layouts(model: str = "llama3-8b", system: str = "dgx-h100", **fields: object):
    """The layouts of training jobs as a user states them (:func:`commodel.pricing.training.job_layouts`):
    the declaration's defaults for every field not given; ``dp`` as given, or from the GPUs."""
    from commodel.pricing.training import job_layouts

    return job_layouts({"model": model, "system": system, **fields})


def module_texts(bits):
    """Recompute-module bits (:data:`commodel.workloads.model.recompute.RECOMPUTE_MODULES`) as the names a job
    states, one text per entry."""
    import numpy as np

    from commodel.workloads.model.recompute import RECOMPUTE_MODULES

    return np.array(
        [",".join(n for n, b in RECOMPUTE_MODULES.items() if int(v) & b) for v in np.ravel(bits)],
        dtype=object,
    )


def model_step(job: object = None, **fields: object) -> dict:
    """One training job's step as the models price it (:func:`commodel.workloads.training.step.train_step`),
    whether or not it fits: ``commodel train`` gives a job that does not fit no step, but a test of a
    mechanism on such a job (a recomputation, a collective's bytes) reads what the models give it. The
    job as a user states it, the declaration's defaults for the rest; its outputs as floats, with the
    seconds per step by component under ``breakdown`` as :func:`commodel.pricing.run.train` gives them.
    ``job``: a :class:`~commodel.pricing.training_job.TrainingJob` instead of its fields."""
    import numpy as np

    from commodel.hardware import cluster
    from commodel.pricing.job import cluster_shape
    from commodel.pricing.training import job_layouts
    from commodel.pricing.training_job import training_job
    from commodel.workloads.model.catalog import model
    from commodel.workloads.training.step import BREAKDOWN, train_step

    j = job if job is not None else training_job(**fields)
    values = j.model_dump()
    x = job_layouts({k: v for k, v in values.items() if v is not None})
    c = cluster(j.system, scale_out=j.fabric or None, **cluster_shape(values))
    r = train_step(model(j.model), c, x, j.dtype, j.overlap, j.attention, j.tp_overlap, j.ep_overlap)
    out = {k: float(np.asarray(v)) for k, v in r.items() if np.asarray(v).dtype.kind in "fb"}
    out["fits"] = bool(out["fits"])
    return out | {"breakdown": {name: out[f"{name}_s"] for name in BREAKDOWN}}


def run_cli(args: list, capsys, monkeypatch) -> tuple[int, object]:
    """``commodel ARGS`` in this process: its exit code (0 when it returns) and its captured output."""
    from commodel.cli import main

    monkeypatch.setattr("sys.argv", ["commodel", *map(str, args)])
    try:
        main()
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code
    return code, capsys.readouterr()
