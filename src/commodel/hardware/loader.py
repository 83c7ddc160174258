"""Load ``hardware_db/`` into validated records. Nothing else in commodel reads TOML.

Layout: ``gpus/NAME.toml``, ``links/NAME.toml``, ``systems/NAME.toml``; the file stem is the name.
Errors name the file and the field, and suggest the closest valid key or name.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pydantic import BaseModel

from commodel.errors import CommodelError, pick, suggest, unknown
from commodel.hardware.schema import GPU, Link, System
from commodel.records import load_folder
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
    """Load and cross-check every record under ``root``."""
    tables: dict[str, dict[str, BaseModel]] = {}
    for kind, folder in FOLDERS.items():
        tables[kind] = load_folder(root / folder, KINDS[kind])
    db = HardwareDB(tables["gpu"], tables["link"], tables["system"], root)  # type: ignore[arg-type]
    _check_references(db)
    return db


def _check_references(db: HardwareDB) -> None:
    for name, gpu in db.gpus.items():
        _must_exist(db, "link", gpu.host_link, db.root / "gpus" / f"{name}.toml", "host_link")
    for name, system in db.systems.items():
        path = db.root / "systems" / f"{name}.toml"
        _must_exist(db, "gpu", system.gpu, path, "gpu")
        _must_exist(db, "link", system.scale_up.link, path, "scale_up.link")
        _must_exist(db, "link", system.scale_out.link, path, "scale_out.link")
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


@cache
def default_db() -> HardwareDB:
    """The hardware database shipped with commodel (loaded once per process)."""
    return load_database(resource_dir("hardware_db"))
