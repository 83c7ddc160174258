"""The vectorization helpers: evaluation once per distinct input, and the bounded result cache."""

import dataclasses

import numpy as np

from commodel import vectorize
from commodel.vectorize import distinct, memoized, on_unique, per_distinct


def counting(fn):
    calls = []

    def counted(*args):
        calls.append(args)
        return fn(*args)

    return counted, calls


def test_on_unique_prices_each_distinct_row_once_and_expands_back():
    double, calls = counting(lambda a, b: {"sum": a + b})
    a = np.tile([1.0, 2.0], 500)
    out = on_unique(double, a, 3.0)
    assert np.array_equal(out["sum"], a + 3.0)
    assert len(calls) == 1 and calls[0][0].size == 2


def test_keys_coded_once_serve_several_calls_with_more_keys():
    """``distinct`` codes the keys once; ``on_unique`` over each row's index and an extra key gives
    what ``on_unique`` over all the keys gives, and None says coding would not pay."""
    rng = np.random.default_rng(1)
    a, b = rng.choice([1.0, 2.0, 4.0], 2000), rng.choice([0.5, 3.0], 2000)
    extra = rng.choice([10.0, 20.0], 2000)
    rows, index = distinct(a, b)
    assert len(rows[0]) == len(set(zip(a, b, strict=True))) and index.shape == a.shape
    at = on_unique(lambda i, e: rows[0][i] * rows[1][i] + e, index, extra)
    assert np.array_equal(at, a * b + extra)
    assert distinct(np.arange(2000.0)) is None and distinct(a[:10]) is None


def test_distinct_rows_are_exact_whatever_the_columns_hold():
    """Every kind of column the coding meets (booleans, whole numbers over a short span or in large
    power-of-two steps, fractions, large whole numbers, text, a constant one) and every way of combining them (a presence table,
    one hash, step by step past 2^62 combinations) gives each distinct row once and each row back."""
    rng = np.random.default_rng(0)
    n = 3000
    columns = [
        rng.integers(0, 2, n).astype(bool),
        rng.choice([1.0, 2.0, 8.0, 64.0], n),
        rng.choice([0.25, 1.5, 3.0], n),
        rng.choice([3e11, 7e11, 5.0], n),
        rng.choice([2.0**20, 3 * 2.0**20, 2.0**30], n),  # whole, far apart: offsets in steps of 2^20
        rng.choice(np.array([-(2**40), 0, 2**41, 3 * 2**40]), n),
        rng.choice(np.array(["a", "bb", "c"], dtype=object), n),
        np.full(n, 4.0),
    ]
    wide = [rng.integers(0, 2**40, n) for _ in range(2)]  # 2^80 combinations: coded step by step
    for flat in (columns, columns[1:3], columns + wide, [columns[5]]):
        first, inverse = vectorize._inverse(flat)
        rows = [tuple(c[i] for c in flat) for i in range(n)]
        assert len(set(rows)) == len(first)
        assert all(rows[i] == rows[first[inverse[i]]] for i in range(n))
        assert len({rows[i] for i in first}) == len(first)
        assert vectorize._inverse(flat, most=len(first) - 1) is None  # more distinct rows than allowed
        assert np.array_equal(vectorize._inverse(flat, most=len(first))[1], inverse)


def test_memoized_reuses_equal_arrays_and_starts_afresh_past_its_budget(monkeypatch):
    fn, calls = counting(lambda x: x * 2)
    cached = memoized(fn)
    small = np.arange(4.0)
    assert np.array_equal(cached(small), small * 2)
    cached(small.copy())  # equal content: the cached result
    assert len(calls) == 1
    monkeypatch.setattr(vectorize, "MAX_CACHED_ELEMENTS", 10)
    cached(np.arange(8.0))  # 4 + 8 elements exceed 10: the cache starts afresh with this one
    cached(small)
    assert len(calls) == 3


def test_per_distinct_calls_once_per_distinct_value_and_keeps_the_shape():
    name, calls = counting(lambda v: f"<{v}>")
    values = np.array([["a", "b"], ["a", "a"]], dtype=object)
    out = per_distinct(name, values, object)
    assert out.shape == (2, 2) and out.tolist() == [["<a>", "<b>"], ["<a>", "<a>"]]
    assert sorted(c[0] for c in calls) == ["a", "b"]


def test_a_layers_variants_priced_in_one_call_equal_each_priced_alone():
    """``layer_works`` prices a layer on all SMs, on fewer and with userbuffers' cut GEMMs in one call
    where the layouts are few: field by field, the numbers each variant gets alone."""
    from conftest import layouts

    from commodel.compute.precision import precision
    from commodel.hardware import cluster
    from commodel.workloads.layer.work import STACKED_ROWS, Work, layer_work_of, layer_works
    from commodel.workloads.model.catalog import model

    net, gpu = model("llama3-70b"), cluster("dgx-h100").gpu
    x = layouts("llama3-70b", tp=np.array([2.0, 4.0, 8.0]), dp=np.array([4.0, 2.0, 1.0]), global_batch=64,
                micro_batch=np.array([1.0, 2.0, 1.0]), sequence_parallel=True)  # fmt: skip
    variants = [(None, True), (np.array([100.0, 116.0, 100.0]), False), (116.0, False)]
    many = 3 * STACKED_ROWS  # repeated layouts: the layout's keys coded once for every variant
    tiled = dataclasses.replace(
        x,
        **{
            f.name: np.tile(np.broadcast_to(getattr(x, f.name), (3,)), many // 3)
            for f in dataclasses.fields(x)
        },
    )
    tiled_variants = [(u if np.ndim(u) == 0 else np.tile(u, many // 3), cut) for u, cut in variants]
    for layout, listed, rows in ((x, variants, 3), (tiled, tiled_variants, many)):
        together = layer_works(net, gpu, layout, precision("bf16"), "flash", listed)
        for work, (units, cut) in zip(together, listed, strict=True):
            alone = layer_work_of(net, gpu, layout, precision("bf16"), "flash", units, cut=cut)
            for field in dataclasses.fields(Work):
                assert np.array_equal(
                    getattr(work, field.name), np.broadcast_to(getattr(alone, field.name), (rows,))
                )


def test_collectives_coded_together_equal_each_priced_alone():
    """``collectives`` prices several calls over one group on their shared distinct rows: the numbers
    ``collective`` gives each alone, sizes of 0 (a call a layout does not run) included."""
    from commodel.comm.fabric import fabric_of
    from commodel.hardware import cluster
    from commodel.workloads.parallel.groups import collective, collectives, group

    fab = fabric_of(cluster("dgx-h100", 4))
    rng = np.random.default_rng(2)
    n = 3 * vectorize.MIN_POINTS
    where = group(rng.choice([1.0, 2.0, 8.0, 16.0], n), rng.choice([1.0, 8.0], n), 8)
    ops = ("allgather", "reducescatter", "allreduce")
    sizes = tuple(rng.choice([0.0, 2.0**20, 3.0 * 2**26], n) for _ in ops)
    for (time, bw), op, size in zip(collectives(ops, sizes, where, fab), ops, sizes, strict=True):
        alone = collective(op, size, where, fab)
        assert np.array_equal(time, alone[0]) and np.array_equal(bw, alone[1])


def test_a_layouts_parameters_priced_per_distinct_stage_fields_equal_each_layouts_own():
    """``stage_parameters`` prices each distinct combination of the fields it reads once: over many
    layouts varying those fields (DualPipe, MTP modules, stated stages, expert grids) and others, the
    numbers each layout gets priced alone; a field read but not named comes out NaN, not borrowed."""
    from conftest import layouts

    from commodel.workloads.model.catalog import model
    from commodel.workloads.parallel.layout import on_distinct
    from commodel.workloads.training.memory import _stage_parameters, stage_parameters

    net, rng, n = model("deepseek-v3"), np.random.default_rng(3), 2 * vectorize.MIN_POINTS
    pp = rng.choice([1.0, 2.0, 4.0, 8.0], n)
    x = layouts(
        "deepseek-v3", tp=rng.choice([1.0, 2.0, 8.0], n), pp=pp, ep=rng.choice([8.0, 32.0], n), gpus=2048,
        etp=rng.choice([1.0, 2.0], n), schedule=rng.choice(np.array(["1f1b", "dualpipe"], dtype=object), n), mtp_layers=rng.choice([0.0, 1.0], n), micro_batch=rng.choice([1.0, 2.0], n),
        first_stage_layers=np.where(pp > 2, rng.choice([np.nan, 5.0], n), np.nan), global_batch=4096,
    )  # fmt: skip
    together = stage_parameters(net, x)
    for i in rng.choice(n, 40, replace=False):
        alone = _stage_parameters(net, x.select(np.arange(n) == i))
        assert all(np.array_equal(t[i : i + 1], a) for t, a in zip(together, alone, strict=True))
    unnamed = on_distinct(lambda at: at.micro_batch * at.tp, x, ("tp",))
    assert np.isnan(unnamed).all()
