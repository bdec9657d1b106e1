"""Flush, load and crashes: the Zarr log of a memory, and the disk mode."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from digideep.memory import Memory, Sampler, uniform_transitions
from digideep.memory.log import ZarrLog
from digideep.memory.record import check_zarr_version

from .chunks import make_chunk

W = 2


class SimulatedCrashError(RuntimeError):
    pass


def stream(memory: Memory, steps: list[int], start: int = 0) -> int:
    for n in steps:
        memory.store(make_chunk(W, n, start))
        start += n
    return start


def snapshot(memory: Memory) -> dict[str, np.ndarray]:
    """The bytes of every key at the memory's valid rows (what a reload must reproduce)."""
    rows = memory.valid_rows()
    return {key: memory[key][:, rows].copy() for key in memory}


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def reopen(path: Path, capacity: int, **kwargs) -> Memory:
    memory = Memory(path, num_workers=W, capacity=capacity, **kwargs)
    memory.load()
    return memory


def test_flush_load_round_trip_is_byte_identical(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", W, 10, zarr_chunk_rows=3)
    stream(memory, [4, 4])
    memory.flush()
    chunk = make_chunk(W, 4, 8)
    chunk["/infos/flag"] = np.ones((W, 5), bool)  # a late key, committed by the next flush
    memory.store(chunk)
    memory.flush()
    loaded = reopen(tmp_path / "m.zarr", 10)
    assert loaded.state_dict() == memory.state_dict() and loaded.keys() == memory.keys()
    for key in memory:
        assert same_bytes(loaded[key], memory[key]), key  # the whole ring, placeholders included
    assert loaded.last_chunk()["/observations"].tobytes() == memory.last_chunk()["/observations"].tobytes()


def test_flush_without_new_rows_writes_nothing_and_empty_memory_loads(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", W, 10)
    memory.flush()
    assert reopen(tmp_path / "m.zarr", 10).size == 0
    stream(memory, [3])
    memory.flush()
    record = (tmp_path / "m.zarr" / "zarr.json").stat().st_mtime_ns
    memory.flush()
    assert (tmp_path / "m.zarr" / "zarr.json").stat().st_mtime_ns == record


def crash_in(monkeypatch: pytest.MonkeyPatch, method: str, after: int) -> None:
    """Make ``ZarrLog.<method>`` raise on its ``after + 1``-th call from now on (``_commit``: the
    record, ``_write``: rows)."""
    original = getattr(ZarrLog, method)
    calls = {"n": 0}

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > after:
            raise SimulatedCrashError(f"simulated crash in {method}")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ZarrLog, method, failing)


@pytest.mark.parametrize(("method", "after"), [("_commit", 0), ("_write", 0), ("_write", 5)])
def test_crash_before_the_commit_leaves_the_last_committed_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, after: int
) -> None:
    path = tmp_path / "m.zarr"
    memory = Memory(path, W, 30, zarr_chunk_rows=4)
    stream(memory, [5, 5])
    memory.flush()
    committed, expected = memory.state_dict(), snapshot(memory)
    late = make_chunk(W, 5, 10)
    late["/infos/late"] = np.ones((W, 6), np.int16)
    memory.store(late)  # no wrap: the committed rows are not touched
    memory.wait()  # the background writer is done: the crash comes in the flush
    crash_in(monkeypatch, method, after)
    with pytest.raises(SimulatedCrashError):
        memory.flush()
    monkeypatch.undo()
    loaded = reopen(path, 30)
    assert loaded.state_dict() == committed
    assert "/infos/late" not in loaded  # keys first stored after the commit are not loaded
    for key, value in expected.items():
        assert same_bytes(snapshot(loaded)[key], value), key
    loaded.store(late)  # the leftover array of the late key is recreated
    loaded.flush()
    again = reopen(path, 30)
    assert again.total == 15 and (again["/infos/late"][:, :10] == np.iinfo(np.int16).min).all()
    assert (again["/infos/late"][:, 10:16] == 1).all()


def test_disk_mode_crash_while_storing_keeps_every_committed_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d.zarr"
    memory = Memory(path, W, 12, mode="disk", zarr_chunk_rows=5)
    stream(memory, [4, 4])
    memory.flush()
    expected = snapshot(memory)
    crash_in(monkeypatch, "_write", 1)
    with pytest.raises(SimulatedCrashError):
        stream(memory, [4, 4], start=8)  # the ring wraps onto the oldest committed row
    monkeypatch.undo()
    loaded = reopen(path, 12, mode="disk")
    assert (loaded.pos, loaded.size, loaded.total) == (8, 8, 8)
    for key, value in snapshot(loaded).items():
        assert same_bytes(value, expected[key]), key


@pytest.mark.parametrize(("method", "after"), [("_commit", 0), ("_write", 3)])
def test_crash_during_a_wrapping_flush_keeps_every_committed_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, after: int
) -> None:
    path = tmp_path / "m.zarr"
    memory = Memory(path, W, 12, zarr_chunk_rows=5)
    stream(memory, [4, 4])  # 8 rows valid
    memory.flush()
    committed, expected = memory.state_dict(), snapshot(memory)
    stream(memory, [4], start=8)  # rows 8..12: the ring wraps onto row 0, the oldest committed row
    memory.wait()  # appended behind; the flush then writes the open chunks and commits: crash there
    crash_in(monkeypatch, method, after)
    with pytest.raises(SimulatedCrashError):
        memory.flush()
    monkeypatch.undo()
    loaded = reopen(path, 12)
    assert loaded.state_dict() == committed  # rows are appended to the log, never overwritten
    for key, value in expected.items():
        assert same_bytes(snapshot(loaded)[key], value), key
    # and the memory goes on: the next store and flush continue from the commit
    stream(loaded, [4], start=8)
    loaded.flush()
    assert reopen(path, 12).total == 12


def test_load_state_dict_returns_to_the_newest_checkpoint_exactly_in_either_order(tmp_path: Path) -> None:
    path = tmp_path / "m.zarr"
    memory = Memory(path, W, 12)
    stream(memory, [4, 4])
    memory.flush()
    checkpoint, expected = memory.state_dict(), whole_ring(memory)
    memory.checkpoint_committed(checkpoint)  # the Runner calls it once the checkpoint folder exists
    stream(memory, [4], start=8)
    memory.flush()  # flushed past the checkpoint (wrapping onto its oldest row), then the process died
    for order in ("state_first", "load_first"):
        copy = tmp_path / f"{order}.zarr"
        shutil.copytree(path, copy)
        resumed = Memory(copy, W, 12)
        if order == "state_first":
            resumed.load_state_dict(checkpoint)
            resumed.load()
        else:
            resumed.load()
            resumed.load_state_dict(checkpoint)
        assert resumed.state_dict() == checkpoint
        assert all(same_bytes(resumed[key], value) for key, value in expected.items()), order
        assert reopen(copy, 12).state_dict() == checkpoint  # the restore was committed


def test_an_older_checkpoint_comes_back_exactly_while_the_log_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "m.zarr"
    memory = Memory(path, W, 12)
    stream(memory, [4, 4])
    memory.flush()
    older, expected = memory.state_dict(), whole_ring(memory)
    memory.checkpoint_committed()
    stream(memory, [4], start=8)
    memory.flush()
    memory.checkpoint_committed()  # a newer checkpoint; keep=0: the log keeps every checkpoint's rows
    stream(memory, [4], start=12)
    memory.flush()
    resumed = Memory(path, W, 12)
    resumed.load_state_dict(older)  # e.g. a checkpoint kept by retention, chosen by hand
    resumed.load()
    assert resumed.state_dict() == older
    assert all(same_bytes(whole_ring(resumed)[key], value) for key, value in expected.items())


KEYS = ("/observations", "/rewards", "/agents/agent/actions")
PHASE = [
    11,
    7,
    11,
    8,
]  # 37 rows after the checkpoint: a 12-row ring wraps 3 times (11 steps: 12 rows, all of it)


def whole_ring(memory: Memory) -> dict[str, np.ndarray]:
    """Every row of every key, placeholders included (in disk mode assembled from the log)."""
    return {key: np.array(memory[key][:]) for key in memory}


def store_phase(memory: Memory, start: int, flush_every: int) -> None:
    for i, steps in enumerate(PHASE):
        chunk = make_chunk(W, steps, start)
        memory.store({key: chunk[key] for key in KEYS})
        start += steps
        if i % flush_every == flush_every - 1:
            memory.flush()


def crash_at_write(monkeypatch: pytest.MonkeyPatch, point: int) -> dict[str, int]:
    """Raise at the ``point``-th write from now on: rows of a Zarr array (the log or a final
    prestep) or a commit record."""
    calls = {"n": 0}

    def counting(original):
        def write(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == point + 1:
                raise SimulatedCrashError(f"simulated crash at write {point}")
            return original(*args, **kwargs)

        return write

    monkeypatch.setattr(zarr.Array, "__setitem__", counting(zarr.Array.__setitem__))
    monkeypatch.setattr(ZarrLog, "_commit", counting(ZarrLog._commit))
    return calls


@pytest.mark.parametrize(("mode", "flush_every"), [("ram", 1), ("ram", 4), ("disk", 2)])
def test_resume_at_the_checkpoint_is_exact_after_a_crash_at_any_write_while_the_ring_wraps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, flush_every: int
) -> None:
    """The ring wraps 3 times between two checkpoints; a crash at each write, or after the last
    flush but before the next checkpoint commits, loads the first checkpoint byte for byte."""
    point = 0
    while True:
        path = tmp_path / f"{point}.zarr"
        memory = Memory(path, W, 12, mode=mode, zarr_chunk_rows=5)
        start = 0
        for steps in (4, 4, 4, 4):  # wrapped once already
            chunk = make_chunk(W, steps, start)
            memory.store({key: chunk[key] for key in KEYS})
            start += steps
        memory.flush()
        checkpoint, expected = memory.state_dict(), whole_ring(memory)
        memory.checkpoint_committed(checkpoint)
        calls = crash_at_write(monkeypatch, point)
        with contextlib.suppress(SimulatedCrashError):
            store_phase(memory, start, flush_every)
        crashed = calls["n"] > point
        monkeypatch.undo()
        resumed = Memory(path, W, 12, mode=mode)
        resumed.load_state_dict(checkpoint)
        resumed.load()
        assert resumed.state_dict() == checkpoint, point
        for key, value in expected.items():
            assert same_bytes(whole_ring(resumed)[key], value), (point, key)
        if not crashed:  # every flush finished: the crash came before the next checkpoint's commit
            break
        point += 1
    assert point >= len(KEYS) + 2  # it crashed at every write first: rows, presteps, commits
    # the resumed memory goes on from the checkpoint and reloads as it is
    store_phase(resumed, start, flush_every)
    resumed.flush()
    resumed.checkpoint_committed()
    resumed.wait()
    assert all(
        same_bytes(whole_ring(reopen(path, 12, mode=mode))[k], v) for k, v in whole_ring(resumed).items()
    )


def test_checkpoint_committed_refuses_a_state_that_was_not_flushed(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", W, 12)
    stream(memory, [4])
    with pytest.raises(ValueError, match="call flush"):
        memory.checkpoint_committed()
    memory.flush()
    stream(memory, [4], start=4)
    with pytest.raises(ValueError, match="call flush"):
        memory.checkpoint_committed()


def test_zarr_releases_that_write_files_in_place_are_refused() -> None:
    with pytest.raises(RuntimeError, match=r"zarr >= 3\.1\.3.*3\.1\.2"):
        check_zarr_version("3.1.2")
    check_zarr_version("3.1.3")
    check_zarr_version("3.2.0.dev4")
    check_zarr_version(zarr.__version__)


def test_restoring_a_state_that_was_never_flushed_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", W, 12)
    with pytest.raises(FileNotFoundError, match="no memory to load"):
        memory.restore(
            {"pos": 4, "size": 4, "total": 4, "last_chunk_rows": 5, "num_workers": W, "capacity": 12}
        )
    assert memory.total == 0
    memory.store(make_chunk(W, 4, 0))  # the memory is still usable from scratch
    memory.flush()
    assert reopen(tmp_path / "m.zarr", 12).total == 4


def test_load_refuses_other_layouts_with_a_message(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no memory to load"):
        Memory(tmp_path / "missing.zarr", W, 10).load()
    plain = zarr.open_group(str(tmp_path / "plain.zarr"), mode="w")
    plain.create_array("observations", shape=(2, 10, 3), dtype="float32")
    with pytest.raises(ValueError, match="not a digideep memory"):
        Memory(tmp_path / "plain.zarr", W, 10).load()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="not a digideep memory"):
        Memory(tmp_path / "junk", W, 10).load()
    memory = Memory(tmp_path / "m.zarr", W, 10)
    stream(memory, [4])
    memory.flush()
    with pytest.raises(ValueError, match="num_workers=2, capacity=10"):
        Memory(tmp_path / "m.zarr", 3, 10).load()
    with pytest.raises(ValueError, match="num_workers=2, capacity=10"):
        Memory(tmp_path / "m.zarr", W, 20).load()
    shutil.rmtree(tmp_path / "m.zarr" / "rewards")
    with pytest.raises(ValueError, match="'/rewards'"):
        Memory(tmp_path / "m.zarr", W, 10).load()
    meta = tmp_path / "m.zarr" / "zarr.json"
    record = json.loads(meta.read_text())
    record["attributes"]["digideep_memory"]["format"] = 99
    meta.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="format 99"):
        Memory(tmp_path / "m.zarr", W, 10).load()


def test_a_new_memory_never_overwrites_an_existing_one(tmp_path: Path) -> None:
    first = Memory(tmp_path / "m.zarr", W, 10)
    stream(first, [4])
    first.flush()
    second = Memory(tmp_path / "m.zarr", W, 10)
    stream(second, [4])
    with pytest.raises(ValueError, match="call load"):
        second.flush()
    assert reopen(tmp_path / "m.zarr", 10).total == 4


def test_disk_mode_returns_the_same_samples_as_ram_mode(tmp_path: Path) -> None:
    ram = Memory(tmp_path / "ram.zarr", W, 15)
    disk = Memory(tmp_path / "disk.zarr", W, 15, mode="disk", zarr_chunk_rows=4)
    for memory in (ram, disk):
        chunk = make_chunk(W, 4, 0)
        memory.store(chunk)
        chunk = make_chunk(W, 6, 4)
        chunk["/infos/id"] = np.arange(W * 7, dtype=np.int64).reshape(W, 7)
        memory.store(chunk)
        stream(memory, [5, 4], start=10)  # wraps
    assert ram.state_dict() == disk.state_dict()
    assert all(same_bytes(ram[key], disk[key]) for key in ram)
    info = {"batch_size": 32, "num_batches": 3, "seed": 7}
    a, b = Sampler([uniform_transitions], info)(ram), Sampler([uniform_transitions], info)(disk)
    assert a.keys() == b.keys()
    for key in a:
        assert same_bytes(a[key], b[key]), key
    for key in ram:
        assert same_bytes(ram.last_chunk()[key], disk.last_chunk()[key]), key
    disk.flush()
    reloaded = reopen(tmp_path / "disk.zarr", 15, mode="disk")
    c = Sampler([uniform_transitions], info)(reloaded)
    assert all(same_bytes(a[key], c[key]) for key in a)
    ram_copy = reopen(tmp_path / "disk.zarr", 15)  # a disk-mode store loads into RAM too
    assert all(same_bytes(ram_copy[key], ram[key]) for key in ram)
