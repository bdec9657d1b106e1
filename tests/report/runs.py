"""MLflow runs that follow the benchmark contract (docs/report.md), made with MlflowClient in a real store.

A benchmark is one parent run tagged ``digideep.kind=benchmark`` and ``digideep.benchmark=<name>``
(in an experiment of its own, as the benchmark flow keeps it in ``benchmarks``); each cell is a
FINISHED run of another experiment nested under it (``mlflow.parentRunId``) with the tags ``algorithm``,
``env``, ``seed``, ``variant`` and ``digideep.resumes`` (0 here: never resumed) and the ``eval/*``
params, and logs ``eval/return`` at step = frames.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
from mlflow import MlflowClient
from mlflow.entities import Metric

Curve = Callable[[str, str, int, np.ndarray], np.ndarray]
"""``(algorithm, env, seed, frames) -> returns``: the eval/return of a cell at each frame point."""


def make_benchmark(
    client: MlflowClient,
    cells: Sequence[tuple[str, str, int]],
    curve: Curve,
    frame_interval: int = 1000,
    frame_budget: int = 5000,
    episodes: int = 5,
    name: str | None = None,
    variant: str = "default",
    protocol: Mapping[tuple[str, str, int], Mapping[str, str]] | None = None,
    artifacts: Path | None = None,
) -> tuple[str, str]:
    """A benchmark of ``cells`` ``(algorithm, env, seed)`` in a fresh experiment; returns (name, parent id).

    ``protocol`` overrides the ``eval/*`` params of chosen cells (to make mixed selections);
    ``artifacts`` is the experiment's artifact folder (MLflow's default is ``./mlruns`` of the cwd).
    """
    name = name or f"bench-{uuid.uuid4().hex[:8]}"
    location = artifacts.as_uri() if artifacts else None
    experiment = client.create_experiment(f"exp-{name}", artifact_location=location)
    parents = client.create_experiment(f"benchmarks-{name}", artifact_location=location)  # as the flow does
    tags = {"digideep.kind": "benchmark", "digideep.benchmark": name}
    parent = client.create_run(parents, tags=tags, run_name=name).info.run_id
    frames = np.unique(np.r_[np.arange(frame_interval, frame_budget, frame_interval), frame_budget])
    for algorithm, env, seed in cells:
        tags = {
            "mlflow.parentRunId": parent,
            "digideep.benchmark": name,
            "algorithm": algorithm,
            "env": env,
            "seed": str(seed),
            "variant": variant,
            "digideep.resumes": "0",
        }
        run = client.create_run(experiment, tags=tags).info.run_id
        params = {
            "eval/frame_interval": str(frame_interval),
            "eval/episodes": str(episodes),
            "eval/frame_budget": str(frame_budget),
            **(protocol or {}).get((algorithm, env, seed), {}),
        }
        for key, value in params.items():
            client.log_param(run, key, value)
        returns = curve(algorithm, env, seed, frames)
        metrics = [Metric("eval/return", float(r), 0, int(f)) for f, r in zip(frames, returns, strict=True)]
        client.log_batch(run, metrics=metrics)
        client.set_terminated(run, "FINISHED")
    client.set_terminated(parent, "FINISHED")
    return name, parent


def linear_curve(final: Mapping[tuple[str, str], float], spread: float = 10.0) -> Curve:
    """Returns rising linearly to ``final[(algorithm, env)] + spread * seed`` at the budget."""

    def curve(algorithm: str, env: str, seed: int, frames: np.ndarray) -> np.ndarray:
        end = final[(algorithm, env)] + spread * seed
        return end * frames / frames[-1]

    return curve
