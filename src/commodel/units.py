"""Parsing of human quantities ("400 Gbit/s", "1 GiB", "2 us") into SI floats.

Only the hardware loader and the CLI call this module: models receive SI numbers (seconds, bytes,
bytes/s, FLOP/s, watts). The common units are read from a table of pint's own values
(:data:`KNOWN_UNITS`), any other spelling by pint; bits are converted to bytes (8 bit = 1 B).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

import numpy as np

from commodel.errors import CommodelError

#: Canonical SI unit per physical kind, as pint spells it.
SI_UNITS = {
    "bandwidth": "B/s",
    "bytes": "B",
    "time": "s",
    "flop_rate": "FLOP/s",
    "power": "W",
    "rate": "1/s",
}

#: How error messages name each kind, with example spellings.
DESCRIPTIONS = {
    "bandwidth": "a bandwidth such as '450 GB/s' or '400 Gbit/s'",
    "bytes": "a size in bytes such as '4096', '80 GB' or '1GiB'",
    "time": "a duration such as '0.6 us' or '2 ms'",
    "flop_rate": "a compute rate such as '989 TFLOP/s'",
    "power": "a power such as '700 W'",
    "rate": "a rate such as '3.3e8' (per second) or '330 MHz'",
}


@cache
def _registry():
    """pint's registry, with its parsed definitions cached on disk (0.03 s instead of 1 s to build)."""
    import pint  # slow: pint (0.2 s), only where a TOML quantity needs parsing

    try:
        ureg = pint.UnitRegistry(cache_folder=":auto:")
    except OSError:  # no writable cache folder: parse the definitions every time
        ureg = pint.UnitRegistry()
    ureg.define("FLOP = [flop]")
    return ureg


_NUMBER_UNIT = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(.*)")


#: Units as pint defines them, per kind (``kB`` = 1000 B, ``KiB`` = 1024 B, ``Gbit/s`` = 1.25e8 B/s),
#: read without importing pint (0.2 s, and its optional integrations with it): every unit the shipped
#: records and ``commodel calibrate``'s overlays write, and the CLI's sizes; pint reads any other.
KNOWN_UNITS = {
    "bytes": {"B": 1.0, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
              "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40},
    "time": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9},
    "power": {"W": 1.0, "kW": 1e3, "MW": 1e6},
    "flop_rate": {"FLOP/s": 1.0, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15},
    "bandwidth": {"B/s": 1.0, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12, "GiB/s": 2.0**30,
                  "Mbit/s": 1.25e5, "Gbit/s": 1.25e8, "Tbit/s": 1.25e11},
}  # fmt: skip


@cache
def _factor(unit: str, kind: str) -> float:
    """SI value of one ``unit`` of ``kind`` (pint does the conversion, once per distinct unit; a unit
    of :data:`KNOWN_UNITS` is read from it)."""
    if unit in KNOWN_UNITS.get(kind, {}):
        return KNOWN_UNITS[kind][unit]
    quantity = _registry().Quantity(1.0, unit) if unit else None
    if quantity is None or (kind != "bytes" and quantity.dimensionless):
        raise ValueError("no unit")
    return float(quantity.to(SI_UNITS[kind]).magnitude)


def parse_quantity(text: str | float | int, kind: str) -> float:
    """Parse ``text`` as a quantity of ``kind`` (a key of :data:`SI_UNITS`) and return it in SI units.

    A bare number is taken to be already in SI units (bytes, seconds, ...).

    Raises
    ------
    CommodelError
        If ``text`` has no recognizable unit of the right kind.
    """
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise CommodelError(f"expected {DESCRIPTIONS[kind]}, got {text!r}")
    if isinstance(text, int | float):
        return float(text)
    match = _NUMBER_UNIT.fullmatch(text.strip())
    if match and not match[2]:
        return float(match[1])
    try:
        if match is None:
            raise ValueError("no number")
        return float(match[1]) * _factor(match[2].strip(), kind)
    except Exception as exc:  # pint raises several unrelated types for bad strings
        raise CommodelError(f"cannot read {text!r}: expected {DESCRIPTIONS[kind]}") from exc


def parse_sizes(spec: str) -> np.ndarray:
    """Parse a CLI size list into bytes.

    ``spec`` is one size (``1GiB``, ``4096``), a comma list (``8,1MiB,1GiB``) or a doubling range
    ``LO:HI`` (``8B:8GiB``: LO, 2 LO, 4 LO, ... up to HI, like nccl-tests ``-b LO -e HI -f 2``).
    Units are pint's (``kB`` = 1000 B, ``KiB`` = 1024 B); nccl-tests' bare suffixes ``K M G T`` are
    binary (``128M`` = 128 MiB).
    """
    return _doubling_list(spec, _one_size, "size", "'1GiB', '8,1MiB' or '8B:8GiB'")


def parse_counts(spec: str, what: str) -> np.ndarray:
    """Parse a CLI list of whole counts of ``what`` (tokens, requests): one (``128``), a comma list
    (``1,128,4096``) or a doubling range (``1:4096``)."""

    def one(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not np.isfinite(value) or value < 1 or value != round(value) or value > 2**53:
            raise CommodelError(f"{what} must be a whole number of at least 1, got '{text}'")
        return value

    return _doubling_list(spec, one, what, "'128', '1,128,4096' or '1:4096'")


def _doubling_list(spec: str, one: Callable[[str], float], what: str, example: str) -> np.ndarray:
    """One value, a comma list or doubling ranges ``LO:HI`` of values ``one`` parses."""
    parts = spec.replace(" ", "").split(",")
    if not any(parts):
        raise CommodelError(f"empty {what} list: give e.g. {example}")
    if not all(parts):
        raise CommodelError(f"{what} list '{spec}' has an empty item: give e.g. {example}")
    values: list[float] = []
    for part in parts:
        if ":" in part:
            lo_text, _, hi_text = part.partition(":")
            lo, hi = one(lo_text), one(hi_text)
            if hi < lo:
                raise CommodelError(f"{what} range '{part}' ends below its start")
            count = int(np.floor(np.log2(hi / lo) + 1e-9)) + 1
            values.extend(lo * 2.0 ** np.arange(count))
        else:
            values.append(one(part))
    return np.asarray(values, dtype=float)


#: The largest message size: a signed 64-bit byte count (what NCCL and MPI take).
MAX_BYTES = 2**63 - 1

#: nccl-tests' own size suffixes (``-b 8 -e 128M``): bare K, M, G, T are binary multiples.
_NCCL_TESTS_SUFFIX = re.compile(r"(\d+)([KMGT])")


def _one_size(text: str) -> float:
    shorthand = _NCCL_TESTS_SUFFIX.fullmatch(text)
    if shorthand:
        value = float(int(shorthand[1]) * 1024 ** ("KMGT".index(shorthand[2]) + 1))
    else:
        value = parse_quantity(text, "bytes")
    if not np.isfinite(value) or value <= 0:
        raise CommodelError(f"size must be positive, got '{text}'")
    if value != round(value):
        raise CommodelError(f"size must be a whole number of bytes, got '{text}'")
    if value > MAX_BYTES:
        raise CommodelError(f"size '{text}' is above 2^63 bytes, the largest a message can be")
    return float(value)


def format_bytes(n: float, digits: int | None = None) -> str:
    """Human form of a byte count with binary prefixes (``1 GiB``), to ``digits`` significant digits
    (all of them by default)."""
    shown = (lambda v: f"{v:g}") if digits is None else (lambda v: f"{v:.{digits}g}")
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = KNOWN_UNITS["bytes"][unit]
        if n >= scale:
            return f"{shown(n / scale)} {unit}"
    return f"{shown(n)} B"


#: The unit each quantity kind prints in (SI prefixes are added by :func:`format_quantity`).
_UNITS = {"bandwidth": "B/s", "time": "s", "bytes": "B", "flop_rate": "FLOP/s", "power": "W", "rate": "/s"}


def readable_number(value: float) -> str:
    """A metric for a person: thousands separated from 10,000 up, four significant digits below."""
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def format_quantity(value: float, kind: str | None) -> str:
    """A value in the project's units for a person: memory in binary prefixes (``80 GiB``), everything
    else in SI ones (``2.5e10`` bandwidth as ``25 GB/s``, ``3e-6`` time as ``3 us``); dimensionless
    values (fractions, counts, rates) as plain numbers."""
    if kind == "bytes":
        return format_bytes(value, 4)
    unit = _UNITS.get(kind or "")
    if unit is None:
        return f"{value:.6g}"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0), ("m", 1e-3),
                          ("u", 1e-6), ("n", 1e-9)):  # fmt: skip
        if abs(value) >= scale or prefix == "n":
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"
