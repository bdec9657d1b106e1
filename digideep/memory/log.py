"""The durable copy of a memory: an append-only Zarr log of every row it stored (its layout:
:mod:`~digideep.memory.record`). A row is written once (a later write of its chunk keeps its
bytes), every file or object whole, the commit record in one atomic write: a crash leaves the last
commit whole (``docs/memory.md``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from math import prod
from typing import Any

import google_crc32c
import numpy as np
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import NDBuffer
from zarr.core.sync import sync

from digideep.memory.record import (
    ARRAY_CONFIG,
    ATTR,
    LOG_ROWS,
    PRESTEP,
    DamagedMemoryError,
    Record,
    check_zarr_version,
    compressors,
)
from digideep.memory.ring import KeySpec, Ring, RingState, fill_value, ring_slices
from digideep.storage.location import Location
from digideep.storage.objects import delete_objects, list_objects

logger = logging.getLogger(__name__)

RING_FRACTION = 16  # a chunk holds at most 1/16 of the ring: a flush rewrites at most that much
RAM_CHUNK_BYTES = 1 << 22  # mode "ram": chunks of all workers, about 4 MiB (few large PUTs)
DISK_CHUNK_BYTES = 1 << 18  # mode "disk": chunks of one worker, about 256 KiB (sampling reads them)
_THREADS = 8  # keys read or written at once
_BAD_BYTES = (ValueError, RuntimeError, EOFError)  # the codecs' errors for bad bytes

Write = tuple[str, int, int, np.ndarray | np.generic]  # (key, start, stop, values): rows of every worker


@dataclass(frozen=True)
class Readback:
    """A restore read back and checked, nothing changed yet (:meth:`ZarrLog.read_back`): the state
    asked for (``target``, a checkpoint's), the one it gives (``state``: ``target`` with the rows the
    log still holds), the keys it keeps (``specs``), the next RAM rings (``arrays``, ``None`` without
    a ring) and each key's final prestep row at ``target`` (``prestep``, ``(W, *row_shape)``)."""

    target: RingState
    state: RingState
    specs: dict[str, KeySpec] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] | None = None
    prestep: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def whole(self) -> bool:
        """Whether the restore gives ``target`` itself (the log still holds all of its rows)."""
        return self.state == self.target


class ZarrLog:
    """One memory's append-only Zarr log at ``location``: append rows, commit, read back (verified),
    prune. ``chunk_rows``: rows per chunk, ``None`` sizes each key's to about :data:`RAM_CHUNK_BYTES`
    (:data:`DISK_CHUNK_BYTES` per worker with ``per_worker``: chunks of one worker, for a memory
    that samples the log), at most ``ceil(C / 16)`` rows; ``compression``: see :func:`compressors`."""

    def __init__(
        self,
        location: Location,
        num_workers: int,
        capacity: int,
        name: str,
        chunk_rows: int | None = None,
        compression: str | None = None,
        per_worker: bool = False,
    ) -> None:
        check_zarr_version()
        compressors(compression)  # refuses an unknown name now
        self.location, self.name = location, name
        self.num_workers, self.capacity = num_workers, capacity
        self.chunk_rows, self.compression = chunk_rows, compression
        self.chunk_bytes = DISK_CHUNK_BYTES if per_worker else RAM_CHUNK_BYTES
        self.chunk_workers = 1 if per_worker else num_workers
        self.root: zarr.Group | None = None
        self.arrays: dict[str, zarr.Array] = {}
        self.since: dict[str, int] = {}  # every key with an array, committed or not
        self.record = Record()  # the last commit

    @property
    def what(self) -> str:
        return f"memory '{self.name}' at {self.location}"

    def planned_rows(self, spec: KeySpec) -> int:
        """Rows per chunk of a new array of ``spec``."""
        if self.chunk_rows is not None:
            return max(1, min(self.capacity, self.chunk_rows))
        rows = self.chunk_bytes // (max(1, spec.dtype.itemsize * prod(spec.shape)) * self.chunk_workers)
        return max(1, min(-(-self.capacity // RING_FRACTION), rows))

    def open(self) -> Record:
        """Open the existing group and check its record and arrays (changes nothing); refuses a place
        where nothing was flushed, another memory, a damaged record or an array it does not list."""
        if not self.location.zarr_exists():
            raise FileNotFoundError(
                f"memory '{self.name}': no memory to load at {self.location}; it is written by flush() "
                "(the Runner flushes before every checkpoint)"
            )
        record = Record.from_json(self._peek(), self.name, self.location, self.num_workers, self.capacity)
        root = self.location.open_group("r+")
        arrays = {}
        for key, spec in record.specs.items():
            array, shape = root.get(key[1:]), (self.num_workers, LOG_ROWS, *spec.shape)
            if not isinstance(array, zarr.Array) or array.shape != shape or array.dtype != spec.dtype:
                raise DamagedMemoryError(
                    f"{self.what}: the record lists key '{key}' as {spec.dtype} {spec.shape} but the store "
                    f"holds {'nothing' if array is None else type(array).__name__} at '{key[1:]}'; the "
                    "folder was changed by something else than this memory"
                )
            if array.chunks[1] != record.rows[key]:
                raise DamagedMemoryError(
                    f"{self.what}: '{key[1:]}' has chunks of {array.chunks[1]} rows, not {record.rows[key]}"
                )
            arrays[key] = array.with_config(ARRAY_CONFIG)
        self.root, self.arrays, self.since, self.record = root, arrays, dict(record.since), record
        return record

    def _peek(self) -> dict | None:
        """The commit record of the place, or ``None`` if it is not a group carrying one."""
        try:
            record = self.location.open_group("r").attrs.get(ATTR)
        except Exception as error:  # any reason it is not a readable group
            logger.debug("%s is not a readable Zarr group: %r", self.location, error)
            return None
        return record if isinstance(record, dict) else None

    def _create(self) -> None:
        """Create the group, empty, unless this memory opened or created it; refuses a place that holds
        something else (a memory is continued with ``load()`` or ``restore()``, never overwritten)."""
        if self.root is not None:
            return
        if not self.location.is_empty():
            found = (
                "a digideep memory" if self._peek() is not None else "files that are not a digideep memory"
            )
            raise ValueError(
                f"memory '{self.name}': {self.location} already holds {found}; call load() to continue "
                "it, or delete the folder (or pick another path) to start a new memory"
            )
        self.root = self.location.open_group("w")
        self._commit(RingState(), {})

    def append(self, new: Mapping[str, tuple[KeySpec, int]], since: int, writes: Sequence[Write]) -> None:
        """Create the array of each ``new`` key (``(spec, chunk rows)``), whose first row is global row
        ``since`` (recreated, dropping what an abandoned run left), then make ``writes``, the keys
        concurrently."""
        self._create()
        assert self.root is not None
        for key, (spec, rows) in new.items():
            if key.split("/")[1] == PRESTEP:
                raise ValueError(f"memory '{self.name}': key {key!r} is reserved for the log; rename it")
            self.arrays[key] = self.root.create_array(
                key[1:],
                shape=(self.num_workers, LOG_ROWS, *spec.shape),
                chunks=(self.chunk_workers, rows, *(max(1, d) for d in spec.shape)),
                dtype=spec.dtype,
                fill_value=fill_value(spec.dtype),
                compressors=compressors(self.compression, spec),
                overwrite=True,
                config=ARRAY_CONFIG,
            )
            self.since[key] = since
        _concurrently([partial(self._write, *write) for write in writes])

    def _write(self, key: str, start: int, stop: int, values: np.ndarray | np.generic) -> None:
        self.arrays[key][:, start:stop] = values

    def commit(
        self,
        state: RingState,
        specs: Mapping[str, KeySpec],
        prestep: Mapping[str, np.ndarray],
        writes: Sequence[Write] = (),
    ) -> None:
        """Make ``writes`` (as :meth:`append`) and write the final ``prestep`` rows of ``state``, all at
        once, then commit ``state``; nothing when it is committed already."""
        self._create()
        record = self.record
        presteps = dict(record.presteps)
        jobs = [partial(self._write, *write) for write in writes]
        if prestep and state.total not in presteps:
            data = b"".join(np.ascontiguousarray(prestep[key]).tobytes() for key in specs)
            presteps[state.total] = google_crc32c.value(data)
            jobs.append(partial(_put, self.root, f"{PRESTEP}/{state.total}", data))
        elif not writes and state == record.state and list(specs) == list(record.specs):
            return
        _concurrently(jobs)
        self._commit(state, specs, presteps=presteps)
        logger.debug("%s committed: %s", self.what, state)

    def _commit(self, state: RingState, specs: Mapping[str, KeySpec], **changes: Any) -> None:
        """Commit ``state`` with the keys ``specs`` and ``changes`` to the record: one atomic write."""
        assert self.root is not None
        since, rows = {k: self.since[k] for k in specs}, {k: self.arrays[k].chunks[1] for k in specs}
        record = replace(self.record, state=state, specs=dict(specs), since=since, rows=rows, **changes)
        self.root.attrs.update({ATTR: record.to_json(self.num_workers, self.capacity)})
        self.record = record

    def checkpoint(self, state: RingState, keep: int) -> list[str]:
        """Record that a checkpoint holds ``state`` (refused unless it is the committed state), keeping
        the rows of the newest ``keep`` checkpoints (``0``: every one); returns the store keys no kept
        checkpoint needs any more, for :meth:`delete`."""
        record = self.record
        if self.root is None or state != record.state:
            raise ValueError(
                f"memory '{self.name}': the checkpoint holds {state} but the flushed state is "
                f"{record.state if self.root is not None else 'nothing'}; call flush() before saving "
                "the checkpoint"
            )
        checkpoints = (*(t for t in record.checkpoints if t < state.total), state.total)
        checkpoints = checkpoints[-keep:] if keep > 0 else checkpoints
        first = max(record.first, min(max(0, t - (self.capacity - 1)) for t in checkpoints))
        presteps = {t: crc for t, crc in record.presteps.items() if t in checkpoints}
        self._commit(record.state, record.specs, first=first, checkpoints=checkpoints, presteps=presteps)
        dropped = [f"{PRESTEP}/{t}" for t in record.presteps if t not in presteps]
        for key, array in self.arrays.items():
            rows = array.chunks[1]
            dropped += _chunk_keys(
                array, range(max(record.first, self.since.get(key, 0)) // rows, first // rows)
            )
        return dropped

    def delete(self, keys: list[str]) -> None:
        """Delete store keys (:meth:`checkpoint`'s); missing ones are fine."""
        if keys and self.root is not None:
            delete_objects(self.root.store, keys)

    def read_back(self, target: RingState, ring: Ring | None) -> Readback:
        """What returning to ``target`` gives, changing nothing: the chunk files of its rows (and of the
        chunk the next append fills) are listed and every chunk is read, so checked, into new rings of
        ``ring``'s layout (``None``: read to check only, a chunk at a time).

        Raises:
            FileNotFoundError, ValueError: nothing was flushed here; ``target`` is not a state of it.
            DamagedMemoryError: a chunk file is missing or fails its checksum; names them.
        """
        if self.root is None:
            if target.total == 0 and not self.location.zarr_exists():
                return Readback(target, target, arrays=None if ring is None else {})
            self.open()
        record = self.record
        state = record.state.restored(target, self.capacity, record.first)
        specs = {key: spec for key, spec in record.specs.items() if self.since[key] < target.total}
        arrays = None if ring is None else ring.empty(specs)
        reads = []  # (array, key, out or None, start, stop): see _read
        for key in specs:
            array, rows, since = self.arrays[key], record.rows[key], self.since[key]
            start, stop = max(state.first, since), state.total
            low = max(min(start, stop // rows * rows), record.first, since)  # rows the log must hold
            needed = _chunk_keys(array, range(low // rows, (stop - 1) // rows + 1))
            present = list_objects(self.root.store, array.path) if needed else set()
            if missing := [name for name in needed if name not in present]:
                raise DamagedMemoryError(
                    f"{self.what} is damaged: {len(missing)} chunk file(s) of key '{key}' are missing "
                    f"({_shown(missing)}), though the commit record says their rows were written (a file "
                    "deleted)"
                )
            if arrays is None:
                reads += [
                    (array, key, None, max(a, low), min(stop, a + rows))
                    for a in range(low // rows * rows, stop, rows)
                ]
                continue
            if low < start:  # the rows of the next append's chunk that the ring does not hold
                reads.append((array, key, None, low, start))
            for a, b, offset in ring_slices(start % self.capacity, stop - start, self.capacity):
                reads.append((array, key, arrays[key][:, a:b], start + offset, start + offset + b - a))
        _concurrently([partial(self._read, *read) for read in reads])
        prestep = {}
        if target.total in record.presteps:
            prestep = self._read_prestep(target.total, record.presteps[target.total], specs)
            if arrays is not None:
                for key, row in prestep.items():
                    arrays[key][:, state.pos] = row
        return Readback(target, state, specs, arrays, prestep)

    def _read(self, array: zarr.Array, key: str, out: np.ndarray | None, start: int, stop: int) -> None:
        """Rows ``start:stop`` of every worker of ``array`` into ``out``, ``(W, stop - start, ...)``
        (``None``: read to check only); a :class:`DamagedMemoryError` names the chunks that fail."""
        selection = (slice(None), slice(start, stop))
        try:
            if out is None:
                array[selection]
            else:  # straight into the ring, without a temporary copy
                array.get_basic_selection(selection, out=NDBuffer.from_numpy_array(out))
        except Exception:
            damaged = _damaged_chunks(array, start, stop)
            if not damaged:
                raise
            raise DamagedMemoryError(
                f"{self.what} is damaged: {len(damaged)} chunk(s) of key '{key}' fail their checksum "
                f"({_shown(damaged)})"
            ) from None

    def _read_prestep(self, total: int, crc: int, specs: Mapping[str, KeySpec]) -> dict[str, np.ndarray]:
        """The final prestep rows committed at ``total``, ``(W, *row_shape)`` per key, checked."""
        key = f"{PRESTEP}/{total}"
        assert self.root is not None
        buffer = sync(self.root.store.get(key, prototype=default_buffer_prototype()))
        data = None if buffer is None else buffer.to_bytes()
        if data is None or google_crc32c.value(data) != crc:
            problem = "is missing" if data is None else "fails its checksum"
            raise DamagedMemoryError(f"{self.what} is damaged: the final prestep rows ({key}) {problem}")
        rows, offset = {}, 0
        for name, spec in specs.items():
            shape = (self.num_workers, *spec.shape)
            rows[name] = np.frombuffer(data, spec.dtype, prod(shape), offset).reshape(shape).copy()
            offset += spec.dtype.itemsize * prod(shape)
        return rows

    def adopt(self, readback: Readback) -> None:
        """Make ``readback`` (:meth:`read_back`'s) the committed state: the keys and checkpoints after
        it are dropped from the record (their rows become the next writer's to overwrite)."""
        total, record = readback.state.total, self.record
        if self.root is not None:
            checkpoints = tuple(t for t in record.checkpoints if t <= total)
            presteps = {t: crc for t, crc in record.presteps.items() if t <= total}
            self._commit(readback.state, readback.specs, checkpoints=checkpoints, presteps=presteps)

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Global rows ``(workers[i], rows[i])``: ``(n, *row_shape)``; each chunk read once per call."""
        array = self.arrays[key]
        size = array.chunks[1]
        chunks = rows // size
        order = np.lexsort((chunks, workers))
        out = np.empty((len(rows), *array.shape[2:]), dtype=array.dtype)
        bounds = np.flatnonzero(np.diff(workers[order]) | np.diff(chunks[order])) + 1
        for group in np.split(order, bounds):
            worker, chunk = int(workers[group[0]]), int(chunks[group[0]])
            block = array[worker, chunk * size : (chunk + 1) * size]
            out[group] = block[rows[group] - chunk * size]
        return out

    def read(self, key: str, start: int, stop: int) -> np.ndarray:
        """Global rows ``start:stop`` of every worker: ``(W, stop - start, ...)``."""
        return self.arrays[key][:, start:stop]


def _shown(keys: list[str]) -> str:
    """The first three store keys, and how many more."""
    return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def _concurrently(jobs: list[Callable[[], None]]) -> None:
    if len(jobs) <= 1:
        for job in jobs:
            job()
        return
    with ThreadPoolExecutor(min(len(jobs), _THREADS)) as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.result()


def _put(root: zarr.Group | None, key: str, data: bytes) -> None:
    """Write ``data`` as the object ``key`` of the group's store (whole, as zarr writes its chunks)."""
    assert root is not None
    sync(root.store.set(key, default_buffer_prototype().buffer.from_bytes(data)))


def _blocks(array: zarr.Array, row_chunks: range) -> list[tuple[int, ...]]:
    """Block coordinates of every chunk of ``array`` in the row chunks ``row_chunks``."""
    grid = [range(-(-n // c)) for n, c in zip(array.shape, array.chunks, strict=True)]
    return [(w, i, *rest) for i in row_chunks for w in grid[0] for rest in itertools.product(*grid[2:])]


def _chunk_keys(array: zarr.Array, row_chunks: range) -> list[str]:
    """Store keys (below the group) of every chunk of ``array`` in the row chunks ``row_chunks``."""
    return [f"{array.path}/{array.metadata.encode_chunk_key(block)}" for block in _blocks(array, row_chunks)]


def _damaged_chunks(array: zarr.Array, start: int, stop: int) -> list[str]:
    """Store keys of the chunks of rows ``start:stop`` of ``array`` that fail to decode, read one by one."""
    rows = array.chunks[1]
    found = []
    for block in _blocks(array, range(start // rows, (stop - 1) // rows + 1)):
        try:
            array.get_block_selection(block)
        except _BAD_BYTES as error:
            logger.debug("chunk %s of %s does not decode: %r", block, array.path, error)
            found.append(f"{array.path}/{array.metadata.encode_chunk_key(block)}")
    return found
