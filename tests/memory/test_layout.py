"""The Zarr layout of a write-through memory: chunk shapes, what a flush rewrites, older layouts."""

from __future__ import annotations

import json
from pathlib import Path

from digideep.memory import Memory

from .chunks import make_chunk

W, KEYS = 2, ("/observations", "/rewards", "/agents/agent/actions")


def stream(memory: Memory, steps: list[int], start: int = 0) -> int:
    for n in steps:
        chunk = make_chunk(W, n, start)
        memory.store({key: chunk[key] for key in KEYS})
        start += n
    return start


def chunk_files(path: Path, undo: bool = False) -> dict[str, int]:
    """Chunk files of the ring (or of the undo area) and their inodes (zarr renames a new file in)."""
    out = {}
    for file in path.rglob("*"):
        parts = file.relative_to(path).parts
        if file.is_file() and "c" in parts[:-1] and (parts[0] == "_undo") == undo:
            out["/".join(parts[undo:])] = file.stat().st_ino
    return out


def test_every_key_has_chunks_of_at_most_a_sixteenth_of_the_ring_and_a_flush_rewrites_only_those_it_touched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.zarr"
    memory = Memory(path, W, 320)  # chunks of 20 rows for every key, the one-column ones too
    start = stream(memory, [100, 100, 100])
    memory.flush()
    for key in KEYS:
        assert memory.storage.zarr.group.arrays[key].chunks[:2] == (W, 20), key
    before = chunk_files(path)
    stream(memory, [10], start)  # rows 300..310: chunk 15 only
    memory.flush()
    after = chunk_files(path)
    changed = sorted(name for name, inode in after.items() if before.get(name) != inode)
    assert changed == sorted(f"{key[1:]}/c/0/15/0" for key in KEYS)


def test_the_undo_area_copies_whole_chunks_and_restores_the_checkpoint_exactly(tmp_path: Path) -> None:
    path = tmp_path / "m.zarr"
    memory = Memory(path, W, 32)  # chunks of 2 rows
    start = stream(memory, [20])
    memory.flush()
    checkpoint = memory.state_dict()
    expected = {key: memory[key].copy() for key in memory}
    memory.checkpoint_committed(checkpoint)
    original = chunk_files(path)
    stream(memory, [9, 9, 9, 9], start)  # wraps past the checkpoint's rows
    memory.flush()
    undo = chunk_files(path, undo=True)
    assert undo and all(original[name] == inode for name, inode in undo.items())  # the files themselves
    resumed = Memory(path, W, 32)
    resumed.restore(checkpoint)
    assert resumed.state_dict() == checkpoint
    for key, value in expected.items():
        assert resumed[key].tobytes() == value.tobytes(), key


def test_a_memory_of_layout_format_2_with_an_undo_area_of_rows_still_restores_exactly(tmp_path: Path) -> None:
    """Format 2 (before whole-chunk copies) kept undo rows in partly filled chunks: restored row by row."""
    path = tmp_path / "m.zarr"
    memory = Memory(path, W, 12, zarr_chunk_rows=5)
    start = stream(memory, [4, 4, 4, 4])
    memory.flush()
    checkpoint = memory.state_dict()
    expected = {key: memory[key].copy() for key in memory}
    memory.checkpoint_committed(checkpoint)
    memory.wait()
    memory.storage.zarr.group.rowwise_undo = True  # write the undo area as format 2 did
    stream(memory, [7, 11], start)
    memory.flush()
    record = json.loads((path / "zarr.json").read_text())["attributes"]["digideep_memory"]
    assert record["format"] == 2 and record["undo_rows"] > 0
    resumed = Memory(path, W, 12)
    resumed.restore(checkpoint)
    for key, value in expected.items():
        assert resumed[key].tobytes() == value.tobytes(), key
    stream(resumed, [3], start)
    resumed.flush()
    resumed.checkpoint_committed()
    assert json.loads((path / "zarr.json").read_text())["attributes"]["digideep_memory"]["format"] == 3


def test_on_s3_the_undo_area_restores_chunks_copied_and_chunks_that_did_not_exist_at_the_checkpoint(
    s3_env: dict, s3_bucket: str
) -> None:
    """A checkpoint before the ring filled: later stores create chunks it did not have (the restore
    deletes them) and overwrite chunks it had (server-side copies bring them back)."""
    url = f"s3://{s3_bucket}/m.zarr"
    memory = Memory(url, W, 32)  # chunks of 2 rows
    start = stream(memory, [9])
    memory.flush()
    checkpoint = memory.state_dict()
    expected = {key: memory[key].copy() for key in memory}
    memory.checkpoint_committed(checkpoint)
    start = stream(memory, [9, 9, 9, 9], start)  # fills rows the checkpoint never had, then wraps
    memory.flush()
    memory.close()
    resumed = Memory(url, W, 32)
    resumed.restore(checkpoint)
    assert resumed.state_dict() == checkpoint
    for key, value in expected.items():
        assert resumed[key].tobytes() == value.tobytes(), key
    zarr_rows = resumed.storage.zarr.group.arrays["/rewards"][:]  # the store itself, not only the ring
    assert zarr_rows[:, 10:].tobytes() == expected["/rewards"][:, 10:].tobytes()  # never-written rows
