"""The 1F1B pipeline's closed form against an event simulation of the schedule (DESIGN principle 10)."""

import numpy as np
import pytest
from conftest import layouts

from commodel.errors import CommodelError
from commodel.hardware import cluster
from commodel.pricing.run import train
from commodel.workloads.model.catalog import model
from commodel.workloads.training.schedule import one_f_one_b, stages_1f1b
from commodel.workloads.training.step import train_step


def simulated_1f1b(forward: np.ndarray, backward: np.ndarray, m: int) -> float:
    """Makespan of ``m`` micro-batches through non-interleaved 1F1B (Megatron-LM's schedule): stage
    ``s`` runs ``min(pp - s - 1, m)`` warm-up forwards, then one forward and one backward in turn,
    then the backwards left; a forward waits for the stage before, a backward for the stage after
    (the last stage's for its own forward), each stage runs its operations in that order."""
    pp = len(forward)
    orders = []
    for s in range(pp):
        warm = min(pp - s - 1, m)
        ops, forwards = [("F", i) for i in range(warm)], warm
        for i in range(m):
            if forwards < m:
                ops.append(("F", forwards))
                forwards += 1
            ops.append(("B", i))
        orders.append(ops)
    done: dict[tuple[str, int, int], float] = {}
    at, clock = [0] * pp, [0.0] * pp
    while any(at[s] < len(orders[s]) for s in range(pp)):
        for s in range(pp):
            while at[s] < len(orders[s]):
                kind, i = orders[s][at[s]]
                before = ("F", s - 1, i) if kind == "F" else ("B", s + 1, i) if s < pp - 1 else ("F", s, i)
                if kind == "F" and s == 0:
                    ready = 0.0
                elif before in done:
                    ready = done[before]
                else:
                    break
                clock[s] = max(clock[s], ready) + (forward[s] if kind == "F" else backward[s])
                done[(kind, s, i)] = clock[s]
                at[s] += 1
    return max(clock)


def simulated_interleaved(forward: np.ndarray, backward: np.ndarray, m: int) -> float:
    """Makespan of Megatron-LM's interleaved 1F1B (``forward_backward_pipelining_with_interleaving``)
    with ``forward[r, c]`` and ``backward[r, c]`` for chunk ``c`` of stage ``r`` and ``m`` micro-batches,
    a multiple of ``pp``: rank ``r`` runs ``2 (pp - r - 1) + (vpp - 1) pp`` warm-up forwards (all of them
    where ``m = pp``), then a forward and a backward in turn; its ``k``-th virtual micro-batch is chunk
    ``(k mod pp vpp) // pp`` (backwards from the last chunk) of micro-batch ``(k // pp vpp) pp + k mod
    pp``; a chunk's forward follows the previous stage's (stage 0 the last stage's previous chunk), a
    backward the next stage's (the last stage's last chunk its own forward, its others stage 0's next
    chunk)."""
    pp, vpp = forward.shape
    total = m * vpp

    def virtual(k: int, is_forward: bool) -> tuple[int, int]:
        chunk = (k % (pp * vpp)) // pp
        return (chunk if is_forward else vpp - chunk - 1), (k // (pp * vpp)) * pp + k % pp

    orders = []
    for r in range(pp):
        warm = total if m == pp else min(2 * (pp - r - 1) + (vpp - 1) * pp, total)
        ops = [("F", *virtual(k, True)) for k in range(warm)]
        for i in range(total - warm):
            ops += [("F", *virtual(warm + i, True)), ("B", *virtual(i, False))]
        ops += [("B", *virtual(i, False)) for i in range(total - warm, total)]
        orders.append(ops)
    done: dict[tuple[str, int, int, int], float] = {}
    at, clock = [0] * pp, [0.0] * pp
    while any(at[r] < len(orders[r]) for r in range(pp)):
        for r in range(pp):
            while at[r] < len(orders[r]):
                kind, c, i = orders[r][at[r]]
                if kind == "F":
                    before = ("F", r - 1, c, i) if r > 0 else ("F", pp - 1, c - 1, i) if c > 0 else None
                elif r < pp - 1:
                    before = ("B", r + 1, c, i)
                else:
                    before = ("F", r, c, i) if c == vpp - 1 else ("B", 0, c + 1, i)
                if before is not None and before not in done:
                    break
                ready = done[before] if before is not None else 0.0
                clock[r] = max(clock[r], ready) + (forward[r, c] if kind == "F" else backward[r, c])
                done[(kind, r, c, i)] = clock[r]
                at[r] += 1
    return max(clock)


def _stages(pp: int, first: float, middle: float, last: float) -> np.ndarray:
    return np.array([first] + [middle] * (pp - 2) + [last]) if pp > 1 else np.array([last])


@pytest.mark.parametrize("pp", [2, 3, 4, 8])
@pytest.mark.parametrize("m", [1, 4, 9, 32])
def test_equal_stages_and_a_slowest_last_one_take_the_simulated_schedule_exactly(pp, m):
    for last in (1.0, 1.7):  # equal stages, then the logits' stage the slowest
        t = _stages(pp, 1.0, 1.0, last) * 3
        expected = simulated_1f1b(t / 3, 2 * t / 3, m)
        assert one_f_one_b(3.0, 3.0, 3 * last, 1 / 3, pp, m) == pytest.approx(expected, rel=1e-12)


def test_the_form_is_a_bound_within_a_few_percent_of_the_simulated_schedule():
    """Stages of three sizes (first, middle, last: Megatron's splits with the embedding and the
    logits), each up to 2.5x another, forward a quarter to a half of a stage's time (recomputation
    lengthens the backward), 1-40 micro-batches on 2-9 stages: the form never exceeds the simulated
    makespan (each term is a bound no schedule beats) and falls at most 3% below it, where ``m t_max
    + (pp - 1) t_mean`` was up to 35% above."""
    rng = np.random.default_rng(7)
    worst, earlier = 0.0, 0.0
    for _ in range(400):
        pp, m = int(rng.integers(2, 10)), int(rng.integers(1, 41))
        sizes, share = rng.uniform(0.4, 1.0, 3), rng.uniform(1 / 4, 1 / 2)
        t = _stages(pp, *sizes)
        simulated = simulated_1f1b(share * t, (1 - share) * t, m)
        form = float(one_f_one_b(*sizes, share, pp, m))
        assert form <= simulated * (1 + 1e-12)
        worst = max(worst, 1 - form / simulated)
        earlier = max(earlier, (m * t.max() + (pp - 1) * t.mean()) / simulated - 1)
    assert worst < 0.03 and earlier > 0.2


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 2, 8), (4, 2, 32), (8, 4, 16), (8, 4, 64), (4, 5, 16)])
@pytest.mark.parametrize(("ends", "logits"), [(0, 0.0), (0, 0.5), (0, 1.0), (1, 0.5), (1, 2.0)])
def test_the_interleaved_form_follows_megatrons_interleaved_schedule(pp, vpp, m, ends, logits):
    """Chunks of four layers, the last stage's last one with the logits (``logits`` layers' worth),
    and with ``ends`` the embedding and the loss counted as layers (the first and last chunks one
    layer fewer, Llama 3 405B's split): exact with equal chunks, otherwise above the simulation by at
    most 5% (a middle stage the slowest, lighter ends, 2 pp micro-batches) and 1.4% from 4 pp, from
    stage totals alone."""
    chunks = np.full((pp, vpp), 4.0)
    chunks[0, 0] -= ends
    chunks[-1, -1] += logits - ends
    simulated = simulated_interleaved(chunks / 3, 2 * chunks / 3, m)
    stage = chunks.sum(axis=1)
    form = float(one_f_one_b(stage[0], stage[1], stage[-1], 1 / 3, pp, m, vpp))
    assert simulated * (1 - 1e-12) <= form <= (1.051 if m < 4 * pp else 1.014) * simulated
    if not (ends or logits):
        assert form == pytest.approx(simulated, rel=1e-12)


def test_the_logits_stage_pays_its_excess_on_every_micro_batch_and_none_in_the_bubble():
    """Llama 3 70B on 16 H100 (pp 4 of 20 layers, the last with the logits) at 4 micro-batches: the
    step's bubble is the three other stages' time, as with a one-token vocabulary (the logits then
    free), not ``(pp - 1) t_mean``, which charged 3/4 of the logits once more."""
    net = model("llama3-70b")
    x = layouts(tp=4, pp=4, dp=1, global_batch=4, seq=4096, recompute="none")
    with_logits = train_step(net, cluster("dgx-h100", 2), x)
    free = train_step(net.model_copy(update={"vocab": 1}), cluster("dgx-h100", 2), x)
    assert float(with_logits["bubble_s"]) == pytest.approx(float(free["bubble_s"]), rel=1e-4)
    logits = with_logits["compute_s"] - free["compute_s"]
    assert float(logits) > 0.01 * float(with_logits["bubble_s"])  # the old form's share would show


def test_interleaving_with_fewer_micro_batches_than_stages_is_refused():
    """Megatron-Core's interleaved schedule runs micro-batches in groups of pp
    (``microbatch_group_size_per_vp_stage`` in [pp, m]): a step of 2 on 4 stages has no schedule, so
    no time; at 4 it has one."""
    job = dict(model="llama3-8b", system="dgx-h100", gpus=4, pp=4, vpp=2, seq=2048)
    with pytest.raises(CommodelError, match="at least pp micro-batches"):
        train(**job, global_batch=2)
    assert train(**job, global_batch=4)["step_time_s"] > 0


def test_stages_of_any_sizes_are_bounded_by_each_stages_work_and_round_trip():
    """Node groups give every stage its own size: over 300 random pipelines of 2-9 stages each up to
    2.5x another, the largest stage bound is never above the simulated makespan and at most 5% below
    it, where ``(m - 1) t_max + sum t`` was up to 17% above."""
    rng = np.random.default_rng(11)
    worst, earlier = 0.0, 0.0
    for _ in range(300):
        pp, m = int(rng.integers(2, 10)), int(rng.integers(1, 41))
        t, share = rng.uniform(0.4, 1.0, pp), rng.uniform(1 / 4, 1 / 2)
        simulated = simulated_1f1b(share * t, (1 - share) * t, m)
        form = stages_1f1b(t, share, m)
        assert form <= simulated * (1 + 1e-12)
        worst = max(worst, 1 - form / simulated)
        earlier = max(earlier, ((m - 1) * t.max() + t.sum()) / simulated - 1)
    assert worst < 0.05 and earlier > 0.15
