"""Damage on disk: every chunk of a memory's log carries a crc32c, checked whenever it is read back;
the commit record lists the chunks that must exist."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from digideep.memory import DamagedMemoryError, Memory
from digideep.memory.record import record_crc

from .chunks import make_chunk

W, CAPACITY = 2, 40


def written(path: Path, mode: str = "ram", checkpoint: bool = True) -> tuple[Memory, dict]:
    """A memory of two 12-step chunks (rows 0..24), flushed; its state, made the anchor."""
    memory = Memory(path, W, CAPACITY, mode=mode, zarr_chunk_rows=5)
    memory.store(make_chunk(W, 12, 0))
    memory.store(make_chunk(W, 12, 12))
    memory.flush()
    state = memory.state_dict()
    if checkpoint:
        memory.checkpoint_committed(state)
    memory.close()
    return memory, state


def chunk_file(path: Path, key: str, index: int, worker: int = 0) -> Path:
    """The file of row chunk ``index`` of ``key`` (workers ``worker`` on, whole row shape)."""
    return path / key[1:] / "c" / str(worker) / str(index) / "0"


def flip_low_bit(file: Path, offset: int = 0) -> None:
    data = bytearray(file.read_bytes())
    data[offset] ^= 1  # the lowest mantissa bit of a little-endian float32
    file.write_bytes(bytes(data))


@pytest.mark.parametrize("mode", ["ram", "disk"])
def test_a_flipped_low_bit_in_a_rewards_chunk_is_refused_at_restore_naming_the_chunk(
    tmp_path: Path, mode: str
) -> None:
    path = tmp_path / "m.zarr"
    _, state = written(path, mode)
    flip_low_bit(chunk_file(path, "/rewards", 1))  # rows 5..9 of worker 0 (disk: one worker a chunk)
    resumed = Memory(path, W, CAPACITY, mode=mode)
    with pytest.raises(DamagedMemoryError, match=r"key '/rewards' fail their checksum \(rewards/c/0/1/0\)"):
        resumed.restore(state)
    with pytest.raises(DamagedMemoryError):
        Memory(path, W, CAPACITY, mode=mode).load()


def test_a_chunk_overwritten_with_nan_is_caught_when_the_memory_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "m.zarr"
    _, state = written(path)
    file = chunk_file(path, "/observations", 0)
    file.write_bytes(np.full(file.stat().st_size // 4, np.nan, np.float32).tobytes())  # same length
    with pytest.raises(DamagedMemoryError, match="key '/observations'"):
        Memory(path, W, CAPACITY).restore(state)


def test_a_damaged_commit_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.zarr"
    _, state = written(path)
    metadata = json.loads((path / "zarr.json").read_text())
    metadata["attributes"]["digideep_memory"]["pos"] += 1  # a pointer one row off, still valid JSON
    (path / "zarr.json").write_text(json.dumps(metadata))
    with pytest.raises(DamagedMemoryError, match=r"the commit record .* is damaged"):
        Memory(path, W, CAPACITY).restore(state)


def test_damage_in_a_final_prestep_row_is_caught_when_the_checkpoint_is_restored(tmp_path: Path) -> None:
    path = tmp_path / "m.zarr"
    _, state = written(path)
    flip_low_bit(path / "_prestep" / "24")
    with pytest.raises(DamagedMemoryError, match=r"final prestep rows \(_prestep/24\) fails its checksum"):
        Memory(path, W, CAPACITY).restore(state)


def rewards_of_two_chunks() -> np.ndarray:
    """``/rewards`` of rows 0..23 as :func:`written` stores them: ``(W, 24, 1)``."""
    return np.concatenate([make_chunk(W, 12, s)["/rewards"][:, :12] for s in (0, 12)], axis=1)


def test_an_undamaged_memory_restores_and_a_chunk_never_written_is_not_damage(tmp_path: Path) -> None:
    path = tmp_path / "m.zarr"
    _, state = written(path)
    assert not chunk_file(path, "/rewards", 6).exists()  # rows 30.. were never written
    resumed = Memory(path, W, CAPACITY)
    resumed.restore(state)
    assert resumed.state_dict() == state
    np.testing.assert_array_equal(resumed["/rewards"][:, :24], rewards_of_two_chunks())


def test_a_memory_of_an_older_layout_is_refused_naming_the_version_that_wrote_it(tmp_path: Path) -> None:
    path = tmp_path / "m.zarr"
    _, state = written(path)
    metadata = json.loads((path / "zarr.json").read_text())
    record = metadata["attributes"]["digideep_memory"]
    record.update(format=3, writer="digideep 0.0.9")  # an older layout, with its own (valid) record
    record["crc32c"] = record_crc(record)
    (path / "zarr.json").write_text(json.dumps(metadata))
    said = r"written by digideep 0\.0\.9 in memory layout format 3; digideep .* reads format 4 only"
    with pytest.raises(ValueError, match=said):
        Memory(path, W, CAPACITY).restore(state)


def folder_bytes(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` and its bytes (the commit record, the arrays)."""
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}


def stored_past_the_checkpoint(path: Path) -> dict:
    """A memory checkpointed at rows 0..12, then stored on to row 24 and flushed."""
    memory = Memory(path, W, CAPACITY, zarr_chunk_rows=5)
    memory.store(make_chunk(W, 12, 0))
    memory.flush()
    state = memory.state_dict()
    memory.checkpoint_committed(state)
    memory.store(make_chunk(W, 12, 12))
    memory.flush()
    memory.close()
    return state


@pytest.mark.parametrize("damage", ["flip", "delete"])
def test_a_refused_restore_changes_no_file_and_the_repaired_memory_restores(
    tmp_path: Path, damage: str
) -> None:
    """The checks come before the record is rolled back: a refusal leaves the log byte for byte."""
    path = tmp_path / "m.zarr"
    state = stored_past_the_checkpoint(path)
    undamaged = folder_bytes(path)
    file = chunk_file(path, "/rewards", 0)  # rows 0..4
    flip_low_bit(file) if damage == "flip" else file.unlink()
    before = folder_bytes(path)
    said = "fail their checksum" if damage == "flip" else r"are missing \(rewards/c/0/0/0\)"
    with pytest.raises(DamagedMemoryError, match=said):
        Memory(path, W, CAPACITY).restore(state)
    assert folder_bytes(path) == before
    file.write_bytes(undamaged["rewards/c/0/0/0"])
    resumed = Memory(path, W, CAPACITY)
    resumed.restore(state)
    assert resumed.state_dict() == state
    np.testing.assert_array_equal(resumed["/rewards"][:, :12], make_chunk(W, 12, 0)["/rewards"][:, :12])


@pytest.mark.parametrize("mode", ["ram", "disk"])
def test_a_deleted_chunk_file_is_caught_naming_the_memory_key_and_chunk(tmp_path: Path, mode: str) -> None:
    """zarr reads a missing chunk as the placeholder; the commit record says its rows were written."""
    path = tmp_path / "m.zarr"
    _, state = written(path, mode)
    chunk_file(path, "/observations", 3).unlink()  # rows 15..19 of worker 0
    said = r"memory 'm' at .* 1 chunk file\(s\) of key '/observations' are missing \(observations/c/0/3/0\)"
    with pytest.raises(DamagedMemoryError, match=said):
        Memory(path, W, CAPACITY, mode=mode).restore(state)
    with pytest.raises(DamagedMemoryError, match=said):
        Memory(path, W, CAPACITY, mode=mode).load()


def test_a_deleted_final_prestep_chunk_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "m.zarr"
    state = stored_past_the_checkpoint(path)
    (path / "_prestep" / "12").unlink()
    with pytest.raises(DamagedMemoryError, match=r"final prestep rows \(_prestep/12\) is missing"):
        Memory(path, W, CAPACITY).restore(state)


def test_chunks_of_placeholders_and_the_rows_before_a_late_key_are_not_missing(tmp_path: Path) -> None:
    """Every chunk written is a file, placeholders alone included; rows before a key's first store
    were never written for it, so their chunk files are not required."""
    path = tmp_path / "m.zarr"
    memory = Memory(path, W, CAPACITY, zarr_chunk_rows=5)
    memory.store(make_chunk(W, 12, 0))
    chunk = make_chunk(W, 12, 12)
    chunk["/infos/late"] = np.full((W, 13, 1), np.nan, np.float32)  # first stored now, placeholders alone
    memory.store(chunk)
    memory.flush()
    state = memory.state_dict()
    memory.checkpoint_committed(state)
    memory.close()
    late = path / "infos" / "late" / "c" / "0"
    assert sorted(int(p.name) for p in late.iterdir()) == [2, 3, 4]  # rows 10..24: written, all NaN
    resumed = Memory(path, W, CAPACITY)
    resumed.restore(state)
    assert resumed.state_dict() == state and np.isnan(resumed["/infos/late"]).all()
