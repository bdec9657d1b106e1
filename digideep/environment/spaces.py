"""Helpers for Gymnasium spaces: plain-dict specs, flat paths of Dict spaces and buffer dtypes.

The Explorer stores every leaf of a (nested) ``Dict`` space under a unix-style path, the way
:func:`digideep.environment.data_helpers.flatten_dict` names keys: ``Dict(a=Dict(b=Box))`` has the
single leaf ``/a/b``; a space that is not a ``Dict`` is the single leaf ``""``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from digideep.environment.data_helpers import join_keys

__all__ = ["buffer_dtype", "flat_leaves", "space_to_dict"]


def space_to_dict(space: spaces.Space) -> dict[str, Any]:
    """Describe ``space`` as a plain, JSON-ready dict.

    Box: ``{"type": "Box", "shape", "dtype", "low", "high"}`` (``low``/``high`` are one number when
    every element has the same bound, else nested lists). Discrete: ``n`` and ``start``.
    MultiDiscrete: ``nvec`` and ``start``; MultiBinary: ``n``. Dict: ``{"type": "Dict", "spaces":
    {key: ...}}``; Tuple: ``{"type": "Tuple", "spaces": [...]}``. Anything else: its type name,
    ``shape`` and ``dtype`` where it has them.
    """
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start), "dtype": str(space.dtype)}
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": space.nvec.tolist(),
            "start": space.start.tolist(),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist(), "dtype": str(space.dtype)}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {str(k): space_to_dict(s) for k, s in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_dict(s) for s in space.spaces]}
    described: dict[str, Any] = {"type": type(space).__name__}
    if space.shape is not None:
        described["shape"] = list(space.shape)
    if space.dtype is not None:
        described["dtype"] = str(space.dtype)
    return described


def _bound(values: np.ndarray) -> float | list:
    flat = values.ravel()
    if flat.size and np.all(flat == flat[0]):
        return float(flat[0])
    return values.astype(np.float64).tolist()


def flat_leaves(space: spaces.Space, prefix: str = "") -> dict[str, spaces.Space]:
    """The leaves of a (nested) Dict space keyed by path; ``{"": space}`` for any other space.

    >>> flat_leaves(spaces.Dict({"a": spaces.Dict({"b": spaces.Discrete(2)})}))
    {'/a/b': Discrete(2)}
    """
    if not isinstance(space, spaces.Dict):
        return {prefix: space}
    leaves: dict[str, spaces.Space] = {}
    for key, sub in space.spaces.items():
        leaves.update(flat_leaves(sub, join_keys(prefix, str(key))))
    return leaves


def buffer_dtype(space: spaces.Space) -> np.dtype:
    """The dtype a chunk stores values of ``space`` in.

    Floating Boxes become float32 (the trajectory contract); Discrete, MultiDiscrete and MultiBinary
    become int64; any other space keeps its own dtype.
    """
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return np.dtype(np.int64)
    if space.dtype is None:
        raise TypeError(f"cannot store values of space {space}: it has no dtype; flatten or wrap it first")
    dtype = np.dtype(space.dtype)
    return np.dtype(np.float32) if dtype.kind == "f" else dtype


def is_image(space: spaces.Space) -> bool:
    """Whether ``space`` is an image: a Box of 3 or more dimensions, or of 2 with dtype uint8."""
    if not isinstance(space, spaces.Box):
        return False
    return len(space.shape) >= 3 or (len(space.shape) == 2 and space.dtype == np.uint8)
