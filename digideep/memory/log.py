"""The durable copy of a memory: an append-only Zarr log of every row it stored, and its writer.

Layout of the group (``<session>/memory/<name>.zarr``, a local folder or a URL)::

    zarr.json                 its attribute "digideep_memory" is the commit record (Record)
    observations/c/...        one array per key, (W, LOG_ROWS, *row_shape): row g is global row g
                              (ring.py), in chunks of chunk_rows rows, each ending with its crc32c
    _prestep/<total>          the final prestep rows of the state committed at ``total``, every key
                              in the record's order, in one object (its crc32c in the record)

A row is written once: a flush writes the chunk being filled as far as it goes, a later write of it
keeps those rows' bytes, and every file or object is written whole. The record is one atomic write.
So a crash leaves the last commit whole (``docs/memory.md`` has the design and its guarantees).
"""

from __future__ import annotations

import itertools
import json
import logging
import queue
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from math import prod

import google_crc32c
import numpy as np
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import NDBuffer
from zarr.core.sync import sync

import digideep
from digideep.memory.layout import DamagedMemoryError, KeySpec, compressors, fill_value
from digideep.memory.ring import FIELDS, RingState, ring_slices
from digideep.storage.location import Location
from digideep.storage.objects import delete_objects, list_objects
from digideep.utility.placeholders import placeholder_array

logger = logging.getLogger(__name__)

ATTR = "digideep_memory"  # the group attribute that holds the commit record
FORMAT = 4  # version of the layout above
PRESTEP = "_prestep"
LOG_ROWS = 1 << 40  # rows per worker an array can hold: its shape (chunks exist where written)
RING_FRACTION = 16  # a chunk holds at most 1/16 of the ring: a flush rewrites at most that much
RAM_CHUNK_BYTES = 1 << 22  # mode "ram": chunks of all workers, about 4 MiB (few large PUTs)
DISK_CHUNK_BYTES = 1 << 18  # mode "disk": chunks of one worker, about 256 KiB (sampling reads them)
ZARR_MIN = (3, 1, 3)  # the first zarr release whose LocalStore writes files atomically
ARRAY_CONFIG = {"write_empty_chunks": True}  # a chunk of placeholders is a file too: missing is damage
_THREADS = 8  # keys read or written at once
_BAD_BYTES = (ValueError, RuntimeError, EOFError)  # the codecs' errors for bad bytes


def check_zarr_version(version: str | None = None) -> None:
    """Refuse zarr releases older than :data:`ZARR_MIN`, whose writes a crash can tear.

    Raises:
        RuntimeError: naming the installed version and the fix.
    """
    version = zarr.__version__ if version is None else version
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if match is not None and tuple(int(part) for part in match.groups()) < ZARR_MIN:
        wanted = ".".join(map(str, ZARR_MIN))
        raise RuntimeError(
            f"digideep's replay memory needs zarr >= {wanted} (atomic file writes), zarr {version} is "
            f"installed; upgrade it: pip install 'zarr>={wanted},<4'"
        )


@dataclass
class Record:
    """The commit record: the committed state, each key's spec, first row (``since``) and chunk rows,
    the oldest row kept (``first``), the totals of the checkpoints kept and of the presteps kept."""

    state: RingState = field(default_factory=RingState)
    specs: dict[str, KeySpec] = field(default_factory=dict)
    since: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    first: int = 0
    checkpoints: tuple[int, ...] = ()
    presteps: dict[int, int] = field(default_factory=dict)  # total -> crc32c of its prestep object

    def to_json(self, num_workers: int, capacity: int) -> dict:
        keys = {
            key: {**spec.to_json(), "since": self.since[key], "chunk_rows": self.rows[key]}
            for key, spec in self.specs.items()
        }
        record = {
            "format": FORMAT,
            "writer": f"digideep {digideep.__version__}",
            "num_workers": num_workers,
            "capacity": capacity,
            **self.state.as_dict(),
            "first": self.first,
            "keys": keys,
            "checkpoints": list(self.checkpoints),
            "presteps": [[total, crc] for total, crc in self.presteps.items()],
        }
        return {**record, "crc32c": record_crc(record)}

    @staticmethod
    def from_json(record: dict) -> Record:
        keys = record["keys"]
        return Record(
            RingState(*(int(record[name]) for name in FIELDS)),
            {key: KeySpec.from_json(entry) for key, entry in keys.items()},
            {key: int(entry["since"]) for key, entry in keys.items()},
            {key: int(entry["chunk_rows"]) for key, entry in keys.items()},
            int(record["first"]),
            tuple(int(t) for t in record["checkpoints"]),
            {int(total): int(crc) for total, crc in record["presteps"]},
        )


def record_crc(record: dict) -> int:
    """crc32c of a commit record (without its own ``crc32c`` field), over its canonical JSON."""
    fields = {key: value for key, value in record.items() if key != "crc32c"}
    return google_crc32c.value(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())


@dataclass(frozen=True)
class Readback:
    """A restore read back and checked, nothing changed yet (:meth:`ZarrLog.read_back`).

    Attributes:
        target: the state asked for (a checkpoint's).
        state: the state the restore gives: ``target`` with the rows the log still holds.
        specs: the keys the restore keeps (those stored before ``target``).
        arrays: the next RAM rings (``None`` for a memory without a ring).
        prestep: each key's final prestep row at ``target``, ``(W, *row_shape)``.
        seeds: each key's rows of the chunk the next append fills, ``(chunk start, (W, rows, ...))``.
    """

    target: RingState
    state: RingState
    specs: dict[str, KeySpec] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] | None = None
    prestep: dict[str, np.ndarray] = field(default_factory=dict)
    seeds: dict[str, tuple[int, np.ndarray]] = field(default_factory=dict)

    @property
    def whole(self) -> bool:
        """Whether the restore gives ``target`` itself (the log still holds all of its rows)."""
        return self.state == self.target


class ZarrLog:
    """One memory's append-only Zarr log: create or open it, append rows, commit, read back, prune.

    Args:
        location: the group's place (local folder or URL).
        num_workers: ``W``.
        capacity: ``C``, rows per worker of the memory's ring.
        name: the memory's, shown in messages.
        chunk_rows: rows per chunk; ``None`` sizes each key's chunks to about :data:`RAM_CHUNK_BYTES`
            (or :data:`DISK_CHUNK_BYTES` per worker), at most ``ceil(C / 16)`` rows.
        compression: ``None``, ``"zstd"``, ``"lz4"`` or ``"images"`` (:func:`~digideep.memory.layout.compressors`).
        per_worker: chunks of one worker (a memory that samples the log), not of all workers.

    Raises:
        RuntimeError: if the installed zarr is older than :data:`ZARR_MIN`.
    """

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
        self.chunk_rows = chunk_rows
        self.chunk_bytes = DISK_CHUNK_BYTES if per_worker else RAM_CHUNK_BYTES
        self.chunk_workers = 1 if per_worker else num_workers
        self.compression = compression
        self.root: zarr.Group | None = None
        self.arrays: dict[str, zarr.Array] = {}
        self.since: dict[str, int] = {}  # every key with an array, committed or not
        self.record = Record()  # the last commit

    @property
    def what(self) -> str:
        return f"memory '{self.name}' at {self.location}"

    @property
    def is_open(self) -> bool:
        return self.root is not None

    def planned_rows(self, spec: KeySpec) -> int:
        """Rows per chunk of a new array of ``spec``."""
        if self.chunk_rows is not None:
            return max(1, min(self.capacity, self.chunk_rows))
        row_bytes = max(1, spec.dtype.itemsize * prod(spec.shape))
        rows = self.chunk_bytes // (row_bytes * self.chunk_workers)
        return max(1, min(-(-self.capacity // RING_FRACTION), rows))

    # -- opening -------------------------------------------------------------------------------
    def ensure_open(self) -> None:
        """Open the group, created empty if this memory has not written it yet.

        Raises:
            ValueError: if the place holds something else than this memory's log (a memory is
                continued with ``load()`` or ``restore()``, never silently overwritten).
        """
        if self.is_open:
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
        self.arrays, self.since = {}, {}
        self._commit(Record())

    def open(self) -> Record:
        """Open the existing group and check its record (changes nothing).

        Raises:
            FileNotFoundError: if nothing was flushed here.
            ValueError: if it is not a digideep memory of this format, worker count and capacity.
            DamagedMemoryError: the record fails its checksum or an array is not what it lists.
        """
        if not self.location.zarr_exists():
            raise FileNotFoundError(
                f"memory '{self.name}': no memory to load at {self.location}; it is written by flush() "
                "(the Runner flushes before every checkpoint)"
            )
        raw = self._peek()
        if raw is None:
            raise ValueError(
                f"memory '{self.name}': {self.location} is not a digideep memory (no Zarr group with a "
                f"'{ATTR}' attribute); point the memory at its own folder"
            )
        if raw.get("format") != FORMAT:
            writer = raw.get("writer", "an earlier digideep")
            raise ValueError(
                f"memory '{self.name}': {self.location} was written by {writer} in memory layout format "
                f"{raw.get('format')!r}; digideep {digideep.__version__} reads format {FORMAT} only: "
                "start a new session, or continue this one with the version that wrote it"
            )
        if raw.get("crc32c") != record_crc(raw):
            raise DamagedMemoryError(
                f"memory '{self.name}': the commit record in {self.location} is damaged (its crc32c differs)"
            )
        layout = (raw.get("num_workers"), raw.get("capacity"))
        if layout != (self.num_workers, self.capacity):
            raise ValueError(
                f"memory '{self.name}': {self.location} holds num_workers={layout[0]}, capacity={layout[1]}, "
                f"but this memory was created with num_workers={self.num_workers}, "
                f"capacity={self.capacity}; create it with the values of the run that wrote it"
            )
        record = Record.from_json(raw)
        root = self.location.open_group("r+")
        arrays = {
            key: self._opened(root, key[1:], key, spec, record.rows[key])
            for key, spec in record.specs.items()
        }
        self.root, self.arrays = root, arrays
        self.since, self.record = dict(record.since), record
        return record

    def _opened(self, root: zarr.Group, path: str, key: str, spec: KeySpec, rows: int) -> zarr.Array:
        array = root.get(path)
        shape = (self.num_workers, LOG_ROWS, *spec.shape)
        if not isinstance(array, zarr.Array) or array.shape != shape or array.dtype != spec.dtype:
            raise DamagedMemoryError(
                f"{self.what}: the record lists key '{key}' as {spec.describe()} but the store holds "
                f"{'nothing' if array is None else type(array).__name__} at '{path}'; the folder was "
                "changed by something else than this memory"
            )
        if array.chunks[1] != rows:
            raise DamagedMemoryError(
                f"{self.what}: '{path}' has chunks of {array.chunks[1]} rows, not {rows}"
            )
        return array.with_config(ARRAY_CONFIG)

    def _peek(self) -> dict | None:
        """The commit record of the place, or ``None`` if it is not a group carrying one."""
        try:
            record = self.location.open_group("r").attrs.get(ATTR)
        except Exception as error:  # any reason it is not a readable group
            logger.debug("%s is not a readable Zarr group: %r", self.location, error)
            return None
        return record if isinstance(record, dict) else None

    # -- writing -------------------------------------------------------------------------------
    def append(
        self,
        new: Mapping[str, tuple[KeySpec, int]],
        since: int,
        writes: Sequence[tuple[str, int, int, np.ndarray]],
    ) -> None:
        """Create the group if needed and the array of each ``new`` key (``(spec, chunk rows)``), whose
        first row is global row ``since`` (recreated, dropping what an abandoned run left); then write
        ``writes``, ``(key, start, stop, values)``: global rows ``start:stop`` of every worker, the
        keys concurrently."""
        self.ensure_open()
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
        writes: Sequence[tuple[str, int, int, np.ndarray]] = (),
    ) -> None:
        """Write ``writes`` (as :meth:`append`) and the final prestep rows of ``state``, all at once,
        then commit ``state``; nothing when it is committed already."""
        self.ensure_open()
        record = self.record
        if (
            not writes
            and state == record.state
            and list(specs) == list(record.specs)
            and (state.total in record.presteps or not prestep)
        ):
            return
        presteps = dict(record.presteps)
        jobs = [partial(self._write, *write) for write in writes]
        if prestep:
            data = b"".join(np.ascontiguousarray(prestep[key]).tobytes() for key in specs)
            presteps[state.total] = google_crc32c.value(data)
            jobs.append(partial(_put, self.root, f"{PRESTEP}/{state.total}", data))
        _concurrently(jobs)
        rows = {key: self.arrays[key].chunks[1] for key in specs}
        since = {key: self.since[key] for key in specs}
        self._commit(
            replace(self.record, state=state, specs=dict(specs), since=since, rows=rows, presteps=presteps)
        )
        logger.debug("%s committed: %s", self.what, state)

    def _commit(self, record: Record) -> None:
        assert self.root is not None
        self.root.attrs.update({ATTR: record.to_json(self.num_workers, self.capacity)})
        self.record = record

    def checkpoint(self, state: RingState, keep: int) -> list[str]:
        """Record that a checkpoint holds ``state`` (the committed state), keeping the rows of the
        newest ``keep`` checkpoints (``0``: every one); the store keys that no kept checkpoint
        needs any more, to :meth:`delete` (the record no longer lists them).

        Raises:
            ValueError: if ``state`` is not the committed state.
        """
        record = self.record
        if not self.is_open or state != record.state:
            raise ValueError(
                f"memory '{self.name}': the checkpoint holds {state} but the flushed state is "
                f"{record.state if self.is_open else 'nothing'}; call flush() before saving the checkpoint"
            )
        checkpoints = (*(t for t in record.checkpoints if t < state.total), state.total)
        checkpoints = checkpoints[-keep:] if keep > 0 else checkpoints
        first = max(record.first, min(max(0, t - (self.capacity - 1)) for t in checkpoints))
        presteps = {t: crc for t, crc in record.presteps.items() if t in checkpoints}
        self._commit(replace(record, first=first, checkpoints=checkpoints, presteps=presteps))
        dropped = [f"{PRESTEP}/{t}" for t in record.presteps if t not in presteps]
        for key, array in self.arrays.items():
            rows = array.chunks[1]
            start = max(record.first, self.since.get(key, 0)) // rows
            dropped += _chunk_keys(array, range(start, first // rows))
        return dropped

    def delete(self, keys: list[str]) -> None:
        """Delete store keys (:meth:`checkpoint`'s); missing ones are fine."""
        if keys and self.root is not None:
            delete_objects(self.root.store, keys)

    # -- reading back --------------------------------------------------------------------------
    def read_back(
        self, target: RingState, allocate: Callable[[dict[str, KeySpec]], dict[str, np.ndarray]] | None
    ) -> Readback:
        """Read back and check what returning to ``target`` gives, changing nothing: the chunk files of
        its rows are listed, and every chunk is read (so checked) into new rings made by ``allocate``,
        or only read (``None``: a memory without a ring).

        Raises:
            FileNotFoundError: if ``target`` holds rows but nothing was flushed here.
            ValueError: if ``target`` is newer than the log or not a state of it.
            DamagedMemoryError: a chunk file is missing or fails its checksum; names them.
        """
        if not self.is_open:
            if target.total == 0 and not self.location.zarr_exists():
                return Readback(target, target, arrays=None if allocate is None else {})
            self.open()
        record = self.record
        state = record.state.restored(target, self.capacity, record.first)
        specs = {key: spec for key, spec in record.specs.items() if self.since[key] < target.total}
        arrays = None if allocate is None else allocate(specs)
        reads = []  # (array, key, out, start, stop): global rows start:stop into out (see _read)
        prestep, seeds = {}, {}
        copies = []  # (key, seed rows, start, stop): the next append's chunk, from the ring once read
        for key, spec in specs.items():
            array, rows = self.arrays[key], record.rows[key]
            start, stop = max(state.first, self.since[key]), state.total
            seed = stop // rows * rows
            low = max(min(start, seed), record.first, self.since[key])  # rows the log must hold
            missing = _missing(self.root, array, range(low // rows, (stop - 1) // rows + 1))
            if missing:
                raise DamagedMemoryError(
                    f"{self.what} is damaged: {len(missing)} chunk file(s) of key '{key}' are missing "
                    f"({_shown(missing)}), though the commit record says their rows were written (a file deleted)"
                )
            if arrays is not None:
                for a, b, offset in ring_slices(start % self.capacity, stop - start, self.capacity):
                    reads.append((array, key, arrays[key][:, a:b], start + offset, start + offset + b - a))
                if seed < stop:
                    buffer = placeholder_array((self.num_workers, rows, *spec.shape), spec.dtype)
                    low = max(seed, start)  # rows from start on come into the ring: copied below
                    if seed < start and self.since[key] < start:
                        reads.append(
                            (
                                array,
                                key,
                                buffer[:, max(seed, self.since[key]) - seed : start - seed],
                                max(seed, self.since[key]),
                                start,
                            )
                        )
                    seeds[key] = (seed, buffer)
                    copies.append((key, buffer[:, low - seed : stop - seed], low, stop))
            else:
                pieces = range(start // rows * rows, stop, rows)
                reads += [(array, key, None, max(a, start), min(stop, a + rows)) for a in pieces]
        _concurrently([partial(self._read, *read) for read in reads])
        for key, out, start, stop in copies:
            for a, b, offset in ring_slices(start % self.capacity, stop - start, self.capacity):
                out[:, offset : offset + b - a] = arrays[key][:, a:b]  # type: ignore[index]
        if target.total in record.presteps:
            prestep = self._read_prestep(target.total, record.presteps[target.total], specs)
        if arrays is not None:
            for key, row in prestep.items():
                arrays[key][:, state.pos] = row
        return Readback(target, state, specs, arrays, prestep, seeds)

    def _read(self, array: zarr.Array, key: str, out: np.ndarray | None, start: int, stop: int) -> None:
        """Rows ``start:stop`` of every worker of ``array`` into ``out``, ``(W, stop - start, ...)``
        (``None``: read to check only).

        Raises:
            DamagedMemoryError: naming the chunks that fail their checksum or do not decode.
        """
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
        """The final prestep rows of the state committed at ``total``, ``(W, *row_shape)`` per key.

        Raises:
            DamagedMemoryError: the object is missing or fails its checksum.
        """
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
            size = spec.dtype.itemsize * prod(shape)
            rows[name] = np.frombuffer(data, spec.dtype, prod(shape), offset).reshape(shape).copy()
            offset += size
        return rows

    def adopt(self, readback: Readback) -> None:
        """Make ``readback`` (:meth:`read_back`'s) the committed state: the keys and checkpoints
        after it are dropped from the record (their rows become the next writer's to overwrite)."""
        total = readback.state.total
        record = self.record
        if self.is_open:
            self._commit(
                replace(
                    record,
                    state=readback.state,
                    specs=dict(readback.specs),
                    since={key: self.since[key] for key in readback.specs},
                    rows={key: record.rows[key] for key in readback.specs},
                    checkpoints=tuple(t for t in record.checkpoints if t <= total),
                    presteps={t: crc for t, crc in record.presteps.items() if t <= total},
                )
            )

    # -- reading (a memory without a ring) -----------------------------------------------------
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


def _blocks(array: zarr.Array, row_chunks: Iterable[int]) -> list[tuple[int, ...]]:
    """Block coordinates of every chunk of ``array`` in the row chunks ``row_chunks``."""
    grid = [range(-(-n // c)) for n, c in zip(array.shape, array.chunks, strict=True)]
    return [
        (w, index, *rest) for index in row_chunks for w in grid[0] for rest in itertools.product(*grid[2:])
    ]


def _chunk_keys(array: zarr.Array, row_chunks: Iterable[int]) -> list[str]:
    """Store keys (below the group) of every chunk of ``array`` in the row chunks ``row_chunks``."""
    return [f"{array.path}/{array.metadata.encode_chunk_key(block)}" for block in _blocks(array, row_chunks)]


def _missing(root: zarr.Group, array: zarr.Array, row_chunks: range) -> list[str]:
    """Store keys of the chunk files of ``array`` in ``row_chunks`` that are missing (one listing)."""
    if not row_chunks:
        return []
    present = list_objects(root.store, array.path)
    return [key for key in _chunk_keys(array, row_chunks) if key not in present]


def _damaged_chunks(array: zarr.Array, start: int, stop: int) -> list[str]:
    """Store keys of the chunks of ``array`` holding rows ``start:stop`` that fail to decode, each read alone."""
    rows = array.chunks[1]
    found = []
    for block in _blocks(array, range(start // rows, (stop - 1) // rows + 1)):
        try:
            array.get_block_selection(block)
        except _BAD_BYTES as error:
            logger.debug("chunk %s of %s does not decode: %r", block, array.path, error)
            found.append(f"{array.path}/{array.metadata.encode_chunk_key(block)}")
    return found


# -- the writer -------------------------------------------------------------------------------------
_STOP = object()


class LogWriter:
    """Appends a memory's rows to its log behind the training thread: :meth:`append` copies rows into
    each key's open chunk and hands a full one to a background thread; :meth:`flush` writes the open
    ones. The thread runs the writes in order; a write's error is raised by the next call (the
    original once, then a ``RuntimeError`` naming it) and later writes are skipped. The thread ends
    with the writer or :meth:`close`.

    Args:
        log: the log written to.
        write_behind: write on a background thread (default); ``False`` writes in the caller's
            thread (the same writes in the same order, for debugging and fault injection).
        max_pending: writes that may wait for the thread; :meth:`append` blocks beyond.
    """

    def __init__(self, log: ZarrLog, write_behind: bool = True, max_pending: int = 16) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending!r}")
        self.log, self.write_behind = log, write_behind
        self.guard: Callable[[], None] | None = None  # run before every write (see Memory.guard_writes)
        self.open: dict[str, tuple[int, np.ndarray]] = {}  # key -> (first row, (W, rows, ...) buffer)
        self.dirty: set[str] = set()  # keys whose open chunk has rows its file lacks
        self.rows: dict[str, int] = {}  # chunk rows of each key
        self._queue: queue.Queue = queue.Queue(maxsize=max_pending)
        self._state: dict = {"error": None}  # shared with the thread (not self: it must not keep self alive)
        self._reported = False
        self._thread: threading.Thread | None = None
        weakref.finalize(self, self._queue.put, _STOP)

    def check(self) -> None:
        """Raise a background write's error (before the caller changes anything)."""
        error = self._state["error"]
        if error is None:
            return
        if not self._reported:
            self._reported = True
            error.add_note(f"raised by the background writer of {self.log.what}")
            raise error
        raise RuntimeError(
            f"{self.log.what}: an earlier background write failed ({error!r}); the durable copy is "
            "behind the RAM ring, resume the run from its last checkpoint"
        ) from error

    def append(
        self,
        chunk: Mapping[str, np.ndarray],
        start: int,
        steps: int,
        specs: Mapping[str, KeySpec],
        new_specs: Mapping[str, KeySpec],
    ) -> None:
        """Append rows ``0 .. steps - 1`` of ``chunk`` as global rows ``start ..`` of every key of
        ``specs`` (a key the chunk lacks: placeholders); ``new_specs`` are the keys it brings first."""
        for key, spec in new_specs.items():
            self.rows[key] = self.log.planned_rows(spec)
        full = []
        for key, spec in specs.items():
            rows, value, row = self.rows[key], chunk.get(key), start
            while row < start + steps:
                first = row // rows * rows
                opened = self.open.get(key)
                if opened is None or opened[0] != first:
                    opened = (first, placeholder_array((self.log.num_workers, rows, *spec.shape), spec.dtype))
                    self.open[key] = opened
                end = min(start + steps, first + rows)
                part = fill_value(spec.dtype) if value is None else value[:, row - start : end - start]
                opened[1][:, row - first : end - first] = part
                self.dirty.add(key)
                if end == first + rows:
                    full.append((key, first, end, self.open.pop(key)[1]))
                    self.dirty.discard(key)
                row = end
        if full or new_specs:
            new = {key: (spec, self.rows[key]) for key, spec in new_specs.items()}
            self._run(partial(self.log.append, new, start, full))

    def flush(
        self, state: RingState, specs: Mapping[str, KeySpec], prestep: Mapping[str, np.ndarray]
    ) -> None:
        """Write the open chunks as they are, then commit ``state`` with its final ``prestep`` rows;
        waits for it."""
        opened = [
            (key, first, first + buffer.shape[1], buffer.copy())
            for key, (first, buffer) in self.open.items()
            if key in self.dirty
        ]
        self.dirty = set()
        self._run(partial(self.log.commit, state, dict(specs), dict(prestep), opened))
        self.wait()

    def checkpoint(self, state: RingState, keep: int) -> None:
        """:meth:`ZarrLog.checkpoint`, now; the chunks it lets go are deleted in the background."""
        self.wait()
        self._run(partial(self.log.delete, self.log.checkpoint(state, keep)))

    def reset(self, seeds: Mapping[str, tuple[int, np.ndarray]]) -> None:
        """Start again from a restored state: the open chunks are ``seeds`` (:class:`Readback`'s)."""
        self.open, self.dirty = dict(seeds), set()
        self.rows = dict(self.log.record.rows)

    def _run(self, job: Callable[[], None]) -> None:
        if self.guard is not None:
            job = partial(_guarded, self.guard, job)
        if not self.write_behind:
            job()
            return
        self.check()
        if self._thread is None:
            self._thread = threading.Thread(
                target=_work,
                args=(self._queue, self._state),
                name=f"write-behind {self.log.what}",
                daemon=True,
            )
            self._thread.start()
        self._queue.put(job)

    def wait(self) -> None:
        """Wait for the writes in flight (nothing is committed); raise the error of one that failed."""
        if self._thread is not None:
            self._queue.join()
        self.check()

    def close(self) -> None:
        """Wait for the writes in flight and end the background thread."""
        if self._thread is not None:
            self._queue.join()
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None
        self.check()


def _work(jobs: queue.Queue, state: dict) -> None:
    while True:
        job = jobs.get()
        try:
            if job is _STOP:
                return
            if state["error"] is None:
                job()
        except BaseException as error:  # surfaced on the training thread by check()
            logger.debug("background write failed: %r", error)
            state["error"] = error
        finally:
            jobs.task_done()


def _guarded(guard: Callable[[], None], job: Callable[[], None]) -> None:
    guard()  # raises when this process may no longer write (a session lease that was lost)
    job()
