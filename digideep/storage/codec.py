"""One codec for states: live Python values to what ``torch.load(weights_only=True)`` accepts, and back.

``torch.load(..., weights_only=True)`` admits tensors, numbers, strings, None, lists, tuples and
dicts only. :func:`encode` turns the other values a ``state_dict()`` may hold into tagged dicts,
``{"__codec__": <kind>, ...}``, built from those types; :func:`decode` turns them back:

- numpy array: ``{"__codec__": "ndarray", "data": tensor, "dtype": "<f4", "shape": [...]}``;
- numpy scalar (``np.float32(1.5)``): ``{"__codec__": "npscalar", "data": 0-d tensor, "dtype"}``;
- ``collections.deque``: ``{"__codec__": "deque", "items": [...], "maxlen": n}``;
- ``numpy.random.Generator``: ``{"__codec__": "generator", "state": bit_generator.state}``;
- Gymnasium's ``RunningMeanStd``: ``{"__codec__": "rms", "mean", "var", "count"}``.

Tensors stay tensors and numpy arrays come back as numpy arrays: the tag, not the place in the
tree, says which is which. Dicts, lists and tuples are walked. Both functions are idempotent on
what they produce (encoding an encoded tree or decoding a decoded one changes nothing), so a
component may encode its own part and the checkpoint may encode the whole tree again.

:func:`decode` never hands a tensor on another device to numpy: data is moved to the CPU first, so
a tree loaded with any ``map_location`` decodes. Checkpoints load with ``map_location="cpu"``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch
from gymnasium.wrappers.utils import RunningMeanStd

__all__ = ["SIMPLE_TYPES", "TAG", "decode", "encode", "is_encodable"]

TAG = "__codec__"
SIMPLE_TYPES = (bool, int, float, str, type(None))
_ARRAY_KINDS = "biufc"  # bool, signed, unsigned, floating, complex: the kinds torch can hold


def is_encodable(value: Any) -> bool:
    """Whether :func:`encode` can encode ``value`` (recursively); used to pick attributes to capture."""
    if isinstance(value, (*SIMPLE_TYPES, torch.Tensor, np.random.Generator, RunningMeanStd)):
        return True
    if isinstance(value, np.ndarray | np.generic):
        return value.dtype.kind in _ARRAY_KINDS
    if isinstance(value, list | tuple | deque):
        return all(is_encodable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_encodable(v) for k, v in value.items())
    return False


def encode(value: Any) -> Any:
    """Encode ``value`` with tensors, numbers, strings, None, lists, tuples and dicts only.

    numpy arrays and scalars are copied (a later change to the live array does not reach the
    encoded one). Dict keys are kept as they are.

    Raises:
        TypeError: for a value :func:`is_encodable` rejects (naming its type), e.g. a numpy array of
            strings or objects, or an arbitrary class instance.
    """
    if isinstance(value, np.generic):  # before SIMPLE_TYPES: np.float64 is a float subclass
        return {TAG: "npscalar", "data": _tensor(np.asarray(value)), "dtype": value.dtype.str}
    if isinstance(value, (*SIMPLE_TYPES, torch.Tensor)):
        return value
    if isinstance(value, np.ndarray):
        return {TAG: "ndarray", "data": _tensor(value), "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, dict):
        if value.get(TAG) is not None:  # already encoded
            return value
        return {key: encode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [encode(item) for item in value]
    if isinstance(value, tuple):
        return tuple(encode(item) for item in value)
    if isinstance(value, deque):
        return {TAG: "deque", "items": [encode(item) for item in value], "maxlen": value.maxlen}
    if isinstance(value, np.random.Generator):
        return {TAG: "generator", "state": value.bit_generator.state}
    if isinstance(value, RunningMeanStd):
        return {
            TAG: "rms",
            "mean": encode(value.mean),
            "var": encode(value.var),
            "count": encode(value.count),
        }
    raise TypeError(
        f"cannot save a value of type {type(value).__module__}.{type(value).__qualname__} in a state "
        "dict; use tensors, numpy arrays, numbers, strings, lists, tuples and dicts"
    )


def _tensor(array: np.ndarray) -> torch.Tensor | list:
    """A copy of ``array`` as a CPU tensor (a nested list for a numeric dtype this torch lacks)."""
    if array.dtype.kind not in _ARRAY_KINDS:
        raise TypeError(
            f"cannot save a numpy array of dtype {array.dtype}; only bool, integer, float and complex arrays"
        )
    copy = np.array(array, copy=True, order="C")
    try:
        return torch.from_numpy(copy)
    except TypeError:
        return copy.tolist()


def _numpy(data: Any, dtype: str) -> np.ndarray:
    """A tagged entry's data as a numpy array of ``dtype``, wherever the tensor was loaded."""
    if isinstance(data, torch.Tensor):
        return data.detach().cpu().numpy().copy().astype(np.dtype(dtype), copy=False)
    return np.array(data, dtype=np.dtype(dtype))


def decode(value: Any) -> Any:
    """Inverse of :func:`encode`. Untagged values (tensors, numbers, live objects) pass unchanged."""
    if isinstance(value, list):
        return [decode(item) for item in value]
    if isinstance(value, tuple):
        return tuple(decode(item) for item in value)
    if not isinstance(value, dict):
        return value
    kind = value.get(TAG)
    if kind is None:
        return {key: decode(item) for key, item in value.items()}
    if kind == "ndarray":
        return _numpy(value["data"], value["dtype"]).reshape(value["shape"])
    if kind == "npscalar":
        return _numpy(value["data"], value["dtype"])[()]
    if kind == "deque":
        return deque((decode(item) for item in value["items"]), maxlen=value["maxlen"])
    if kind == "generator":
        return _generator(value["state"])
    if kind == "rms":
        return _rms(decode(value["mean"]), decode(value["var"]), decode(value["count"]))
    raise ValueError(f"unknown codec tag '{kind}' in a state dict; was it written by a newer digideep?")


def _generator(state: dict[str, Any]) -> np.random.Generator:
    generator = np.random.Generator(getattr(np.random, state["bit_generator"])())
    generator.bit_generator.state = state
    return generator


def _rms(mean: Any, var: Any, count: Any) -> RunningMeanStd:
    rms = RunningMeanStd()
    rms.mean, rms.var, rms.count = mean, var, count
    return rms
