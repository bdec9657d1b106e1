"""A minimal training loop (Explorer + memory + one agent) for the agents' tests.

It stands in for the Runner until the agents' tests move to it: explore a chunk, store it, sample,
update; evaluate with a deterministic test Explorer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from digideep.environment.explorer import Explorer
from digideep.environment.make_environment import MakeEnvironment
from digideep.memory import Memory, RolloutMemory
from digideep.pipeline.session import Session
from digideep.utility.imports import import_object


@dataclass
class Setup:
    session: Session
    agent: Any
    explorer: Explorer
    memory: Any
    env: dict
    metrics: list[dict[str, float]] = field(default_factory=list)

    def close(self) -> None:
        self.explorer.close()
        self.session.close()


def build(
    root: Path,
    agent_cls: Callable[..., Any],
    agent_args: dict[str, Any],
    env: dict[str, Any],
    num_workers: int,
    n_steps: int,
    warm_start: int = 0,
    capacity: int | None = None,
    seed: int = 0,
) -> Setup:
    """A session, an agent, a train Explorer and a memory (a replay ``Memory`` when ``capacity``)."""
    session = Session(root=root, name=f"{agent_cls.__name__.lower()}-{seed}", device="cpu")
    observation_space, action_space = MakeEnvironment(**env).spaces()
    agent = agent_cls("agent", session, observation_space, action_space["agent"], **agent_args)
    explorer = Explorer(
        session, {"agent": agent}, "train", env, num_workers, n_steps, warm_start=warm_start, seed=seed
    )
    if capacity is None:
        memory: Any = RolloutMemory(num_workers)
    else:
        memory = Memory(session.memory_path("train"), num_workers, capacity)
    return Setup(session, agent, explorer, memory, env)


def build_from_params(root: Path, params: dict[str, Any]) -> tuple[Setup, int]:
    """A :class:`Setup` from a params tree (``params/<name>.py``); returns it and the iterations to run."""
    seed = params["runner"]["seed"]
    torch.manual_seed(seed)
    np.random.seed(seed)
    spec = params["agents"]["agent"]
    train_args = dict(params["explorer"]["train"])
    memory_spec = params["memory"][spec["memory"]]
    capacity = memory_spec["args"].get("capacity") if memory_spec["type"].endswith(".Memory") else None
    setup = build(
        root,
        import_object(spec["type"]),
        spec["args"],
        params["env"],
        train_args.pop("num_workers"),
        train_args.pop("n_steps"),
        warm_start=train_args.pop("warm_start", 0),
        capacity=capacity,
        seed=train_args.pop("seed", seed),
    )
    return setup, params["runner"]["number_epochs"] * params["runner"]["epoch_size"]


def train(setup: Setup, iterations: int) -> list[dict[str, float]]:
    """``iterations`` of explore, store, sample, update; returns the metrics of each update."""
    for _ in range(iterations):
        setup.memory.store(setup.explorer.update())
        setup.metrics.append(setup.agent.update(setup.agent.sample(setup.memory)))
    return setup.metrics


def evaluate(setup: Setup, episodes: int, seed: int = 1000) -> float:
    """Mean undiscounted return of ``episodes`` deterministic episodes (one per worker)."""
    explorer = Explorer(
        setup.session,
        {"agent": setup.agent},
        "test",
        setup.env,
        episodes,
        None,
        n_episodes=episodes,
        deterministic=True,
        seed=seed,
    )
    try:
        chunk = explorer.update()
    finally:
        explorer.close()
    return float(np.mean(episode_returns(chunk)))


def episode_returns(chunk: dict[str, np.ndarray]) -> list[float]:
    """Returns of the episodes that ended inside ``chunk`` and started there too."""
    rewards = chunk["/rewards"][..., 0]
    ended = (chunk["/terminals"][..., 0] > 0) | (chunk["/truncations"][..., 0] > 0)
    starts = chunk["/masks"][..., 0] == 0
    returns = []
    for w in range(rewards.shape[0]):
        total, started = 0.0, bool(starts[w, 0])
        for t in range(rewards.shape[1] - 1):
            if starts[w, t]:
                total, started = 0.0, True
            total += float(rewards[w, t])
            if ended[w, t] and started:
                returns.append(total)
                started = False
    return returns
