"""Frame-stack columns: a chunk's stacked image observations held one frame per row, rebuilt exactly.

Within an episode, row ``t``'s stack is row ``t - 1``'s shifted by one frame plus one new frame. So
an encoded chunk keeps, of ``/observations``, the newest frame of every row plus the whole stack of
every row that is *not* the previous row's shifted by one (a worker's first row, episode starts,
data that is not a frame stack); of ``/next_observations``, the whole stack where it differs from
the next row's observation (an episode's final observation, the final prestep's placeholder).

Shifts are checked on the bytes, so decoding is exact for any input; a key whose encoding would not
be smaller stays a plain array. Only ``uint8`` keys whose rows are ``(S >= 2, H, W, ...)`` stacks
are encoded (Gymnasium's ``FrameStackObservation`` on ``(84, 84)`` frames gives ``(4, 84, 84)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StackedFrames:
    """``(W, R, S, *frame)`` stacks held as frames: ``newest``, ``(W, R, *frame)`` the last frame of
    every row's stack; ``starts``, ``(W, R)`` bool, the rows whose whole stack is kept (not shifted
    from the row before); ``whole``, ``(n_starts, S, *frame)`` those stacks in (worker, row) order."""

    newest: np.ndarray
    starts: np.ndarray
    whole: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return (*self.starts.shape, self.whole.shape[1], *self.newest.shape[2:])

    @property
    def nbytes(self) -> int:
        return self.newest.nbytes + self.starts.nbytes + self.whole.nbytes


@dataclass(frozen=True)
class NextFrames:
    """``(W, R, ...)`` next observations held as the exceptions to "the next row of ``source``" (the
    observations' key): ``kept``, ``(W, R)`` bool, the rows held (the final prestep's always);
    ``rows``, ``(n_kept, *row_shape)`` those rows in (worker, row) order."""

    source: str
    kept: np.ndarray
    rows: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return (*self.kept.shape, *self.rows.shape[1:])

    @property
    def nbytes(self) -> int:
        return self.kept.nbytes + self.rows.nbytes


Column = np.ndarray | StackedFrames | NextFrames


def encode_stacks(values: np.ndarray) -> StackedFrames:
    """Encode ``(W, R, S, *frame) uint8`` stacks; lossless for any values."""
    W, R = values.shape[:2]
    starts = np.ones((W, R), bool)
    for t in range(1, R):  # row by row: a (W, S - 1, *frame) comparison, no chunk-sized temporary
        shifted = values[:, t, :-1] == values[:, t - 1, 1:]
        starts[:, t] = ~shifted.reshape(W, -1).all(axis=-1)
    return StackedFrames(np.ascontiguousarray(values[:, :, -1]), starts, values[starts])


def _stack_index(stacks: StackedFrames, flat_rows: np.ndarray) -> np.ndarray:
    """``(n, S)`` indices into ``concat(newest, whole)`` (flattened frames) of the rows ``flat_rows``."""
    W, R = stacks.starts.shape
    S = stacks.whole.shape[1]
    positions = np.arange(W * R)
    last_start = np.maximum.accumulate(np.where(stacks.starts.ravel(), positions, 0))
    ordinal = np.cumsum(stacks.starts.ravel()) - 1  # the start's place in ``whole``
    start = last_start[flat_rows]
    age = (flat_rows - start)[:, None]  # rows since the stack was kept whole
    slot = np.arange(S)[None, :]
    from_newest = flat_rows[:, None] - (S - 1 - slot)
    from_whole = W * R + ordinal[start][:, None] * S + np.minimum(age + slot, S - 1)
    return np.where(slot >= S - 1 - age, from_newest, from_whole)


def _gather(stacks: StackedFrames, index: np.ndarray) -> np.ndarray:
    """Frames at ``index`` (of :func:`_stack_index`) from ``newest`` and ``whole``, no pool copied."""
    frame = stacks.newest.shape[2:]
    newest, whole = stacks.newest.reshape(-1, *frame), stacks.whole.reshape(-1, *frame)
    out = np.empty((*index.shape, *frame), stacks.newest.dtype)
    recent = index < len(newest)
    out[recent] = newest[index[recent]]
    out[~recent] = whole[index[~recent] - len(newest)]
    return out


def encode_next(values: np.ndarray, observations: np.ndarray, source: str) -> NextFrames:
    """Encode next observations ``(W, R, ...)`` against ``observations`` (same shape, decoded)."""
    W, R = values.shape[:2]
    kept = np.ones((W, R), bool)
    for t in range(R - 1):
        kept[:, t] = ~(values[:, t] == observations[:, t + 1]).reshape(W, -1).all(axis=-1)
    return NextFrames(source, kept, values[kept])


def decode(column: Column, chunk: Mapping[str, Column]) -> np.ndarray:
    """The plain ``(W, R, ...)`` array of ``column`` of ``chunk`` (a new array; plain arrays are
    returned as they are); a :class:`NextFrames` column reads its source from ``chunk``."""
    if isinstance(column, StackedFrames):
        W, R = column.starts.shape
        index = _stack_index(column, np.arange(W * R))
        return _gather(column, index).reshape(column.shape)
    if isinstance(column, NextFrames):
        out = np.empty(column.shape, column.rows.dtype)
        out[:, :-1] = decode(chunk[column.source], chunk)[:, 1:]
        out[column.kept] = column.rows
        return out
    return column


def decode_rows(
    column: Column, workers: np.ndarray, rows: np.ndarray, chunk: Mapping[str, Column]
) -> np.ndarray:
    """``(n, *row_shape)`` values of the (worker, row) pairs: a minibatch gathered without decoding all."""
    workers, rows = np.asarray(workers), np.asarray(rows)
    if isinstance(column, StackedFrames):
        flat = workers * column.starts.shape[1] + rows
        return _gather(column, _stack_index(column, flat))
    if isinstance(column, NextFrames):
        kept = column.kept[workers, rows]
        out = np.empty((len(workers), *column.shape[2:]), column.rows.dtype)
        follow = ~kept
        out[follow] = decode_rows(chunk[column.source], workers[follow], rows[follow] + 1, chunk)
        place = np.cumsum(column.kept.ravel()) - 1
        out[kept] = column.rows[place[workers[kept] * column.kept.shape[1] + rows[kept]]]
        return out
    return column[workers, rows]


def encode_chunk(chunk: Mapping[str, np.ndarray]) -> dict[str, Column]:
    """Encode every stackable key of a chunk, and each ``/next_observations...`` key whose
    ``/observations...`` twin is present; keys whose encoding is not smaller stay plain."""
    out: dict[str, Column] = dict(chunk)
    for key, values in chunk.items():
        stackable = values.dtype == np.uint8 and values.ndim >= 5 and values.shape[2] >= 2
        if key.startswith("/next_observations") or not stackable or values.shape[1] < 2:
            continue
        stacks = encode_stacks(values)
        if stacks.nbytes < values.nbytes:
            out[key] = stacks
        if key.startswith("/observations"):
            twin = "/next_observations" + key[len("/observations") :]
            nxt = chunk.get(twin)
            if nxt is not None and nxt.shape == values.shape and nxt.dtype == values.dtype:
                encoded = encode_next(nxt, values, key)
                if encoded.nbytes < nxt.nbytes:
                    out[twin] = encoded
    return out


def decode_chunk(encoded: Mapping[str, Column]) -> dict[str, np.ndarray]:
    """The plain chunk of :func:`encode_chunk`'s output."""
    out = {key: decode(c, encoded) for key, c in encoded.items() if not isinstance(c, NextFrames)}
    for key, column in encoded.items():
        if isinstance(column, NextFrames):
            out[key] = decode(column, out)
    return {key: out[key] for key in encoded}
