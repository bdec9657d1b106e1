"""Conversion of live Python state to what ``torch.load(weights_only=True)`` accepts, and back.

``torch.load(..., weights_only=True)`` refuses numpy arrays and numpy scalars, so every state dict
in this package stores them as CPU tensors; deques, tuples, numpy generators and Gymnasium's
``RunningMeanStd`` become tagged dicts. :func:`from_saveable` inverts :func:`to_saveable`.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch
from gymnasium.wrappers.utils import RunningMeanStd

__all__ = ["SIMPLE_TYPES", "from_saveable", "is_saveable", "to_saveable"]

SIMPLE_TYPES = (bool, int, float, str, type(None))

_ARRAY_KINDS = "biuf"  # bool, signed, unsigned, floating: the kinds torch can hold


def is_saveable(value: Any) -> bool:
    """Whether :func:`to_saveable` can encode ``value`` (recursively)."""
    if isinstance(value, (*SIMPLE_TYPES, np.random.Generator, RunningMeanStd)):
        return True
    if isinstance(value, np.ndarray | np.generic):
        return value.dtype.kind in _ARRAY_KINDS
    if isinstance(value, list | tuple | deque):
        return all(is_saveable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_saveable(v) for k, v in value.items())
    return False


def to_saveable(value: Any) -> Any:
    """Encode ``value`` with tensors, numbers, strings, None, lists and dicts only.

    numpy array -> tensor (a copy); numpy scalar -> ``{"__scalar__": 0-d tensor}``; tuple ->
    ``{"__tuple__": [...]}``; deque -> ``{"__deque__": [...], "maxlen": n}``; numpy Generator ->
    ``{"__rng__": bit_generator.state}``; RunningMeanStd -> ``{"__rms__": {mean, var, count}}``.

    Raises:
        TypeError: for a value :func:`is_saveable` rejects.
    """
    if isinstance(value, np.generic):  # before SIMPLE_TYPES: np.float64 is a float subclass
        return {"__scalar__": to_saveable(np.asarray(value))}
    if isinstance(value, SIMPLE_TYPES):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _ARRAY_KINDS:
            raise TypeError(
                f"cannot save a numpy array of dtype {value.dtype}; only bool, int and float arrays"
            )
        return torch.from_numpy(np.array(value, copy=True, order="C"))
    if isinstance(value, dict):
        return {str(k): to_saveable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_saveable(v) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [to_saveable(v) for v in value]}
    if isinstance(value, deque):
        return {"__deque__": [to_saveable(v) for v in value], "maxlen": value.maxlen}
    if isinstance(value, np.random.Generator):
        return {"__rng__": value.bit_generator.state}
    if isinstance(value, RunningMeanStd):
        return {
            "__rms__": {
                "mean": to_saveable(value.mean),
                "var": to_saveable(value.var),
                "count": to_saveable(value.count),
            }
        }
    raise TypeError(f"cannot save a value of type {type(value).__name__} in a state dict")


def from_saveable(value: Any) -> Any:
    """Decode what :func:`to_saveable` produced (tensors become numpy arrays)."""
    if isinstance(value, torch.Tensor):
        return value.numpy().copy()
    if isinstance(value, list):
        return [from_saveable(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__scalar__" in value:
        return from_saveable(value["__scalar__"])[()]
    if "__tuple__" in value:
        return tuple(from_saveable(v) for v in value["__tuple__"])
    if "__deque__" in value:
        return deque((from_saveable(v) for v in value["__deque__"]), maxlen=value["maxlen"])
    if "__rng__" in value:
        state = value["__rng__"]
        generator = np.random.Generator(getattr(np.random, state["bit_generator"])())
        generator.bit_generator.state = state
        return generator
    if "__rms__" in value:
        stats = value["__rms__"]
        rms = RunningMeanStd()
        rms.mean, rms.var = from_saveable(stats["mean"]), from_saveable(stats["var"])
        rms.count = from_saveable(stats["count"])
        return rms
    return {k: from_saveable(v) for k, v in value.items()}
