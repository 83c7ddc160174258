"""Where the data shipped with commodel lives (hardware database, measurements).

In a wheel the top-level ``hardware_db/`` and ``data/`` folders are packaged under
``commodel/_resources``; in a source checkout (editable install) they are read in place.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGED = Path(__file__).parent / "_resources"
_SOURCE_TREE = Path(__file__).resolve().parents[2]


def resource_dir(name: str) -> Path:
    """Return the directory ``name`` (``hardware_db``, ``workloads`` or ``data``) shipped with commodel."""
    for root in (_PACKAGED, _SOURCE_TREE):
        if (root / name).is_dir():
            return root / name
    raise FileNotFoundError(f"commodel's '{name}' folder is missing from {_PACKAGED} and {_SOURCE_TREE}")
