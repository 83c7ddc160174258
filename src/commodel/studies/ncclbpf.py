"""Study ``ncclbpf``: what a size-aware tuner policy gains over NCCL's default, and what it costs.

Both sides come from the collective model (:mod:`commodel.comm.collectives`): ``auto`` is NCCL's own
choice (its tuner's argmin), ``best`` the (algorithm, protocol, channels) whose physical time is
lowest, which is what a policy tuned per size bucket would pick. The decision's cost comes from
:mod:`commodel.ops.policy_plugin` with the study's stated component costs.
"""

from __future__ import annotations

import pandas as pd

from commodel.ops.policy_plugin import PluginCost, overhead_share
from commodel.studies.base import Claim, StudyResult, study_spec, study_table
from commodel.units import format_bytes, parse_sizes


def by_size(table: pd.DataFrame, cost: PluginCost, lookups: int, updates: int) -> pd.DataFrame:
    """One row per size: NCCL's choice and busbw, the policy's, the gain and the decision's share."""
    default = table[table.algo == "auto"].set_index("size_bytes")
    policy = table[table.algo == "best"].set_index("size_bytes")
    decision = float(cost.decision_s(lookups, updates))
    out = pd.DataFrame(
        {
            "nccl_choice": default.chosen,
            "nccl_busbw_GBps": default.busbw_GBps,
            "policy_choice": policy.chosen,
            "policy_channels": policy.channels_used,
            "policy_busbw_GBps": policy.busbw_GBps,
            "gain_pct": 100 * (default.time_s / policy.time_s - 1),
            "decision_share_pct": 100 * overhead_share(decision, policy.time_s),
        }
    )
    return out.reset_index()


def run() -> StudyResult:
    spec = study_spec("ncclbpf")
    p = spec.parameters
    cost = PluginCost(
        float(p["dispatch_ns"]) * 1e-9, float(p["lookup_ns"]) * 1e-9, float(p["update_ns"]) * 1e-9
    )
    lookups, updates = int(p["policy_lookups"]), int(p["policy_updates"])
    table = by_size(study_table(spec), cost, lookups, updates)
    lo, hi = parse_sizes(f"{p['gain_from']},{p['gain_to']}")
    window = table[(table.size_bytes >= lo) & (table.size_bytes <= hi)]
    large = table[table.size_bytes >= lo]
    best = window.loc[window.gain_pct.idxmax()]
    decision_ns = float(cost.decision_s(lookups, updates)) * 1e9
    claims = [
        Claim("per-decision cost of the size-aware policy", (80.0, 130.0), decision_ns, "ns"),
        Claim(
            f"AllReduce throughput gain over NCCL's default, best size in {p['gain_from']}-{p['gain_to']}",
            27.0,
            float(best.gain_pct),
            "%",
        ),
        Claim(
            f"decision overhead at >= {p['gain_from']}, largest share of a call",
            0.03,
            float(large.decision_share_pct.max()),
            "%",
        ),
    ]
    nvls = table[table.nccl_choice.str.startswith("nvls")]
    notes = [
        f"NCCL's tuner picks NVLS from {format_bytes(nvls.size_bytes.min())} up on {spec.fixed['system']}; the "
        "policy keeps NVLS where it is fastest and switches to ring (LL128 at mid sizes, Simple above) where "
        "NVLS's 25-us latency, its pipeline fill and Blackwell's lower multimem efficiency (0.506, calibrated "
        "on a 72-GPU GB200 row) cost more than the ring",
        f"largest gain {best.gain_pct:.1f}% at {format_bytes(best.size_bytes)} ({best.nccl_choice} -> "
        f"{best.policy_choice}); the paper's +27% is larger: the model's Blackwell NVLS is calibrated on a 72-GPU "
        "domain and its 8-GPU mid-size penalty is only what the fill, latency and efficiency give",
        f"a decision costs {decision_ns:.0f} ns ({p['dispatch_ns']} dispatch + {lookups} x {p['lookup_ns']} lookup "
        f"+ {updates} x {p['update_ns']} update, assumed components); it is "
        f"{table.decision_share_pct.iloc[0]:.2f}% of a {format_bytes(table.size_bytes.iloc[0])} call and "
        f"{large.decision_share_pct.max():.4f}% or less from {p['gain_from']}",
    ]
    return StudyResult.of(spec, claims, table, notes)
