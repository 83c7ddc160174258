"""Sweep specifications (TOML): variables, fixed inputs, derived values, objectives, constraints, method.

```toml
[study]
name = "default"
evaluate = "training"            # an evaluator from commodel.pricing.evaluator
method = "grid"                  # grid | sobol | lhs | nsga2 | nsga3
budget = 4096                    # samples (sobol, lhs) or evaluations (nsga2, nsga3)
seed = 1
constraints = ["fits == true", "power_kW <= 20000"]

[fixed]
model = "llama3-70b"

[variables]
system = { choice = ["dgx-h100", "mi300x-8"] }
tp = { choice = [1, 2, 4, 8] }
nodes = { int = [1, 64], log = true }     # log: powers of two from the low end
pue = { real = [1.1, 1.5], points = 5 }   # points: grid resolution

[derived]
gpus = "nodes * 8"
price_per_gpu_hour = { lookup = "system", values = { "dgx-h100" = 2.5, "mi300x-8" = 2.0 } }

[objectives]
time_to_train_days = "min"

[uncertainty]                    # optional: bands from the hardware database's uncertain numbers
samples = 100                    # Monte Carlo draws per design (commodel.explore.robust)
band = [10, 90]                  # percentiles written as OBJECTIVE_p10 and OBJECTIVE_p90
robust = "p90"                   # optional: a second front on each objective at this percentile

[sensitivity]                    # optional: Sobol or Morris indices of the objectives in the report
method = "sobol"
samples = 64
```

Every name is checked against the evaluator's inputs and outputs with a suggestion for typos.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import Discriminator, Field, JsonValue, Tag, field_validator, model_validator

from commodel.errors import CommodelError, suggest
from commodel.explore.expressions import constraint_parts, expression_names
from commodel.pricing.evaluator import evaluator
from commodel.pricing.job_checks import field_problem
from commodel.records import Strict, load_record

METHODS = ("grid", "sobol", "lhs", "nsga2", "nsga3")
Scalar = bool | int | float | str


class Choice(Strict):
    choice: list[Scalar] = Field(min_length=1)

    @field_validator("choice")
    @classmethod
    def _finite(cls, values: list[Scalar]) -> list[Scalar]:
        """A choice is a value a job can take: no NaN or infinity among its numbers."""
        bad = [v for v in values if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            raise ValueError(f"a choice must be a finite number or a name, got {bad[0]}")
        return values

    @property
    def varies(self) -> bool:
        return len(set(map(repr, self.choice))) > 1


class IntRange(Strict):
    int: tuple[int, int]
    step: int = 1
    log: bool = False

    @model_validator(mode="after")
    def _nonempty(self) -> IntRange:
        lo, hi = self.int
        if hi < lo:
            raise ValueError(f"empty range [{lo}, {hi}]")
        if self.step < 1 or (self.log and lo < 1):
            raise ValueError("step must be >= 1, and a log range must start at >= 1")
        return self

    @property
    def varies(self) -> bool:
        return self.int[1] > self.int[0]


class RealRange(Strict):
    real: tuple[float, float]
    log: bool = False
    points: int = 5

    @model_validator(mode="after")
    def _nonempty(self) -> RealRange:
        lo, hi = self.real
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"a range needs finite bounds, got [{lo}, {hi}]")
        if not hi > lo:
            raise ValueError(f"empty range [{lo}, {hi}]")
        if self.points < 2 or (self.log and lo <= 0):
            raise ValueError("points must be >= 2, and a log range must be positive")
        return self

    @property
    def varies(self) -> bool:
        return True  # a real range is never empty (its validator)


VARIABLE_KINDS = {"choice": Choice, "int": IntRange, "real": RealRange}


def _variable_kind(value: Any) -> str | None:
    """Which kind of variable ``value`` is, by its key (``choice``, ``int`` or ``real``)."""
    if isinstance(value, dict):
        return next((key for key in VARIABLE_KINDS if key in value), None)
    return next((key for key, kind in VARIABLE_KINDS.items() if isinstance(value, kind)), None)


#: A variable is told by its key, so a bad one gets its own kind's error, not every kind's mismatch.
Variable = Annotated[
    Annotated[Choice, Tag("choice")] | Annotated[IntRange, Tag("int")] | Annotated[RealRange, Tag("real")],
    Discriminator(
        _variable_kind,
        custom_error_type="variable_kind",
        custom_error_message="a variable is { choice = [...] }, { int = [lo, hi] } or { real = [lo, hi] }",
    ),
]


class Lookup(Strict):
    lookup: str
    values: dict[str, Scalar]


#: A study's name: it names output folders, so letters, digits, '.', '_' and '-' (no '..'), at most 100.
STUDY_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class StudySection(Strict):
    name: str
    title: str = ""
    evaluate: str
    method: Literal["grid", "sobol", "lhs", "nsga2", "nsga3"] = "grid"
    budget: int = 0
    seed: int = 0
    chunk_size: int = 50_000
    constraints: list[str] = []

    @field_validator("name")
    @classmethod
    def _folder_name(cls, name: str) -> str:
        if not re.fullmatch(STUDY_NAME, name) or ".." in name:
            shown = name if len(name) <= 40 else name[:37] + "..."
            raise ValueError(
                f"a study name names its folder: 1-100 letters, digits, '.', '_' or '-', starting with a "
                f"letter or digit, no '..'; got {shown!r}"
            )
        return name

    @model_validator(mode="after")
    def _budget(self) -> StudySection:
        if self.method != "grid" and self.budget < 1:
            raise ValueError(f"method '{self.method}' needs a budget >= 1")
        if self.chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        return self


class UncertaintySection(Strict):
    """Monte Carlo bands of every design's objectives over the uncertain hardware numbers
    (:mod:`commodel.hardware.uncertain`); ``robust = "pNN"`` adds a front on each objective taken at
    its pessimistic NN-th percentile (the NN-th of a minimized objective, the (100-NN)-th of a
    maximized one)."""

    samples: int = Field(default=100, ge=2)
    band: tuple[float, float] = (10.0, 90.0)
    robust: str | None = None
    seed: int = 0

    @model_validator(mode="after")
    def _percentiles(self) -> UncertaintySection:
        low, high = self.band
        if not 0 < low < high < 100:
            raise ValueError(f"band needs percentiles with 0 < low < high < 100, got [{low:g}, {high:g}]")
        if self.robust is not None:
            _ = self.robust_percentile  # a bad text raises here
        return self

    @property
    def robust_percentile(self) -> float:
        """The NN of ``robust = "pNN"``."""
        text = str(self.robust)
        try:
            value = float(text.removeprefix("p"))
        except ValueError:
            value = float("nan")
        if not (text.startswith("p") and 0 < value < 100):
            raise ValueError(f"robust must be a percentile 'pNN' with 0 < NN < 100, got '{text}'")
        return value


class SensitivitySection(Strict):
    """Global sensitivity of the objectives to the variables, computed with the sweep and shown in
    its report (:mod:`commodel.explore.sensitivity`)."""

    method: Literal["sobol", "morris"] = "sobol"
    samples: int = Field(default=64, ge=2)


class SweepSpec(Strict):
    """A design space, its objectives and constraints; ``parameters`` holds inputs a study module
    reads beyond the sweep itself (any TOML value: the sweep ignores them, the study checks them)."""

    study: StudySection
    parameters: dict[str, JsonValue] = {}
    fixed: dict[str, Scalar] = {}
    variables: dict[str, Variable] = {}
    derived: dict[str, str | Lookup] = {}
    objectives: dict[str, Literal["min", "max"]] = Field(min_length=1)
    uncertainty: UncertaintySection | None = None
    sensitivity: SensitivitySection | None = None

    @field_validator("fixed")
    @classmethod
    def _finite(cls, fixed: dict[str, Scalar]) -> dict[str, Scalar]:
        """A fixed input is a value a job can take: no NaN or infinity."""
        for name, value in fixed.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value}")
        return fixed

    @field_validator("variables", mode="before")
    @classmethod
    def _no_empty_choice(cls, variables: Any) -> Any:
        """An empty choice list, said as such (not as a union's every mismatch)."""
        for name, var in (variables or {}).items():
            if isinstance(var, dict) and "choice" in var and not var["choice"]:
                raise ValueError(f"variable '{name}' has an empty choice list; give it at least one value")
        return variables

    def described(self) -> dict[str, Any]:
        """The specification as plain values, for a sweep's summary and the reports that read it:
        the design space, constraints, bands and sensitivity method, and the TOML a person reads."""
        u, rules = self.uncertainty, self.derived.items()
        return {
            "variables": {name: var.model_dump() for name, var in self.variables.items()},
            "fixed": dict(self.fixed),
            "derived": {name: rule if isinstance(rule, str) else rule.model_dump() for name, rule in rules},
            "constraints": list(self.study.constraints),
            "uncertainty": None
            if u is None
            else {"band": list(u.band), "samples": u.samples, "robust": u.robust},
            "sensitivity_method": None if self.sensitivity is None else self.sensitivity.method,
            "specification": tomli_w.dumps(json.loads(self.model_dump_json(exclude_defaults=True))),
        }

    def digest(self) -> str:
        """A stable hash of the specification (what ``--resume`` checks)."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_spec(path: str | Path) -> SweepSpec:
    """Read a sweep specification and check its names against its evaluator."""
    path = Path(path)
    if not path.is_file():
        raise CommodelError(f"no sweep specification at {path}")
    spec: SweepSpec = load_record(path, SweepSpec)  # type: ignore[assignment]
    check_names(spec, path)
    check_values(spec, path)
    return spec


def _ends(variable: Choice | IntRange | RealRange) -> list[Scalar]:
    """The values a variable reaches at its ends: every choice, a range's two bounds."""
    if isinstance(variable, Choice):
        return variable.choice
    return list(variable.int if isinstance(variable, IntRange) else variable.real)


def check_values(spec: SweepSpec, path: Path | str) -> None:
    """Every [fixed] value, and every value a variable reaches at its ends, by its input's own rules
    (:func:`~commodel.pricing.job_checks.field_problem`), as the CLI checks an option: a broken one names
    the file, the field and the value before any design is priced. The rules that read several
    inputs together are each design's: a design that breaks them is an invalid row, not an error."""
    schema = evaluator(spec.study.evaluate).job
    given = [("fixed", name, [value]) for name, value in spec.fixed.items()]
    given += [("variables", name, _ends(variable)) for name, variable in spec.variables.items()]
    for section, name, values in given:
        for value in values:
            if why := field_problem(schema, name, value):
                raise CommodelError(f"{path}: field '{section}.{name}': {value!r}: {why}")


def check_names(spec: SweepSpec, path: Path | str) -> None:
    """Every variable, fixed or derived name must be an evaluator input; every objective and
    constraint column an input or an output; each name appears once."""
    ev = evaluator(spec.study.evaluate)
    inputs = set(ev.inputs)
    columns = inputs | set(ev.outputs)
    seen: dict[str, str] = {}
    for section in ("fixed", "variables", "derived"):
        for name in getattr(spec, section):
            if name not in inputs:
                raise CommodelError(
                    f"{path}: [{section}] unknown input '{name}'{suggest(name, inputs)} for evaluator '{ev.name}'"
                )
            if name in seen:
                raise CommodelError(f"{path}: '{name}' is given in both [{seen[name]}] and [{section}]")
            seen[name] = section
    given = set(seen)
    for name, used in _derived_references(spec, path).items():
        for ref in used - given:
            raise CommodelError(
                f"{path}: [derived] {name} refers to '{ref}', which is not a variable, fixed or derived input"
            )
    derived_order(spec, path)  # a derived value that needs itself is an error here
    for name in spec.objectives:
        if name not in columns:
            raise CommodelError(f"{path}: [objectives] unknown column '{name}'{suggest(name, columns)}")
        if name in ev.words or name in ev.flags:
            what = "words" if name in ev.words else "a flag (true or false)"
            raise CommodelError(
                f"{path}: [objectives] '{name}' holds {what}, not numbers: it cannot be minimized or maximized"
                + (
                    "; keep only the designs that fit with the constraint 'fits == true'"
                    if name == "fits"
                    else ""
                )
            )
    for text in spec.study.constraints:
        column, op, value = constraint_parts(text)
        if column not in columns:
            raise CommodelError(
                f"{path}: constraint '{text}': unknown column '{column}'{suggest(column, columns)}"
            )
        if value.strip().lower() in ("nan", "+nan", "-nan"):
            raise CommodelError(f"{path}: constraint '{text}': nothing compares with nan; give a number")
        if column in ev.words and (op not in ("==", "!=") or _is_number(value)):
            raise CommodelError(
                f"{path}: constraint '{text}': '{column}' holds words: compare it with == or != and a name"
            )
    missing = [name for name in ev.needs if name not in given]
    if missing:
        raise CommodelError(
            f"{path}: evaluator '{ev.name}' needs {', '.join(missing)} (as a variable, fixed or derived value)"
        )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _derived_references(spec: SweepSpec, path: Path | str = "") -> dict[str, set[str]]:
    """The names each derived value's rule reads."""
    return {
        name: {rule.lookup}
        if isinstance(rule, Lookup)
        else expression_names(rule, f"{path}: [derived] {name}")
        for name, rule in spec.derived.items()
    }


def derived_order(spec: SweepSpec, path: Path | str = "") -> list[str]:
    """The derived values in an order that computes each after the derived values it reads (a
    topological sort); one that reads itself, or a cycle of them, is an error naming it."""
    refs = _derived_references(spec, path)
    graph = {name: used & set(refs) for name, used in refs.items()}
    try:
        return list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        cycle = exc.args[1]
        chain = " -> ".join(cycle) if len(cycle) > 2 else f"{cycle[0]} reads itself"
        raise CommodelError(f"{path}: [derived] values that need each other: {chain}") from None
