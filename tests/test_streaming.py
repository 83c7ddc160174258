"""A stream run under faults: expectations by hand, each arm's mechanism moving its extra time the right
way, and bad parameters."""

import dataclasses

import pytest

from commodel.errors import CommodelError
from commodel.ops.streaming import StreamRun, checkpointing, completion_times, outcome
from commodel.studies.base import study_spec, study_table
from commodel.studies.streamguard import by_rate

BASE = StreamRun(workers=8, work_s=800.0, state_bytes=4.3e9, storage_Bps=1e9, copy_Bps=25e9, restart_s=30.0,
                 task_s=200.0, fixed_interval_s=60.0, mttf_s=40.0, anomalies_per_s=0.0, anomaly_s=1.0)  # fmt: skip


def _mean_time(arm, s=BASE, trials=20_000):
    return float(completion_times(arm, s, trials, seed=3).mean())


def test_streamguard_and_sync_by_hand():
    """Faults strike per working second, so a run meets work / M crashes on average: StreamGuard's each
    costs (R + S/B + tau/2) / W of the run, a synchronous rollback R + S/B + tau/2 of it."""
    for arm, spread in (("streamguard", BASE.workers), ("sync", 1)):
        tau, stop = checkpointing(arm, BASE)
        work = BASE.work_s * (1 + stop / tau)
        expected = work * (1 + (BASE.restart_s + BASE.restore_s + tau / 2) / (spread * BASE.mttf_s))
        assert _mean_time(arm) == pytest.approx(expected, rel=0.02)


def test_fixed_partitions_end_with_the_worker_that_lost_the_most():
    """VeloC's crash costs one worker R + S/B + U(0, tau_f): the run waits for the unluckiest lane, so it
    takes longer than the mean lane, and longer than spreading the same losses would."""
    tau, stop = checkpointing("fixed", BASE)
    work = BASE.work_s * (1 + stop / tau)
    loss = BASE.restart_s + BASE.restore_s + tau / 2
    mean_lane = work * (1 + loss / (BASE.workers * BASE.mttf_s))
    assert _mean_time("fixed") > 1.1 * mean_lane


@pytest.mark.parametrize(
    ("arm", "change", "grows"),
    [
        ("streamguard", {"restart_s": 60.0}, True),  # the replacement's absence is capacity lost
        ("streamguard", {"workers": 16}, False),  # more survivors share a crash
        ("fixed", {"fixed_interval_s": 120.0}, True),  # more work since the last checkpoint
        ("sync", {"storage_Bps": 4e9}, False),  # cheaper aligned checkpoints and restores
        ("none", {"task_s": 100.0}, False),  # a rerun starts over less
        ("fixed", {"anomalies_per_s": 1 / 4, "anomaly_s": 4.0}, True),  # a slowed fixed partition lags
    ],
)
def test_each_arm_moves_with_its_mechanism(arm, change, grows):
    before, after = _mean_time(arm, trials=2000), _mean_time(arm, dataclasses.replace(BASE, **change), 2000)
    assert (after > before) == grows


def test_the_balancer_spreads_anomalies_a_fixed_partition_keeps():
    slow = dataclasses.replace(BASE, mttf_s=1e9, anomalies_per_s=1 / 4, anomaly_s=4.0)
    assert _mean_time("streamguard", slow, 2000) < _mean_time("fixed", slow, 2000) - 20


def test_streamguard_gains_over_veloc_as_crashes_get_rarer():
    """The study's 'up to' is driven by the crash rate: VeloC's fixed interval loses the same work per
    crash at every rate, StreamGuard's interval and spreading follow it."""
    table = by_rate(study_table(study_spec("streamguard")))
    ratios = table[table.anomalies_per_crash > 0].sort_values("mttf_s").fixed_vs_streamguard.to_numpy()
    assert (ratios[1:] > ratios[:-1]).all()


def test_fault_free_overhead_follows_the_snapshot_cost():
    cheap, dear = (
        outcome("streamguard", dataclasses.replace(BASE, copy_Bps=b), 1000.0, 50) for b in (25e9, 5e9)
    )
    assert dear["overhead"] > cheap["overhead"] and cheap["overhead"] < 0.01
    assert outcome("none", BASE, 1000.0, 50)["overhead"] == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mttf_s": 0.0}, "mttf"),
        ({"workers": 0}, "workers"),
        ({"restart_s": -1.0}, "non-negative"),
        ({"mttf_s": 0.1}, "faults expected"),
        # a petabyte of state: the fixed interval's snapshots lengthen the run past its faults' limit
        ({"state_bytes": 1e15}, r"s of its checkpoints; check the fault rates and the checkpoints' size"),
        ({"workers": 4096, "mttf_s": 4.0}, "fewer trials"),
    ],
)
def test_bad_stream_parameters_are_errors(change, message):
    with pytest.raises(CommodelError, match=message):
        completion_times("fixed", dataclasses.replace(BASE, **change), 10_000)


def test_an_unknown_arm_is_named():
    with pytest.raises(CommodelError, match="stream arm"):
        checkpointing("flink", BASE)
