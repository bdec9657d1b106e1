"""The durable copy of a circular memory: a Zarr group with one array per key and a commit record.

Layout of the group folder (``<session>/memory/<name>.zarr``)::

    zarr.json                 group metadata; its attribute "digideep_memory" is the commit record
    observations/zarr.json    one array per key, the key's path without its leading "/"
    observations/c/...        chunks of (1 worker, chunk_rows rows, *row_shape), uncompressed by default
    agents/agent/actions/...

Every array is shaped ``(num_workers, capacity, *row_shape)``; rows never written read as the nonify
placeholder (the arrays' fill value). The commit record holds the format version, ``num_workers``,
``capacity``, the ring pointers (``pos``, ``size``, ``total``, ``last_chunk_rows``, see
:mod:`digideep.memory.ring`) and the committed keys with their dtype and row shape. Only committed
keys are loaded; an array left by an interrupted flush is recreated the next time its key is stored.

The record is one small JSON document written in a single store operation. Zarr's ``LocalStore``
writes it to a temporary file and renames it into place, object stores replace an object in one
PUT, so a reader sees the old record or the new one, never a mix.
"""

from __future__ import annotations

import logging
from math import prod
from pathlib import Path

import numpy as np
import zarr

from digideep.memory.layout import KeySpec, fill_value
from digideep.memory.ring import RingState

__all__ = ["ATTR", "FORMAT", "ZarrStore"]

logger = logging.getLogger(__name__)

ATTR = "digideep_memory"  # name of the group attribute that holds the commit record
FORMAT = 1  # version of the layout above

try:  # read straight into the ring, without a temporary copy (zarr 3 API)
    from zarr.core.buffer.cpu import NDBuffer as _NDBuffer
except ImportError:  # pragma: no cover - other zarr 3 releases
    _NDBuffer = None


def _compressors(compression: str | None) -> object:
    if compression is None or compression == "none":
        return None
    if compression == "zstd":
        return zarr.codecs.ZstdCodec(level=1)
    if compression == "lz4":
        return zarr.codecs.BloscCodec(cname="lz4", clevel=1, shuffle="shuffle")
    raise ValueError(f"compression must be None, 'none', 'zstd' or 'lz4', got {compression!r}")


class ZarrStore:
    """One memory's Zarr group: create or open it, write and read row ranges, commit the pointers.

    Args:
        path: folder of the group.
        num_workers: ``W``, first axis of every array.
        capacity: ``C``, rows per worker, second axis of every array.
        chunk_rows: rows per Zarr chunk; ``None`` sizes each key's chunks to about ``chunk_bytes``.
        chunk_bytes: target chunk size when ``chunk_rows`` is ``None``.
        compression: ``None`` (default, fastest: replay data barely compresses), ``"zstd"`` or ``"lz4"``.
        name: shown in messages.
    """

    def __init__(
        self,
        path: Path,
        num_workers: int,
        capacity: int,
        chunk_rows: int | None,
        chunk_bytes: int,
        compression: str | None,
        name: str,
    ) -> None:
        self.path = path
        self.num_workers = num_workers
        self.capacity = capacity
        self.chunk_rows = chunk_rows
        self.chunk_bytes = chunk_bytes
        self.compressors = _compressors(compression)
        self.name = name
        self.group: zarr.Group | None = None
        self.arrays: dict[str, zarr.Array] = {}
        self.committed = RingState()
        self.committed_specs: dict[str, KeySpec] = {}

    # -- opening -------------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self.group is not None

    def create(self) -> None:
        """Create an empty group and commit the empty state.

        Raises:
            ValueError: if the folder already holds something (a memory must be continued with
                ``load()``, never silently overwritten).
        """
        if self.path.exists() and any(self.path.iterdir()):
            record = self._peek_record()
            what = "a digideep memory" if record is not None else "files that are not a digideep memory"
            raise ValueError(
                f"memory '{self.name}': {self.path} already holds {what}; call load() to continue "
                "it, or delete the folder (or pick another path) to start a new memory"
            )
        self.group = zarr.open_group(str(self.path), mode="w")
        self.arrays = {}
        self.commit(RingState(), {})

    def open(self) -> tuple[RingState, dict[str, KeySpec]]:
        """Open an existing group and check that it is a memory of this layout.

        Returns:
            The committed state and the committed keys' specs.

        Raises:
            FileNotFoundError: if the folder does not exist.
            ValueError: if it is not a digideep memory of this format, worker count and capacity.
        """
        if not self.path.exists():
            raise FileNotFoundError(
                f"memory '{self.name}': no memory to load at {self.path}; it is written by flush() "
                "(the Runner flushes before every checkpoint)"
            )
        record = self._peek_record()
        if record is None:
            raise ValueError(
                f"memory '{self.name}': {self.path} is not a digideep memory (no Zarr group with a "
                f"'{ATTR}' attribute); point the memory at its own folder"
            )
        if record.get("format") != FORMAT:
            raise ValueError(
                f"memory '{self.name}': {self.path} has layout format {record.get('format')!r}, this "
                f"version reads format {FORMAT}; open it with the digideep version that wrote it"
            )
        layout = (record.get("num_workers"), record.get("capacity"))
        if layout != (self.num_workers, self.capacity):
            raise ValueError(
                f"memory '{self.name}': {self.path} holds num_workers={layout[0]}, capacity={layout[1]}, "
                f"but this memory was created with num_workers={self.num_workers}, "
                f"capacity={self.capacity}; create it with the values of the run that wrote it"
            )
        try:
            state = RingState(*(int(record[k]) for k in ("pos", "size", "total", "last_chunk_rows")))
            specs = {key: KeySpec.from_json(entry) for key, entry in record["keys"].items()}
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(
                f"memory '{self.name}': the commit record in {self.path} is damaged: {error!r}"
            ) from None
        self.group = zarr.open_group(str(self.path), mode="r+")
        self.arrays = {}
        for key, spec in specs.items():
            array = self.group.get(key[1:])
            expected = (self.num_workers, self.capacity, *spec.shape)
            if not isinstance(array, zarr.Array) or array.shape != expected or array.dtype != spec.dtype:
                found = (
                    "nothing" if array is None else f"{type(array).__name__} {getattr(array, 'shape', '')}"
                )
                raise ValueError(
                    f"memory '{self.name}': {self.path} commits key '{key}' as {spec.dtype} {expected} but "
                    f"the store holds {found} {getattr(array, 'dtype', '')}; the folder was changed by "
                    "something else than this memory"
                )
            self.arrays[key] = array
        self.committed, self.committed_specs = state, specs
        return state, dict(specs)

    def _peek_record(self) -> dict | None:
        """The commit record of the folder, or ``None`` if it is not a group carrying one."""
        try:
            group = zarr.open_group(str(self.path), mode="r")
            record = group.attrs.get(ATTR)
        except Exception as error:  # any reason it is not a readable group
            logger.debug("%s is not a readable Zarr group: %r", self.path, error)
            return None
        return record if isinstance(record, dict) else None

    # -- writing -------------------------------------------------------------------------------
    def create_array(self, key: str, spec: KeySpec) -> None:
        """Create (or recreate, dropping leftovers of an interrupted flush) the array of ``key``."""
        assert self.group is not None
        if self.chunk_rows is not None:
            rows = self.chunk_rows
        else:
            row_bytes = max(1, spec.dtype.itemsize * prod(spec.shape))
            rows = self.chunk_bytes // row_bytes
        rows = max(1, min(self.capacity, rows))
        self.arrays[key] = self.group.create_array(
            key[1:],
            shape=(self.num_workers, self.capacity, *spec.shape),
            chunks=(1, rows, *(max(1, d) for d in spec.shape)),
            dtype=spec.dtype,
            fill_value=fill_value(spec.dtype),
            compressors=self.compressors,
            overwrite=True,
        )

    def write(self, key: str, start: int, stop: int, values: np.ndarray | np.generic) -> None:
        """Write rows ``start:stop`` of every worker; ``values`` is ``(W, stop - start, ...)`` or a scalar."""
        self.arrays[key][:, start:stop] = values

    def commit(self, state: RingState, specs: dict[str, KeySpec]) -> None:
        """Replace the commit record in one atomic write. Call it after the data it describes."""
        assert self.group is not None
        record = {
            "format": FORMAT,
            "num_workers": self.num_workers,
            "capacity": self.capacity,
            **state.as_dict(),
            "keys": {key: spec.to_json() for key, spec in specs.items()},
        }
        self.group.attrs.update({ATTR: record})
        self.committed, self.committed_specs = state, dict(specs)

    # -- reading -------------------------------------------------------------------------------
    def read_into(self, key: str, out: np.ndarray, start: int, stop: int) -> None:
        """Read rows ``start:stop`` of every worker into ``out`` (a ``(W, stop - start, ...)`` view)."""
        selection = (slice(None), slice(start, stop))
        if _NDBuffer is not None:
            self.arrays[key].get_basic_selection(selection, out=_NDBuffer.from_numpy_array(out))
        else:  # pragma: no cover
            out[...] = self.arrays[key][selection]

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
