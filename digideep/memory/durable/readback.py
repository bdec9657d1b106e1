"""Reading a memory's Zarr group back (a load, a restore), checked before anything is changed.

A resume must not change the session when it refuses: a restore that copied the undo area back,
or rolled the commit record back, before it found a damaged chunk would leave a memory that no
checkpoint resumes any more. So reading back goes in two steps:

1. :func:`plan_restore` (or :func:`plan_load`), reading only the commit record: what the group will
   hold after the restore (the state, the keys, where every row comes from: the array, or the undo
   area's copy of its chunk). :func:`check_present` then lists each array's chunk files (one listing
   per array, no chunk read) and refuses when a chunk file that rows written need is missing.
   :func:`read_plan` reads every chunk the refilled ring needs, each from where it will be after
   the restore, into new arrays (the write-through memory's next RAM ring), and
   :func:`verify_plan` reads them chunk by chunk (the Zarr-only memory), so zarr checks every
   chunk's crc32c: each chunk is read once, as before the check existed;
2. only then :meth:`~digideep.memory.durable.zarr_group.ZarrGroup.restore` changes the store (the
   undo area copied back, the record committed) and the arrays read become the RAM ring.

Which chunk files must exist: a key's record entry says from which ``total`` on it was written
(``since``); every ring row written since then (``total`` ``since`` to the state's, modulo the
capacity) lies in a chunk that was written, and every chunk written is a file
(:data:`~digideep.memory.durable.integrity.ARRAY_CONFIG`). Keys of records without ``since``
(written by earlier versions, whose zarr skipped chunks of placeholders alone) are not listed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import zarr

from digideep.memory.durable.integrity import missing_chunks, raise_damage, raise_missing
from digideep.memory.durable.undo import chunks_of_rows
from digideep.memory.layout import KeySpec
from digideep.memory.ring import RingState, ring_slices

if TYPE_CHECKING:
    from digideep.memory.durable.zarr_group import ZarrGroup

__all__ = [
    "RestorePlan",
    "Segment",
    "check_present",
    "filled_rows",
    "plan_load",
    "plan_restore",
    "read_many",
    "read_plan",
    "verify_plan",
]

_THREADS = 8  # keys read at once (each read fetches up to zarr's async.concurrency chunks)
_BAD_BYTES = (ValueError, RuntimeError, EOFError)  # the codecs' errors for bad bytes

try:  # read straight into the ring, without a temporary copy (zarr 3 API)
    from zarr.core.buffer.cpu import NDBuffer as _NDBuffer
except ImportError:  # pragma: no cover - other zarr 3 releases
    _NDBuffer = None


@dataclass(frozen=True)
class Segment:
    """Rows ``start:stop`` of ``key`` (every worker), read from the undo area's array if ``undo``."""

    key: str
    start: int
    stop: int
    undo: bool


@dataclass(frozen=True)
class RestorePlan:
    """What a restore gives, planned from the commit record alone.

    Attributes:
        target: the state asked for (a checkpoint's).
        state: the committed state after the restore: ``target``, shrunk to the rows that survive.
        data: the state whose rows the arrays hold after the restore (the anchor when the undo area
            is copied back, else the committed state).
        specs: the keys after the restore.
        undo: whether the undo area is copied back.
        rows: rows per worker that the ring refills (``0 .. rows``).
        segments: where each of those rows is read from.
    """

    target: RingState
    state: RingState
    data: RingState
    specs: dict[str, KeySpec]
    undo: bool
    rows: int
    segments: tuple[Segment, ...]


def filled_rows(state: RingState, capacity: int) -> int:
    """Rows per worker holding data at ``state`` (``0 .. rows``): every row once the ring wrapped."""
    return min(capacity, state.total + 1) if state.last_chunk_rows else 0


def plan_restore(group: ZarrGroup, target: RingState) -> RestorePlan:
    """The plan of :meth:`ZarrGroup.restore` to ``target`` (an open group; reads nothing more).

    Raises:
        ValueError: if ``target`` is newer than the store or not one of its predecessors.
    """
    anchor = group.anchor
    undo = anchor is not None and group.undo_rows > 0 and target.total <= anchor.total
    if undo:
        assert anchor is not None
        data, specs = anchor, {key: group.committed_specs[key] for key in group.anchor_keys}
    else:
        data, specs = group.committed, dict(group.committed_specs)
    state = data.rolled_back(target, group.capacity)
    return _plan(group, target, state, data, specs, undo)


def plan_load(group: ZarrGroup) -> RestorePlan:
    """The plan of a load: the committed state as it is (the undo area stays where it is)."""
    committed = group.committed
    return _plan(group, committed, committed, committed, dict(group.committed_specs), False)


def _plan(
    group: ZarrGroup,
    target: RingState,
    state: RingState,
    data: RingState,
    specs: dict[str, KeySpec],
    undo: bool,
) -> RestorePlan:
    rows = filled_rows(state, group.capacity)
    segments: list[Segment] = []
    for key in specs:
        covered = _undo_ranges(group, key) if undo else []
        start = 0
        for a, b in covered:
            a, b = min(a, rows), min(b, rows)
            if start < a:
                segments.append(Segment(key, start, a, False))
            if a < b:
                segments.append(Segment(key, a, b, True))
            start = max(start, b)
        if start < rows:
            segments.append(Segment(key, start, rows, False))
    return RestorePlan(target, state, data, specs, undo, rows, tuple(segments))


def _undo_ranges(group: ZarrGroup, key: str) -> list[tuple[int, int]]:
    """Sorted, disjoint row ranges of ``key`` whose bytes the undo area's copy replaces."""
    anchor, capacity = group.anchor, group.capacity
    assert anchor is not None
    if group.rowwise_undo:  # layout format 2: rows
        return sorted((a, b) for a, b, _ in ring_slices(anchor.pos, group.undo_rows, capacity))
    chunk_rows = group.chunk_rows_of(key)
    ranges: list[tuple[int, int]] = []
    for index in sorted(chunks_of_rows(anchor.pos, group.undo_rows, capacity, chunk_rows)):
        a, b = index * chunk_rows, min(capacity, (index + 1) * chunk_rows)
        if ranges and ranges[-1][1] == a:
            ranges[-1] = (ranges[-1][0], b)
        else:
            ranges.append((a, b))
    return ranges


def _written(group: ZarrGroup, key: str, state: RingState) -> set[int]:
    """Row chunks of ``key`` that hold rows written up to ``state`` (empty when ``since`` is unknown)."""
    since = group.since.get(key)
    if since is None or not state.last_chunk_rows or state.total < since:
        return set()
    return chunks_of_rows(
        since % group.capacity, state.total - since + 1, group.capacity, group.chunk_rows_of(key)
    )


def check_present(group: ZarrGroup, plan: RestorePlan) -> None:
    """Refuse when a chunk file that the plan reads, or copies back, is missing (listings only).

    Raises:
        DamagedMemoryError: naming the memory, the key and the missing chunk files.
    """
    assert group.root is not None
    store = group.root.store
    missing: dict[str, list[str]] = {}
    for key in plan.specs:
        written = _written(group, key, plan.data)
        if not written:
            continue
        chunk_rows = group.chunk_rows_of(key)
        read = {index for index in written if index * chunk_rows < plan.rows}
        copied: set[int] = set()
        if plan.undo and not group.rowwise_undo:
            copied = written & chunks_of_rows(group.anchor.pos, group.undo_rows, group.capacity, chunk_rows)  # type: ignore[union-attr]
            missing[key] = missing_chunks(store, group.undo.arrays[key], copied)
        missing[key] = missing.get(key, []) + missing_chunks(store, group.arrays[key], read - copied)
    raise_missing(missing, _what(group))


def _source(group: ZarrGroup, segment: Segment) -> zarr.Array:
    return group.undo.arrays[segment.key] if segment.undo else group.arrays[segment.key]


def read_plan(group: ZarrGroup, plan: RestorePlan, rings: dict[str, np.ndarray]) -> None:
    """Read the plan's rows into ``rings`` (``(W, C, ...)`` per key, of ``plan.specs``), the keys
    concurrently; zarr checks every chunk read against its checksum.

    Raises:
        DamagedMemoryError: a chunk fails its checksum or does not decode; names the chunks.
    """
    reads = [
        (_source(group, s), s.key, rings[s.key][:, s.start : s.stop], s.start, s.stop) for s in plan.segments
    ]
    read_many(group, reads)


def read_many(group: ZarrGroup, reads: list[tuple[zarr.Array, str, np.ndarray, int, int]]) -> None:
    """Read ``(array, key, out, start, stop)``: rows ``start:stop`` of every worker of ``array`` into
    ``out``, the reads concurrently (a resume reads every chunk of a 1M-row memory on object
    storage in parallel, not one after another).

    Raises:
        DamagedMemoryError: a chunk read fails its checksum or does not decode; names the chunks.
    """
    with ThreadPoolExecutor(max(1, min(len(reads), _THREADS))) as pool:
        futures = [(read, pool.submit(_read_into, read[0], read[2], read[3], read[4])) for read in reads]
    for (array, key, _, _, stop), future in futures:
        error = future.exception()
        if error is not None:
            raise_damage(array, key, stop, error, _what(group))


def _read_into(array: zarr.Array, out: np.ndarray, start: int, stop: int) -> None:
    """Read rows ``start:stop`` of every worker into ``out`` (a ``(W, stop - start, ...)`` view)."""
    selection = (slice(None), slice(start, stop))
    if _NDBuffer is not None:
        array.get_basic_selection(selection, out=_NDBuffer.from_numpy_array(out))
    else:  # pragma: no cover
        out[...] = array[selection]


def verify_plan(group: ZarrGroup, plan: RestorePlan) -> None:
    """Read every chunk of the plan's rows once, one chunk-row window at a time, and drop it: zarr
    checks each against its checksum (a Zarr-only memory has no RAM ring to fill).

    Raises:
        DamagedMemoryError: naming the chunks that fail.
    """
    for segment in plan.segments:
        array = _source(group, segment)
        step = array.chunks[1]
        for start in range(segment.start // step * step, segment.stop, step):
            try:
                array[:, max(start, segment.start) : min(segment.stop, start + step)]
            except _BAD_BYTES as error:
                raise_damage(array, segment.key, segment.stop, error, _what(group))


def _what(group: ZarrGroup) -> str:
    return f"memory '{group.name}' at {group.location}"
