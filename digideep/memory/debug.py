"""Debug units to inject into any sampler: shapes, NaN detection, mean and std of a chunk.

Each takes a flat dict of arrays (or an iterator of them, e.g. after ``minibatch_iterator``, in
which case it checks every item as it is drawn) and returns its input unchanged. The arrays may be
numpy arrays or torch tensors on any device (after :class:`~digideep.memory.DeviceUniformTransitions`):
``check_nan`` checks tensors where they are and reads back one flag per key (one device sync per
key), ``chunk_stats`` copies tensors to the host::

    sampler.insert(1, check_nan)     # right after the source unit
    sampler.insert(1, inspect_shapes)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from digideep.utility.monitoring import monitor

__all__ = ["check_nan", "chunk_stats", "inspect_shapes"]

logger = logging.getLogger(__name__)

Batch = Mapping[str, np.ndarray | torch.Tensor]


def _floating(value: np.ndarray | torch.Tensor) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() or value.is_complex()
    return value.dtype.kind in "fc"


def _host(value: np.ndarray | torch.Tensor) -> np.ndarray:
    """A numpy array of ``value`` (a tensor is copied to the host)."""
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value


def _each(data: Any, check: Callable[[Batch], None]) -> Any:
    if isinstance(data, Mapping):
        check(data)
        return data

    def checked() -> Iterator[Batch]:
        for item in data:
            check(item)
            yield item

    return checked()


def inspect_shapes(data: Any, info: dict[str, Any]) -> Any:
    """Log every key's shape and dtype at INFO level (``info["debug_tag"]`` prefixes the line)."""
    tag = info.get("debug_tag", "sampler")

    def check(batch: Batch) -> None:
        lines = "\n".join(f"  {key}: {tuple(value.shape)} {value.dtype}" for key, value in batch.items())
        logger.info("%s shapes:\n%s", tag, lines)

    return _each(data, check)


def check_nan(data: Any, info: dict[str, Any]) -> Any:
    """Raise if a floating-point key holds NaN or +-inf.

    ``info["nan_skip_keys"]`` (list, default none) lists keys left unchecked, e.g. the transition
    keys of a chunk whose final prestep row holds NaN placeholders (or put
    ``drop_final_prestep`` before this unit).

    Raises:
        ValueError: naming the first bad key, how many values are bad and where the first is.
    """
    skip = set(info.get("nan_skip_keys", ()))

    def check(batch: Batch) -> None:
        for key, value in batch.items():
            if key in skip or not _floating(value):
                continue
            finite = torch.isfinite(value) if isinstance(value, torch.Tensor) else np.isfinite(value)
            if not finite.all():
                bad = np.argwhere(~_host(finite))
                raise ValueError(
                    f"check_nan: key '{key}' {tuple(value.shape)} holds {len(bad)} NaN/inf values, the "
                    f"first at index {tuple(int(i) for i in bad[0])}"
                )

    return _each(data, check)


def chunk_stats(data: Any, info: dict[str, Any]) -> Any:
    """Mean and std of every numeric key, logged at INFO and recorded in the Monitor.

    Placeholders are left out (NaN for floats, the sentinel ``iinfo.min`` for signed ints). Monitor names are
    ``<prefix><key>/mean`` and ``<prefix><key>/std``, prefix ``info["stats_prefix"]`` (default
    ``"/memory/stats"``).
    """
    prefix = info.get("stats_prefix", "/memory/stats")

    def check(batch: Batch) -> None:
        lines = []
        for key, tensor in batch.items():
            value = _host(tensor)
            if key == "/indices" or value.dtype.kind not in "biuf":
                continue
            values = value.astype(np.float64, copy=False)
            if value.dtype.kind == "f":
                values = values[~np.isnan(values)]
            elif value.dtype.kind == "i":
                values = values[value != np.iinfo(value.dtype).min]
            if values.size == 0:
                continue
            mean, std = float(values.mean()), float(values.std())
            monitor(f"{prefix}{key}/mean", mean)
            monitor(f"{prefix}{key}/std", std)
            lines.append(f"  {key}: mean {mean:.6g} std {std:.6g}")
        logger.info("chunk stats:\n%s", "\n".join(lines))

    return _each(data, check)
