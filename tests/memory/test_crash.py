"""A real process killed with SIGKILL while it writes the memory, then resumed from its checkpoint.

The child (:mod:`tests.memory.crash_child`) checkpoints a 12-row ring, lets it wrap three times
with flushes, and kills itself halfway through a chosen file write (a commit record or a chunk) or
between the last flush and the next checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from digideep.memory import Memory

from .crash_child import CAPACITY, W, chunks

ROOT = Path(__file__).resolve().parents[2]


def replayed(total: int) -> Memory:
    """A memory never flushed that stored the child's chunks up to ``total`` rows: the expected ring."""
    memory = Memory(Path("/nonexistent/never-flushed.zarr"), W, CAPACITY)
    for chunk in chunks():
        if memory.total >= total:
            break
        memory.store(chunk)
    assert memory.total == total
    return memory


def whole_ring(memory: Memory) -> dict[str, np.ndarray]:
    return {key: np.array(memory[key][:]) for key in memory}


def run_child(path: Path, mode: str, kill: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    child = subprocess.run(
        [sys.executable, "-m", "tests.memory.crash_child", str(path), mode, kill],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, (
        f"child exited with {child.returncode}: {child.stderr[-2000:]}"
    )


@pytest.mark.parametrize(
    ("mode", "kill"),
    [
        ("ram", "after_flush"),  # between the flush and the checkpoint's commit
        ("ram", "record:1"),  # the commit of the first flush after the checkpoint
        ("ram", "record:2"),  # the commit of the last flush (the checkpoint's flush has nothing new)
        ("ram", "record:3"),  # checkpoint_committed, after the checkpoint file exists
        ("ram", "behind:1"),  # the first chunk the write-behind thread writes after the checkpoint
        ("ram", "behind:5"),  # stores only, no flush: the thread was appending to the log
        ("ram", "chunk:9"),  # a chunk of the log or a final prestep
        ("disk", "record:2"),
        ("disk", "chunk:30"),
    ],
)
def test_sigkill_while_writing_the_memory_resumes_the_checkpoint_byte_for_byte(
    tmp_path: Path, mode: str, kill: str
) -> None:
    path = tmp_path / "m.zarr"
    run_child(path, mode, kill)
    checkpoint = json.loads((tmp_path / "checkpoint.json").read_text())
    if kill.startswith("behind"):  # killed while the write-behind thread wrote, not in a flush
        assert (tmp_path / "killed_in.txt").read_text() in ("store", "wait")
    # the memory as it was committed when the process died: readable, and every valid row true
    plain = Memory(path, W, CAPACITY, mode=mode)
    plain.load()
    reference = replayed(plain.total)
    rows = plain.valid_rows()
    for key in plain:
        assert np.array(plain[key][:, rows]).tobytes() == reference[key][:, rows].tobytes(), key
    # resumed at the newest checkpoint: its pointers and its whole ring, byte for byte
    resumed = Memory(path, W, CAPACITY, mode=mode)
    resumed.load_state_dict(checkpoint)
    resumed.load()
    expected = replayed(checkpoint["total"])
    assert resumed.state_dict() == expected.state_dict() == checkpoint
    assert resumed.keys() == expected.keys()
    for key, value in whole_ring(expected).items():
        assert whole_ring(resumed)[key].tobytes() == value.tobytes(), key
