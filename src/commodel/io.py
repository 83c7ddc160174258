"""Files in and out: user files read as bounded UTF-8 text from regular files; output written
atomically (a temporary file in the same folder, renamed over the target) and only over regular files."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from commodel.errors import CommodelError

#: The largest file commodel reads from a user (spec, overlay, log, design, model): 64 MiB.
READ_LIMIT = 64 * 2**20


def regular_file(path: str | Path, what: str = "file", limit: int = READ_LIMIT) -> Path:
    """``path`` if it names a regular file of at most ``limit`` bytes; a missing file, a folder, a
    device or FIFO, or a larger file is a :class:`CommodelError` naming it and ``what`` was expected."""
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise CommodelError(f"{path}: no such {what}") from None
    except OSError as exc:
        raise CommodelError(f"{path}: cannot read the {what} ({exc.strerror})") from None
    if path.is_dir():
        raise CommodelError(f"{path}: is a folder, not a {what}")
    if not path.is_file():
        raise CommodelError(f"{path}: not a regular file (a device, FIFO or socket), not a {what}")
    if info.st_size > limit:
        raise CommodelError(f"{path}: {info.st_size:,} bytes is too large for a {what} (at most {limit:,})")
    return path


def read_text(path: str | Path, what: str = "file", limit: int = READ_LIMIT) -> str:
    """The UTF-8 text of the regular file ``path`` (see :func:`regular_file`), without the byte-order
    mark some Windows editors put first; a file that is not UTF-8 text is a :class:`CommodelError`
    naming it."""
    path = regular_file(path, what, limit)
    data = path.read_bytes()
    if b"\0" in data:
        raise CommodelError(f"{path}: a binary file, not a {what}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CommodelError(f"{path}: not UTF-8 text (byte {exc.start}), not a {what}") from None


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success rename it to ``path``, else delete it.

    A reader never sees a half-written file, and an interrupted write leaves the old file intact. A
    target that exists and is not a regular file (a folder, device, FIFO) is refused, never replaced.
    """
    target = Path(path)
    if (target.exists() or target.is_symlink()) and not target.is_file():
        raise CommodelError(f"{target}: not a regular file; commodel writes only regular files")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CommodelError(f"{target}: a parent of this path is a file, not a folder") from None
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


def output_folder(out: str | Path) -> Path:
    """The folder ``out``, made if missing and checked writable; an empty name, a path that is a file,
    or an unwritable place is a :class:`CommodelError`."""
    if not str(out).strip():
        raise CommodelError("the output folder (-o) needs a name")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CommodelError(f"{out} is a file, not an output folder; choose another -o")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise CommodelError(f"cannot write to {out}: {exc.strerror or exc}") from None
    return out


def output_file(path: str | Path, what: str = "output file") -> Path:
    """``path`` checked as a file commodel may write, before any work that would end in writing it:
    a name, not a folder or other non-regular file, under folders (the first that exists writable)."""
    if not str(path).strip():
        raise CommodelError(f"the {what} needs a name")
    target = Path(path)
    if target.is_dir() or str(path).endswith(("/", os.sep)):
        raise CommodelError(f"{target}: is a folder; give a file name for the {what}")
    if (target.exists() or target.is_symlink()) and not target.is_file():
        raise CommodelError(f"{target}: not a regular file; commodel writes only regular files")
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise CommodelError(f"{target}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK):
        raise CommodelError(f"{target}: cannot write under {parent}")
    return target


#: The file a writer holds in its output folder while it writes there (:func:`writer_lock`).
LOCK_FILE = ".lock"


@contextmanager
def writer_lock(out: Path) -> Iterator[None]:
    """Hold ``out/.lock`` (holding this process's id) while a writer (a sweep) writes ``out``: a second writer is
    refused while the holder lives; a lock its dead holder left is taken over. (Process ids are
    checked on this machine only: writers on two hosts sharing a folder are not told apart.)"""
    lock = out / LOCK_FILE
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _lock_holder(lock)
            if holder is not None and _alive(holder):
                raise CommodelError(
                    f"{out}: another sweep (process {holder}) is writing this folder; wait for it, or use another -o"
                ) from None
            lock.unlink(missing_ok=True)  # its writer died: take the folder over
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        break
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def _lock_holder(lock: Path) -> int | None:
    try:
        return int(lock.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


#: Derived files of one kind the cache folder keeps (the most recently used): each change to the
#: sources they derive from (an upgrade, an edited record) writes a new one under a new digest.
KEPT_CACHE_FILES = 8


def prune_cache(kept: Path, limit: int = KEPT_CACHE_FILES) -> None:
    """Mark ``kept`` (a derived file named ``KIND-DIGEST.EXT``) as just used, and delete all but the
    ``limit`` most recently used files of its kind beside it, so the cache folder does not grow with
    every change; a file another process is writing or using is left to it."""
    kind = kept.name.split("-", 1)[0]
    with suppress(OSError):
        kept.touch()
        siblings = sorted(
            kept.parent.glob(f"{kind}-*{kept.suffix}"), key=lambda p: p.stat().st_mtime, reverse=True
        )
        for old in siblings[limit:]:
            old.unlink(missing_ok=True)
