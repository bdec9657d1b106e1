"""Sections that the shipped parameter files share; each file keeps its own knobs and agent.

A parameter file still reads top to bottom as the whole params tree (``docs/params.md``): its
``cpanel``, its agent's arguments, and a call of :func:`tree` that lays out the rest the same way
for every file. Not a parameter file itself (its name starts with ``_``).
"""

from __future__ import annotations

from typing import Any


def env(cpanel: dict, **overrides: Any) -> dict:
    """``MakeEnvironment`` arguments: ``cpanel["model_name"]``, sync vectorisation, no wrappers."""
    return {
        "model_name": cpanel["model_name"],
        "from_module": None,
        "vectorization": "sync",
        "wrappers": [],
        "vector_wrappers": [],
        "max_episode_steps": None,
        **overrides,
    }


def off_policy_args(cpanel: dict) -> dict:
    """The arguments DDPG, TD3 and SAC share, from their cpanel knobs."""
    return {
        "lr": cpanel["lr"],
        "gamma": cpanel["gamma"],
        "tau": cpanel["tau"],
        "batch_size": cpanel["batch_size"],
        # gradient steps per iteration: updates_per_step per collected frame
        "updates_per_iteration": max(
            1, round(cpanel["updates_per_step"] * cpanel["n_steps"] * cpanel["num_workers"])
        ),
        "learning_starts": cpanel["learning_starts"],
        "hidden_sizes": list(cpanel["hidden_sizes"]),
        "seed": cpanel["seed"],
        "update_mode": cpanel["update_mode"],
        "replay_device": cpanel["replay_device"],
        "acting_device": cpanel["acting_device"],
    }


def ppo_args(cpanel: dict) -> dict:
    """PPO's arguments from its cpanel knobs (the learning-rate schedule spans the whole run)."""
    return {
        "lr": cpanel["lr"],
        "n_epochs": cpanel["n_epochs"],
        "batch_size": cpanel["batch_size"],
        "gamma": cpanel["gamma"],
        "gae_lambda": cpanel["gae_lambda"],
        "clip_range": cpanel["clip_range"],
        "clip_value_loss": cpanel["clip_value_loss"],
        "ent_coef": cpanel["ent_coef"],
        "vf_coef": cpanel["vf_coef"],
        "max_grad_norm": cpanel["max_grad_norm"],
        "anneal_lr": cpanel["anneal_lr"],
        "anneal_clip": cpanel["anneal_clip"],
        "total_iterations": cpanel["number_epochs"] * cpanel["epoch_size"],
        "hidden_sizes": list(cpanel["hidden_sizes"]),
        "recurrent": cpanel["recurrent"],
        "update_mode": cpanel["update_mode"],
    }


def replay_memory(cpanel: dict) -> dict:
    """A Zarr-backed replay memory of ``buffer_size`` frames (rows per worker, plus the final prestep)."""
    return {
        "type": "digideep.memory.Memory",
        "args": {"capacity": cpanel["buffer_size"] // cpanel["num_workers"] + 1},
    }


ROLLOUT_MEMORY = {"type": "digideep.memory.RolloutMemory", "args": {"keep": 1}}
"""On-policy: the latest chunk only."""


def tree(cpanel: dict, *, env: dict, agent: str, agent_args: dict, memory: dict, warm_start: bool) -> dict:
    """The whole params tree around one agent named ``agent`` (a class path).

    Args:
        cpanel: the knobs (``seed``, ``number_epochs``, ``epoch_size``, ``n_steps``, ``num_workers``,
            ``save_interval``, ``test_interval``, ``test_win_size``, ``test_episodes``,
            ``torch_threads``; ``learning_starts`` with ``warm_start``; optional ``device`` and
            ``deterministic``, see ``digideep.pipeline.devices``).
        env: ``MakeEnvironment`` arguments.
        agent: the agent's class path, e.g. ``digideep.agents.sac.SAC``.
        agent_args: its keyword arguments.
        memory: the ``train`` memory's ``{"type", "args"}``.
        warm_start: an off-policy agent: act randomly until the memory holds ``learning_starts`` frames
            (SB3's learning_starts), and draw no action at the final prestep.
    """
    seed, num_workers = cpanel["seed"], cpanel["num_workers"]
    train = {"num_workers": num_workers, "n_steps": cpanel["n_steps"], "seed": seed}
    if warm_start:
        train["warm_start"] = -(-cpanel["learning_starts"] // num_workers)
        # replay targets bootstrap from /next_observations: an action drawn at the final prestep
        # would be thrown away, one more policy pass per iteration (every frame at n_steps 1)
        train["final_action"] = False
    deterministic = {"num_workers": 1, "n_steps": None, "do_reset": True, "deterministic": True}
    return {
        "session": {
            "torch_threads": cpanel["torch_threads"],
            # optional knobs: "auto" | "cpu" | "cuda" | "cuda:N", and repeatable GPU runs
            **{key: cpanel[key] for key in ("device", "deterministic") if key in cpanel},
        },
        "runner": {
            "number_epochs": cpanel["number_epochs"],
            "epoch_size": cpanel["epoch_size"],
            "test_interval": cpanel["test_interval"],
            "save_interval": cpanel["save_interval"],
            "keep_checkpoints": 3,
            "max_wall_time": None,
            "max_iterations": None,
            "seed": seed,
        },
        "env": env,
        "explorer": {
            "train": train,
            "test": {
                **deterministic,
                "n_episodes": cpanel["test_episodes"],
                "seed": seed + 10_000,
                "win_size": cpanel["test_win_size"],
            },
            "eval": {**deterministic, "n_episodes": 1, "render": True, "seed": seed + 20_000},
        },
        "memory": {"train": memory},
        "agents": {"agent": {"type": agent, "memory": "train", "args": agent_args}},
    }
