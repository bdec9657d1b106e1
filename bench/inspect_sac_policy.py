"""A trained SAC policy on a MuJoCo task, read as the Hopper question needs it (docs/benchmark.md).

    .venv/bin/python bench/inspect_sac_policy.py data/sessions/<session>/checkpoints/checkpoint-300000
    .venv/bin/python bench/inspect_sac_policy.py model.zip --env Hopper-v5     # an SB3 SAC model

Each argument is a digideep checkpoint folder (its environment read from its params) or a
Stable-Baselines3 ``SAC`` ``model.zip`` (``--env`` names its environment). For each it prints:

- the entropy temperature ``alpha``;
- the deterministic return and episode lengths over ``--episodes`` episodes (reset seeds 10,000 on);
- how far the actions saturate on the states those episodes visit: the share of action dimensions
  whose pre-tanh mean passes 5 in magnitude, and the share of sampled pre-tanh actions ``u`` that do
  (digideep's exact squash correction and SB3's ``log(1 - tanh(u)^2 + 1e-6)`` part only past about 5),
  and the mean log-std;
- the critics' bias: ``min_i Q_i(s, a)`` against the soft discounted return that followed ``(s, a)``
  on stochastic episodes (reset seeds 20,000 on; ``G_t = r_t + gamma (G_{t+1} - alpha log pi(a_{t+1} |
  s_{t+1}))``, the last 300 steps of a truncated episode left out for lack of their tail).

Both libraries' policies act in ``[-1, 1]``; the tool maps their actions to the environment's bounds as
both do in training, so the figures compare like with like.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from digideep.agents.utils import BoxScaler  # noqa: E402

GAMMA = 0.99
SATURATED = 5.0  # |u| past which the two squash corrections part

Act = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class Loaded:
    """A policy's pieces, whichever library trained it."""

    env_id: str
    head: Act  # obs -> (pre-tanh mean, log-std)
    sample: Act  # obs -> (actions in [-1, 1], log-probability)
    q: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (obs, actions) -> min over the critics
    alpha: float


def load_digideep(folder: str) -> Loaded:
    from digideep.storage.checkpoint import read_runner_info
    from digideep.tracking.model import build_policy

    env = read_runner_info(folder)["params"]["env"]  # runner.json only: build_policy reads the states
    if env.get("wrappers") or env.get("vector_wrappers"):
        sys.exit(f"{folder}: a run with environment wrappers; this tool reads plain MuJoCo tasks only")
    policy = build_policy(folder)[0].policy
    return Loaded(
        env["model_name"],
        policy.actor_head,
        policy.sample,
        lambda o, a: policy.q_values(o, a).min(dim=-1).values,
        float(policy.log_alpha.detach().exp()),
    )


def load_sb3(path: str, env_id: str | None) -> Loaded:
    from stable_baselines3 import SAC

    if env_id is None:
        sys.exit(f"{path}: an SB3 model does not name its environment; give it with --env")
    model = SAC.load(path, device="cpu")
    actor = model.actor

    def head(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std, _ = actor.get_action_dist_params(obs)
        return mean, log_std

    def sample(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        actions, log_prob = actor.action_log_prob(obs)
        return actions, log_prob.reshape(-1)

    def q(obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return torch.cat(model.critic(obs, actions), dim=1).min(dim=1).values

    return Loaded(env_id, head, sample, q, float(model.log_ent_coef.detach().exp()))


def rollout(env: gym.Env, seed: int, act: Act) -> dict[str, Any]:
    """One episode from ``reset(seed=seed)``: per step the float32 observation ``(1, D)``, the action
    ``(1, A)`` in ``[-1, 1]`` and its log-probability as ``act`` gives them (the environment gets the
    action mapped to its bounds), the reward; and whether it was truncated."""
    obs, _ = env.reset(seed=seed)
    scaler = BoxScaler(env.action_space, torch.device("cpu"))  # as both libraries map their actions
    steps: dict[str, Any] = {"obs": [], "actions": [], "log_prob": [], "rewards": []}
    done = truncated = False
    while not done:
        o = torch.as_tensor(obs, dtype=torch.float32)[None]
        with torch.no_grad():
            a, log_prob = act(o)
        steps["obs"].append(o)
        steps["actions"].append(a)
        steps["log_prob"].append(float(log_prob[0]))
        obs, reward, terminated, truncated, _ = env.step(scaler.to_env(a[0]).numpy())
        steps["rewards"].append(float(reward))
        done = terminated or truncated
    steps["truncated"] = truncated
    return steps


def soft_returns(rewards: list[float], log_prob: list[float], alpha: float) -> np.ndarray:
    """``G_t = r_t + gamma (G_{t+1} - alpha log pi(a_{t+1} | s_{t+1}))``: what a soft Q estimates."""
    g, following = np.zeros(len(rewards)), 0.0
    for t in reversed(range(len(rewards))):
        g[t] = rewards[t] + GAMMA * following
        following = g[t] - alpha * log_prob[t]
    return g


def inspect(loaded: Loaded, episodes: int) -> str:
    env = gym.make(loaded.env_id)

    def deterministic(o: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(loaded.head(o)[0]), torch.zeros(1)

    shown = [rollout(env, 10_000 + i, deterministic) for i in range(episodes)]
    obs = torch.cat([o for episode in shown for o in episode["obs"]])
    with torch.no_grad():
        mean, log_std = loaded.head(obs)
        u = mean + log_std.exp() * torch.randn(20, *mean.shape)
    biases, targets = [], []
    for i in range(episodes):
        episode = rollout(env, 20_000 + i, loaded.sample)
        with torch.no_grad():
            q = loaded.q(torch.cat(episode["obs"]), torch.cat(episode["actions"])).numpy()
        g = soft_returns(episode["rewards"], episode["log_prob"], loaded.alpha)
        keep = len(g) - 300 if episode["truncated"] else len(g)
        biases += list(q[:keep] - g[:keep])
        targets += list(g[:keep])
    bias = float(np.mean(biases))
    return (
        f"alpha {loaded.alpha:.4f}; deterministic return {np.mean([sum(e['rewards']) for e in shown]):.1f} "
        f"(lengths {[len(e['rewards']) for e in shown]}); "
        f"|mean| > {SATURATED:g}: {(mean.abs() > SATURATED).float().mean():.4f}, "
        f"|u| > {SATURATED:g}: {(u.abs() > SATURATED).float().mean():.4f}, mean log-std {log_std.mean():.2f}; "
        f"critic bias {bias:+.1f} ({bias / abs(np.mean(targets)) * 100:+.1f} % of the soft return over "
        f"{len(biases)} steps)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("policies", nargs="+", help="digideep checkpoint folders or SB3 SAC model.zip files")
    parser.add_argument("--env", help="the environment of SB3 models, e.g. Hopper-v5")
    parser.add_argument("--episodes", type=int, default=10, help="episodes of each kind (default 10)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from digideep.errors import UsageError

    for path in args.policies:
        if not Path(path).exists():
            sys.exit(f"{path}: no such checkpoint folder or model.zip")
        torch.manual_seed(0)
        try:
            loaded = load_sb3(path, args.env) if path.endswith(".zip") else load_digideep(path)
        except UsageError as error:
            sys.exit(str(error))
        print(f"{path}: {inspect(loaded, args.episodes)}")


if __name__ == "__main__":
    main()
