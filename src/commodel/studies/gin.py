"""Study ``gin``: NCCL's GPU-initiated networking (Hamidouche et al., arXiv:2511.15076): GDAKI and proxy
backends (:mod:`commodel.comm.initiation`) and DeepEP-style MoE dispatch and combine over them and over
NVSHMEM (:mod:`commodel.workloads.moe_dispatch`)."""

from __future__ import annotations

from commodel.comm.initiation import path_of, put_latency
from commodel.hardware import cluster
from commodel.studies.base import Claim, StudyResult, study_spec, study_table

#: The transports compared and the initiation scheme each one is: GIN's two backends, and NVSHMEM's
#: IBGDA transport (GPU-initiated, as GDAKI).
TRANSPORTS = {"GIN GDAKI": "kernel-initiated", "GIN proxy": "proxy", "NVSHMEM IBGDA": "kernel-initiated"}


def run() -> StudyResult:
    spec = study_spec("gin")
    table = study_table(spec)
    path = path_of(cluster("dgx-h100", 2))
    rtt = {name: 2e6 * float(put_latency(scheme, path, 8)) for name, scheme in TRANSPORTS.items()}
    wide = table.pivot_table(index=["mode", "ep"], columns="scheme", values="total_us")
    ll64 = wide.loc[("low-latency", 64)]
    claims = [
        Claim("small-message round trip, GIN GDAKI, H100 + 400G InfiniBand", 16.7, rtt["GIN GDAKI"], "us"),
        Claim("round trip, GIN proxy over GDAKI (paper: proxy slower)", (1.0, 10.0), rtt["GIN proxy"] / rtt["GIN GDAKI"], "x"),
    ]  # fmt: skip
    ll = table[(table["mode"] == "low-latency") & (table.scheme == "proxy")]
    notes = [
        f"round trips: {', '.join(f'{k} {v:.1f} us' for k, v in rtt.items())}",
        "not claimed: GIN within a few percent of NVSHMEM on DeepEP. GIN's GDAKI backend and NVSHMEM's IBGDA "
        "transport are one mechanism in this model (a GPU thread builds the work request and rings the NIC), "
        "so it cannot tell them apart; the paper's few percent is the software around that mechanism",
        f"DeepEP low-latency dispatch + combine on 64 GPUs: {ll64['kernel-initiated']:.0f} us GPU-initiated, "
        f"{ll64['proxy']:.0f} us through the proxy",
        f"low-latency mode on the proxy backend is bound by {', '.join(sorted(set(ll.binding)))}: one proxy "
        "thread per GPU issues every token copy; GPU-initiated warps issue them in parallel",
        "high-throughput mode is bound by NVLink inside one node and by the network beyond (each token crosses "
        "the network once per remote node its experts land on)",
    ]
    return StudyResult.of(spec, claims, table, notes)
