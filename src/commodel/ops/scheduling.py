"""Queue waits of a batch-scheduled partition under node-exclusive allocation and consumable-resource
packing (Slurm TRES), by a queueing approximation and a discrete-event simulation of the same mix.

Jobs arrive as a Poisson process; each asks for the resources of its class (a stated mix,
:class:`commodel.workloads.schema.JobMixSpec`, every job within one node) for a lognormal runtime with
the mix's mean and coefficient of variation ``cv``.

- ``exclusive``: every job holds a whole node, so the partition is ``c = nodes`` servers.
- ``tres``: jobs share nodes by resource; fluid packing gives ``c = nodes / E[max_r d_r / s_r]`` servers
  (a job takes the share of a node its most-demanded resource takes).

**Approximation** (M/G/c; Erlang C with the Allen-Cunneen correction): offered load ``a = lambda E[S]``,
``rho = a / c``; the probability of waiting ``C(c, a)`` (Erlang C), waits beyond that roughly
exponential with rate ``theta = (c / E[S] - lambda) x 2 / (1 + cv^2)``: mean wait ``C / theta``,
median ``max(0, ln(2 C) / theta)``.

**Simulation** (SimPy, seeded): the same arrivals and runtimes on ``nodes`` nodes; whenever a job
arrives or ends, the scheduler starts every queued job, in order, that fits on some node (first fit;
``exclusive``: an empty node). The first :data:`WARMUP_SHARE` of jobs are discarded.
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import simpy
from numpy.typing import ArrayLike

from commodel.errors import CommodelError, unknown
from commodel.workloads.schema import JobMixSpec

POLICIES = ("exclusive", "tres")

#: Share of the simulated jobs discarded as warm-up before waits are recorded.
WARMUP_SHARE = 0.2


def node_share(mix: JobMixSpec) -> float:
    """Mean share of a node one job takes when jobs share nodes: its most-demanded resource's share."""
    demand = np.array([c.demand for c in mix.classes]) / np.array(mix.server)
    return float(np.array([c.share for c in mix.classes]) @ demand.max(axis=1))


def servers(policy: str, mix: JobMixSpec, nodes: ArrayLike) -> np.ndarray:
    """Jobs the partition runs at once under ``policy`` (module docstring)."""
    if policy not in POLICIES:
        raise unknown("scheduling policy", policy, POLICIES)
    n = np.asarray(nodes, dtype=float)
    return n if policy == "exclusive" else n / node_share(mix)


def erlang_c(c: ArrayLike, a: ArrayLike) -> np.ndarray:
    """Probability that an arrival waits in an M/M/c queue with offered load ``a`` (Erlang C), through
    the stable Erlang B recursion ``B_k = a B_{k-1} / (k + a B_{k-1})`` (``c`` may be fractional: the
    recursion runs to its floor and interpolates)."""
    c, a = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(a, dtype=float))
    top = int(np.ceil(c.max()))
    b = np.ones_like(a)
    below = b.copy()
    for k in range(1, top + 1):
        below = np.where(k <= np.floor(c), b, below)
        b = np.where(k <= np.ceil(c), a * b / (k + a * b), b)
    frac = c - np.floor(c)
    blocking = np.where(frac > 0, (1 - frac) * below + frac * b, b)
    rho = a / c
    return np.where(rho < 1, blocking / (1 - rho * (1 - blocking)), 1.0)


def approximate_waits(policy: str, mix: JobMixSpec, nodes: ArrayLike, arrivals_per_h: ArrayLike) -> dict:
    """Mean and median wait (hours), probability of waiting and utilization of the job slots."""
    c = servers(policy, mix, nodes)
    lam = np.asarray(arrivals_per_h, dtype=float)
    load = lam * mix.job_hours
    if np.any(load >= c):
        raise CommodelError(
            f"the offered load ({float(np.max(load / c)):.3g} of the {policy} capacity) must stay below 1: "
            "the queue would grow without end"
        )
    wait = erlang_c(c, load)
    theta = (c / mix.job_hours - lam) * 2 / (1 + mix.runtime_cv**2)
    return {
        "mean_wait_h": wait / theta,
        "median_wait_h": np.maximum(np.log(np.maximum(2 * wait, 1e-300)) / theta, 0.0),
        "wait_probability": wait,
        "utilization": load / c,
    }


def _runtimes(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray:
    sigma = np.sqrt(np.log1p(cv**2))
    return mean * np.exp(sigma * rng.standard_normal(n) - sigma**2 / 2)


def simulate_waits(
    policy: str, mix: JobMixSpec, nodes: int, arrivals_per_h: float, jobs: int = 4000, seed: int = 0
) -> dict[str, float]:
    """Mean and median wait (hours) and utilization of the job slots from a SimPy simulation."""
    if policy not in POLICIES:
        raise unknown("scheduling policy", policy, POLICIES)
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / arrivals_per_h, jobs)
    shares = np.array([c.share for c in mix.classes])
    kinds = rng.choice(len(mix.classes), jobs, p=shares / shares.sum())
    demand = np.array([c.demand for c in mix.classes], dtype=float)[kinds]
    runtime = _runtimes(rng, mix.job_hours, mix.runtime_cv, jobs)
    server = np.array(mix.server, dtype=float)
    free = np.tile(server, (nodes, 1))
    env = simpy.Environment()
    queue: list[int] = []
    start = np.full(jobs, np.nan)
    arrive = np.cumsum(gaps)

    def need(job: int) -> np.ndarray:
        return server if policy == "exclusive" else demand[job]

    def run(job: int, node: int) -> Generator[simpy.events.Event, None, None]:
        yield env.timeout(runtime[job])
        free[node] += need(job)
        schedule()

    def schedule() -> None:
        """Start queued jobs in order on the first node they fit (a class that found no node is not
        tried again in this pass: nodes only fill up within it)."""
        blocked: set[int] = set()
        for job in list(queue):
            if kinds[job] in blocked:
                continue
            fits = np.flatnonzero(np.all(free >= need(job) - 1e-9, axis=1))
            if not fits.size:
                blocked.add(kinds[job])
                if len(blocked) == len(mix.classes):
                    return
                continue
            free[fits[0]] -= need(job)
            queue.remove(job)
            start[job] = env.now
            env.process(run(job, int(fits[0])))

    def source() -> Generator[simpy.events.Event, None, None]:
        for job in range(jobs):
            yield env.timeout(gaps[job])
            queue.append(job)
            schedule()

    env.process(source())
    env.run()
    kept = slice(int(WARMUP_SHARE * jobs), jobs)
    waits = (start - arrive)[kept]
    busy = np.sum(runtime[kept]) / (arrive[-1] - arrive[kept.start])
    return {
        "mean_wait_h": float(np.mean(waits)),
        "median_wait_h": float(np.median(waits)),
        "utilization": float(busy / servers(policy, mix, nodes)),
    }
