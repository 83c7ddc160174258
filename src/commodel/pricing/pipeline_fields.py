"""What a training job's pipeline layout (``--pipeline-layout``) states for its other fields."""

from __future__ import annotations

import numbers
from typing import Any

from commodel.errors import CommodelError
from commodel.pricing.job import cli_option
from commodel.workloads.model.catalog import known_model
from commodel.workloads.parallel.pipeline_layout import layout_chunks, stage_split


def readable_layout(text: str) -> str:
    """``text`` where a pipeline layout can be read (its codes and repetitions), whatever the model and
    pp it goes with: a layout that cannot be read is a value no job may hold."""
    try:
        layout_chunks(text)
    except CommodelError as exc:
        raise ValueError(str(exc)) from None
    return text


def with_pipeline_layout(data: Any) -> Any:
    """A pipeline layout states vpp, the first and last stages' layers and the prediction modules
    (:func:`commodel.workloads.parallel.pipeline_layout.stage_split`); Megatron-Core refuses it beside its
    first and last stage flags or the embedding and loss counted as layers, and so does this."""
    text = data.get("pipeline_layout") if isinstance(data, dict) else None
    if not text or not isinstance(text, str):
        return data  # none stated; or not text, which the field's own check names
    config, pp = known_model(data.get("model")), data.get("pp") or 1
    if config is None or not isinstance(pp, numbers.Integral) or pp < 1:
        return data  # the model's and pp's own checks name them
    try:
        split = stage_split(text, pp, config.layers)
    except CommodelError as exc:
        raise ValueError(str(exc)) from None
    agree = {"vpp": (1, split.vpp), "mtp_layers": (0, split.mtp), "ends_as_layers": (False,)}
    clash = [name for name in ("first_stage_layers", "last_stage_layers") if data.get(name) is not None]
    clash += [name for name, fine in agree.items() if data.get(name) not in (None, *fine)]
    if clash:
        options = ", ".join(map(cli_option, clash))
        raise ValueError(f"a pipeline layout states the pipeline split itself: drop {options}")
    return data | {"vpp": split.vpp, "mtp_layers": split.mtp,
                   "first_stage_layers": split.first or None, "last_stage_layers": split.last or None}  # fmt: skip
