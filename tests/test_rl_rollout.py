"""RL rollouts on serving GPUs: the event simulation by hand, determinism, and how the study's gains
follow serving headroom and the tail."""

import numpy as np
import pytest

from commodel.ops.rl_rollout import Pool, response_lengths, simulate_rollout
from commodel.studies import run_study


def test_a_rollout_on_one_pool_by_hand():
    tpot = lambda b: 0.01 + 0.001 * b  # noqa: E731  (seconds per token at b requests per replica)
    # 8 requests of 1000 tokens on 2 replicas with room for all: each runs at 4 per replica
    one = simulate_rollout(np.full(8, 1000.0), [Pool("rl", 8, 2, tpot)])
    assert one.t_last == pytest.approx(1000 * tpot(4))
    # half the slots: two waves, the second at the same batch
    two = simulate_rollout(np.full(8, 1000.0), [Pool("rl", 4, 2, tpot)])
    assert two.t_last == pytest.approx(2 * 1000 * tpot(2), rel=0.02)


def test_response_lengths_are_seeded_long_tailed_and_capped():
    a, b = (response_lengths(4096, 1024, 1.2, 16384, seed=7) for _ in range(2))
    assert np.array_equal(a, b) and a.max() == 16384 and np.median(a) == pytest.approx(1024, rel=0.1)
    assert np.mean(a) > 1.5 * np.median(a)


@pytest.fixture(scope="module")
def study():
    return run_study("rl-rollout")


def test_less_serving_headroom_shrinks_roses_gain_and_a_longer_tail_raises_the_elastic_gains(study):
    table = study.table
    for _, by_load in table.groupby("tail_sigma"):
        assert by_load.sort_values("load_high").rose_vs_fixed.is_monotonic_decreasing
    for _, by_tail in table.groupby("load_high"):
        ordered = by_tail.sort_values("tail_sigma")
        assert (
            ordered.rose_vs_fixed.is_monotonic_increasing and ordered.elastic_vs_fixed.is_monotonic_increasing
        )
    assert (table.rose_vs_fixed > 1).all()


def test_online_requests_never_miss_the_slo(study):
    assert (study.table.online_tpot_s <= study.table.slo_tpot).all()
    assert next(c for c in study.claims if "SLO" in c.claim).model == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"link_GBps": -5.0}, "--link-GBps: Input should be greater than 0"),
        ({"policy": "rosy"}, "did you mean 'rose'"),
        ({"load_high": 1.2}, "load"),
    ],
)
def test_bad_rollout_inputs_are_errors(change, message):
    import pandas as pd

    from commodel.errors import CommodelError
    from commodel.pricing.rollout import rollout

    with pytest.raises(CommodelError, match=message):
        rollout()(pd.DataFrame([{"policy": "fixed", **change}]))


def test_a_policy_that_does_not_fit_its_tp_is_an_invalid_row_not_a_crash():
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    table = evaluator("rollout")(
        pd.DataFrame([{"model": "llama3-70b", "tp": t, "policy": "fixed"} for t in (1, 4)])
    )
    assert list(table.valid) == [False, True]
    assert "no room for one rollout" in table.problem[0] and table.samples_per_hour[1] > 0
