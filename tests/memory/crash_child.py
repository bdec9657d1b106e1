"""Run by ``test_crash.py`` in a subprocess: fill a memory, checkpoint it, then SIGKILL itself.

    python -m tests.memory.crash_child PATH MODE KILL

``KILL`` says where the process dies, by a real ``SIGKILL`` sent to itself:

- ``after_flush``: after the flushes that follow the first checkpoint, before the second is saved;
- ``record:N``: halfway through writing the N-th file of the commit record (``zarr.json`` of the
  group or its temporary sibling) after the first checkpoint;
- ``chunk:N``: halfway through writing the N-th chunk file (rows or a final prestep) after it.
- ``behind:N``: like ``chunk:N``, but the chunks are only stored (never flushed) and the main
  thread then waits for the background writer: the kill hits the write-behind thread.

What the main thread was doing then ("store" or "flush") goes to ``PATH``'s sibling
``killed_in.txt``: in "ram" mode chunks are written by the memory's background writer while the
main thread goes on storing.

A checkpoint is ``PATH``'s sibling ``checkpoint.json`` (the memory's ``state_dict()``, written to a
temporary file and renamed), followed by ``checkpoint_committed``, as the Runner does. Between the
two checkpoints the ring wraps three times. The child exits with status 3 if it was not killed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from digideep.memory import Memory

from .chunks import make_chunk

W, CAPACITY = 2, 12
STEPS = [4, 4, 4, 4, 11, 7, 11, 8]  # checkpoints after the 4th and the 8th chunk
FIRST = 4  # chunks before the first checkpoint
KEYS = ("/observations", "/rewards", "/agents/agent/actions")
PHASE = {"main": "store"}


def chunks() -> list[dict[str, Any]]:
    """The chunks every run stores, in order (deterministic: the parent replays them)."""
    out, start = [], 0
    for steps in STEPS:
        chunk = make_chunk(W, steps, start)
        out.append({key: chunk[key] for key in KEYS})
        start += steps
    return out


class _HalfThenKill:
    """A file whose first write stops halfway, then the process is killed."""

    def __init__(self, file: Any, note: Path) -> None:
        self.file, self.note = file, note

    def __enter__(self) -> _HalfThenKill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.file.write(view[: len(view) // 2])
        self.file.flush()
        self.note.write_text(PHASE["main"])  # what the main thread was doing
        os.kill(os.getpid(), signal.SIGKILL)
        return 0  # pragma: no cover - never reached

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)


def arm(kill: str, root: Path) -> None:
    """Make the ``N``-th write of a record or chunk file under ``root`` kill the process halfway."""
    kind, _, number = kill.partition(":")
    kind = "chunk" if kind == "behind" else kind
    if kind not in ("record", "chunk"):
        return
    target, seen = int(number), {"n": 0}
    original = Path.open

    def open_(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        file = original(self, mode, *args, **kwargs)
        if ("w" in mode or "+" in mode) and self.is_relative_to(root):
            rel = self.relative_to(root)
            record = len(rel.parts) == 1 and rel.name.startswith("zarr.")
            chunk = "c" in rel.parts[:-1]
            if record if kind == "record" else chunk:
                seen["n"] += 1
                if seen["n"] == target:
                    return _HalfThenKill(file, root.parent / "killed_in.txt")
        return file

    Path.open = open_  # type: ignore[method-assign]


def flush(memory: Memory) -> None:
    PHASE["main"] = "flush"
    memory.flush()
    PHASE["main"] = "store"


def checkpoint(memory: Memory, folder: Path) -> None:
    flush(memory)
    state = memory.state_dict()
    tmp = folder / "checkpoint.json.tmp"
    tmp.write_text(json.dumps(state))
    os.replace(tmp, folder / "checkpoint.json")
    memory.checkpoint_committed(state)


def main(path: Path, mode: str, kill: str) -> None:
    memory = Memory(path, W, CAPACITY, mode=mode, zarr_chunk_rows=5)
    data = chunks()
    for chunk in data[:FIRST]:
        memory.store(chunk)
    checkpoint(memory, path.parent)
    arm(kill, path)
    if kill.startswith("behind"):
        for chunk in data[FIRST:]:
            memory.store(chunk)
        PHASE["main"] = "wait"
        memory.wait()
        sys.exit(3)
    for i, chunk in enumerate(data[FIRST:]):
        memory.store(chunk)
        if i % 2 == 1:
            flush(memory)  # flushes that no checkpoint follows yet
    if kill == "after_flush":
        os.kill(os.getpid(), signal.SIGKILL)
    checkpoint(memory, path.parent)
    sys.exit(3)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
