"""Sizes and counts of a run's params: epochs, steps, workers, capacities, learning rates.

Checked when the params are resolved (:func:`digideep.pipeline.params.resolve_params`), before
anything is written: a zero ``epoch_size`` or a negative ``n_steps`` is refused in one line naming
the cpanel key, instead of failing in the middle of a run with its session and MLflow run made.
The cpanel is checked before ``gen_params`` runs (it may divide by ``num_workers``), the params
tree after it (a value the file derives, such as a replay capacity of ``buffer_size // num_workers
+ 1``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from digideep.errors import UsageError

__all__ = ["BOUNDS", "check_sizes", "check_tree_sizes"]


@dataclass(frozen=True)
class _Bound:
    """The smallest value a size or count may take: ``value >= low`` (``value > low`` when strict)."""

    low: int
    strict: bool = False

    def refuses(self, value: int | float) -> bool:
        return value <= self.low if self.strict else value < self.low

    def __str__(self) -> str:
        return f"greater than {self.low}" if self.strict else f"at least {self.low}"


_COUNT, _NON_NEGATIVE, _POSITIVE = _Bound(1), _Bound(0), _Bound(0, strict=True)
BOUNDS: dict[str, _Bound] = {
    # runner (epochs of iterations), session, env
    "number_epochs": _COUNT,
    "epoch_size": _COUNT,
    "max_iterations": _COUNT,
    "max_wall_time": _POSITIVE,
    "test_interval": _NON_NEGATIVE,  # 0: never
    "save_interval": _NON_NEGATIVE,  # 0: at the end only
    "seed": _NON_NEGATIVE,  # numpy and Gymnasium take no negative seeds
    "torch_threads": _COUNT,
    "max_episode_steps": _COUNT,
    # explorers
    "num_workers": _COUNT,
    "n_steps": _COUNT,
    "n_episodes": _COUNT,
    "warm_start": _NON_NEGATIVE,
    "win_size": _COUNT,
    # memories: a replay ring holds at least one transition (a row and its successor)
    "capacity": _Bound(2),
    "keep": _COUNT,
    # agents
    "lr": _POSITIVE,
    "batch_size": _COUNT,
    "n_epochs": _COUNT,
    "updates_per_iteration": _COUNT,
    "learning_starts": _NON_NEGATIVE,
    "policy_frequency": _COUNT,
    "total_iterations": _COUNT,
    "hidden_sizes": _COUNT,  # each layer's width
    # cpanel knobs of the shipped parameter files that reach the tree under other names
    "buffer_size": _COUNT,
    "test_episodes": _COUNT,
    "test_win_size": _COUNT,
}
"""The sizes and counts that are checked, by key: cpanel knobs of these names, and these keys of the
params tree's ``runner``, ``session``, ``env``, ``explorer.<name>``, ``memory.<name>.args`` and
``agents.<name>.args`` (:func:`check_tree_sizes`). None, a bool or a value of another type is left to its
component."""


def _refuses(bound: _Bound, value: Any) -> bool:
    """Whether ``value`` (a number, or a list of numbers such as ``hidden_sizes``) breaks ``bound``."""
    if isinstance(value, list):
        return any(_refuses(bound, item) for item in value)
    return isinstance(value, int | float) and not isinstance(value, bool) and bound.refuses(value)


def _first_refused(values: dict[str, Any]) -> str | None:
    """The first key of ``values`` whose value breaks its bound in :data:`BOUNDS`, or None."""
    return next((k for k, v in values.items() if k in BOUNDS and _refuses(BOUNDS[k], v)), None)


def _complaint(name: str, key: str, value: Any) -> str:
    """``<name> must be at least 1, got 0`` (``<name> entries must be ...`` for a list)."""
    entries = " entries" if isinstance(value, list) else ""
    return f"{name}{entries} must be {BOUNDS[key]}, got {json.dumps(value)}"


def check_sizes(cpanel: dict[str, Any]) -> None:
    """Refuse a cpanel knob named in :data:`BOUNDS` whose value breaks its bound.

    Raises:
        UsageError: e.g. ``cpanel key 'epoch_size' must be at least 1, got 0``.
    """
    key = _first_refused(cpanel)
    if key is not None:
        raise UsageError(_complaint(f"cpanel key '{key}'", key, cpanel[key]))


def _sections(params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The parts of the params tree whose keys :data:`BOUNDS` checks, with their dotted paths."""
    found: list[tuple[str, Any]] = [(name, params.get(name)) for name in ("runner", "session", "env")]
    for group, inner in (("explorer", None), ("memory", "args"), ("agents", "args")):
        members = params.get(group)
        for member, value in members.items() if isinstance(members, dict) else []:
            section = value.get(inner) if inner and isinstance(value, dict) else value
            found.append((f"{group}.{member}" + (f".{inner}" if inner else ""), section))
    return [(path, section) for path, section in found if isinstance(section, dict)]


def check_tree_sizes(
    module: ModuleType,
    cpanel: dict[str, Any],
    requested: dict[str, Any],
    params: dict[str, Any],
    file: str | None = None,
) -> None:
    """Refuse a size or count of the params tree (``module.gen_params(cpanel)``) that breaks its bound.

    The message names the value by its params path, and the ``--cpanel`` keys it follows from:
    those that, set back to the file's own value, bring it back in bounds (a ``buffer_size``
    smaller than ``num_workers`` gives a replay capacity of 1). A value that follows from no
    override is the parameter file's own, and the message names the file.

    Args:
        module: the parameter file; cpanel: the cpanel after overrides; requested: the overrides;
            params: the tree; file: the parameter file as messages name it.

    Raises:
        UsageError: e.g. ``params value 'memory.train.args.capacity' must be at least 2, got 1; it
            follows from cpanel key 'buffer_size'``.
    """
    for path, section in _sections(params):
        key = _first_refused(section)
        if key is None:
            continue
        message = _complaint(f"params value '{path}.{key}'", key, section[key])
        causes = [name for name in requested if _restores(module, cpanel, name, f"{path}.{key}")]
        if causes:
            keys = " and ".join(f"'{name}'" for name in causes)
            raise UsageError(f"{message}; it follows from cpanel key{'s' * (len(causes) > 1)} {keys}")
        where = f" ({file})" if file else ""
        raise UsageError(f"{message}, from gen_params() of '{module.__name__}'{where}")


def _restores(module: ModuleType, cpanel: dict[str, Any], key: str, path: str) -> bool:
    """Whether setting cpanel ``key`` back to the file's value brings params ``path`` into its bound."""
    try:
        value: Any = module.gen_params({**cpanel, key: module.cpanel[key]})
        for part in path.split("."):
            value = value[part]
    except Exception:  # another tree, or gen_params fails without the override: not the cause
        return False
    return not _refuses(BOUNDS[path.rsplit(".", 1)[-1]], value)
