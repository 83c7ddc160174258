"""Megatron-Core's pipeline layouts (``--pipeline-model-parallel-layout``): the layers each virtual
pipeline chunk holds, written as a string. Chunks are separated by ``|``; ``E`` is the embedding,
``t`` a decoder (transformer) layer, ``m`` a multi-token prediction module, ``L`` the loss; ``x*n``
and ``(...)*n`` repeat, commas are cosmetic. Chunk ``i`` runs on pipeline rank ``i mod pp`` as its
virtual stage ``i div pp``, so ``Et*4|(t*4|)*14tmL`` on pp 4 is 4 chunks per GPU: 16, 16, 16 and
13 layers per stage, the prediction module and the loss on the last (``PipelineParallelLayerLayout``,
Megatron-Core 0.15, whose checks these are). DeepSeek-V3's Megatron-Bridge recipes are written so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from commodel.errors import CommodelError

#: What each character of a layout is.
LAYER_CODES = {
    "E": "the embedding",
    "t": "a decoder layer",
    "m": "a multi-token prediction module",
    "L": "the loss",
}


@dataclass(frozen=True)
class StageSplit:
    """What a layout gives the training model: virtual stages per GPU, the decoder layers of the
    first, the middle and the last pipeline stage (0 with one stage: no stated split), and the
    multi-token prediction modules."""

    vpp: int
    first: int
    middle: int
    last: int
    mtp: int


#: The longest a layout may grow unrolled: room for the most layers a model holds (4,096), each
#: chunk's separator and its embedding, loss and prediction modules, many times over.
MAX_UNROLLED = 1 << 16


def layout_chunks(text: str) -> list[str]:
    """The layout's chunks with its repetitions unrolled (Megatron-Core's ``parse_str_to_list``); one
    that would unroll past :data:`MAX_UNROLLED` codes is an error, not a string to build."""
    unrolled = text.replace(",", "").replace(" ", "")

    def repeat(match: re.Match[str]) -> str:
        if len(match[1]) * int(match[2]) > MAX_UNROLLED:
            raise CommodelError(
                f"pipeline layout '{text}': {match[0]} repeats past {MAX_UNROLLED:,} layers and chunks"
            )
        return match[1] * int(match[2])

    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        unrolled = re.sub(pattern, repeat, unrolled)
        if len(unrolled) > MAX_UNROLLED:
            raise CommodelError(
                f"pipeline layout '{text}': it unrolls past {MAX_UNROLLED:,} layers and chunks"
            )
    unknown = sorted(set(unrolled) - set(LAYER_CODES) - {"|"})
    if unknown:
        codes = ", ".join(f"{code} {name}" for code, name in LAYER_CODES.items())
        raise CommodelError(
            f"pipeline layout '{text}': cannot read '{unknown[0]}' ({codes}, | between chunks)"
        )
    return unrolled.split("|")


def stage_split(text: str, pp: int, layers: int) -> StageSplit:
    """The stages ``text`` gives a ``layers``-layer model on ``pp`` pipeline stages; a layout that
    Megatron-Core would refuse, or whose middle stages hold different numbers of layers (the model
    prices a first, a middle and a last stage), is a :class:`CommodelError` saying why."""
    chunks = layout_chunks(text)
    flat = "".join(chunks)

    def fail(reason: str) -> CommodelError:
        return CommodelError(f"pipeline layout '{text}'{f' on pp {pp}' if pp > 1 else ''}: {reason}")

    if len(chunks) % pp:
        raise fail(f"its {len(chunks)} chunks do not divide into pp stages")
    if flat.count("E") != 1 or flat.count("L") != 1 or not (flat.startswith("E") and flat.endswith("L")):
        raise fail("the embedding must come first and the loss last, once each")
    if flat.count("t") != layers:
        raise fail(f"it holds {flat.count('t')} decoder layers, the model {layers}")
    if "m" in flat and ("t" in flat[flat.index("m") :] or flat.count("m") != chunks[-1].count("m")):
        raise fail("the multi-token prediction modules go after every decoder layer, in the last chunk")
    vpp = len(chunks) // pp
    stages = [sum(chunks[v * pp + rank].count("t") for v in range(vpp)) for rank in range(pp)]
    if len(set(stages[1:-1])) > 1:
        raise fail(f"its middle stages hold different numbers of layers ({stages}); the model prices a "
                   "first, a middle and a last stage")  # fmt: skip
    if pp == 1:
        return StageSplit(vpp, 0, 0, 0, flat.count("m"))
    middle = stages[1] if pp > 2 else 0
    return StageSplit(vpp, stages[0], middle, stages[-1], flat.count("m"))
