"""What a batch scheduler charges a job between its arrival and its first useful second, and how jobs
arrive: the inputs of :mod:`commodel.ops.scheduling`'s queue waits.

**Scheduling cycle** (Slurm, as a stylized model; ``slurm.conf(5)``, SchedulerParameters): a job
that finds room when it is submitted starts at once (the submit-triggered pass), or at the next
periodic pass if the site sets ``defer``: ``min(sched_interval, bf_interval) / 2`` on average. A job
that has to wait is started by the backfill loop once resources free up (the main loop starts only
the queue's head and stops at the first job that does not fit; with mixed job sizes most waiting
jobs start by backfill): ``bf_interval / 2`` after the resources free, on average. Slurm's defaults:
``sched_interval`` 60 s, ``bf_interval`` 30 s.

**Allocation and launch**: the prolog (with a node health check) and the epilog hold the allocated
resources without doing the job's work, so a job holds them ``runtime + prolog + epilog``; the job's
work starts ``prolog + launch`` after its allocation (the step launch and container start). Assumed
defaults: prolog 10 s, launch 5 s, epilog 5 s (sites range from seconds to minutes: a container
image import or a full node health check takes longer).

**Arrivals**: Poisson, in job arrays of ``burst`` jobs submitted together (a batch Poisson process;
the squared coefficient of variation of arrivals that the Allen-Cunneen approximation takes is the
batch size), modulated over the day by ``1 + daily_amplitude sin(2 pi t / 24 h)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commodel.errors import CommodelError

#: Hours in one cycle of the daily modulation of arrivals.
DAY_H = 24.0


@dataclass(frozen=True)
class Scheduler:
    """A batch scheduler's cycle and the per-job costs of allocation and launch (module docstring),
    in seconds."""

    sched_interval_s: float = 60.0
    bf_interval_s: float = 30.0
    defer: bool = False
    prolog_s: float = 10.0
    launch_s: float = 5.0
    epilog_s: float = 5.0

    @property
    def held_h(self) -> float:
        """Hours a job holds its allocation beyond its runtime (prolog and epilog)."""
        return (self.prolog_s + self.epilog_s) / 3600

    @property
    def start_overhead_h(self) -> float:
        """Hours from a job's allocation to its first useful second (prolog and launch)."""
        return (self.prolog_s + self.launch_s) / 3600

    @property
    def immediate_h(self) -> float:
        """Mean hours a job that finds room waits for the pass that starts it."""
        return min(self.sched_interval_s, self.bf_interval_s) / 2 / 3600 if self.defer else 0.0

    @property
    def backfill_h(self) -> float:
        """Mean hours a waiting job waits, once resources free, for the backfill pass that starts it."""
        return self.bf_interval_s / 2 / 3600

    @property
    def pass_h(self) -> float:
        """Hours between the periodic passes that start waiting jobs (the simulation's tick)."""
        return (min(self.sched_interval_s, self.bf_interval_s) if self.defer else self.bf_interval_s) / 3600


#: A scheduler that charges nothing: every pass at once, no prolog, launch or epilog.
IDEAL = Scheduler(0.0, 0.0, False, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Arrivals:
    """How jobs arrive: Poisson batches of ``burst`` jobs, the rate modulated over the day by
    ``daily_amplitude`` (module docstring)."""

    burst: int = 1
    daily_amplitude: float = 0.0

    def __post_init__(self) -> None:
        if self.burst < 1 or not 0 <= self.daily_amplitude < 1:
            raise CommodelError("arrivals need a burst of at least 1 job and a daily amplitude in [0, 1)")

    def times(self, rng: np.random.Generator, rate_per_h: float, jobs: int) -> np.ndarray:
        """Submission times (hours) of ``jobs`` jobs: batches at ``rate_per_h / burst`` per hour, thinned
        to the daily modulation (candidates at the peak rate, kept with probability factor / peak)."""
        peak = 1 + self.daily_amplitude
        batches = -(-jobs // self.burst)
        accepted, last = np.empty(0), 0.0
        while accepted.size < batches:
            n = 2 * (batches - accepted.size) + 16
            candidates = last + np.cumsum(rng.exponential(self.burst / (rate_per_h * peak), n))
            last = float(candidates[-1])
            factor = 1 + self.daily_amplitude * np.sin(2 * np.pi * candidates / DAY_H)
            accepted = np.concatenate([accepted, candidates[rng.random(n) < factor / peak]])
        return np.repeat(accepted[:batches], self.burst)[:jobs]


#: Poisson arrivals of single jobs, the same rate all day.
POISSON = Arrivals()
