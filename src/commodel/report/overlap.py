"""``commodel overlap``'s table: one GEMM and one collective under each strategy."""

from __future__ import annotations

from commodel.units import format_bytes


def overlap_text(job: dict, records: dict[str, dict | str]) -> str:
    """The pair (``job``: the overlap job's fields) and, per strategy, each side alone and together,
    the pair's time against serial and the share of the ideal gain reached; a strategy the system
    cannot run shows why."""
    gemm = job["kernel"] == "gemm"
    kernel = (
        f"GEMM {job['m']}x{job['n']}x{job['k']}" if gemm else f"elementwise pass over {job['m']}x{job['n']}"
    )
    head = (
        f"{kernel} {job['dtype']} beside {job['op']} of "
        f"{format_bytes(job['size_bytes'])} on {job['gpus']} GPUs of {job['system']}"
    )
    side = "GEMM" if gemm else "kernel"
    lines = [
        head,
        f"{'strategy':18} {side + ' ms':>16} {'collective ms':>16} {'total ms':>9} {'vs serial':>9} {'gain':>6}",
    ]
    for strategy, r in records.items():
        if isinstance(r, str):
            lines.append(f"{strategy:18} cannot run: {r}")
            continue
        gemm = f"{r['compute_s'] * 1e3:.3f} x{r['compute_slowdown']:.2f}"
        comm = f"{r['comm_s'] * 1e3:.3f} x{r['comm_slowdown']:.2f}"
        versus = f"{100 * (r['time_s'] / r['serial_s'] - 1):+.1f}%"
        lines.append(
            f"{strategy:18} {gemm:>16} {comm:>16} {r['time_s'] * 1e3:9.3f} {versus:>9} {100 * r['gain_share']:5.0f}%"
        )
    lines.append(
        f"{side} and collective: time alone x slowdown together; serial: the {side}, then the collective as NCCL "
        f"chooses it; gain: share of the ideal gain (serial - max({side}, that collective)) reached"
    )
    return "\n".join(lines)
