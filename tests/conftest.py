"""Shared fixtures: a toy fabric with round numbers for hand-checked formulas; hypothesis profiles.

The property tests run derandomized by default, so a CI run checks the same examples every time and
never fails on a draw nobody has seen; ``pytest --hypothesis-profile=explore`` searches afresh (run it
when a model changes, and keep any failing example it finds with ``@example``).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import settings

from commodel.comm.fabric import Fabric

settings.register_profile("deterministic", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile("deterministic")


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
