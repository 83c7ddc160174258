"""The one exception type users see: a message they can act on, never a traceback."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import TypeVar

T = TypeVar("T")


class CommodelError(ValueError):
    """Bad input: a name, a file, a size or a layout that commodel cannot use."""


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The one of ``choices`` closest to ``name``, or None if none is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return close[0] if close else None


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest of ``choices``, or ``""`` if none is close."""
    close = closest(name, choices)
    return f" (did you mean '{close}'?)" if close else ""


def unknown(kind: str, name: str, choices: Iterable[str]) -> CommodelError:
    """Error for an unknown ``kind`` called ``name``, with a suggestion and the allowed values."""
    choices = sorted(choices)
    return CommodelError(f"unknown {kind} '{name}'{suggest(name, choices)}; known: {', '.join(choices)}")


def pick(kind: str, name: str, table: Mapping[str, T]) -> T:
    """``table[name]``, or an error naming the closest valid name when ``name`` is unknown."""
    if name not in table:
        raise unknown(kind, name, table)
    return table[name]
