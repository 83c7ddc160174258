"""Multi-objective search with pymoo (NSGA-II, NSGA-III) on the same vectorized evaluation.

Decision variables live in the unit cube and are decoded like the samplers' points
(:func:`commodel.explore.space.decode`); every evaluated valid design is kept in the results. Designs
that are invalid or break a constraint are infeasible for the optimizer (pymoo's ``G <= 0``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from commodel.explore.evaluation import finish
from commodel.explore.pareto import objective_matrix, pareto_front
from commodel.explore.space import complete, decode, grid_values
from commodel.explore.spec import RealRange, SweepSpec

#: Population size, capped by a tenth of the budget so at least ten generations run.
POPULATION = 32

#: Probability that mutation changes each variable (pymoo's default is 1 / variables).
MUTATION_RATE = 0.25

#: Share of the budget kept for the neighbours of the front the evolution found (:func:`neighbours`).
REFINE_SHARE = 0.2

#: A real variable's step to a neighbour, as a share of its range.
REAL_STEP = 1 / 16


def snap(spec: SweepSpec, x: np.ndarray) -> np.ndarray:
    """Move discrete variables (choices, integer ranges) to the centre of their cell of the unit
    interval, so two encodings of one design are equal and pymoo's duplicate elimination drops them."""
    x = np.array(x, dtype=float, copy=True)
    for column, var in enumerate(spec.variables.values()):
        if not isinstance(var, RealRange):
            n = len(grid_values(var))
            x[:, column] = (np.clip(np.floor(x[:, column] * n), 0, n - 1) + 0.5) / n
    return x


def neighbours(spec: SweepSpec, x: np.ndarray) -> np.ndarray:
    """The designs one step from each row of ``x`` (the unit cube, snapped) in one variable: the next
    grid value up and down of a choice or an integer, :data:`REAL_STEP` of a real's range (at most to
    its bound, which the grid holds)."""
    moves = []
    for column, var in enumerate(spec.variables.values()):
        real = isinstance(var, RealRange)
        step = REAL_STEP if real else 1 / len(grid_values(var))
        for sign in (-1, 1):
            moved = x.copy()
            moved[:, column] += sign * step
            if real:
                moved[:, column] = np.clip(moved[:, column], 0.0, 1.0 - 1e-12)
            moves.append(moved[(moved[:, column] >= 0) & (moved[:, column] < 1)])
    return snap(spec, np.concatenate(moves)) if moves else x[:0]


def optimize(spec: SweepSpec, progress: bool = False) -> pd.DataFrame:
    """Run the spec's optimizer for ``budget`` evaluations; return every valid design among them."""
    # slow: pymoo (0.3 s), for optimizer runs only
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.algorithms.moo.nsga3 import NSGA3
    from pymoo.core.problem import Problem
    from pymoo.core.repair import Repair
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.operators.sampling.lhs import LHS
    from pymoo.optimize import minimize
    from pymoo.util.ref_dirs import get_reference_directions

    budget, n_obj = spec.study.budget, len(spec.objectives)
    evolve = budget - int(REFINE_SHARE * budget)
    pop = int(max(8, min(POPULATION, evolve // 10)))
    seen: list[pd.DataFrame] = []
    encoded: list[np.ndarray] = []
    counter = [0]

    class Sweep(Problem):
        def __init__(self) -> None:
            super().__init__(n_var=max(len(spec.variables), 1), n_obj=n_obj, n_ieq_constr=1, xl=0.0, xu=1.0)

        def _evaluate(self, x: np.ndarray, out: dict, *args: object, **kwargs: object) -> None:
            frame = complete(spec, decode(spec, x, counter[0]))
            counter[0] += len(x)
            result = finish(spec, frame)
            seen.append(result)
            encoded.append(np.asarray(x, dtype=float))
            F = np.full((len(x), n_obj), 1e30)
            G = np.ones((len(x), 1))
            rows = frame["point"].to_numpy()
            position = {p: i for i, p in enumerate(rows)}
            index = np.array([position[p] for p in result["point"].to_numpy()], dtype=int)
            F[index] = objective_matrix(result, spec.objectives)
            G[index, 0] = np.where(result["feasible"].to_numpy(dtype=bool), -1.0, 1.0)
            out["F"], out["G"] = F, G

    class Snap(Repair):
        def _do(self, problem: Problem, x: np.ndarray, **kwargs: object) -> np.ndarray:
            return snap(spec, x)

    # Discrete design spaces want big jumps: low distribution indices (3) for crossover and mutation,
    # a Latin-hypercube start, and duplicates (after snapping) dropped.
    operators = {
        "sampling": LHS(),
        "crossover": SBX(eta=3),
        "mutation": PM(eta=3, prob_var=MUTATION_RATE),
        "repair": Snap(),
    }
    if spec.study.method == "nsga3":
        partitions = max(1, round((pop * (n_obj - 1)) ** (1 / max(n_obj - 1, 1))) - 1) if n_obj > 1 else 1
        algorithm = NSGA3(
            ref_dirs=get_reference_directions("das-dennis", n_obj, n_partitions=partitions),
            pop_size=pop,
            **operators,
        )
    else:
        algorithm = NSGA2(pop_size=pop, **operators)
    problem = Sweep()
    minimize(problem, algorithm, ("n_evals", evolve), seed=spec.study.seed, verbose=False)
    _refine(spec, problem, seen, encoded, budget)
    if not seen:
        return pd.DataFrame()
    evaluated = pd.concat(seen, ignore_index=True)
    # pymoo stops at the first generation that reaches the budget: keep the budget's first evaluations,
    # so the counts of the summary, the report and the files agree
    return evaluated[evaluated["point"] < budget].reset_index(drop=True)


def _refine(spec: SweepSpec, problem: object, seen: list, encoded: list, budget: int) -> None:
    """Spend what the evolution left of ``budget`` on the untried neighbours of the feasible front
    found so far, a round at a time until none is left: an evolutionary search on a discrete grid
    ends near the front more often than on it, one grid step away."""
    while seen and encoded:
        done = np.concatenate(encoded)
        left = budget - len(done)
        results = pd.concat(seen, ignore_index=True)
        feasible = results[results["feasible"].to_numpy(dtype=bool) & (results["point"] < len(done))]
        if left <= 0 or feasible.empty:
            return
        front = done[pareto_front(feasible, spec.objectives)["point"].to_numpy()]
        tried = {row.tobytes() for row in done}  # pymoo evaluates repaired (snapped) rows
        fresh = [row for row in neighbours(spec, front) if row.tobytes() not in tried]
        fresh = list({row.tobytes(): row for row in fresh}.values())[:left]
        if not fresh:
            return
        problem.evaluate(np.array(fresh))
