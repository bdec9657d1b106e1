"""A benchmark matrix: algorithms x environments x seeds x variants, each cell one run.

An *algorithm* is a parameter file (``params.pendulum_sac``) or a Stable-Baselines3 reference
(``sb3:SAC``, :mod:`digideep.benchmark.sb3`); a *variant* is a named set of cpanel overrides (an
ablation; ``default`` has none). Every cell gets the same frame budget and evaluation protocol
(:mod:`digideep.pipeline.evaluation`): a parameter file's cell has them as cpanel overrides
(``number_epochs``, ``test_interval``, ``test_episodes``) computed from its own epoch's frames, and
its environment as ``model_name``. :func:`plan` checks the whole matrix before anything runs and
refuses bad input in one line: an empty axis, an unknown parameter file, environment id or cpanel
key, a budget or interval that is not a whole number of a file's epochs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from digideep.benchmark.sb3 import check_sb3, is_sb3, sb3_arguments
from digideep.errors import UsageError
from digideep.pipeline.evaluation import EvaluationProtocol, frames_per_epoch, whole_epochs
from digideep.pipeline.params import load_params_module, resolve_params

__all__ = ["DEFAULT_VARIANT", "Cell", "plan"]

DEFAULT_VARIANT = "default"


@dataclass(frozen=True)
class Cell:
    """One run of the matrix.

    Attributes:
        algorithm: a parameter module (``params.pendulum_sac``) or ``sb3:<ALGO>``.
        env: the Gymnasium id.
        seed: the run's seed.
        variant: the variant's name (``default``: no overrides).
        cpanel: the cell's cpanel overrides (an SB3 cell's: its knobs of ``SB3_KNOBS``).
    """

    algorithm: str
    env: str
    seed: int
    variant: str = DEFAULT_VARIANT
    cpanel: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        """A name unique in its benchmark, e.g. ``params.pendulum_sac/Pendulum-v1/seed-0/default``."""
        return f"{self.algorithm}/{self.env}/seed-{self.seed}/{self.variant}"

    def tags(self, benchmark: str, parent_run_id: str | None) -> dict[str, Any]:
        """The train flow's ``benchmark`` parameter (:func:`~digideep.tracking.trials.benchmark_tags`)."""
        cell = {"name": benchmark, "algorithm": self.algorithm, "env": self.env, "seed": self.seed}
        return {
            **cell,
            "variant": self.variant,
            **({"parent_run_id": parent_run_id} if parent_run_id else {}),
        }


def plan(
    algorithms: Sequence[str],
    envs: Sequence[str],
    seeds: Sequence[int],
    protocol: EvaluationProtocol,
    variants: Mapping[str, Mapping[str, Any]] | None = None,
    base_cpanel: Mapping[str, Any] | None = None,
) -> list[Cell]:
    """Every cell of the matrix, checked, in the order a benchmark starts them: environments outermost,
    then seeds and variants, algorithms innermost.

    So a benchmark finishes one environment before the next, and each seed of it under every
    algorithm together: read while it runs (``digideep report --at``) or after it was cut short, the
    finished cells compare like with like.

    Args:
        algorithms: parameter modules and ``sb3:<ALGO>`` names.
        envs: Gymnasium ids.
        seeds: seeds (each a run).
        protocol: frame budget, evaluation interval (frames) and episodes of every cell.
        variants: name -> cpanel overrides; none: one ``default`` variant.
        base_cpanel: overrides of every parameter file's cell (a variant's win).

    Raises:
        UsageError: an empty axis, an unknown parameter file, environment or cpanel key, or a budget
            or interval that is not whole epochs (one line). An SB3 cell takes the knobs of
            :data:`~digideep.benchmark.sb3.SB3_KNOBS` from ``base_cpanel`` and its variant and leaves
            the others to the parameter files.
    """
    variants = dict(variants) if variants else {DEFAULT_VARIANT: {}}
    for axis, values in (("algorithms", algorithms), ("environments", envs), ("seeds", seeds)):
        if not values:
            raise UsageError(f"the benchmark's {axis} axis is empty; give at least one")
    _check_protocol(protocol)
    _check_envs(envs)
    for algorithm in algorithms:  # an unknown file or a missing SB3 is one line here, before any cell
        if is_sb3(algorithm):
            check_sb3(algorithm)
        else:
            load_params_module(algorithm)
    cells = []
    for env in envs:
        for seed in seeds:
            for variant, overrides in variants.items():
                for algorithm in algorithms:
                    cpanel = {**(base_cpanel or {}), **overrides, "model_name": env, "seed": int(seed)}
                    if is_sb3(algorithm):
                        _, cpanel = sb3_arguments(algorithm, {**(base_cpanel or {}), **overrides})
                    else:
                        cpanel = cell_cpanel(algorithm, cpanel, protocol)
                    cells.append(Cell(algorithm, env, int(seed), variant, cpanel))
    return cells


def cell_cpanel(algorithm: str, overrides: Mapping[str, Any], protocol: EvaluationProtocol) -> dict[str, Any]:
    """A parameter file's cpanel overrides for a cell: ``overrides`` plus the protocol in its epochs.

    Raises:
        UsageError: an unknown key, or a budget or interval that is not a whole number of epochs.
    """
    try:
        resolved = resolve_params(algorithm, None, dict(overrides))
    except UsageError as error:
        raise UsageError(f"benchmark cell of '{algorithm}': {error}") from None
    epoch = frames_per_epoch(resolved.params)
    shown = f"'{algorithm}'"
    return {
        **overrides,
        "number_epochs": whole_epochs(protocol.frame_budget, epoch, f"the frame budget of {shown}"),
        "test_interval": whole_epochs(protocol.frame_interval, epoch, f"the evaluation interval of {shown}"),
        "test_episodes": protocol.episodes,
    }


def _check_protocol(protocol: EvaluationProtocol) -> None:
    if protocol.frame_budget <= 0 or protocol.episodes <= 0 or protocol.frame_interval <= 0:
        raise UsageError(
            f"the benchmark needs positive frames, evaluation interval and episodes, got {protocol.frame_budget}, "
            f"{protocol.frame_interval} and {protocol.episodes}"
        )
    if protocol.frame_budget % protocol.frame_interval:
        raise UsageError(
            f"the evaluation interval ({protocol.frame_interval} frames) must divide the frame budget "
            f"({protocol.frame_budget}), so that the last evaluation lands at the budget"
        )


def _check_envs(envs: Sequence[str]) -> None:
    from digideep.environment.play import check_registered

    for env in envs:
        check_registered(env)
