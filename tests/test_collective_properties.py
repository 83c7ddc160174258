"""Properties every collective cost must have, on every system in the database (hypothesis)."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commodel.comm import graph, nccl
from commodel.comm.calls import run
from commodel.comm.collectives import _nccl_available, candidates, library_algorithms, pair_time, tune
from commodel.comm.fabric import fabric_of
from commodel.comm.mpi import BUSBW_FACTOR, OPS
from commodel.errors import CommodelError
from commodel.hardware import cluster, default_db

SYSTEMS = sorted(default_db().systems)
SIZES = np.logspace(0, 34, 60, base=2)


@st.composite
def layouts(draw):
    """(cluster, fabric, ranks, domains): a system, a domain count and ranks that split evenly."""
    system = draw(st.sampled_from(SYSTEMS))
    domains = draw(st.sampled_from([1, 2, 3, 4, 16]))
    c = cluster(system, 1)
    per_domain = draw(st.integers(1, c.domain_gpus))
    return c, fabric_of(c), per_domain * domains, domains


@settings(max_examples=60, deadline=None)
@given(layouts(), st.sampled_from(OPS))
def test_time_never_decreases_with_size(layout, op):
    _, fab, ranks, domains = layout
    for algo, protocol in candidates(op, fab):
        times = pair_time(op, algo, protocol, SIZES, ranks, domains, fab)[0]
        finite = times[np.isfinite(times)]
        assert np.all(np.diff(finite) >= -1e-15), (algo, protocol)


@settings(max_examples=60, deadline=None)
@given(layouts(), st.sampled_from(OPS), st.floats(1.01, 10))
def test_time_never_increases_with_bandwidth(layout, op, scale):
    _, fab, ranks, domains = layout
    faster = dataclasses.replace(
        fab,
        link_Bps=fab.link_Bps * scale,
        nic_Bps=fab.nic_Bps * scale,
        nvls_Bps=None if fab.nvls_Bps is None else fab.nvls_Bps * scale,
    )
    for algo, protocol in candidates(op, fab):
        slow = pair_time(op, algo, protocol, SIZES, ranks, domains, fab)[0]
        fast = pair_time(op, algo, protocol, SIZES, ranks, domains, faster)[0]
        assert np.all((fast <= slow * (1 + 1e-12)) | ~np.isfinite(slow)), (algo, protocol)


@settings(max_examples=60, deadline=None)
@given(layouts(), st.sampled_from(OPS))
def test_best_is_never_slower_than_any_algorithm_and_auto_never_beats_it(layout, op):
    _, fab, ranks, domains = layout
    best = tune(op, SIZES, ranks, domains, fab).time_s
    assert np.all(np.isfinite(best))
    for algo, protocol in candidates(op, fab):
        assert np.all(best <= pair_time(op, algo, protocol, SIZES, ranks, domains, fab)[0])
    auto = tune(op, SIZES, ranks, domains, fab, policy="auto").time_s  # NCCL's choice, priced
    assert np.all(np.isfinite(auto)) and np.all(auto >= best)


@settings(max_examples=40, deadline=None)
@given(layouts(), st.sampled_from(["allreduce", "allgather", "reducescatter"]), st.floats(0.05, 1.0))
def test_fewer_channels_than_the_default_never_help(layout, op, share):
    """Channels are the unit of bandwidth: running a share of NCCL's default channels is slower."""
    _, fab, ranks, domains = layout
    for algo, protocol in candidates(op, fab):
        default, used, _ = pair_time(op, algo, protocol, SIZES, ranks, domains, fab)
        fewer = np.maximum(np.floor(share * used), 1)
        forced = pair_time(op, algo, protocol, SIZES, ranks, domains, fab, fewer)[0]
        assert np.all((forced >= default * (1 - 1e-12)) | ~np.isfinite(default)), (algo, protocol)


@given(st.sampled_from(SYSTEMS), st.sampled_from(OPS))
def test_one_rank_is_not_a_collective(system, op):
    """NCCL's one-rank path is a local copy: a collective of one GPU is refused, not priced at 0 s
    (an algbw of size / 0)."""
    with pytest.raises(CommodelError, match="2 or more GPUs, got 1"):
        run(op, cluster(system), SIZES, gpus=1, library="all")


def _line_rates(c, ranks: int, domains: int) -> tuple[float, float]:
    """(a GPU's scale-up line rate, a domain's NIC line rate) in GB/s: vendor figures, no efficiency."""
    g = ranks // domains
    scale_up, link = c.system.scale_up, c.scale_up.bandwidth.value / 1e9
    links = scale_up.links_per_gpu.value * link
    up = links * (max(g - 1, 1) if scale_up.topology == "mesh" else 1)
    if scale_up.package is not None:  # a ring leaves a q-die package on g / q of its g hops
        q, inner = scale_up.package.value, scale_up.package_links.value * link
        up = inner if g <= q else min(q * links, inner + links)
    nics = min(c.system.scale_out.nics_per_node.value * c.domain_gpus / c.gpus_per_node, g)
    return up, nics * c.scale_out.bandwidth.value / 1e9


@settings(max_examples=80, deadline=None)
@given(layouts(), st.sampled_from(["allreduce", "allgather", "reducescatter", "broadcast"]))
def test_busbw_stays_within_what_the_path_can_carry(layout, op):
    """Without in-network reduction, no schedule beats the wire. Inside a domain a GPU sends at most
    its links' line rate, so busbw <= that rate. Across N domains every domain must receive the other
    domains' share of the data (n (N-1)/N for allgather and reducescatter; 2 n (N-1)/N in and out for
    allreduce, the Patarasuk-Yuan bound), so busbw <= (p-1)/p x N/(N-1) x the domain's NIC line rate
    (broadcast: <= that rate). In-switch (NVLS) and in-network (CollNet) reduction are exempt."""
    c, fab, ranks, domains = layout
    for algo, protocol in candidates(op, fab):
        if algo in ("nvls", "nvls-tree", "collnet-direct", "collnet-chain"):
            continue
        time = pair_time(op, algo, protocol, SIZES, ranks, domains, fab)[0]
        ok = np.isfinite(time) & (time > 0)
        busbw = SIZES[ok] / time[ok] * BUSBW_FACTOR[op](np.float64(ranks)) / 1e9
        up, net = _line_rates(c, ranks, domains)
        bound = (
            up
            if domains == 1
            else min(
                up * (1 if ranks == domains else 2) if op == "allreduce" else np.inf,
                net if op == "broadcast" else (ranks - 1) / ranks * domains / (domains - 1) * net,
            )
        )
        assert np.all(busbw <= bound * (1 + 1e-9)), (algo, protocol, busbw.max(), bound)


def test_a_ring_across_mi250x_packages_is_bound_by_the_links_leaving_them():
    """Frontier's GCDs: 4 links to the package's other die, 3 out of the package (OLCF's node diagram).
    A ring over 8 GCDs leaves a package on 4 of its 8 hops, so it sends at most 2 x 3 x 50 = 300 GB/s
    per GCD (at the links' payload efficiency, 240), not the 350 of seven direct links; an all-to-all
    sends 6/7 of its bytes out of the package: at most 150 x 7/6 = 175 GB/s. One link fewer out of the
    package lowers both."""
    c = cluster("frontier-node", 1)
    frame = run("allreduce", c, [2**30], 8)
    a2a = run("alltoall", c, [2**30], 8)
    assert frame.busbw_GBps.iloc[0] <= 300 and a2a.algbw_GBps.iloc[0] * 7 / 8 <= 175
    fewer = dataclasses.replace(c, system=c.system.model_copy(update={"scale_up": c.system.scale_up.model_copy(
        update={"links_per_gpu": c.system.scale_up.links_per_gpu.model_copy(update={"value": 2})})}))  # fmt: skip
    assert run("allreduce", fewer, [2**30], 8).busbw_GBps.iloc[0] < frame.busbw_GBps.iloc[0]
    assert run("alltoall", fewer, [2**30], 8).algbw_GBps.iloc[0] < a2a.algbw_GBps.iloc[0]


def test_an_all_to_all_inside_one_package_runs_on_its_package_links_without_a_float_overflow():
    """Two GCDs of one MI250X: nothing leaves the package, so its links alone carry the bytes (the
    leaving bound was a division by a 1e-300 stand-in for zero, which overflowed)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inside = run("alltoall", cluster("frontier-node", 1), [2**26], 2)
    assert inside.algbw_GBps.iloc[0] > 0 and np.isfinite(inside.time_s.iloc[0])


def test_nvls_exceeds_the_link_rate_as_measured():
    """In-switch reduction is the one case busbw beats the 450 GB/s link (measured: 479 GB/s)."""
    frame = run("allreduce", cluster("dgx-h100"), [8 * 2**30], algo="nvls")
    assert frame.busbw_GBps.iloc[0] > 450


def test_two_domain_trees_exceed_the_nic_rate_without_reducing_in_the_network():
    """A double binary tree over two domains sends n per domain where a ring sends 2 n (N-1)/N x p/(p-1)
    more: measured 440 GB/s busbw on 2 x 8 H100 with 8 x 400 Gb/s NICs (400 GB/s)."""
    frame = run("allreduce", cluster("dgx-h100", 2), [8 * 2**30])
    assert frame.algo.iloc[0] in ("tree", "nvls-tree") and frame.busbw_GBps.iloc[0] > 400


def test_nccl_choice_takes_no_less_time_as_the_message_grows_across_nodes():
    """Across 2-8 H100 or B200 nodes, NCCL's own choice never gets faster as the message doubles: tree
    LL and LL128 forward a line round at a time (a 128 KiB allreduce on two H100 nodes was priced
    slower than 256 KiB when the pipeline fill moved whole chunks), and NCCL's LL cap bounds the whole
    call rather than each of the channels a small message keeps."""
    from commodel.comm.collectives import library_algorithms

    sizes = 2.0 ** np.arange(3, 31)
    for system in ("dgx-h100", "dgx-b200"):
        for nodes in (2, 4, 8):
            c = cluster(system, nodes)
            fab = fabric_of(c)
            for op in ("allreduce", "allgather", "reducescatter", "broadcast", "reduce"):
                pairs = candidates(op, fab, library_algorithms(op, "nccl"))
                times = tune(op, sizes, c.total_gpus, nodes, fab, pairs, policy="auto").time_s
                assert np.all(np.diff(times) >= -1e-12), (system, nodes, op)


def test_rccl_applies_its_own_size_corrections_on_mi300x_nodes(monkeypatch):
    """RCCL's tuning model 5 (8-GPU xGMI boards) scales each pair's bandwidth by a factor per size:
    ring Simple takes 0.1 below 512 MiB across nodes, so on two MI300X nodes RCCL runs the tree until
    then and the ring after, and its choice never gets faster as the message doubles. Without the
    factors its tuner kept ring LL to 16 MiB, 3.6x slower than ring Simple at 32 MiB."""
    from commodel.comm import tables
    from commodel.comm.collectives import library_algorithms

    sizes = 2.0 ** np.arange(10, 31)
    c = cluster("mi300x-8", 2)
    fab = fabric_of(c)

    def choice(op: str):
        return tune(
            op, sizes, c.total_gpus, 2, fab, candidates(op, fab, library_algorithms(op, "nccl")), "auto"
        )

    picked = choice("allreduce")
    assert set(picked.protocol[(sizes >= 4 * 2**20) & (sizes < 512 * 2**20)]) == {"simple"}
    assert set(picked.algo[(sizes >= 4 * 2**20) & (sizes < 512 * 2**20)]) == {"tree"}
    assert picked.algo[-1] == "ring"
    for op in ("allreduce", "allgather", "reducescatter", "broadcast", "reduce"):
        assert np.all(np.diff(choice(op).time_s) >= -1e-12), op
    monkeypatch.setattr(tables, "RCCL_TREE_CORRECTION", np.ones_like(tables.RCCL_TREE_CORRECTION))
    monkeypatch.setattr(tables, "RCCL_RING_CORRECTION", np.ones_like(tables.RCCL_RING_CORRECTION))
    from commodel.comm import collectives

    monkeypatch.setattr(
        collectives, "_tuner_terms", collectives._tuner_terms.__wrapped__
    )  # not the cached terms
    assert np.any(np.diff(choice("allreduce").time_s) < 0)


def test_rccl_rates_rooted_ring_ll_higher_on_one_mi300x_node(monkeypatch):
    """On one gfx94x node RCCL's tuner gives ring LL broadcast and reduce 1.65x the bandwidth."""
    from commodel.comm import nccl, tables

    fab = fabric_of(cluster("mi300x-8"))
    one = np.array([1.0])
    rates = [nccl.tuner_terms(op, "ring", "ll", 8 * one, one, fab).alg_Bps for op in ("broadcast", "reduce")]
    monkeypatch.setattr(tables, "RCCL_RING_LL_ROOTED_SINGLE_NODE", 1.0)
    plain = [nccl.tuner_terms(op, "ring", "ll", 8 * one, one, fab).alg_Bps for op in ("broadcast", "reduce")]
    np.testing.assert_allclose(np.array(rates) / np.array(plain), 1.65)


def test_the_fastest_path_never_falls_as_the_message_grows_where_the_choice_can():
    """The fastest path the library offers is the least of paths whose times never fall, so it never
    falls either and never trails the library's choice; the choice itself can fall (four A100 nodes:
    ring LL keeps one channel at 128 KiB where ring LL128 spreads 256 KiB over all), and the table
    names that gap."""
    from commodel.report.collective_table import nccl_tests_table

    sizes = 2.0 ** np.arange(3, 31)
    for system, nodes in (("dgx-a100", 4), ("dgx-h100", 1), ("mi300x-8", 4), ("gb200-nvl72", 16)):
        for op in ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall"):
            frame = run(op, cluster(system, nodes), sizes)
            assert (frame.fastest_time_s <= frame.time_s * (1 + 1e-12)).all(), (system, op)
            assert np.all(np.diff(frame.fastest_time_s) >= -1e-12), (system, op)
    frame = run("allgather", cluster("dgx-a100", 4), sizes)
    assert np.any(np.diff(frame.time_s) < 0)
    note = nccl_tests_table(frame, "dgx-a100").splitlines()[-1]
    assert "trails its fastest path" in note and "128 KiB" in note
    assert "trails" not in nccl_tests_table(run("allgather", cluster("dgx-a100", 4), sizes, algo="best"), "x")


def test_nccls_ll_cap_bounds_nvidia_gpus_only_and_rccls_own_ll_choice_stays_monotone_from_8_nodes():
    """NCCL's llMaxBw (by CPU vendor across nodes) is NVIDIA's own: RCCL carries none (digest 7.1),
    so RCCL's LL runs at its links. Applied to MI300X, the cap made 8- and 16-node all-gather and
    reduce-scatter 13-45% slower at 8-16 MiB, where RCCL's thresholds still pick LL, than at twice the
    size."""
    from commodel.comm import tables
    from commodel.comm.collectives import library_algorithms
    from commodel.comm.nccl_physical import physical_time

    big = np.array([2.0**24])
    for system, capped in (("dgx-a100", True), ("mi300x-8", False)):
        fab = fabric_of(cluster(system, 4))
        args = ("allgather", "ring", "ll", big, np.array([32.0]), np.array([4.0]), fab)
        before = physical_time(*args)[0]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tables, "LL_MAX_BW", tables.LL_MAX_BW * 1e3)
            assert (physical_time(*args)[0] < before) == capped, system
    sizes = 2.0 ** np.arange(10, 31)
    for nodes in (8, 16):
        c = cluster("mi300x-8", nodes)
        fab = fabric_of(c)
        for op in ("allgather", "reducescatter"):
            pairs = candidates(op, fab, library_algorithms(op, "nccl"))
            times = tune(op, sizes, c.total_gpus, nodes, fab, pairs, policy="auto").time_s
            assert np.all(np.diff(times) >= -1e-12), (nodes, op)


@pytest.mark.parametrize("system", ["dgx-h100", "dgx-b200", "mi300x-8", "gb200-nvl72"])
def test_more_domains_never_make_the_same_algorithm_and_protocol_faster(system):
    """At a fixed size on one fabric, a collective over more scale-up domains (2 to 32; GB200 racks
    of 18 trays) never takes less time while the algorithm and protocol stay; where NCCL's choice
    switches (``auto``, or the protocol under a forced algorithm: tree's Simple giving way to LL128 at
    64 MiB between 8 and 16 H100 nodes) the time may fall, and the test skips those steps. From one
    domain to two the fabric itself changes (NVLink alone, then NVLink and the network)."""
    per_domain = 18 if system == "gb200-nvl72" else 1
    sizes = [2**10, 2**20, 2**26, 2**30]
    for op in ("allreduce", "allgather", "alltoall"):
        for algo in ("ring", "tree", "auto"):
            previous = None
            for domains in (2, 4, 8, 16, 32):
                c = cluster(system, domains * per_domain)
                try:
                    r = run(op, c, sizes, c.total_gpus, algo=algo)
                except CommodelError:  # an algorithm this operation has no form of
                    previous = None
                    continue
                time, chosen = r.time_s.to_numpy(), (r.algo + "/" + r.protocol).to_numpy()
                if previous is not None:
                    same = chosen == previous[1]
                    assert (time[same] >= previous[0][same] * (1 - 1e-9)).all(), (op, algo, domains)
                previous = (time, chosen)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SYSTEMS), st.sampled_from([1, 2, 4, 16]), st.sampled_from(OPS))
def test_nccls_tuner_sees_a_fabric_as_its_tuner_view(system, nodes, op):
    """The tuner's terms, where each pair may run and the topology searches' graphs are the same on a
    fabric and on its tuner view (nominal speeds, the measured rates set to placeholders), which is
    what lets an uncertainty draw's fabrics share them: NCCL's tuner reads nothing a calibration or a
    draw moves."""
    try:
        c = cluster(system, nodes)
    except CommodelError:  # a rack-scale system needs whole racks
        return
    fab, g = fabric_of(c), c.domain_gpus
    p, N = np.array([2.0, g, g * nodes]), np.array([1.0, 1.0, float(nodes)])
    n = 2.0 ** np.arange(0, 35, 3)[:, None]
    for search in (graph._ring_graph, graph._nvls_graph):  # the searches, on the fabric and as keyed
        own, seen = (dataclasses.astuple(search(f, p / N, N)) for f in (fab, fab.tuner_view))
        assert all(np.array_equal(a, b) for a, b in zip(own, seen, strict=True)), search.__name__
    for algo, proto in candidates(op, fab, library_algorithms(op, "nccl")):
        if algo in nccl.NCCL_ALGORITHMS.get(op, ()):
            with np.errstate(all="ignore"):
                own, seen = (
                    nccl.tuner_terms(op, algo, proto, p, N, f).time(n) for f in (fab, fab.tuner_view)
                )
            assert np.array_equal(own, seen, equal_nan=True), (algo, proto)
            assert np.array_equal(
                _nccl_available(op, algo, fab, p, N), _nccl_available(op, algo, fab.tuner_view, p, N)
            )
