"""The vectorization helpers: evaluation once per distinct input, and the bounded result cache."""

import numpy as np

from commodel import vectorize
from commodel.vectorize import memoized, on_unique, per_distinct


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
