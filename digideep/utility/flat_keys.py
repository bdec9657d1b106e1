"""Flat dicts whose keys are unix-style paths (``/agents/agent/actions``), and back to nested ones.

The Explorer's chunks, the memory's keys and the params logged to MLflow are all named this way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["flatten_dict", "join_keys", "unflatten_dict"]


def flatten_dict(dic: Mapping[str, Any], sep: str = "/", prefix: str = "") -> dict[str, Any]:
    """Flatten a nested dict into one level whose keys are unix-style paths.

    >>> flatten_dict({"a": 1, "b": {"c": 1, "d": {"e": 2, "f": 3}}})
    {'/a': 1, '/b/c': 1, '/b/d/e': 2, '/b/d/f': 3}
    """
    flat: dict[str, Any] = {}
    for key, value in dic.items():
        path = join_keys(prefix, str(key), sep)
        if isinstance(value, Mapping):
            flat.update(flatten_dict(value, sep=sep, prefix=path))
        else:
            flat[path] = value
    return flat


def unflatten_dict(dic: Mapping[str, Any], sep: str = "/") -> dict[str, Any]:
    """Inverse of :func:`flatten_dict`.

    >>> unflatten_dict({"/a": 1, "/b/c": 1, "/b/d/e": 2, "/b/d/f": 3})
    {'a': 1, 'b': {'c': 1, 'd': {'e': 2, 'f': 3}}}

    Raises:
        ValueError: if a key is both a value and a prefix of other keys (``/a`` and ``/a/b``).
    """
    nested: dict[str, Any] = {}
    for path, value in dic.items():
        *parents, leaf = [part for part in path.split(sep) if part]
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"unflatten_dict: key '{path}' runs through '{part}', which holds a value")
        if isinstance(node.get(leaf), dict):
            raise ValueError(f"unflatten_dict: key '{path}' is also the prefix of other keys")
        node[leaf] = value
    return nested


def join_keys(key1: str, key2: str, sep: str = "/") -> str:
    """Join two unix-style keys with exactly one separator between them and one in front.

    >>> join_keys('/agent1', 'artifcats')
    '/agent1/artifcats'
    """
    return sep + sep.join(part for part in (key1.strip(sep), key2.strip(sep)) if part)
