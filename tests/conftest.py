"""Shared fixtures: a toy fabric with round numbers for hand-checked formulas."""

from __future__ import annotations

import dataclasses

import pytest

from commodel.comm.fabric import Fabric


def make_fabric(**overrides: object) -> Fabric:
    """An 8-GPU switch node with 100 GB/s per GPU, 1 us steps inside, 10 us across, no launch cost."""
    base = Fabric(
        topology="switch",
        gpus_per_node=8,
        link_Bps=100e9,
        links_per_gpu=1,
        nic_Bps=25e9,
        nics_per_node=8,
        intra_step_s={"ll": 1e-6, "ll128": 1e-6, "simple": 1e-6},
        inter_step_s={"ll": 10e-6, "ll128": 10e-6, "simple": 10e-6},
        nvls_Bps=None,
        nvls_latency_s=25e-6,
        reduce_Bps=1e15,
        ll128=True,
        launch_s=0.0,
    )
    return dataclasses.replace(base, **overrides)


@pytest.fixture
def toy() -> Fabric:
    return make_fabric()
