"""Shared fixtures: a toy fabric with round numbers for hand-checked formulas."""

from __future__ import annotations

import dataclasses

import pytest

from commodel.comm.fabric import Fabric


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
