"""Placeholders: the "missing" value of each dtype, for chunk rows and memory slots nothing wrote.

A numpy array's placeholder keeps its dtype: NaN for floating and complex arrays,
:func:`int_sentinel` (the smallest value of the integer dtype, e.g. ``-2**63`` for int64; ``0`` for
unsigned) for integers, ``False`` for booleans, ``None`` for object arrays. The Explorer, the memory and
:func:`digideep.environment.data_helpers.nonify` share these rules.
"""

from __future__ import annotations

import numpy as np

__all__ = ["int_sentinel", "placeholder_array"]


def int_sentinel(dtype: np.dtype | type) -> int:
    """The placeholder for a missing integer of ``dtype``: its minimum (0 for unsigned dtypes)."""
    return int(np.iinfo(dtype).min)


def placeholder_array(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """An array of ``shape`` filled with the missing-value placeholder of ``dtype`` (see module doc)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        return np.full(shape, np.nan, dtype=dtype)
    if dtype.kind in "iu":
        return np.full(shape, int_sentinel(dtype), dtype=dtype)
    if dtype.kind == "b":
        return np.zeros(shape, dtype=dtype)
    return np.full(shape, None, dtype=object)
