"""Helpers that reshape the Explorer's outputs: nested dicts, lists of steps and flat trajectories.

Keys of flat dictionaries follow unix-style paths (``/agents/agent/actions``). The functions keep the
names and the behaviour of the original Digideep ``data_helpers`` module. Where the original page's
printed output contradicted its own text (keys shown without their leading ``/``, ``none`` printed
for ``None``), these functions follow the text; the docstrings say where.

Placeholders (see :func:`nonify`): the "missing" value of a Python scalar is ``None``; of a numpy
array it keeps the array's dtype: NaN for floating and complex arrays, :func:`int_sentinel` (the
smallest value of the integer dtype, e.g. ``-2**63`` for int64; ``0`` for unsigned) for integers,
``False`` for booleans.

The helpers that other layers use too live in :mod:`digideep.utility`: :func:`flatten_dict`,
:func:`unflatten_dict` and :func:`join_keys` in :mod:`digideep.utility.flat_keys`,
:func:`int_sentinel` and :func:`placeholder_array` in :mod:`digideep.utility.placeholders`. They are
imported here too, so ``digideep.environment.data_helpers`` keeps the original module's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from digideep.utility.flat_keys import flatten_dict, join_keys, unflatten_dict
from digideep.utility.placeholders import int_sentinel, placeholder_array

__all__ = [
    "complete_dict_of_list",
    "convert_time_to_batch_major",
    "dict_of_lists_to_list_of_dicts",
    "extract_keywise",
    "flatten_dict",
    "int_sentinel",
    "join_keys",
    "list_of_dicts_to_flattened_dict_of_lists",
    "nonify",
    "placeholder_array",
    "unflatten_dict",
    "update_dict_of_lists",
]


def nonify(element: Any) -> Any:
    """Return an element shaped like ``element`` whose values all mean "missing".

    Lists stay lists and tuples stay tuples (nested to any depth); numpy arrays keep their shape and
    dtype (NaN for floats, :func:`int_sentinel` for integers, ``False`` for booleans); any other
    scalar becomes ``None``. The page printed ``none``; the text and this function use ``None``.

    >>> nonify([(1, 2, 3), (1, 2, 4, 5, [-1, -2])])
    [(None, None, None), (None, None, None, None, [None, None])]

    Raises:
        TypeError: if ``element`` contains a dict (flatten it first with :func:`flatten_dict`).
    """
    if isinstance(element, np.ndarray):
        return placeholder_array(element.shape, element.dtype)
    if isinstance(element, list):
        return [nonify(e) for e in element]
    if isinstance(element, tuple):
        return tuple(nonify(e) for e in element)
    if isinstance(element, Mapping):
        raise TypeError("nonify() cannot take a dict; flatten it first with flatten_dict()")
    if isinstance(element, np.generic):
        return placeholder_array((), element.dtype)[()]
    return None


def complete_dict_of_list(dic: dict[str, list], length: int) -> dict[str, list]:
    """Pad every list of ``dic`` to ``length`` with placeholders shaped like its last element.

    The page's example pads key ``'c'`` (length 2) to length 4 with ``[None, None]`` twice.
    ``dic`` is changed in place and returned.

    Raises:
        ValueError: if a list is already longer than ``length``.
    """
    for key, values in dic.items():
        missing = length - len(values)
        if missing < 0:
            raise ValueError(
                f"complete_dict_of_list: key '{key}' has {len(values)} items, more than length={length}"
            )
        if missing and values:
            values.extend(nonify(values[-1]) for _ in range(missing))
    return dic


def update_dict_of_lists(dic: dict[str, list], item: Mapping[str, Any], index: int = 0) -> dict[str, list]:
    """Append each value of ``item`` to the list of the same key in ``dic``.

    A key seen for the first time gets ``index`` placeholders (shaped like its value) in front, so
    that its new value sits at position ``index``. Keys of ``dic`` that ``item`` lacks are left short;
    :func:`complete_dict_of_list` pads them later. Only one-level dicts are supported.

    >>> update_dict_of_lists({'a': [1, 2, 3], 'c': [[-1, -2], [-3, -4]]}, {'a': 4, 'b': [1, 2, 3]}, 3)
    {'a': [1, 2, 3, 4], 'c': [[-1, -2], [-3, -4]], 'b': [[None, None, None], [None, None, None], [None, None, None], [1, 2, 3]]}
    """
    for key, value in item.items():
        if key not in dic:
            dic[key] = [nonify(value) for _ in range(index)]
        dic[key].append(value)
    return dic


def list_of_dicts_to_flattened_dict_of_lists(List: list[Mapping[str, Any]], length: int) -> dict[str, list]:
    """Turn a list of (nested) per-step dicts into one flat dict of lists, each of ``length`` items.

    >>> List = [{'a': {'f': [1, 2], 'g': [7, 8]}, 'b': [-1, -2], 'info': [10, 20]},
    ...         {'a': {'f': [3, 4], 'g': [9, 8]}, 'b': [-3, -4], 'step': [80, 90]}]
    >>> list_of_dicts_to_flattened_dict_of_lists(List, 2)
    {'/a/f': [[1, 2], [3, 4]], '/a/g': [[7, 8], [9, 8]], '/b': [[-1, -2], [-3, -4]], '/info': [[10, 20], [None, None]], '/step': [[None, None], [80, 90]]}
    """
    result: dict[str, list] = {}
    for index, entry in enumerate(List):
        update_dict_of_lists(result, flatten_dict(entry), index=index)
    return complete_dict_of_list(result, length)


def dict_of_lists_to_list_of_dicts(dic: Mapping[str, Any], num: int) -> list[dict[str, Any]]:
    """Split a dict of per-worker sequences into ``num`` dicts, one per worker (one-level dicts only).

    Used to turn ``{agent: actions}`` into the per-worker actions that ``env.step`` takes.

    >>> dict_of_lists_to_list_of_dicts({'a1': ([1, 2], [3, 4], [5, 6]), 'a2': ([9], [8], [7])}, 3)
    [{'a1': [1, 2], 'a2': [9]}, {'a1': [3, 4], 'a2': [8]}, {'a1': [5, 6], 'a2': [7]}]

    Raises:
        ValueError: if a value does not hold ``num`` items.
    """
    for key, values in dic.items():
        if len(values) != num:
            raise ValueError(
                f"dict_of_lists_to_list_of_dicts: key '{key}' has {len(values)} items, expected num={num}"
            )
    return [{key: values[i] for key, values in dic.items()} for i in range(num)]


def extract_keywise(dic: Mapping[str, Mapping[str, Any]], key: str) -> dict[str, Any]:
    """Pick the first-level entry ``key`` out of every sub-dict of ``dic``.

    >>> extract_keywise({'agent1': {'a': [1, 2], 'b': {'c': 2}}, 'agent2': {'a': [3, 4], 'b': {'c': 9}}}, 'a')
    {'agent1': [1, 2], 'agent2': [3, 4]}
    """
    return {name: sub[key] for name, sub in dic.items()}


def convert_time_to_batch_major(episode: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Swap the first two axes of every entry: ``(num_steps, batch_size, ...)`` -> ``(batch_size, num_steps, ...)``.

    numpy arrays keep their dtype. Python lists become float32 arrays, as in the page's example.

    >>> out = convert_time_to_batch_major({'key1': [[[1], [2]], [[3], [4]], [[5], [6]]]})
    >>> out['key1'].shape, out['key1'].dtype
    ((2, 3, 1), dtype('float32'))
    """
    result: dict[str, np.ndarray] = {}
    for key, value in episode.items():
        array = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=np.float32)
        if array.ndim < 2:
            raise ValueError(
                f"convert_time_to_batch_major: key '{key}' has shape {array.shape}, needs at least 2 axes"
            )
        result[key] = np.swapaxes(array, 0, 1)
    return result
