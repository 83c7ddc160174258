"""RL rollouts on serving GPUs: the event simulation by hand, determinism, and how the study's gains
follow serving headroom and the tail."""

import numpy as np
import pytest

from commodel.ops.rl_rollout import Pool, _admit, response_lengths, simulate_rollout
from commodel.studies import run_study


def test_a_rollout_on_one_pool_by_hand():
    tpot = lambda b: 0.01 + 0.001 * b  # noqa: E731  (seconds per token at b requests per replica)
    # 8 requests of 1000 tokens on 2 replicas with room for all: each runs at 4 per replica
    one = simulate_rollout(np.full(8, 1000.0), [Pool("rl", 8, 2, tpot)])
    assert one.t_last == pytest.approx(1000 * tpot(4))
    # half the slots: two waves, the second at the same batch
    two = simulate_rollout(np.full(8, 1000.0), [Pool("rl", 4, 2, tpot)])
    assert two.t_last == pytest.approx(2 * 1000 * tpot(2), rel=0.02)


def test_an_episodes_turns_by_hand():
    """300 tokens in turns of 100 at 10 ms a token: 3 s of decoding, a prefill iteration before each of
    the two later turns, and the environment's step between turns; a request waiting on its environment
    holds its slot (one slot: the second episode starts when the first ends) and leaves the batch (the
    other request decodes faster meanwhile)."""
    from commodel.ops.rl_rollout import Turns

    flat = lambda b: np.full(np.shape(b), 0.01)  # noqa: E731
    for env in (0.0, 0.5, 5.0, 500.0):
        two = simulate_rollout(np.full(2, 300.0), [Pool("rl", 2, 1, flat)], turns=Turns(100.0, 10, env))
        assert two.t_last == pytest.approx(3.0 + 2 * 0.01 + 2 * env)
    assert (
        len(two.timeline) < 12
    )  # while both wait, a step runs to the first one back, not 128 tokens at a time
    one_slot = simulate_rollout(np.full(2, 300.0), [Pool("rl", 1, 1, flat)], turns=Turns(100.0, 10, 0.5))
    assert 2 * 4.02 <= one_slot.t_last <= 2 * 4.02 + 128 * 0.01  # admitted at the step's end after the first
    capped = simulate_rollout(np.full(2, 300.0), [Pool("rl", 2, 1, flat)], turns=Turns(100.0, 2, 0.5))
    assert capped.t_last == pytest.approx(2.0 + 0.01 + 0.5)  # two turns: the rest is never generated
    batches = []  # the batch each step's iteration time is read at

    def iteration(b: np.ndarray) -> np.ndarray:
        batches.append(float(b[0]))
        return 0.01 + 0.01 * np.asarray(b)

    simulate_rollout(np.full(2, 300.0), [Pool("rl", 2, 1, iteration)], turns=Turns(100.0, 10, 5.0))
    assert 2.0 in batches and 0.0 in batches  # both decoding, then both on their environment


def test_response_lengths_are_seeded_long_tailed_and_capped():
    a, b = (response_lengths(4096, 1024, 1.2, 16384, seed=7) for _ in range(2))
    assert np.array_equal(a, b) and a.max() == 16384 and np.median(a) == pytest.approx(1024, rel=0.1)
    assert np.mean(a) > 1.5 * np.median(a)


@pytest.fixture(scope="module")
def study():
    return run_study("rl-rollout")


def _day(**change):
    import pandas as pd

    from commodel.pricing.evaluator import evaluator
    from commodel.studies.base import study_spec

    fixed = dict(study_spec("rl-rollout").fixed) | {"load_high": 0.32}
    rows = [fixed | {"policy": p} | change for p in ("fixed", "elastic", "rose", "async")]
    return evaluator("rollout")(pd.DataFrame(rows)).set_index("policy")


def test_less_serving_headroom_shrinks_roses_gain():
    """From the quietest day to the busiest, ROSE's gain over the fixed and elastic baselines shrinks,
    over days of 24 hourly steps, each with its own response lengths (the same on both days). One
    step does not resolve it: which of the requests that have run as long the RL cluster takes back
    decides whether the longest ends on its fast slots, and moves that step's end by up to a fifth
    (the study's four steps a day show the gain 1.25 -> 1.24)."""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator
    from commodel.studies.base import study_spec

    fixed = dict(study_spec("rl-rollout").fixed) | {"hours": 24}
    rows = [
        fixed | {"load_high": load, "policy": p} for load in (0.32, 0.7) for p in ("fixed", "elastic", "rose")
    ]
    days = evaluator("rollout")(pd.DataFrame(rows))
    per_hour, rollout = (
        days[column].to_numpy().reshape(2, 3) for column in ("samples_per_hour", "rollout_s")
    )
    gain, faster = per_hour[:, 2] / per_hour[:, 0], rollout[:, 1] / rollout[:, 2]
    assert (gain > 1).all()
    assert gain[0] > 1.02 * gain[1]  # 1.29 -> 1.25
    assert faster[0] > 1.03 * faster[1]  # 1.27 -> 1.21


def test_the_slo_is_checked_at_the_peaks_so_a_tighter_one_fails(study):
    """At the paper's 500 ms TPOT SLO no load in the sweep breaks it (a note, not a claim: the peaks sit
    far below it); at 30 ms and a busy day, the per-minute peak meets the elastic baseline's packed
    replicas and ROSE's co-served ones over it."""
    assert not any("SLO" in c.claim for c in study.claims)
    assert any("0 of the sweep's loads break it" in note for note in study.notes)
    tight = _day(slo_tpot=0.03, load_high=0.7)
    assert (tight.loc[["elastic", "rose"], "online_tpot_s"] > 0.03).all()


def test_an_asynchronous_run_takes_the_slower_of_its_generation_and_its_training():
    """AReaL-like: half the RL GPUs generate while the other half train one step behind; its step is
    the slower of the two, each on its own GPUs, and it lends nothing."""
    from types import SimpleNamespace

    from commodel.pricing.rollout import RolloutJob, async_setups
    from commodel.studies.base import study_spec

    day = _day()
    fixed = RolloutJob.inputs() | dict(study_spec("rl-rollout").fixed)
    row = SimpleNamespace(**(fixed | {"load_high": 0.32, "policy": "async"}))
    setups = async_setups(row)
    assert setups and all(s.rl_replicas < row.rl_gpus for s in setups)
    assert day.step_s["async"] == pytest.approx(max(day.rollout_s["async"], day.train_s["async"]))
    assert day.train_s["async"] > day.train_s["fixed"]  # fewer GPUs train
    assert day.allocation_overhead_pct["async"] == 0


def test_dapo_generates_rounds_until_its_kept_groups_fill_the_batch():
    """DAPO's dynamic sampling: every group kept takes one round; fewer kept, more rounds (seeded). The
    rounds lengthen the rollout against the same update, so borrowed GPUs gain more the more rounds a
    step needs."""
    from commodel.ops.rl_rollout import dapo_rounds

    rng = lambda: np.random.default_rng(3)  # noqa: E731
    assert dapo_rounds(256, 1.0, rng()) == 1
    assert dapo_rounds(256, 0.5, rng()) in (2, 3) and dapo_rounds(256, 0.2, rng()) >= 5
    assert dapo_rounds(256, 0.3, rng()) == dapo_rounds(256, 0.3, rng())
    gains = []
    for keep in (0.6, 0.3):
        day = _day(algorithm="dapo", keep_share=keep)
        assert day.rounds["fixed"] > 1 and day.train_s["fixed"] == _day().train_s["fixed"]
        gains.append(day.samples_per_hour["rose"] / day.samples_per_hour["fixed"])
    assert gains[1] > gains[0] > _day().samples_per_hour["rose"] / _day().samples_per_hour["fixed"]


def test_roses_32b_gain_follows_the_rollouts_share_of_the_step():
    """The driving input of the 32B claims: borrowed GPUs shorten only the rollout, so ROSE's gain
    over the fixed baseline grows with the rollout's share of the step (longer stragglers here)."""
    from commodel.studies.base import study_spec

    large = study_spec("rl-rollout").parameters["large"]
    gains, shares = [], []
    for sigma in (0.65, 0.95):
        day = _day(**large, tail_sigma=sigma)
        gains.append(day.samples_per_hour["rose"] / day.samples_per_hour["fixed"])
        shares.append(day.rollout_s["fixed"] / day.step_s["fixed"])
    assert shares[1] > shares[0] and gains[1] > gains[0] > 1


def test_the_rollouts_time_and_share_follow_the_tokens_each_trajectory_generates():
    """The driving input of the rollout-time and rollout-share claims: the tokens a trajectory
    generates (the study's median response). Twice as long, the fixed baseline's rollout takes about
    twice as long (decode-bound, the same slots), ROSE's somewhat less (the RL cluster takes back a
    longer tail), and the rollout's share of the fixed baseline's step rises, the update being
    unchanged: the direction the paper's longer, multi-turn episodes need. Where the longest responses
    end moves one day's ROSE rollout by 5-10% (a 1% slower serving iteration can move it either way),
    so the ratios are means over four days' draws (ROSE 1.58-1.78 each, fixed 1.90-2.11)."""
    days = [(_day(seed=seed), _day(seed=seed, median_response=4096)) for seed in range(4)]
    for policy, (low, high) in {"fixed": (1.8, 2.2), "rose": (1.5, 2.2)}.items():
        ratio = np.mean([longer.rollout_s[policy] / base.rollout_s[policy] for base, longer in days])
        assert low < ratio < high, policy
    base, longer = days[0]
    share = [day.rollout_s["fixed"] / day.step_s["fixed"] for day in (base, longer)]
    assert share[1] > share[0] + 0.05


def test_lending_costs_are_the_allocation_overhead():
    """An elastic replica's cold start and ROSE's sparse weight sync sit on the step's critical path;
    ROSE's activation runs while the RL cluster trains, so it costs only what it outlasts the update
    by, and a slower link between the clusters costs both."""
    base, slow = _day(), _day(cold_start_s=240.0, activation_s=400.0)
    train = base.train_s["rose"]
    assert base.allocation_overhead_pct["fixed"] == 0 and train < 400
    for policy in ("elastic", "rose"):
        assert slow.allocation_overhead_pct[policy] > base.allocation_overhead_pct[policy] > 0
        assert slow.samples_per_hour[policy] < base.samples_per_hour[policy]
    hidden = _day(activation_s=0.9 * train)
    assert hidden.allocation_overhead_pct["rose"] == pytest.approx(base.allocation_overhead_pct["rose"])
    slow_link = _day(link_GBps=0.5)
    assert (
        slow_link.allocation_overhead_pct[["elastic", "rose"]]
        > base.allocation_overhead_pct[["elastic", "rose"]]
    ).all()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"link_GBps": -5.0}, "--link-GBps: Input should be greater than 0"),
        ({"policy": "rosy"}, "did you mean 'rose'"),
        ({"load_high": 1.2}, "load"),
        ({"concurrency": -1}, "--concurrency"),
        ({"minute_peak": 0.5}, "--minute-peak"),
        ({"algorithm": "dapoo"}, "did you mean 'dapo'"),
        ({"keep_share": 0.0}, "--keep-share"),
        ({"env_step_s": -1.0}, "--env-step-s"),
    ],
)
def test_bad_rollout_inputs_are_errors(change, message):
    import pandas as pd

    from commodel.errors import CommodelError
    from commodel.pricing.rollout import rollout

    with pytest.raises(CommodelError, match=message):
        rollout()(pd.DataFrame([{"policy": "fixed", **change}]))


def test_an_episode_of_several_turns_without_a_turns_length_is_an_invalid_row():
    """Each value holds alone; together they break a rule: the row is refused with it (a table of
    such rows among others prices the others: tests/test_bad_input_files.py)."""
    import pandas as pd

    from commodel.pricing.rollout import rollout

    row = rollout()(pd.DataFrame([{"policy": "fixed", "max_turns": 10}]))
    assert not row.valid[0] and "an episode of several turns needs turn_tokens" in row.problem[0]


def test_a_policy_that_does_not_fit_its_tp_is_an_invalid_row_not_a_crash():
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    table = evaluator("rollout")(
        pd.DataFrame([{"model": "llama3-70b", "tp": t, "policy": "fixed"} for t in (1, 4)])
    )
    assert list(table.valid) == [False, True]
    assert "no room for one rollout" in table.problem[0] and table.samples_per_hour[1] > 0


def test_an_episode_or_online_request_beyond_the_models_context_is_an_invalid_row():
    """LLaMA-7B holds 2,048 tokens: a 512-token prompt with responses up to 1,536 fits, one more token
    does not; ten turns' observations of 100 tokens count too, as does an online request's length."""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    base = {"model": "llama-7b", "policy": "fixed", "median_response": 256, "online_prompt": 512}
    rows = [{"longest": 1536}, {"longest": 1537}, {"longest": 1536, "turn_tokens": 128, "max_turns": 12,
            "observation": 100}, {"longest": 1536, "online_output": 1537}]  # fmt: skip
    table = evaluator("rollout")(pd.DataFrame([base | row for row in rows]))
    assert list(table.valid) == [True, False, False, False]
    assert "(2,049 tokens) exceed llama-7b's context of 2,048" in table.problem[1]
    assert "observations (3,148 tokens)" in table.problem[2] and "online request" in table.problem[3]


def test_an_episodes_turns_and_environment_lengthen_the_rollout_not_the_update():
    """FrozenLake's 10 actions of 128 tokens: the environment's steps hold the slots out of the batch, so
    the rollout grows with them while the update, which trains the same tokens, does not; longer turns
    lengthen both."""
    day = {env: _day(turn_tokens=128, max_turns=10, observation=64, env_step_s=env) for env in (0.0, 5.0)}
    arms = ["fixed", "elastic", "rose"]  # the asynchronous run picks its split by the rollout it meets
    assert (day[5.0].rollout_s > day[0.0].rollout_s).all()
    assert (day[5.0].train_s[arms] == day[0.0].train_s[arms]).all()
    longer = _day(turn_tokens=512, max_turns=10, observation=64)
    assert (longer.rollout_s > day[0.0].rollout_s).all() and (longer.train_s > day[0.0].train_s).all()


def test_the_study_prices_frozenlakes_episodes_at_their_published_caps(study):
    note = next(n for n in study.notes if n.startswith("multi-turn episodes"))
    assert "at most 10 actions of at most 128 new tokens" in note and "496 s would need" in note


def test_admission_in_one_sort_is_the_one_request_at_a_time_rule():
    """Each queued request, in order, goes to the ready pool with the fewest requests per replica (the
    first on a tie) while it has free slots: the sort that admits them all at once gives every
    request the pool that rule gives it, ties included, on random pools."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        k = int(rng.integers(1, 4))
        pools = [
            Pool(f"p{i}", int(rng.integers(1, 40)), float(rng.choice([1.0, 2.0, 3.0, 8.0])), np.exp,
                 start=float(rng.choice([0.0, 5.0])), base=float(rng.choice([0.0, 0.5, 1.0])))
            for i in range(k)
        ]  # fmt: skip
        counts = np.array([int(rng.integers(0, p.slots + 1)) for p in pools])
        queue = list(range(int(rng.integers(0, 60))))
        where, expected = np.full(len(queue), -1), np.full(len(queue), -1)
        left, seen, batch = (
            list(queue),
            counts.copy(),
            [c / p.replicas + p.base for p, c in zip(pools, counts, strict=True)],
        )
        while left:  # the rule, one request at a time
            ready = [i for i, p in enumerate(pools) if p.start <= 1.0 and seen[i] < p.slots]
            if not ready:
                break
            p = min(ready, key=batch.__getitem__)
            expected[left.pop(0)] = p
            seen[p] += 1
            batch[p] += 1 / pools[p].replicas
        _admit(queue, pools, where, counts, 1.0, np.zeros(len(where)), [np.empty(0)] * k)
        assert (where == expected).all() and (counts == seen).all() and len(queue) == len(left)


@pytest.mark.parametrize("length", [1000.0, 1003.0, 777.0])
def test_a_slot_freed_within_a_step_is_refilled_when_it_ends(length):
    """Three requests through one slot at 100 tokens/s end at L/100, 2L/100 and 3L/100 exactly,
    whatever the simulation's step: the next request takes the slot when the last one ends, as an
    engine refills it at its next iteration (it had waited for the step's end: 777 tokens ended
    at 23.31 s only when a step ended with them)."""
    one = Pool("one", 1, 1.0, lambda batch: np.full(np.shape(batch), 0.01))
    ends = simulate_rollout(np.full(3, length), [one]).finish
    np.testing.assert_allclose(ends, length / 100 * np.arange(1, 4), rtol=1e-12)


def test_the_rl_cluster_takes_a_request_back_when_its_slot_ends():
    """A request taken back from a slow pool into a slot of the RL cluster that ended within the last
    step is owed what it would have gained there since: with one slot of the RL cluster at 100
    tokens/s ending its own request at 10 s and the other running at 10 tokens/s, the other's 2,000
    tokens end at 10 + (2000 - 100) / 100 = 29 s, whatever the step."""
    fast = Pool("RL cluster", 1, 1.0, lambda batch: np.full(np.shape(batch), 0.01))
    slow = Pool("serving spare", 1, 1.0, lambda batch: np.full(np.shape(batch), 0.1))
    ends = simulate_rollout(np.array([1000.0, 2000.0]), [fast, slow], steal=True).finish
    np.testing.assert_allclose(ends, [10.0, 29.0], rtol=1e-12)


def test_at_its_defaults_the_rollout_evaluator_borrows_serving_slots():
    """The evaluator's defaults are the size of ROSE's 8B runs (4,096 rollouts a step, 16 in flight
    per RL GPU): the RL cluster's 512 slots queue the rest, so ROSE borrows serving slots and ends
    its rollout before the fixed baseline. (At 512 rollouts and the KV cache's slots every policy
    ran the fixed one's rollout, 93.7 s, the serving cluster never used.)"""
    import pandas as pd

    from commodel.pricing.evaluator import evaluator

    table = evaluator("rollout")(pd.DataFrame([{"policy": p} for p in ("fixed", "rose")])).set_index("policy")
    assert table.loc["fixed", "serving_slots"] == 0 < table.loc["rose", "serving_slots"]
    assert table.loc["rose", "rollout_s"] < 0.9 * table.loc["fixed", "rollout_s"]
