"""Atomic file writes: write a temporary sibling, fsync, rename into place."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "fsync_dir"]


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries (so that a rename inside it survives a power cut), or a file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part.

    The file gets ``mode`` (e.g. ``0o600`` for a file holding a secret) or, by default, the
    permissions ``open()`` would give a new file (``0o666`` less the umask); never for a moment the
    umask's when ``mode`` is stricter, as it is set before the data is written.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask() if mode is None else mode)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it, which races with threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def atomic_write_text(path: str | Path, text: str, mode: int | None = None) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def atomic_write_json(path: str | Path, value: Any) -> None:
    """:func:`atomic_write_text` of ``value`` as indented JSON."""
    atomic_write_text(path, json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")
