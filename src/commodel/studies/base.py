"""What a study is: a specification (``studies/NAME/study.toml``), an evaluate function built from the
same models the CLI uses, and claims that set the paper's figure beside the model's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from commodel.explore.spec import SweepSpec, load_spec
from commodel.explore.sweep import evaluate_all
from commodel.resources import resource_dir


@dataclass(frozen=True)
class Claim:
    """One headline: the paper's figure (a number, or a (low, high) range) and commodel's."""

    claim: str
    paper: float | tuple[float, float]
    model: float
    unit: str

    def as_dict(self) -> dict[str, object]:
        paper = list(self.paper) if isinstance(self.paper, tuple) else self.paper
        return {"claim": self.claim, "paper": paper, "model": self.model, "unit": self.unit}


@dataclass(frozen=True)
class StudyResult:
    """A study's claims and its table (one row per design point it evaluated)."""

    study: str
    title: str
    paper: str
    claims: list[Claim]
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "study": self.study,
            "title": self.title,
            "paper": self.paper,
            "claims": [c.as_dict() for c in self.claims],
            "notes": self.notes,
            "table": json.loads(self.table.to_json(orient="records")),
        }


def spec_path(name: str) -> Path:
    """``studies/NAME/study.toml``."""
    return resource_dir("studies") / name / "study.toml"


def study_spec(name: str) -> SweepSpec:
    """A study's specification: a sweep specification (its design space) plus study parameters."""
    return load_spec(spec_path(name))


def study_table(spec: SweepSpec) -> pd.DataFrame:
    """Every design of a study's space through the same evaluation the sweep uses."""
    return evaluate_all(spec)
