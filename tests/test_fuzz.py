"""Fuzzing what users write by hand: sweep specifications and hardware overlays. Whatever the input,
loading it either works or raises one CommodelError (never another exception)."""

from pathlib import Path

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commodel.errors import CommodelError
from commodel.explore.spec import load_spec
from commodel.hardware import default_db
from commodel.hardware.loader import apply_overlay

SCALARS = st.one_of(
    st.integers(-(2**40), 2**40), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.text(max_size=12), st.sampled_from(["1 GB", "3.35 TB/s", "700 W", "0.6 us", "-5 W", "GB", "fp8", ""]),
)  # fmt: skip
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(
    st.sampled_from(["value", "source", "choice", "int", "real", "lookup", "values", "log", "points"]), inner,
    max_size=3)), max_leaves=8)  # fmt: skip
SPEC_KEYS = {
    "study": ["name", "evaluate", "method", "budget", "seed", "chunk_size", "constraints", "title"],
    "fixed": ["model", "system", "gpus", "tp", "pue", "global_batch", "seq"],
    "variables": ["tp", "pp", "system", "nodes", "pue"],
    "derived": ["global_batch", "price_per_gpu_hour"],
    "objectives": ["step_time_s", "cost_usd", "nonsense"],
    "parameters": ["paper"],
}


def _toml_safe(value: object) -> bool:
    try:
        tomli_w.dumps({"x": value})
        return True
    except (TypeError, ValueError):
        return False


@st.composite
def specs(draw: st.DrawFn) -> dict:
    document = {}
    for table, keys in SPEC_KEYS.items():
        if draw(st.booleans()):
            document[table] = {
                k: draw(VALUES) for k in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True))
            }
    if draw(st.booleans()):  # often a valid core, so the fuzzing reaches deeper checks
        document.setdefault("study", {}).update(name="fuzz", evaluate="training", method="grid")
        document.setdefault("fixed", {}).update(model="llama3-8b", system="dgx-h100")
        document.setdefault("objectives", {}).update(step_time_s="min")
    return document


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs())
def test_any_spec_loads_or_is_one_commodel_error(tmp_path_factory, document):
    if not _toml_safe(document):
        return
    path = Path(tmp_path_factory.mktemp("spec")) / "spec.toml"
    path.write_text(tomli_w.dumps(document))
    try:
        load_spec(path)
    except CommodelError as exc:
        assert str(exc).strip()


@st.composite
def overlays(draw: st.DrawFn) -> dict:
    kind = draw(st.sampled_from(["gpus", "links", "systems", "switches"]))
    name = draw(st.sampled_from(["h100-sxm", "nvlink4", "dgx-h100", "new-thing"]))
    fields = draw(st.dictionaries(
        st.sampled_from(["memory_bandwidth", "tdp", "bandwidth", "latency", "gpu", "gpus_per_node",
                         "efficiency", "description", "vendor", "kind", "peak_flops", "bogus"]),
        VALUES, max_size=3))  # fmt: skip
    return {kind: {name: fields}}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overlays())
def test_any_hardware_overlay_applies_or_is_one_commodel_error(tmp_path_factory, document):
    if not _toml_safe(document):
        return
    path = Path(tmp_path_factory.mktemp("hw")) / "overlay.toml"
    path.write_text(tomli_w.dumps(document))
    try:
        apply_overlay(default_db(), path)
    except CommodelError as exc:
        assert str(exc).strip()
