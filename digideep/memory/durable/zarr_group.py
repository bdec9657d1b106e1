"""The durable copy of a circular memory: a Zarr group with one array per key and a commit record.

Layout of the group (``<session>/memory/<name>.zarr``, a local folder or a URL, see
:mod:`digideep.storage.location`)::

    zarr.json                 group metadata; its attribute "digideep_memory" is the commit record
    observations/zarr.json    one array per key, the key's path without its leading "/"
    observations/c/...        chunks of (workers, chunk_rows rows, *row_shape), uncompressed by
                              default, each followed by its crc32c (checked on every read)
    agents/agent/actions/...
    _undo/observations/...    the undo area: chunks of the anchor that later writes overwrote (below)

Every array is shaped ``(num_workers, capacity, *row_shape)``; rows never written read as the nonify
placeholder (the arrays' fill value). The commit record holds the format version, ``num_workers``,
``capacity``, the ring pointers (``pos``, ``size``, ``total``, ``last_chunk_rows``, see
:mod:`digideep.memory.ring`), the committed keys with their dtype, row shape and ``since`` (the
``total`` from which on the key was written; records of earlier versions have none), and the undo
state: ``anchor`` (the pointers of the newest checkpoint, or null), ``anchor_keys`` and
``undo_rows``. Only committed keys are loaded; an array left by an interrupted flush is recreated
the next time its key is stored.

The undo area (:mod:`digideep.memory.durable.undo`) makes the anchor restorable exactly however far the
ring advanced since; it is deleted when the next anchor is committed.
The record is one small JSON document written in a single store operation. With zarr >= 3.1.3 the
``LocalStore`` writes every file (chunks and metadata alike) to a temporary sibling and renames it
into place (zarr-developers/zarr-python#3412; earlier 3.x releases rewrote files in place, so a
crash could leave a torn ``zarr.json`` or chunk), so a process that dies at any instant leaves each
file old or new, never a mix; on object storage every object is written whole by one PUT. Nothing
is fsynced: the guarantee covers a killed process, not a power loss before the OS writes its page
cache back.

Chunk shapes: a chunk spans ``chunk_workers`` workers (all of them for the write-through memory, so
that one write of a row range is one file or object per key; one for the Zarr-only memory, whose
sampling reads rows of one worker) and ``chunk_bytes // (chunk_workers * row_bytes)`` rows, at
least 1 and at most ``ceil(capacity / 16)`` for every key, the one-column keys included, unless
``chunk_rows`` fixes the rows. So a flush rewrites only the chunks that rows stored since the last
one touch, each one file or object, and the undo area copies whole chunks. Arrays written by an
older version keep their chunk shapes (read from their metadata).

Layout formats: 3 (this one), 2 (the undo area held rows copied into partly filled chunks; such an
area is restored row by row), 1 (no undo area). All three load; a later format is refused in one
line naming it.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from math import prod

import numpy as np
import zarr

from digideep.memory.durable.integrity import ARRAY_CONFIG, check_zarr_version, record_crc
from digideep.memory.durable.readback import RestorePlan
from digideep.memory.durable.undo import UNDO, UndoArea
from digideep.memory.layout import DamagedMemoryError, KeySpec, compressors, fill_value
from digideep.memory.ring import FIELDS, RingState
from digideep.storage.location import Location

__all__ = ["ATTR", "FORMAT", "DamagedMemoryError", "ZarrGroup"]

logger = logging.getLogger(__name__)

ATTR = "digideep_memory"  # name of the group attribute that holds the commit record
FORMAT = 3  # version of the layout above (1: no undo area, 2: undo area of rows; both still read)
RING_FRACTION = 16  # a chunk holds at most 1/16 of the ring, so a flush rewrites only the chunks it changes
_THREADS = 8  # keys read or written at once (each read fetches up to zarr's async.concurrency chunks)


def _ring_state(record: dict) -> RingState:
    return RingState(*(int(record[k]) for k in FIELDS))


class ZarrGroup:
    """One memory's Zarr group: create or open it, write and read row ranges, commit the pointers.

    Args:
        location: the group's place (local folder or URL).
        num_workers: ``W``, first axis of every array.
        capacity: ``C``, rows per worker, second axis of every array.
        chunk_rows: rows per Zarr chunk; ``None`` sizes each key's chunks to about ``chunk_bytes``.
        chunk_bytes: target chunk size when ``chunk_rows`` is ``None``.
        chunk_workers: workers per chunk (``1`` or ``num_workers``).
        compression: ``None`` (default, fastest: replay data barely compresses), ``"zstd"``, ``"lz4"``
            or ``"images"`` (zstd for uint8 image keys only, see :func:`~digideep.memory.layout.compressors`).
        name: shown in messages.

    Raises:
        RuntimeError: if the installed zarr is older than :data:`~digideep.memory.durable.integrity.ZARR_MIN`.
    """

    def __init__(
        self,
        location: Location | str,
        num_workers: int,
        capacity: int,
        chunk_rows: int | None,
        chunk_bytes: int,
        compression: str | None,
        name: str,
        chunk_workers: int = 1,
    ) -> None:
        self.location = location if isinstance(location, Location) else Location(location)
        self.chunk_workers = chunk_workers
        self.num_workers = num_workers
        self.capacity = capacity
        self.chunk_rows = chunk_rows
        self.chunk_bytes = chunk_bytes
        compressors(compression)  # refuses an unknown name now; each array gets its key's codecs
        self.compression = compression
        self.name = name
        check_zarr_version()
        self.root: zarr.Group | None = None  # the opened zarr group itself
        self.arrays: dict[str, zarr.Array] = {}
        self.committed = RingState()
        self.committed_specs: dict[str, KeySpec] = {}
        self.since: dict[str, int] = {}  # key -> the total from which on it was written (when known)
        self.anchor: RingState | None = None  # state of the newest checkpoint, restorable exactly
        self.anchor_keys: tuple[str, ...] = ()
        self.undo_rows = 0  # rows from anchor.pos on (circular) whose anchor bytes are in the undo area
        self.undo = UndoArea(self.location, capacity, name)
        self.rowwise_undo = False  # the undo area holds rows, not chunks (layout format 2, opened)

    # -- opening -------------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self.root is not None

    def create(self) -> None:
        """Create an empty group and commit the empty state.

        Raises:
            ValueError: if the folder already holds something (a memory must be continued with
                ``load()``, never silently overwritten).
        """
        if not self.location.is_empty():
            record = self._peek_record()
            what = "a digideep memory" if record is not None else "files that are not a digideep memory"
            raise ValueError(
                f"memory '{self.name}': {self.location} already holds {what}; call load() to continue "
                "it, or delete the folder (or pick another path) to start a new memory"
            )
        self.root = self.location.open_group("w")
        self.arrays, self.undo.arrays, self.since = {}, {}, {}
        self.anchor, self.anchor_keys, self.undo_rows = None, (), 0
        self.rowwise_undo = False
        self.commit(RingState(), {})

    def open(self, tidy: bool = True) -> tuple[RingState, dict[str, KeySpec]]:
        """Open an existing group and check that it is a memory of this layout.

        Args:
            tidy: finish deleting undo areas renamed away by a process that ended; ``False``
                reads only (a resume checks a memory before it changes anything).

        Returns:
            The committed state and the committed keys' specs.

        Raises:
            FileNotFoundError: if the folder does not exist.
            ValueError: if it is not a digideep memory of this format, worker count and capacity.
        """
        if not self.location.zarr_exists():
            raise FileNotFoundError(
                f"memory '{self.name}': no memory to load at {self.location}; it is written by flush() "
                "(the Runner flushes before every checkpoint)"
            )
        record = self._peek_record()
        if record is None:
            raise ValueError(
                f"memory '{self.name}': {self.location} is not a digideep memory (no Zarr group with a "
                f"'{ATTR}' attribute); point the memory at its own folder"
            )
        if record.get("format") not in (1, 2, FORMAT):
            raise ValueError(
                f"memory '{self.name}': {self.location} has layout format {record.get('format')!r}, this "
                f"version reads format {FORMAT}; open it with the digideep version that wrote it"
            )
        if "crc32c" in record and record["crc32c"] != record_crc(record):  # older records have none
            raise DamagedMemoryError(
                f"memory '{self.name}': the commit record in {self.location} is damaged (its crc32c differs)"
            )
        layout = (record.get("num_workers"), record.get("capacity"))
        if layout != (self.num_workers, self.capacity):
            raise ValueError(
                f"memory '{self.name}': {self.location} holds num_workers={layout[0]}, capacity={layout[1]}, "
                f"but this memory was created with num_workers={self.num_workers}, "
                f"capacity={self.capacity}; create it with the values of the run that wrote it"
            )
        try:
            state = _ring_state(record)
            specs = {key: KeySpec.from_json(entry) for key, entry in record["keys"].items()}
            since = {key: int(entry["since"]) for key, entry in record["keys"].items() if "since" in entry}
            anchor = None if record.get("anchor") is None else _ring_state(record["anchor"])
            anchor_keys = tuple(record.get("anchor_keys", ()))
            undo_rows = int(record.get("undo_rows", 0))
            if not set(anchor_keys) <= set(specs) or not 0 <= undo_rows <= self.capacity:
                raise ValueError(f"anchor keys {anchor_keys} or undo_rows={undo_rows} out of range")
        except (KeyError, TypeError, ValueError) as error:
            raise DamagedMemoryError(
                f"memory '{self.name}': the commit record in {self.location} is damaged: {error!r}"
            ) from None
        self.root = self.location.open_group("r+")
        self.arrays = {}
        for key, spec in specs.items():
            array = self.root.get(key[1:])
            expected = (self.num_workers, self.capacity, *spec.shape)
            if not isinstance(array, zarr.Array) or array.shape != expected or array.dtype != spec.dtype:
                found = (
                    "nothing" if array is None else f"{type(array).__name__} {getattr(array, 'shape', '')}"
                )
                raise DamagedMemoryError(
                    f"memory '{self.name}': {self.location} commits key '{key}' as {spec.dtype} {expected} but "
                    f"the store holds {found} {getattr(array, 'dtype', '')}; the folder was changed by "
                    "something else than this memory"
                )
            self.arrays[key] = array.with_config(ARRAY_CONFIG)
        self.undo.open(self.root, anchor_keys if undo_rows else (), self.arrays)
        if tidy:
            self.undo.tidy()
        self.rowwise_undo = record.get("format") == 2 and undo_rows > 0
        self.committed, self.committed_specs, self.since = state, specs, since
        self.anchor, self.anchor_keys, self.undo_rows = anchor, anchor_keys, undo_rows
        return state, dict(specs)

    def _peek_record(self) -> dict | None:
        """The commit record of the folder, or ``None`` if it is not a group carrying one."""
        try:
            group = self.location.open_group("r")
            record = group.attrs.get(ATTR)
        except Exception as error:  # any reason it is not a readable group
            logger.debug("%s is not a readable Zarr group: %r", self.location, error)
            return None
        return record if isinstance(record, dict) else None

    # -- writing -------------------------------------------------------------------------------
    def create_array(self, key: str, spec: KeySpec, since: int) -> None:
        """Create (or recreate, dropping leftovers of an interrupted flush) the array of ``key``,
        first written at the ring's ``total`` ``since``."""
        assert self.root is not None
        if key.split("/")[1] == UNDO:
            raise ValueError(f"memory '{self.name}': key {key!r} is reserved for the undo area; rename it")
        rows = self.planned_rows(spec)
        self.arrays[key] = self.root.create_array(
            key[1:],
            shape=(self.num_workers, self.capacity, *spec.shape),
            chunks=(self.chunk_workers, rows, *(max(1, d) for d in spec.shape)),
            dtype=spec.dtype,
            fill_value=fill_value(spec.dtype),
            compressors=compressors(self.compression, spec),
            overwrite=True,
            config=ARRAY_CONFIG,
        )
        self.since[key] = since

    def planned_rows(self, spec: KeySpec) -> int:
        """Rows per chunk of a new array of ``spec``: ``chunk_rows``, or about ``chunk_bytes`` and at
        most ``ceil(capacity / 16)`` (so one-column keys are not one chunk for the whole ring)."""
        if self.chunk_rows is not None:
            return max(1, min(self.capacity, self.chunk_rows))
        row_bytes = max(1, spec.dtype.itemsize * prod(spec.shape))
        rows = self.chunk_bytes // (row_bytes * self.chunk_workers)
        return max(1, min(-(-self.capacity // RING_FRACTION), rows))

    def chunk_rows_of(self, key: str) -> int:
        """Rows per chunk of the array of ``key`` (an array of an older layout keeps its chunks)."""
        return self.arrays[key].chunks[1]

    def write(self, key: str, start: int, stop: int, values: np.ndarray | np.generic) -> None:
        """Write rows ``start:stop`` of every worker; ``values`` is ``(W, stop - start, ...)`` or a scalar."""
        self.arrays[key][:, start:stop] = values

    def write_many(self, writes: list[tuple[str, int, int, np.ndarray]]) -> None:
        """:meth:`write` of several ``(key, start, stop, values)`` at once, the keys concurrently."""
        if len(writes) <= 1:
            for write in writes:
                self.write(*write)
            return
        with ThreadPoolExecutor(min(len(writes), _THREADS)) as pool:
            for future in [pool.submit(self.write, *write) for write in writes]:
                future.result()

    def commit(self, state: RingState, specs: dict[str, KeySpec], undo_rows: int | None = None) -> None:
        """Replace the commit record in one atomic write. Call it after the data it describes.

        The anchor is kept; ``undo_rows`` (default: unchanged) records rows saved by :meth:`save_undo`.
        """
        self._write_record(
            state, specs, self.anchor, self.anchor_keys, self.undo_rows if undo_rows is None else undo_rows
        )

    def _write_record(
        self,
        state: RingState,
        specs: dict[str, KeySpec],
        anchor: RingState | None,
        anchor_keys: tuple[str, ...],
        undo_rows: int,
    ) -> None:
        assert self.root is not None
        record = {
            "format": 2 if self.rowwise_undo else FORMAT,
            "num_workers": self.num_workers,
            "capacity": self.capacity,
            **state.as_dict(),
            "keys": {key: self._key_entry(key, spec) for key, spec in specs.items()},
            "anchor": None if anchor is None else anchor.as_dict(),
            "anchor_keys": list(anchor_keys),
            "undo_rows": undo_rows,
        }
        self.root.attrs.update({ATTR: {**record, "crc32c": record_crc(record)}})
        self.committed, self.committed_specs = state, dict(specs)
        self.anchor, self.anchor_keys, self.undo_rows = anchor, tuple(anchor_keys), undo_rows

    def _key_entry(self, key: str, spec: KeySpec) -> dict:
        since = self.since.get(key)
        return spec.to_json() if since is None else {**spec.to_json(), "since": since}

    # -- the undo area -------------------------------------------------------------------------
    def save_undo(self, rows: int) -> None:
        """Copy the anchor's bytes of undo rows ``undo_rows .. rows`` (from ``anchor.pos`` on) to the undo area.

        Call it before those rows are overwritten, then commit ``undo_rows=rows``: an interrupted
        copy leaves the committed ``undo_rows`` as it was.
        """
        assert self.root is not None and self.anchor is not None
        if self.rowwise_undo:
            start = (self.anchor.pos + self.undo_rows) % self.capacity
            self.undo.save_rows(self.root, self.arrays, self.anchor_keys, start, rows - self.undo_rows)
        else:
            self.undo.save(self.root, self.arrays, self.anchor_keys, self.anchor.pos, self.undo_rows, rows)

    def restore(self, plan: RestorePlan) -> tuple[RingState, dict[str, KeySpec]]:
        """Return the store to ``plan.target`` (a checkpoint's state) and make that the anchor.

        ``plan`` is :func:`~digideep.memory.durable.readback.plan_restore`'s, checked before
        (every chunk the restore keeps is there and passes its checksum): this changes the store.
        If the target is the anchor (or older), the undo area is copied back first, so the anchor
        returns byte for byte however often the ring wrapped since. Otherwise, or for a target
        older than the anchor, :meth:`RingState.rolled_back` drops the rows written after it.

        Returns:
            The committed state and keys after the restore.
        """
        self.undo.tidy()
        anchor = self.anchor
        if plan.undo and anchor is not None:
            if self.rowwise_undo:
                self.undo.apply_rows(self.arrays, self.anchor_keys, anchor.pos, self.undo_rows)
            else:
                self.undo.apply(self.root, self.arrays, self.anchor_keys, anchor.pos, self.undo_rows)
            specs = {key: self.committed_specs[key] for key in self.anchor_keys}
            self._write_record(anchor, specs, anchor, self.anchor_keys, 0)
            self.undo.drop(self.root)
            self.rowwise_undo = False
        state = self.committed.rolled_back(plan.target, self.capacity)
        if state != self.committed or self.anchor != state or self.undo_rows:
            self.set_anchor(state, self.committed_specs)
        return self.committed, dict(self.committed_specs)

    def set_anchor(self, state: RingState, specs: dict[str, KeySpec], drop: bool = True) -> None:
        """Commit ``state`` as the anchor (a checkpoint holds it), then delete the undo area
        (``drop=False``: the caller calls :meth:`drop_undo` before the next write)."""
        self._write_record(state, specs, state, tuple(specs), 0)
        self.rowwise_undo = False
        if drop:
            self.drop_undo()

    def drop_undo(self) -> None:
        """Delete the undo area (the commit record no longer refers to it)."""
        self.undo.drop(self.root)

    # -- reading -------------------------------------------------------------------------------
    def read(self, key: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of every worker: ``(W, stop - start, ...)``."""
        return self.arrays[key][:, start:stop]

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Rows ``(workers[i], rows[i])`` read straight from disk: ``(n, *row_shape)``.

        Indices are sorted so each Zarr chunk is read once per call; one orthogonal read per worker.
        """
        array = self.arrays[key]
        order = np.lexsort((rows, workers))
        w_sorted, r_sorted = workers[order], rows[order]
        out = np.empty((len(rows), *array.shape[2:]), dtype=array.dtype)
        sorted_out = np.empty_like(out)
        bounds = np.flatnonzero(np.diff(w_sorted)) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(w_sorted)], strict=True):
            if hi > lo:
                sorted_out[lo:hi] = array.oindex[int(w_sorted[lo]), r_sorted[lo:hi]]
        out[order] = sorted_out
        return out
