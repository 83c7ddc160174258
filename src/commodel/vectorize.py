"""Evaluate a vectorized function once per distinct input combination.

Design-space sweeps repeat the same sub-problem many times (every layout with tp = 8 and 8192 tokens
prices the same allreduce). :func:`on_unique` finds the distinct combinations of its key arrays,
calls the function on those only, and broadcasts the results back, so the cost follows the number of
distinct sub-problems rather than the number of design points.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

#: Below this many points the bookkeeping costs more than it saves.
MIN_POINTS = 256


#: Whole-number columns spanning fewer steps than this are coded by their offset from their least
#: value, without hashing.
DENSE_SPAN = 4096


def _code(column: np.ndarray) -> tuple[np.ndarray, int] | None:
    """(codes in 0..size-1, size) telling ``column``'s values apart; None where it holds one value.
    Whole numbers are their offset from the least in steps of the largest power of two dividing
    every offset, where that spans fewer than :data:`DENSE_SPAN` steps (the sizes, token counts and
    group sizes of a design space are multiples of large powers of two); other values are hashed
    (pandas.factorize)."""
    import pandas as pd  # slow: pandas (0.2 s), which a single estimate does not need

    if column.strides == (0,):
        return None
    if column.dtype.kind == "b":
        return (column.astype(np.int64), 2) if column.any() and not column.all() else None
    if column.dtype.kind in "iuf":
        low, high = column.min(), column.max()
        if low == high:
            return None
        if float(high) - float(low) < 2**53:  # offsets exact as whole numbers
            whole = column.astype(np.int64)
            if column.dtype.kind != "f" or (whole == column).all():
                offset = whole - int(low)
                combined = int(np.bitwise_or.reduce(offset))
                shift = (combined & -combined).bit_length() - 1  # the power of two dividing them all
                steps = (int(high) - int(low)) >> shift
                if steps < DENSE_SPAN:
                    return (offset >> shift if shift else offset), steps + 1
    code, values = pd.factorize(column)
    return (code, len(values)) if len(values) > 1 else None


def _inverse(flat: list[np.ndarray], most: float = np.inf) -> tuple[np.ndarray, np.ndarray] | None:
    """(first index of each distinct row, row -> distinct-row index) for columns ``flat``; None as
    soon as the rows are seen to hold more than ``most`` distinct ones.

    Linear in the number of rows: each column that holds more than one value is coded
    (:func:`_code`) and folded into one integer per row, ``combined * size + code``; before a fold
    would let that integer exceed four per row, it is replaced by the rank of its value among those
    present (:func:`_compact`), which also counts the distinct rows so far.
    """
    rows = len(flat[0])
    combined, span = np.zeros(rows, dtype=np.int64), 1
    for code, size in filter(None, map(_code, flat)):
        if span * size > 4 * rows:
            combined, span = _compact(combined, span)
            if span > most:
                return None
        combined, span = combined * size + code, span * size
    inverse, count = _compact(combined, span)
    if count > most:
        return None
    first = np.empty(count, dtype=np.int64)
    first[inverse[::-1]] = np.arange(rows - 1, -1, -1)
    return first, inverse


def _compact(values: np.ndarray, span: int) -> tuple[np.ndarray, int]:
    """(each value's rank among the distinct ``values``, their count), for whole numbers in
    ``0..span-1``: a presence table where the span is at most four per value, else hashed."""
    if span <= 4 * len(values):
        present = np.zeros(span, dtype=bool)
        present[values] = True
        ids = np.cumsum(present) - 1
        return ids[values], int(ids[-1]) + 1
    import pandas as pd  # slow: pandas (0.2 s), which a single estimate does not need

    inverse, distinct = pd.factorize(values)
    return inverse, len(distinct)


def _expand(value: Any, inverse: np.ndarray, shape: tuple[int, ...]) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value,
            **{f.name: _expand(getattr(value, f.name), inverse, shape) for f in dataclasses.fields(value)},
        )
    if isinstance(value, tuple):
        return tuple(_expand(v, inverse, shape) for v in value)
    if isinstance(value, dict):
        return {k: _expand(v, inverse, shape) for k, v in value.items()}
    array = np.asarray(value)
    if array.ndim == 0:
        return np.broadcast_to(array, shape)
    return array[inverse].reshape(shape)


def distinct(*keys: ArrayLike) -> tuple[list[np.ndarray], np.ndarray] | None:
    """(each key's values on the distinct rows of the broadcast ``keys``, each row's index among them,
    shaped as the keys), or None where coding does not pay: fewer than :data:`MIN_POINTS` rows, or
    more than half of them distinct. For several :func:`on_unique` calls over the same keys and a
    few more (``on_unique(fn, index, extra)``, ``fn`` taking the keys' values at ``index``), the
    keys coded once."""
    return _distinct(np.broadcast_arrays(*(np.asarray(k) for k in keys)))


def _distinct(arrays: list[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray] | None:
    """:func:`distinct` of keys already broadcast."""
    if arrays[0].size < MIN_POINTS:
        return None
    flat = [a.ravel() for a in arrays]
    found = _inverse(flat, most=0.5 * len(flat[0]))
    if found is None:
        return None
    first, inverse = found
    return [a[first] for a in flat], inverse.reshape(arrays[0].shape)


def on_unique(fn: Callable[..., Any], *keys: ArrayLike) -> Any:
    """``fn(*keys)`` computed on the distinct rows of the broadcast ``keys`` and expanded back.

    ``fn`` must be elementwise in its arguments (row i of the output depends on row i of the inputs
    only) and return an array, or a tuple, dict or dataclass of arrays.
    """
    arrays = np.broadcast_arrays(*(np.asarray(k) for k in keys))
    found = _distinct(arrays)
    if found is None:
        return fn(*arrays)
    rows, inverse = found
    return _expand(fn(*rows), inverse.ravel(), inverse.shape)


def per_distinct(fn: Callable[[Any], Any], values: ArrayLike, dtype: Any = float) -> np.ndarray:
    """``fn`` of every entry of ``values``, called once per distinct entry (hashable ones): a table's
    text columns hold a few distinct values over many rows."""
    entries = np.asarray(values, dtype=object).ravel().tolist()
    results = {value: fn(value) for value in dict.fromkeys(entries)}
    return np.array([results[value] for value in entries], dtype=dtype).reshape(np.shape(values))


#: Array elements a memoized function's cache may hold in its keys before it starts afresh: about
#: 4 MB of keys, and (results being a few arrays of the keys' length each) some tens of MB of results.
MAX_CACHED_ELEMENTS = 2**19


def memoized(fn: Callable[..., Any], size: int = 4096) -> Callable[..., Any]:
    """``fn`` with its results kept for repeated arguments: scalars and hashable records by value,
    arrays by content. For the size-independent parts of a model (NCCL's graph search, table
    latencies), which a sweep or a loop of estimates asks for again and again. The cache starts
    afresh past ``size`` entries or :data:`MAX_CACHED_ELEMENTS` array elements, so a long sweep's
    distinct arrays do not pile up. Results are shared: callers must not change them in place."""
    cache: dict[tuple, Any] = {}
    held = 0

    def key(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return (value.shape, value.dtype.str, value.tobytes())
        return value

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal held
        k = (*(key(a) for a in args), *((name, key(v)) for name, v in sorted(kwargs.items())))
        if k not in cache:
            elements = sum(np.size(v) for v in (*args, *kwargs.values()) if isinstance(v, np.ndarray))
            if len(cache) >= size or held + elements > MAX_CACHED_ELEMENTS:
                cache.clear()
                held = 0
            cache[k] = fn(*args, **kwargs)
            held += elements
        return cache[k]

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    wrapper.__doc__ = fn.__doc__
    return wrapper
