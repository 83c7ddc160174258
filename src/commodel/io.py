"""Atomic file output: write to a temporary file in the same folder, then rename over the target."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success rename it to ``path``, else delete it.

    A reader never sees a half-written file, and an interrupted write leaves the old file intact.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def files_digest(files: Iterable[Path], root: Path | None = None) -> str:
    """A short digest of ``files``' names (relative to ``root``, or bare) and contents, in order: the
    key of a derived file kept in the cache folder, which any change to them changes."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root) if root else path.name).encode() + path.read_bytes())
    return digest.hexdigest()[:20]
