"""Study ``gpu-centric``: the taxonomy of GPU-centric communication (Unat et al., arXiv:2409.09874)
with each fabric's numbers (:mod:`commodel.comm.initiation`): put latency by size, coordination
latency, message rate, and the crossovers, where each scheme stops or starts beating the host path."""

from __future__ import annotations

import pandas as pd

from commodel.comm.initiation import handoff, path_of, put_latency, scheme_table
from commodel.hardware import cluster
from commodel.studies.base import Claim, StudyResult, study_spec, study_table
from commodel.units import parse_quantity

GPU_DRIVEN = ("kernel-triggered", "kernel-initiated")


def crossovers(systems: list[str]) -> pd.DataFrame:
    """Per fabric and scheme: coordination latency, message rate, the size above which the host path
    is within 5%, and the coordination rate above which the scheme saves 10% of the wall time."""
    rows = []
    for system in systems:
        for r in scheme_table(path_of(cluster(system, 2)), [8]):
            rows.append(
                {
                    "system": system,
                    **{k: v for k, v in r.items() if k != "put_us"},
                    "put_8B_us": r["put_us"][8],
                }
            )
    return pd.DataFrame(rows)


def run() -> StudyResult:
    spec = study_spec("gpu-centric")
    p = spec.parameters
    table = study_table(spec)
    crossing = crossovers(p["systems"])
    device = crossing[crossing.scheme.isin(GPU_DRIVEN)]
    largest = parse_quantity(str(p["largest"]), "bytes") / 2**20
    stops = device.groupby("system").host_competitive_above_bytes.max() / 2**20
    slingshot = path_of(cluster("frontier-node", 2))
    host = float(put_latency("host-driven", slingshot, 8) + slingshot.launch)
    gicc = host / handoff("kernel-triggered", slingshot)
    gin = 2e6 * float(put_latency("kernel-initiated", path_of(cluster("dgx-h100", 2)), 8))
    claims = [
        *(Claim(f"{system}: the put size above which the host path comes within 5% of the best GPU-driven one",
                f"<{largest:g}", float(mib), "MiB",
                "the survey: GPU-driven puts win small messages, the host path is competitive for large ones "
                f"(a crossover within the sizes studied, up to {p['largest']})")
          for system, mib in stops.items()),
        Claim("Slingshot: host-driven coordination over the GPU-triggered hand-off (GICC's measured pair)", 229.0,
              gicc, "x", "GICC's 25.2 us over 0.11 us: a kernel's end to the peer's next kernel, against a GPU "
              "thread's trigger store",
              f"the host side, {1e6 * host:.1f} us, is within 25% of GICC's 25.2 us; the ratio divides by the GPU thread's "
              "sub-microsecond store, which the model assumes (0.2 us) and no record in the data measures"),
        Claim("InfiniBand: GPU-initiated round trip (GIN's measured GDAKI pair)", 16.7, gin, "us",
              "an 8-byte put-with-signal and its answer between two H100 nodes on 400G InfiniBand"),
    ]  # fmt: skip
    notes = [
        f"{r.system}: {r.scheme} wins above {r.wins_above_per_s:,.0f} coordinations/s; the host path is within "
        f"5% of it above {r.host_competitive_above_bytes / 2**20:.2f} MiB"
        for r in device.itertuples()
    ] + ["kernel-triggered needs host-staged triggered operations (Slingshot CXI, GPUDirect Async on ConnectX); "
         "kernel-initiated needs GPU-initiated work requests (IBGDA/GDAKI on ConnectX): each fabric lists only what "
         "its NIC runs"]  # fmt: skip
    return StudyResult.of(spec, claims, table, notes)
