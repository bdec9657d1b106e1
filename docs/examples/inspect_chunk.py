"""Explore one chunk of CartPole-v1 with random actions and print what it holds (docs/trajectories.md).

Run from the repository root::

    .venv/bin/python docs/examples/inspect_chunk.py
"""

from __future__ import annotations

import numpy as np

from digideep.environment.explorer import Explorer
from digideep.environment.make_environment import MakeEnvironment
from digideep.environment.random_agent import RandomAgent


# --8<-- [start:explore]
def explore_one_chunk(
    model_name: str = "CartPole-v1", num_workers: int = 2, n_steps: int = 20, seed: int = 0
) -> dict[str, np.ndarray]:
    """One ``Explorer.update()`` of a random agent: ``{key: (num_workers, n_steps + 1, ...)}``."""
    env = {"model_name": model_name}
    observation_space, action_space = MakeEnvironment(**env).spaces()
    agent = RandomAgent("agent", None, observation_space, action_space["agent"], seed=seed)
    explorer = Explorer(
        None, {"agent": agent}, mode="train", env=env, num_workers=num_workers, n_steps=n_steps, seed=seed
    )
    try:
        return explorer.update()
    finally:
        explorer.close()


# --8<-- [end:explore]


if __name__ == "__main__":
    chunk = explore_one_chunk()
    for key, value in chunk.items():
        print(f"{key:28} {value.shape!s:12} {value.dtype}")
    np.set_printoptions(linewidth=150)
    for key in ("/masks", "/terminals", "/truncations"):
        print(f"{key} of worker 0:", chunk[key][0, :, 0])
