"""Reference scores: random-policy returns and cited published results, and the normalisation they give.

The data ship with the package in ``reference_scores.toml`` (its header says how each number was
obtained). A normalised score is ``(score - random) / (reference - random)``: 0 is the random policy,
1 is the environment's chosen published result (rl-baselines3-zoo's SAC where there is one), so that
scores of different environments can be aggregated.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = [
    "BUDGET_TOLERANCE",
    "DEFAULT_REFERENCES",
    "EnvReference",
    "Published",
    "algorithm_family",
    "load_references",
]

DEFAULT_REFERENCES = "reference_scores.toml"
BUDGET_TOLERANCE = 0.01
"""A published budget within this fraction of a run's counts as the same budget: PPO's runs end on a
whole epoch (49 epochs of 20,480 frames, 1,003,520, beside published results at 1,000,000)."""


@dataclass(frozen=True)
class Published:
    """A published result: ``value`` of ``algorithm`` after ``frames`` environment steps."""

    name: str
    algorithm: str
    frames: int
    value: float
    measured_on: str
    source: str  # the citation: what the value is and where it is printed


@dataclass(frozen=True)
class EnvReference:
    """An environment's random-policy score, its published results and the one normalising to 1."""

    env: str
    random: float
    reference: Published | None
    published: tuple[Published, ...]

    def normalise(self, scores: np.ndarray) -> np.ndarray:
        """``(scores - random) / (reference - random)``, any shape, float64."""
        if self.reference is None:
            raise ValueError(f"{self.env} has no reference score to normalise by")
        return (np.asarray(scores, dtype=np.float64) - self.random) / (self.reference.value - self.random)

    def at_budget(self, frames: int, algorithm: str | None = None) -> list[Published]:
        """Published results at ``frames`` (within :data:`BUDGET_TOLERANCE` of it), of ``algorithm``'s
        family when one is given."""
        return [
            p
            for p in self.published
            if abs(p.frames - frames) <= BUDGET_TOLERANCE * frames
            and (algorithm is None or p.algorithm.upper() == algorithm.upper())
        ]


def load_references(path: str | Path | None = None) -> dict[str, EnvReference]:
    """The environments of a reference file (default: the one shipped with digideep), by Gymnasium id."""
    if path is None:
        text = resources.files("digideep.report").joinpath(DEFAULT_REFERENCES).read_text()
    else:
        text = Path(path).read_text()
    data = tomllib.loads(text)
    sources: Mapping[str, str] = data.get("sources", {})
    return {env: _env_reference(env, entry, sources) for env, entry in data.get("envs", {}).items()}


def _env_reference(env: str, entry: Mapping, sources: Mapping[str, str]) -> EnvReference:
    published = tuple(
        Published(
            name=p["name"],
            algorithm=p["algorithm"],
            frames=int(p["frames"]),
            value=float(p["value"]),
            measured_on=p.get("measured_on", env),
            source=sources.get(p["source"], p["source"]),
        )
        for p in entry.get("published", [])
    )
    named = entry.get("reference")
    reference = next((p for p in published if p.name == named), None)
    if named and reference is None:
        raise ValueError(f"reference '{named}' of {env} is none of its published results")
    return EnvReference(env=env, random=float(entry["random"]), reference=reference, published=published)


def algorithm_family(algorithm: str) -> str | None:
    """The published algorithm a run's ``algorithm`` tag stands for, to set a published value beside it.

    ``sb3:SAC`` is SAC; a parameter file is taken by the last word of its module name
    (``params.pendulum_sac`` and ``params/hopper_td3.py`` are SAC and TD3). None when that word is
    not a known method, so that a user's own file is never set beside an unrelated number.

    >>> algorithm_family("params.pendulum_sac"), algorithm_family("sb3:TD3"), algorithm_family("mine")
    ('SAC', 'TD3', None)
    """
    name = algorithm.split(":", 1)[1] if algorithm.startswith("sb3:") else algorithm
    stem = re.split(r"[./\\]", name.removesuffix(".py"))[-1]
    word = stem.split("_")[-1].upper()
    return word if word in KNOWN_FAMILIES else None


KNOWN_FAMILIES: Sequence[str] = ("SAC", "TD3", "DDPG", "PPO", "A2C", "TQC", "DQN")
