"""The RAM ring of a memory: the check of an incoming chunk (the Explorer's flat dict of
``(W, T + 1, *row_shape)`` arrays), one ``(W, C, *row_shape)`` array per key, its pointers and its
mirror on a torch device. Row ``g`` of a memory (its *global* row, the ``g``-th it stored, per
worker) lives at physical row ``g % C``. A chunk stored at ``total`` fills global rows
``total .. total + T``; its last row, the final prestep, is overwritten by the next chunk's first
row. The state (:class:`RingState`):

- ``total``: rows stored so far (``T`` per chunk); the final prestep is global row ``total``;
- ``pos``: its physical row, ``total % C``;
- ``size``: valid transition rows, global rows ``total - size .. total - 1`` (``size <= C - 1``);
- ``last_chunk_rows``: ``T + 1`` of the latest chunk.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

import numpy as np
import torch

from digideep.utility.placeholders import placeholder_array

logger = logging.getLogger(__name__)

FIELDS = ("pos", "size", "total", "last_chunk_rows")  # the pointers, in a memory's state_dict
Pieces = list[tuple[int, int, int]]  # (ring_start, ring_stop, offset in the chunk), see ring_slices


@dataclass(frozen=True)
class KeySpec:
    """What a key holds per row: ``dtype`` and ``shape`` (the trailing dims after workers and rows)."""

    dtype: np.dtype
    shape: tuple[int, ...]


def fill_value(dtype: np.dtype) -> np.generic:
    """The nonify placeholder of ``dtype``: NaN for floats, ``iinfo.min`` for ints, False for bools."""
    return placeholder_array((), dtype)[()]


def validate_chunk(
    chunk: Mapping[str, np.ndarray],
    num_workers: int,
    specs: Mapping[str, KeySpec],
    capacity: int | None = None,
    name: str = "memory",
) -> tuple[int, dict[str, KeySpec]]:
    """Check ``chunk`` against a memory's ``specs`` and ``capacity`` (``None``: no bound), changing
    nothing: ``(T + 1, the specs of its new keys)``.

    Raises:
        TypeError, ValueError: naming the key that does not fit and how to fix it.
    """
    if not isinstance(chunk, Mapping) or not chunk:
        raise TypeError(
            f"{name}: a chunk must be a non-empty dict of numpy arrays, got {type(chunk).__name__}"
        )
    rows, first_key = None, ""
    new_specs: dict[str, KeySpec] = {}
    for key, value in chunk.items():
        spec = specs.get(key)
        if spec is None and not isinstance(key, str):
            raise TypeError(f"chunk keys must be strings like '/observations', got {key!r}")
        if spec is None and (
            not key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/")[1:])
        ):
            raise ValueError(
                f"chunk key {key!r} is not a flat unix-style path like '/agents/agent/actions'; "
                "flatten nested dicts with digideep.environment.data_helpers.flatten_dict"
            )
        if not isinstance(value, np.ndarray):
            raise TypeError(
                f"{name}: chunk key '{key}' is a {type(value).__name__}, expected a numpy array "
                "(convert tensors with .cpu().numpy() before storing)"
            )
        shape = value.shape
        if len(shape) < 2:
            raise ValueError(
                f"{name}: chunk key '{key}' has shape {shape}; values must be (num_workers, T + 1, ...)"
            )
        if shape[0] != num_workers:
            raise ValueError(
                f"{name}: chunk key '{key}' holds {shape[0]} workers (shape {shape}) but the memory was "
                f"created for num_workers={num_workers}; store chunks of the same explorer or create "
                "the memory with its num_workers"
            )
        if rows is None:
            rows, first_key = shape[1], key
        elif shape[1] != rows:
            raise ValueError(
                f"{name}: chunk key '{key}' has {shape[1]} rows but '{first_key}' has {rows}; every "
                "value of a chunk must be (num_workers, T + 1, ...) with the same T"
            )
        if spec is None:
            if value.dtype.kind not in "biufc":
                raise TypeError(
                    f"{name}: chunk key '{key}' has dtype {value.dtype}; a memory stores bool, int, "
                    "float and complex arrays only"
                )
            new_specs[key] = KeySpec(value.dtype, shape[2:])
        elif value.dtype != spec.dtype or shape[2:] != spec.shape:
            raise ValueError(
                f"{name}: chunk key '{key}' changed from {spec.dtype} {spec.shape} to {value.dtype} "
                f"{shape[2:]} (dtype, per-row shape); keep each key's dtype and shape fixed during a run "
                "(cast in the explorer or the env wrappers) or store it under a new key"
            )
    assert rows is not None
    if rows < 2:
        raise ValueError(
            f"{name}: a chunk needs at least 2 rows (T >= 1 steps plus the final prestep), got {rows}"
        )
    if capacity is not None and rows > capacity:
        raise ValueError(
            f"{name}: a chunk of {rows} rows does not fit a capacity of {capacity} rows per worker; "
            "raise the capacity or store shorter chunks (n_steps)"
        )
    for key in new_specs:  # Zarr cannot hold '/a' and '/a/b': an array is not a folder
        for other in {*specs, *new_specs}:
            parent, child = sorted((key, other), key=len)
            if child.startswith(parent + "/"):
                raise ValueError(
                    f"{name}: keys '{parent}' and '{child}' cannot both be stored: '{parent}' would be "
                    "an array and a folder at once; rename one of them"
                )
    return rows, new_specs


@dataclass(frozen=True)
class RingState:
    """Pointers of a ring (see the module docstring)."""

    pos: int = 0
    size: int = 0
    total: int = 0
    last_chunk_rows: int = 0

    @staticmethod
    def from_dict(state: Mapping[str, int]) -> RingState:
        """The pointers of a ``state_dict`` (extra entries ignored); refuses one that lacks some."""
        missing = [key for key in FIELDS if key not in state]
        if missing:
            raise ValueError(f"memory state lacks {missing}; it holds {sorted(state)}")
        return RingState(*(int(state[key]) for key in FIELDS))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @property
    def first(self) -> int:
        """Global row of the oldest valid row."""
        return self.total - self.size

    def advance(self, rows: int, capacity: int) -> RingState:
        """The state after storing a chunk of ``rows = T + 1`` rows (``2 <= rows <= capacity``)."""
        steps = rows - 1
        return RingState(
            (self.pos + steps) % capacity, min(capacity - 1, self.size + steps), self.total + steps, rows
        )

    def restored(self, target: RingState, capacity: int, first: int) -> RingState:
        """``target``, an earlier state of this ring's data, with the rows from global row ``first`` on
        (the oldest the data still holds); refuses a newer state or one of another ring."""
        if target.total > self.total:
            raise ValueError(
                f"memory state with total={target.total} rows is newer than the stored data "
                f"(total={self.total}); the memory was not flushed before that state was saved"
            )
        if target.pos != target.total % capacity:
            raise ValueError(
                f"memory state (pos={target.pos}, total={target.total}) does not belong to a memory of "
                f"capacity {capacity}; was it saved by another memory?"
            )
        size = max(0, min(target.size, target.total - first))
        return RingState(target.pos, size, target.total, target.last_chunk_rows)


def ring_slices(start: int, count: int, capacity: int) -> Pieces:
    """``count <= capacity`` rows from physical row ``start`` as at most two contiguous pieces, split
    at the wrap-around: ``[(ring_start, ring_stop, offset among the count rows), ...]``."""
    if count > capacity:
        raise ValueError(f"cannot place {count} rows in a ring of capacity {capacity}")
    if count <= 0:
        return []
    stop = start + count
    if stop <= capacity:
        return [(start, stop, 0)]
    return [(start, capacity, 0), (0, stop - capacity, capacity - start)]


class Ring:
    """Numpy rings in RAM, ``arrays``: one ``(W, C, *row_shape)`` array per key, allocated when the key
    first comes (its earlier rows the placeholder, :func:`fill_value`)."""

    def __init__(self, num_workers: int, capacity: int) -> None:
        self.num_workers, self.capacity = num_workers, capacity
        self.arrays: dict[str, np.ndarray] = {}

    def store(
        self, chunk: Mapping[str, np.ndarray], pieces: Pieces, new_specs: Mapping[str, KeySpec]
    ) -> None:
        """Write a validated chunk's rows at ``pieces``; a known key the chunk lacks gets the placeholder."""
        self.arrays.update(self.empty(new_specs))
        for key, ring in self.arrays.items():
            value = chunk.get(key)
            for a, b, offset in pieces:
                ring[:, a:b] = fill_value(ring.dtype) if value is None else value[:, offset : offset + b - a]

    def empty(self, specs: Mapping[str, KeySpec]) -> dict[str, np.ndarray]:
        """New rings of ``specs``, placeholders everywhere."""
        shape = (self.num_workers, self.capacity)
        return {key: placeholder_array((*shape, *spec.shape), spec.dtype) for key, spec in specs.items()}

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Rows ``(workers[i], rows[i])`` (physical): one ``np.take``, ``(n, *row_shape)``."""
        ring = self.arrays[key]
        return ring.reshape(-1, *ring.shape[2:]).take(workers * self.capacity + rows, axis=0)


class DeviceMirror:
    """The rings of some keys of a :class:`Ring` on a torch ``device``, ``rings``: ``{key: (W, C,
    *row_shape) tensor}``, kept equal to them. On the CPU the ring itself (``torch.from_numpy``
    views), elsewhere a copy that every store updates and a restore refills (``copy``, default: on
    every device but the CPU; ``True`` on the CPU runs that path without a GPU). ``name``: the
    memory's, for the log."""

    def __init__(self, ring: Ring, device: torch.device | str, name: str, copy: bool | None = None) -> None:
        self.ring, self.device, self.name = ring, torch.device(device), name
        self.copy = self.device.type != "cpu" if copy is None else bool(copy)
        self.rings: dict[str, torch.Tensor] = {}

    def add(self, keys: Iterable[str]) -> None:
        """Mirror ``keys`` too (those not mirrored yet are filled from the ring now)."""
        for key in keys:
            if key not in self.rings:
                self._fill(key)

    def refill(self) -> None:
        """Fill every mirrored key from the ring again (after a restore, whose ring is new)."""
        for key in list(self.rings):
            self._fill(key)

    def write(self, pieces: Pieces) -> None:
        """Copy the rows a store just wrote, ``ring[:, start:stop]`` per piece (a no-op on the CPU)."""
        if not self.copy:
            return
        for key, tensor in self.rings.items():
            ring = self.ring.arrays[key]
            for start, stop, _ in pieces:
                tensor[:, start:stop].copy_(torch.from_numpy(ring[:, start:stop]))

    def gather(self, key: str, index: torch.Tensor) -> torch.Tensor:
        """Rows ``index`` (``(n,) int64`` on :attr:`device`, ``worker * capacity + physical_row``) of the
        ring of ``key``: ``(n, *row_shape)``, a new tensor; on the CPU by numpy's ``take``, faster
        there than ``index_select`` (``docs/memory.md``)."""
        ring = self.rings[key]
        flat = ring.view(-1, *ring.shape[2:])
        if self.device.type == "cpu":
            return torch.from_numpy(flat.numpy().take(index.numpy(), axis=0))
        return flat.index_select(0, index)

    def _fill(self, key: str) -> None:
        ring = self.ring.arrays[key]
        host = torch.from_numpy(ring)
        tensor = host.to(self.device, copy=True) if self.copy else host
        self.rings[key] = tensor
        if self.copy:
            logger.debug(
                "memory '%s': %s mirrored on %s (%d bytes)", self.name, key, self.device, ring.nbytes
            )
