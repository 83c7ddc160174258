"""What a study is: a specification (``studies/NAME/study.toml``), an evaluate function built from the
same models the CLI uses, and claims that set the paper's figure beside the model's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from commodel.explore.spec import SweepSpec, load_spec
from commodel.explore.sweep import evaluate_all
from commodel.resources import resource_dir

#: How far a model's figure may sit from the paper's and still reproduce it (a share of the figure).
TOLERANCE = 0.25


@dataclass(frozen=True)
class Claim:
    """One headline: what it compares (``claim``), the paper's figure and commodel's.

    ``paper`` is a number, a ``(low, high)`` range the paper reports (a model range is then compared
    end to end), or a bound (``">52"``, ``"<0"``) where the paper states one side only (``">0"``: a
    direction). A claim ``holds`` when the model is within :data:`TOLERANCE` of the paper's figure (of
    each end of a range), or on the bound's side of it (a sign exactly). ``definition``: the paper's definition of the compared quantity.
    ``reason``: where the model misses, why, in one sentence grounded in the paper's setup (reported
    only while the claim misses).
    """

    claim: str
    paper: float | tuple[float, float] | str
    model: float | tuple[float, float]
    unit: str
    definition: str = ""
    reason: str = ""

    @property
    def holds(self) -> bool:
        """The model's figure reproduces the paper's: within :data:`TOLERANCE` of a number; inside a
        range widened by it (a model range: each end within it of the paper's); or on a bound's side."""
        if isinstance(self.paper, str):
            side, bound = self.paper[0], float(self.paper[1:])
            slack = TOLERANCE * abs(bound)
            return bool(self.model > bound - slack if side == ">" else self.model < bound + slack)
        if isinstance(self.paper, tuple) and not isinstance(self.model, tuple):
            low, high = sorted(self.paper)
            return low - TOLERANCE * abs(low) <= self.model <= high + TOLERANCE * abs(high)
        papers = np.atleast_1d(np.asarray(self.paper, dtype=float))
        models = np.broadcast_to(np.asarray(self.model, dtype=float), papers.shape)
        return bool(np.all(np.abs(models - papers) <= TOLERANCE * np.abs(papers)))

    def as_dict(self) -> dict[str, object]:
        def plain(value: object) -> object:
            return list(value) if isinstance(value, tuple) else value

        fields = {"claim": self.claim, "paper": plain(self.paper), "model": plain(self.model)}
        fields |= {"unit": self.unit, "definition": self.definition, "holds": self.holds}
        return fields | ({"reason": self.reason} if self.reason and not self.holds else {})


@dataclass(frozen=True)
class StudyResult:
    """A study's claims, its setup beside the paper's, and its table (one row per design point).

    ``setup``: the paper's evaluation setup and the study's own (``{"paper": ..., "model": ...}``),
    each a short text; what the paper does not say, the study's text states as its assumption.
    """

    study: str
    title: str
    paper: str
    claims: list[Claim]
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    setup: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, spec: SweepSpec, claims: list[Claim], table: pd.DataFrame, notes: list[str]) -> StudyResult:
        """A study's result, its name, title, paper and setup read from its specification
        (``[parameters]`` ``paper``, ``paper_setup`` and ``model_setup``)."""
        p = spec.parameters
        setup = {"paper": str(p["paper_setup"]), "model": str(p["model_setup"])}
        return cls(spec.study.name, spec.study.title, str(p["paper"]), claims, table, notes, setup)

    def as_dict(self) -> dict[str, object]:
        return {
            "study": self.study,
            "title": self.title,
            "paper": self.paper,
            "setup": self.setup,
            "claims": [c.as_dict() for c in self.claims],
            "notes": self.notes,
            "table": json.loads(self.table.to_json(orient="records")),
        }


def side_by_side(table: pd.DataFrame, index: list[str], arm: str, metrics: list[str]) -> pd.DataFrame:
    """One row per ``index`` setting with each arm's ``metrics`` beside the others' as columns named
    ``ARM_METRIC`` (the arms of a study compared at the same inputs)."""
    wide = table.pivot_table(index=index, columns=arm, values=metrics)
    wide.columns = [f"{name}_{metric}" for metric, name in wide.columns]
    return wide


def spec_path(name: str) -> Path:
    """``studies/NAME/study.toml``."""
    return resource_dir("studies") / name / "study.toml"


def study_spec(name: str) -> SweepSpec:
    """A study's specification: a sweep specification (its design space) plus study parameters."""
    return load_spec(spec_path(name))


def study_table(spec: SweepSpec) -> pd.DataFrame:
    """Every design of a study's space through the same evaluation the sweep uses."""
    return evaluate_all(spec)
