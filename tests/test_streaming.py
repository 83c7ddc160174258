"""Stream fault tolerance: impacts by hand, async never worse, headroom helps, bad parameters."""

import dataclasses

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from commodel.errors import CommodelError
from commodel.ops.streaming import Stream, crash_impact, fault_impacts, slowdown_impact

BASE = Stream(workers=16, rate=1.0, headroom=0.25, state_bytes=4e9, storage_Bps=1e9, memory_Bps=2e10,
              restart_s=60, detect_s=30, mtbf_s=12 * 3600, slowdowns_per_s=2 / 86400, slowdown=4, slowdown_s=300)  # fmt: skip


def test_a_synchronous_rollback_by_hand():
    # down for R, then r (R + a) items drain at spare capacity r h: R + (R + a) / h
    assert crash_impact("sync", BASE, 100.0) == pytest.approx(60 + (60 + 100) / 0.25)
    # a slow worker's fixed share: behind at r/W - mu/s for d, caught up at mu - r/W
    share, mu = 1 / 16, 1.25 / 16
    behind = (share - mu / 4) * 300
    assert slowdown_impact("sync", BASE) == pytest.approx(300 + behind / (mu - share))


@settings(max_examples=60, deadline=None)
@given(
    st.floats(0.05, 2.0), st.floats(1.0, 48.0), st.floats(0.0, 10.0), st.floats(1.5, 8.0), st.floats(1, 120)
)
@example(0.05, 1.0, 9.0, 4.125, 55.0)  # found by a fresh search: the drain once the slowdown ends
def test_async_with_redistribution_never_does_worse(headroom, mtbf_h, slow_per_day, slowdown, detect):
    s = dataclasses.replace(BASE, headroom=headroom, mtbf_s=3600 * mtbf_h, slowdowns_per_s=slow_per_day / 86400,
                            slowdown=slowdown, detect_s=detect)  # fmt: skip
    sync, asynchronous = (fault_impacts(p, s, 86400 * 3, seed=5) for p in ("sync", "async"))
    assert asynchronous["overhead"] <= sync["overhead"]
    assert asynchronous["impact_share"] <= sync["impact_share"]


def test_more_headroom_shrinks_the_impact_and_weibull_lifetimes_are_seeded():
    impacts = [fault_impacts("sync", dataclasses.replace(BASE, headroom=h), 86400 * 7, seed=3)["impact_share"]
               for h in (0.1, 0.25, 0.5)]  # fmt: skip
    assert impacts[0] > impacts[1] > impacts[2]
    a, b = (fault_impacts("async", BASE, 86400 * 7, "weibull", 0.7, seed=9) for _ in range(2))
    assert a == b


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"headroom": 0.0}, "outrun the stream"),
        ({"mtbf_s": -1.0}, "mtbf"),
        ({"slowdowns_per_s": -1.0}, "non-negative"),
    ],
)
def test_bad_stream_parameters_are_errors(change, message):
    with pytest.raises(CommodelError, match=message):
        dataclasses.replace(BASE, **change)


def test_a_weibull_shape_must_be_positive():
    with pytest.raises(CommodelError, match="Weibull shape"):
        fault_impacts("sync", BASE, 86400, "weibull", 0.0)
