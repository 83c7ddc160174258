"""Load ``hardware_db/`` into validated records, and the user's overlays on top of it.

Layout: ``gpus/NAME.toml``, ``links/NAME.toml``, ``systems/NAME.toml``; the file stem is the name.
Errors name the file and the field, and suggest the closest valid key or name.

An **overlay** is the user's own data, applied over the built-in records (DESIGN principle 9): a TOML
file with tables ``[gpus.NAME]``, ``[links.NAME]``, ``[systems.NAME]`` (the fields given replace the
record's, or a full record adds a new name), as ``commodel calibrate`` writes, or a folder laid out
like ``hardware_db/``. Overlays go through the same strict validation. The active overlays are the
paths in ``COMMODEL_HARDWARE`` (separated by the OS path separator; the CLI's ``--hardware`` sets
it), so every process of a sweep, Dask workers included, prices the same hardware.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import commodel.hardware.gpu_sections as gpu_sections_module
import commodel.hardware.schema as schema_module
import commodel.records as record_module
from commodel.errors import CommodelError, pick, suggest, unknown
from commodel.hardware.schema import GPU, Link, System
from commodel.io import files_digest, prune_cache, write_text
from commodel.records import load_folder, read_toml, validate_record
from commodel.resources import resource_dir

KINDS: dict[str, type[BaseModel]] = {"gpu": GPU, "link": Link, "system": System}
FOLDERS = {"gpu": "gpus", "link": "links", "system": "systems"}


@dataclass(frozen=True)
class HardwareDB:
    """All hardware records by kind and name."""

    gpus: dict[str, GPU]
    links: dict[str, Link]
    systems: dict[str, System]
    root: Path

    def table(self, kind: str) -> dict[str, BaseModel]:
        """Records of one kind (``gpu``, ``link`` or ``system``)."""
        if kind not in KINDS:
            raise unknown("hardware kind", kind, KINDS)
        return {"gpu": self.gpus, "link": self.links, "system": self.systems}[kind]

    def get(self, kind: str, name: str) -> BaseModel:
        """One record by kind and name; an unknown name gets a suggestion."""
        return pick(kind, name, self.table(kind))

    def gpu(self, name: str) -> GPU:
        return self.get("gpu", name)  # type: ignore[return-value]

    def link(self, name: str) -> Link:
        return self.get("link", name)  # type: ignore[return-value]

    def system(self, name: str) -> System:
        return self.get("system", name)  # type: ignore[return-value]

    def find(self, name: str) -> tuple[str, BaseModel]:
        """Look ``name`` up in every kind; return ``(kind, record)``."""
        for kind in KINDS:
            if name in self.table(kind):
                return kind, self.table(kind)[name]
        raise unknown("hardware name", name, [n for k in KINDS for n in self.table(k)])


def load_database(root: Path) -> HardwareDB:
    """Load and cross-check every record under ``root``.

    The validated records are kept as JSON (SI numbers, no units left to parse) in the user's cache
    folder, keyed by a hash of every file's content and of the schema that reads them (its defaults
    and units are in the JSON too), so a warm start reads no TOML and imports no unit library; any
    change to a file or to the schema changes the key.
    """
    files = sorted(p for folder in FOLDERS.values() for p in (root / folder).glob("*.toml"))
    readers = [Path(module.__file__) for module in (schema_module, gpu_sections_module, record_module)]
    cached = cache_dir() / f"hardware-{files_digest([*readers, *files])}.json"
    if cached.is_file():
        prune_cache(cached)
        try:
            data = json.loads(cached.read_text())
            tables = {
                kind: {n: KINDS[kind].model_validate(v) for n, v in data[kind].items()} for kind in KINDS
            }
            return HardwareDB(tables["gpu"], tables["link"], tables["system"], root)  # type: ignore[arg-type]
        except (ValueError, KeyError):  # a stale or damaged cache: rebuild it below
            pass
    tables: dict[str, dict[str, BaseModel]] = {}
    for kind, folder in FOLDERS.items():
        tables[kind] = load_folder(root / folder, KINDS[kind])
    db = HardwareDB(tables["gpu"], tables["link"], tables["system"], root)  # type: ignore[arg-type]
    _check_references(db)
    try:
        payload = {kind: {n: r.model_dump(mode="json") for n, r in tables[kind].items()} for kind in KINDS}
        write_text(cached, json.dumps(payload))
        prune_cache(cached)
    except OSError:  # no writable cache folder: load from TOML every time
        pass
    return db


def cache_dir() -> Path:
    """Where commodel keeps derived files: ``$XDG_CACHE_HOME/commodel`` (default ~/.cache/commodel)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "commodel"


def _check_references(db: HardwareDB) -> None:
    for name, gpu in db.gpus.items():
        _must_exist(db, "link", gpu.host_link, db.root / "gpus" / f"{name}.toml", "host_link")
    for name, system in db.systems.items():
        path = db.root / "systems" / f"{name}.toml"
        _must_exist(db, "gpu", system.gpu, path, "gpu")
        _must_exist(db, "link", system.scale_up.link, path, "scale_up.link")
        _must_exist(db, "link", system.scale_out.link, path, "scale_out.link")
        if system.host_memory is not None:
            _must_exist(db, "link", system.host_memory.link, path, "host_memory.link")
        if db.links[system.scale_out.link].endpoint_power is None:
            raise CommodelError(
                f"{path}: field 'scale_out.link': link '{system.scale_out.link}' has no endpoint_power, "
                "which a scale-out fabric needs"
            )


def _must_exist(db: HardwareDB, kind: str, name: str, path: Path, field: str) -> None:
    if name not in db.table(kind):
        raise CommodelError(
            f"{path}: field '{field}': unknown {kind} '{name}'{suggest(name, db.table(kind))}"
        )


#: Environment variable naming the active overlays.
OVERLAY_ENV = "COMMODEL_HARDWARE"


def _merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``change`` applied: sub-tables merge, everything else replaces."""
    out = dict(base)
    for key, value in change.items():
        out[key] = (
            _merged(base[key], value)
            if isinstance(value, dict) and isinstance(base.get(key), dict)
            else value
        )
    return out


def _overlay_tables(path: Path) -> dict[str, dict[str, tuple[dict[str, Any], str]]]:
    """An overlay's records as ``{kind: {name: (fields, where)}}``, from a file or a folder."""
    if path.is_dir():
        found = {
            kind: {p.stem: (read_toml(p), str(p)) for p in sorted((path / folder).glob("*.toml"))}
            for kind, folder in FOLDERS.items()
        }
        if not any(found.values()):
            raise CommodelError(
                f"{path}: a hardware folder holds records in {', '.join(f + '/' for f in FOLDERS.values())}; "
                "found none"
            )
        return found
    document = read_toml(path)
    folders = {folder: kind for kind, folder in FOLDERS.items()}
    for section in document:
        if section not in folders:
            raise CommodelError(
                f"{path}: unknown table [{section}]{suggest(section, folders)}; an overlay has "
                "[gpus.NAME], [links.NAME] or [systems.NAME] tables"
            )
    return {
        kind: {
            name: (fields, f"{path} [{folder}.{name}]") for name, fields in document.get(folder, {}).items()
        }
        for kind, folder in FOLDERS.items()
    }


def apply_overlay(db: HardwareDB, path: Path) -> HardwareDB:
    """``db`` with the overlay at ``path`` applied and every record re-validated and cross-checked."""
    if not path.exists():
        raise CommodelError(f"{path}: no such hardware overlay (a TOML file or a hardware_db-like folder)")
    tables = {kind: dict(db.table(kind)) for kind in KINDS}
    for kind, records in _overlay_tables(path).items():
        for name, (fields, where) in records.items():
            if not isinstance(fields, dict):
                raise CommodelError(f"{where}: expected a table of fields")
            base = tables[kind][name].model_dump(exclude_none=True) if name in tables[kind] else {}
            tables[kind][name] = validate_record(_merged(base, fields), KINDS[kind], where)
    merged = HardwareDB(tables["gpu"], tables["link"], tables["system"], db.root)  # type: ignore[arg-type]
    _check_references(merged)
    return merged


def active_overlays() -> tuple[Path, ...]:
    """The overlays in ``COMMODEL_HARDWARE``, in the order they apply."""
    text = os.environ.get(OVERLAY_ENV, "")
    return tuple(Path(p) for p in text.split(os.pathsep) if p)


@cache
def _database(overlays: tuple[Path, ...]) -> HardwareDB:
    db = load_database(resource_dir("hardware_db"))
    for path in overlays:
        db = apply_overlay(db, path)
    return db


#: A database standing in for the default one (:func:`using`), or ``None``.
_standing_in: list[HardwareDB] = []


def default_db() -> HardwareDB:
    """The hardware database shipped with commodel, with the active overlays applied (loaded once
    per process and set of overlays), or the one :func:`using` puts in its place."""
    return _standing_in[-1] if _standing_in else _database(active_overlays())


@contextmanager
def using(db: HardwareDB) -> Iterator[HardwareDB]:
    """Price everything inside the ``with`` block on ``db`` (e.g. one Monte Carlo draw of the
    uncertain parameters, :func:`commodel.hardware.uncertain.moved`)."""
    _standing_in.append(db)
    try:
        yield db
    finally:
        _standing_in.pop()
