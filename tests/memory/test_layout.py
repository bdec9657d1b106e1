"""The Zarr log of a memory: chunk shapes, rows only ever appended, retention, on disk and on S3."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from digideep.memory import Memory

from .chunks import make_chunk
from .test_s3 import objects as s3_objects

W, KEYS = 2, ("/observations", "/rewards", "/agents/agent/actions")


def stream(memory: Memory, steps: list[int], start: int = 0) -> int:
    for n in steps:
        chunk = make_chunk(W, n, start)
        memory.store({key: chunk[key] for key in KEYS})
        start += n
    return start


def chunk_files(path: Path) -> dict[str, int]:
    """The log's row chunk files (not the final presteps') and their inodes (zarr renames a new file in)."""
    out = {}
    for file in path.rglob("*"):
        parts = file.relative_to(path).parts
        if file.is_file() and "c" in parts[:-1] and parts[0] != "_prestep":
            out["/".join(parts)] = file.stat().st_ino
    return out


def ring(memory: Memory) -> dict[str, np.ndarray]:
    return {key: np.array(memory[key]) for key in memory}


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)


def test_every_key_has_chunks_of_at_most_a_sixteenth_of_the_ring_and_a_flush_rewrites_only_the_one_it_fills(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.zarr"
    memory = Memory(path, W, 320)  # chunks of 20 rows for every key, the one-column ones too
    start = stream(memory, [100, 100, 100])
    memory.flush()
    assert memory.log is not None
    for key in KEYS:
        assert memory.log.arrays[key].chunks[:2] == (W, 20), key
    before = chunk_files(path)
    stream(memory, [10], start)  # rows 300..309: chunk 15 only
    memory.flush()
    after = chunk_files(path)
    changed = sorted(name for name, inode in after.items() if before.get(name) != inode)
    assert changed == sorted(f"{key[1:]}/c/0/15/0" for key in KEYS)


def test_rows_are_only_appended_and_a_checkpoint_comes_back_exactly_after_the_ring_wrapped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.zarr"
    memory = Memory(path, W, 32)  # chunks of 2 rows
    start = stream(memory, [20])
    memory.flush()
    checkpoint = memory.state_dict()
    expected = ring(memory)
    memory.checkpoint_committed(checkpoint)
    written = chunk_files(path)
    stream(memory, [9, 9, 9, 9], start)  # wraps past the checkpoint's rows
    memory.flush()
    memory.close()
    now = chunk_files(path)
    assert all(
        now[name] == inode for name, inode in written.items() if not name.endswith("/9/0")
    )  # whole chunks stay
    resumed = Memory(path, W, 32)
    resumed.restore(checkpoint)
    assert resumed.state_dict() == checkpoint
    assert same(ring(resumed), expected)


def test_retention_keeps_the_rows_of_the_newest_checkpoints_and_deletes_whole_chunks_below(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.zarr"
    memory = Memory(path, W, 16, zarr_chunk_rows=4)
    start, checkpoints = 0, []
    for _ in range(5):  # a checkpoint every 10 rows, the newest 2 kept
        start = stream(memory, [5, 5], start)
        memory.flush()
        checkpoints.append((memory.state_dict(), ring(memory)))
        memory.checkpoint_committed(keep=2)
    memory.close()
    # the older kept checkpoint (total 40) needs rows 25.. (capacity - 1 rows before it): chunks 6..
    assert sorted({int(name.split("/")[-2]) for name in chunk_files(path)}) == list(range(6, 13))
    assert memory.log is not None and memory.log.record.checkpoints == (40, 50)
    for state, expected in checkpoints[-2:]:  # read back, nothing changed
        readback = Memory(path, W, 16).prepare_restore(state)
        assert readback.whole and same(readback.arrays or {}, expected)
    oldest, _ = checkpoints[0]  # beyond retention: its rows are gone, the pointers come back
    resumed = Memory(path, W, 16)
    resumed.restore(oldest)
    assert (resumed.total, resumed.size) == (10, 0)


def test_on_s3_an_older_kept_checkpoint_comes_back_exactly_and_retention_deletes_objects(
    s3_env: dict, s3_bucket: str
) -> None:
    url = f"s3://{s3_bucket}/m.zarr"
    memory = Memory(url, W, 32)  # chunks of 2 rows
    states = []
    start = 0
    for steps, keep in (([9], 3), ([9, 9], 3), ([9, 9, 9, 9], 3), ([9, 9], 2)):  # totals 9, 27, 63, 81
        start = stream(memory, steps, start)
        memory.flush()
        states.append((memory.state_dict(), ring(memory)))
        memory.checkpoint_committed(keep=keep)
        if len(states) == 3:  # the ring wrapped past the first checkpoint, which is still kept
            memory.wait()
            readback = Memory(url, W, 32).prepare_restore(states[0][0])  # reads, changes nothing
            assert readback.whole and same(readback.arrays or {}, states[0][1])
    memory.close()
    assert memory.log is not None and memory.log.record.first == 63 - 31  # the older of the 2 kept
    objects = s3_objects(s3_bucket, "m.zarr/rewards/c/")
    assert min(int(key.split("/")[-2]) for key in objects) == 16  # chunks of rows 0..31: deleted
    resumed = Memory(url, W, 32)
    resumed.restore(states[2][0])
    assert same(ring(resumed), states[2][1])
