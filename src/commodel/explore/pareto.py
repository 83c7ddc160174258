"""Pareto fronts and hypervolume.

Objectives are turned into a minimization matrix (maximized columns negated). The non-dominated
filter and the hypervolume use moocore (the C implementations of the COCO/moocore project); the
hypervolume is taken on objectives normalized to [0, 1] between given ideal and nadir points, with
the reference point at 1.1 in every objective.
"""

from __future__ import annotations

import moocore
import numpy as np
import pandas as pd

REFERENCE = 1.1


def objective_matrix(frame: pd.DataFrame, objectives: dict[str, str]) -> np.ndarray:
    """Rows x objectives, every column to be minimized (an empty frame gives a 0-row matrix)."""
    if len(frame) == 0:
        return np.empty((0, len(objectives)))
    columns = [
        frame[name].to_numpy(dtype=float) * (-1.0 if sense == "max" else 1.0)
        for name, sense in objectives.items()
    ]
    return np.column_stack(columns) if columns else np.empty((len(frame), 0))


def nondominated(points: np.ndarray) -> np.ndarray:
    """Mask of the points no other point dominates (all objectives minimized; duplicates all kept)."""
    points = np.asarray(points, dtype=float)
    if len(points) == 0:
        return np.zeros(0, dtype=bool)
    return np.asarray(moocore.is_nondominated(points, keep_weakly=True), dtype=bool)


def pareto_front(frame: pd.DataFrame, objectives: dict[str, str]) -> pd.DataFrame:
    """The rows of ``frame`` on its Pareto front."""
    return frame[nondominated(objective_matrix(frame, objectives))]


def bounds(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ideal, nadir) of a point set: per-objective minimum and maximum."""
    return points.min(axis=0), points.max(axis=0)


def hypervolume(points: np.ndarray, ideal: np.ndarray, nadir: np.ndarray) -> float:
    """Hypervolume of ``points`` normalized between ``ideal`` (0) and ``nadir`` (1), reference 1.1."""
    points = np.asarray(points, dtype=float)
    if len(points) == 0:
        return 0.0
    span = np.where(nadir > ideal, nadir - ideal, 1.0)
    scaled = (points - ideal) / span
    scaled = scaled[np.all(scaled < REFERENCE, axis=1)]
    if len(scaled) == 0:
        return 0.0
    return float(moocore.hypervolume(scaled, ref=np.full(points.shape[1], REFERENCE)))
