"""Random-policy returns for the report's normalisation (digideep/report/reference_scores.toml).

Each environment plays ``--episodes`` episodes with actions drawn uniformly from its action space
(the action space's own sampler, seeded), to the environment's own time limit, and the mean
undiscounted return is printed as a TOML line to paste under ``[envs."<id>".random]``::

    MUJOCO_GL=egl .venv/bin/python bench/measure_random_scores.py [--episodes 100] [--seed 0] [ENV ...]
"""

from __future__ import annotations

import argparse
import datetime
import sys

import gymnasium as gym
import numpy as np

DEFAULT_ENVS = ("Pendulum-v1", "Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")


def random_returns(env_id: str, episodes: int, seed: int) -> np.ndarray:
    """Undiscounted returns of ``episodes`` uniform-random episodes: ``(episodes,) float64``."""
    env = gym.make(env_id)
    env.action_space.seed(seed)
    returns = np.zeros(episodes)
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            returns[episode] += float(reward)
            done = terminated or truncated
    env.close()
    return returns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("envs", nargs="*", default=list(DEFAULT_ENVS), help="Gymnasium ids")
    parser.add_argument("--episodes", type=int, default=100, help="episodes per environment (default: 100)")
    parser.add_argument("--seed", type=int, default=0, help="first episode's reset seed (default: 0)")
    args = parser.parse_args(argv)
    print(f"# measured {datetime.date.today()} with: python {' '.join(sys.argv)}")
    for env_id in args.envs:
        returns = random_returns(env_id, args.episodes, args.seed)
        print(
            f'"{env_id}": score = {returns.mean():.1f}  # std {returns.std():.1f}, '
            f"{args.episodes} episodes, gymnasium {gym.__version__}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
