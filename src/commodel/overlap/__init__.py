"""How computation and communication share a GPU: a training step's overlap windows
(:mod:`commodel.overlap.window`) and two kernels on two streams, block by block
(:mod:`commodel.overlap.streams`)."""

from commodel.overlap.window import (
    COMM_CTAS,
    IN_NETWORK_CTAS,
    STRATEGIES,
    Window,
    ctas,
    exposed,
    overlapping,
    window_time,
)

__all__ = [
    "COMM_CTAS",
    "IN_NETWORK_CTAS",
    "STRATEGIES",
    "Window",
    "ctas",
    "exposed",
    "overlapping",
    "window_time",
]
