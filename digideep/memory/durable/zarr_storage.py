"""The Zarr-only storage (``mode="disk"``), and the crash protocol every durable storage runs.

:class:`ZarrStorage` holds a memory's :class:`~digideep.memory.durable.zarr_group.ZarrGroup` and
the protocol of :mod:`digideep.memory.durable`: before rows of the committed state or the anchor
are overwritten, :meth:`ZarrStorage.protect` copies the anchor's Zarr chunks to the undo area and
shrinks the committed state, in one commit; :meth:`ZarrStorage.commit` records a new state after
its rows are written. Used alone, it writes every stored chunk's rows straight to Zarr and
sampling reads Zarr; the write-through storage
(:class:`~digideep.memory.durable.write_through.WriteThroughStorage`) runs the same protocol from
its background thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np
import zarr

from digideep.memory.durable.readback import RestorePlan, check_present, plan_load, plan_restore, verify_plan
from digideep.memory.durable.zarr_group import ZarrGroup
from digideep.memory.layout import KeySpec, fill_value
from digideep.memory.ring import RingState, rows_written_since, surviving_size
from digideep.memory.storage import Pieces, PreparedRestore, Storage
from digideep.storage.location import Location

__all__ = ["DISK_CHUNK_BYTES", "WRITE_THROUGH_CHUNK_BYTES", "ZarrStorage"]

logger = logging.getLogger(__name__)

DISK_CHUNK_BYTES = (
    1 << 18
)  # Zarr-only storage: Zarr chunks of one worker, about 256 KiB (sampling reads them)
WRITE_THROUGH_CHUNK_BYTES = 1 << 22  # write-through: Zarr chunks of all workers, about 4 MiB (few large PUTs)


class ZarrStorage(Storage):
    """The Zarr group of a memory and its crash-safe protocol (the anchor, the undo area, commits).

    Used alone (``mode="disk"``), :meth:`write` writes every stored chunk's rows straight to Zarr and
    sampling reads Zarr. The write-through storage uses its :meth:`protect`, :meth:`commit` and
    :attr:`group` (the :class:`~digideep.memory.durable.zarr_group.ZarrGroup`) to write in the
    background.

    Args:
        location: the group's place (local folder or fsspec URL).
        num_workers: ``W``, the memory's.
        capacity: ``C``, rows per worker, the memory's.
        name: the memory's, shown in messages.
        chunk_rows: rows per Zarr chunk, or ``None`` to size Zarr chunks to ``chunk_bytes``.
        chunk_bytes: target Zarr chunk size.
        chunk_workers: workers per chunk (1 or ``num_workers``).
        compression: ``None``, ``"zstd"`` or ``"lz4"``.
    """

    def __init__(
        self,
        location: Location,
        num_workers: int,
        capacity: int,
        name: str,
        chunk_rows: int | None = None,
        chunk_bytes: int = DISK_CHUNK_BYTES,
        chunk_workers: int = 1,
        compression: str | None = None,
    ) -> None:
        super().__init__(num_workers, capacity, name)
        self.location = location
        self.group = ZarrGroup(
            location, num_workers, capacity, chunk_rows, chunk_bytes, compression, name, chunk_workers
        )
        self.specs: dict[str, KeySpec] = {}  # keys stored so far, committed or not

    @property
    def durable(self) -> bool:
        return True

    # -- the crash protocol ----------------------------------------------------------------------------
    def ensure_open(self) -> ZarrGroup:
        """The group, created empty if this memory has not written it yet (refused if the place is taken)."""
        if not self.group.is_open:
            self.group.create()
        return self.group

    def add_keys(self, specs: dict[str, KeySpec], state: RingState) -> None:
        """Create the arrays of keys first stored by the chunk that led to ``state`` (recreating
        leftovers of an interrupted write)."""
        since = state.total - max(0, state.last_chunk_rows - 1)  # the total of the chunk's first row
        for key, spec in specs.items():
            self.group.create_array(key, spec, since)
            self.specs[key] = spec

    def protect(self, new_total: int, undo_total: int | None = None) -> None:
        """Before writing rows up to ``new_total``, make the committed state and the anchor survive it.

        Rows the anchor held that are about to be overwritten for the first time since it (up to
        ``undo_total`` if given: copying ahead) are saved to the undo area, in whole chunks; the
        committed state shrinks to the rows it keeps. Both are recorded in one commit, before any
        of those rows is written.
        """
        group = self.group
        committed = group.committed
        keep = surviving_size(committed.size, new_total - committed.total, self.capacity)
        undo = group.undo_rows
        if group.anchor is not None:
            ahead = new_total if undo_total is None else max(new_total, undo_total)
            undo = max(undo, rows_written_since(group.anchor, ahead, self.capacity))
            if undo > group.undo_rows:
                group.save_undo(undo)
        if keep < committed.size or undo > group.undo_rows:
            group.commit(replace(committed, size=keep), group.committed_specs, undo_rows=undo)

    def commit(self, state: RingState, specs: Mapping[str, KeySpec]) -> None:
        """Commit ``state`` and ``specs`` (after their rows are written); nothing if unchanged."""
        group = self.ensure_open()
        if state != group.committed or any(key not in group.committed_specs for key in specs):
            group.commit(state, dict(specs))
            logger.debug("memory '%s' committed: %s", self.name, state)

    # -- the Storage contract (Zarr only) -------------------------------------------------------
    def array(self, key: str) -> zarr.Array:
        return self.group.arrays[key]

    def write(
        self, chunk: Mapping[str, np.ndarray], pieces: Pieces, new_specs: dict[str, KeySpec], state: RingState
    ) -> None:
        """Write the chunk's rows straight to Zarr (after :meth:`protect`); committed by :meth:`flush`."""
        self.ensure_open()
        self.protect(state.total)
        self.add_keys(new_specs, state)
        for key, spec in self.specs.items():
            value = chunk.get(key)
            for a, b, offset in pieces:
                self.group.write(
                    key, a, b, fill_value(spec.dtype) if value is None else value[:, offset : offset + b - a]
                )

    def read(self, key: str, start: int, stop: int) -> np.ndarray:
        return self.group.read(key, start, stop)

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self.group.gather(key, workers, rows)

    def flush(self, state: RingState) -> None:
        self.commit(state, self.specs)

    def wait(self) -> None:
        """Writes are synchronous: nothing in flight."""

    def guard_writes(self, guard: Callable[[], None]) -> None:
        """Not run: this storage writes Zarr in :meth:`write`, on the caller's thread, not behind it."""

    def close(self) -> None:
        """Nothing to release (files are closed after every write)."""

    def checkpoint_committed(self, state: RingState) -> None:
        """Make ``state`` (the flushed state a checkpoint now holds) the anchor; delete the old undo area."""
        self.set_anchor(state)

    def set_anchor(self, state: RingState, drop: bool = True) -> bool:
        """Make ``state`` (the flushed state a checkpoint now holds) the anchor; drop the undo area.

        Args:
            state: the flushed state.
            drop: delete the old undo area now; ``False``: the caller calls
                :meth:`ZarrGroup.drop_undo` before the next write.

        Returns:
            Whether the anchor changed (so there may be an old area to delete).

        Raises:
            ValueError: if ``state`` is not the flushed state.
        """
        group = self.group
        if not group.is_open or state != group.committed:
            flushed = group.committed if group.is_open else "nothing"
            raise ValueError(
                f"memory '{self.name}': the checkpoint holds {state} but the flushed state is "
                f"{flushed}; call flush() before saving the checkpoint"
            )
        if group.anchor != state or group.undo_rows:
            group.set_anchor(state, group.committed_specs, drop)
            return True
        return False

    def load(self, verify: bool = True) -> tuple[RingState, dict[str, KeySpec]]:
        """Open the group; return its committed state and keys.

        Args:
            verify: read every chunk and check its checksum (the write-through storage checks them
                as it fills its RAM ring, so it passes ``False``). The chunk files are always listed.

        Raises:
            DamagedMemoryError: a chunk file is missing or a chunk fails its checksum.
        """
        state, specs = self.group.open()
        plan = plan_load(self.group)
        check_present(self.group, plan)
        if verify:
            verify_plan(self.group, plan)
        self.specs = dict(specs)
        logger.info("memory '%s' loaded from %s: %s", self.name, self.location, state)
        return state, specs

    def plan_restore(self, target: RingState) -> RestorePlan | None:
        """Open the group (reading only) and plan the restore to ``target``; its chunk files are
        listed and must be there (see :mod:`~digideep.memory.durable.readback`); no chunk is read.

        Returns:
            The plan, or ``None`` when nothing was flushed here and ``target`` holds no rows.

        Raises:
            FileNotFoundError: if nothing was flushed at the location and ``target`` holds rows.
            ValueError: if ``target`` is not a state of this group.
            DamagedMemoryError: the commit record is damaged or a chunk file is missing.
        """
        if not self.group.is_open:
            if target.total == 0 and not self.location.zarr_exists():
                return None  # nothing stored yet, nothing to restore
            self.group.open(tidy=False)
        plan = plan_restore(self.group, target)
        check_present(self.group, plan)
        return plan

    def prepare_restore(self, target: RingState, current: RingState) -> PreparedRestore:
        """:meth:`plan_restore`, then every chunk the restore keeps is read once and checked (nothing
        is changed: the undo area's chunks are read where they are)."""
        plan = self.plan_restore(target)
        if plan is None:
            return PreparedRestore(target, target)
        verify_plan(self.group, plan)
        return PreparedRestore(target, plan.state, plan)

    def restore(
        self, target: RingState, current: RingState, prepared: PreparedRestore | None = None
    ) -> RingState:
        """Return the group to ``target`` (see :meth:`ZarrGroup.restore`) and make it the anchor.

        ``prepared``: :meth:`prepare_restore`'s, or a plan's (the write-through storage read the
        chunks itself); made now when not given.

        Raises:
            FileNotFoundError: if nothing was flushed at the location and ``target`` holds rows.
            ValueError: if ``target`` is not a state of this group.
            DamagedMemoryError: a chunk file is missing or a chunk fails its checksum.
        """
        prepared = prepared or self.prepare_restore(target, current)
        if prepared.staged is None:
            return prepared.state
        state, specs = self.group.restore(prepared.staged)
        self.specs = dict(specs)
        logger.info("memory '%s' restored to %s", self.name, state)
        return state
