"""Real Runners for the agents' tests, from a small params tree or from a shipped parameter file."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from digideep.pipeline.devices import DeviceChoice, set_torch_threads
from digideep.pipeline.runner import Runner
from digideep.storage.session import Session


def path_of(cls: type) -> str:
    """An agent class's import path as a params file names it: ``digideep.agents.sac.SAC``."""
    return f"{cls.__module__.rsplit('.', 1)[0]}.{cls.__name__}"


def small_params(
    agent_type: str,
    agent_args: dict[str, Any],
    model_name: str,
    num_workers: int,
    n_steps: int,
    warm_start: int = 0,
    capacity: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """A params tree with one agent, a train explorer and a replay (``capacity``) or rollout memory."""
    memory = (
        {"type": "digideep.memory.Memory", "args": {"capacity": capacity}}
        if capacity
        else {"type": "digideep.memory.RolloutMemory", "args": {}}
    )
    return {
        "runner": {"number_epochs": 1, "epoch_size": 1, "seed": seed, "stats_interval": 0},
        "env": {"model_name": model_name},
        "explorer": {
            "train": {"num_workers": num_workers, "n_steps": n_steps, "warm_start": warm_start, "seed": seed}
        },
        "memory": {"train": memory},
        "agents": {"agent": {"type": agent_type, "memory": "train", "args": agent_args}},
        "tracking": {"enabled": False},
    }


def shipped_params(name: str, **cpanel: Any) -> dict[str, Any]:
    """The params tree of ``params/<name>.py`` with cpanel overrides, tracking and stats off."""
    module = importlib.import_module(f"params.{name}")
    params = module.gen_params({**module.cpanel, **cpanel})
    params["tracking"] = {"enabled": False}
    params["runner"]["stats_interval"] = 0
    return params


def make_runner(root: Path, params: dict[str, Any], device: str = "cpu") -> Runner:
    """A Runner in a fresh session under ``root`` (close it with :func:`close`) whose agents run on
    ``device``, with the params' ``torch_threads`` as ``digideep train`` runs it: the process's thread
    count changes what a seed learns (torch's CPU kernels split their sums by thread)."""
    session = Session(root=root, name="run")
    set_torch_threads(params.get("session", {}).get("torch_threads"))
    return Runner(session, params, devices=DeviceChoice(device), modes=tuple(params["explorer"]))


def iterate(runner: Runner, iterations: int) -> list[dict[str, float]]:
    """Run the stages of ``iterations`` iterations; return the agent's metrics of each update."""
    metrics = []
    for _ in range(iterations):
        runner.explore()
        runner.store()
        runner.sample()
        metrics.append({k.removeprefix("/agents/agent/"): v for k, v in runner.update().items()})
    return metrics


def close(runner: Runner) -> None:
    """Close as ``close_run`` does: environments and memories, a URL session's uploads, the lock."""
    runner.close()
    runner.session.uploads.close()
    runner.session.close()
