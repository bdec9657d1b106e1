"""Build a run's components (agents, memories, explorers) from its params tree.

The params tree names classes by dotted path (``"type": "digideep.agents.sac.SAC"``) and gives each
component its own slice of keyword arguments; this module is the one place that knows how those
slices reach the constructors (see ``docs/architecture.md``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from digideep.environment.explorer import Explorer
from digideep.environment.make_environment import MakeEnvironment
from digideep.errors import UsageError
from digideep.memory import DurableMemory, TrajectoryMemory
from digideep.pipeline.devices import DeviceChoice
from digideep.storage.session import Session
from digideep.utility.imports import import_object
from digideep.utility.user_code import FIX

__all__ = [
    "Built",
    "build",
    "check_classes",
    "copy_normalizers",
    "load_normalizers",
    "resolved_settings",
]

log = logging.getLogger(__name__)


@dataclass
class Built:
    """The live objects of a run."""

    agents: dict[str, Any]
    memories: dict[str, TrajectoryMemory]
    durable: dict[str, DurableMemory]  # the memories kept in the session (flushed, closed)
    explorers: dict[str, Explorer]
    agent_memory: dict[str, str]  # agent name -> name of the memory it samples from
    agent_types: dict[str, str]
    memory_types: dict[str, str]
    frames_per_chunk: int

    def class_paths(self) -> dict[str, dict[str, str]]:
        return {"agents": dict(self.agent_types), "memories": dict(self.memory_types)}


def build(
    session: Session,
    devices: DeviceChoice,
    params: dict[str, Any],
    modes: tuple[str, ...] = ("train", "test"),
) -> Built:
    """Instantiate agents, memories (when training) and the explorers of ``modes``.

    Each agent gets ``devices`` as its ``session`` (the
    :class:`~digideep.agents.base.AgentSession` that picks its device); memories get their place
    in ``session`` and the explorers ``session`` itself (for videos).
    """
    env_params = params["env"]
    observation_space, action_spaces = MakeEnvironment(**env_params).spaces()

    agents: dict[str, Any] = {}
    agent_memory: dict[str, str] = {}
    agent_types: dict[str, str] = {}
    for name, spec in params["agents"].items():
        if name not in action_spaces.spaces:
            raise UsageError(
                f"agent '{name}' has no action space; the environment's agents are {list(action_spaces.spaces)}"
            )
        agent_class = import_object(spec["type"])
        agents[name] = agent_class(
            name=name,
            session=devices,
            observation_space=observation_space,
            action_space=action_spaces[name],
            **spec.get("args", {}),
        )
        agent_memory[name] = spec.get("memory", "train")
        agent_types[name] = spec["type"]
        if agents[name].update_mode is not None and "train" in modes:  # (play builds agents that never learn)
            log.info(
                "agent '%s': the update runs %s (%s)",
                name,
                agents[name].update_mode,
                agents[name].update_mode_reason,
            )

    explorer_params = params["explorer"]
    memories: dict[str, TrajectoryMemory] = {}
    memory_types: dict[str, str] = {}
    if "train" in modes:
        num_workers = explorer_params["train"]["num_workers"]
        for name, spec in params["memory"].items():
            memory_class = import_object(spec["type"])
            try:
                memory = memory_class.from_params(
                    location=session.memory_location(name).url,
                    num_workers=num_workers,
                    name=name,
                    **spec.get("args", {}),
                )
            except AttributeError as error:
                if error.name != "from_params" or error.obj is not memory_class:
                    raise
                raise UsageError(
                    f"memory '{name}': class '{spec['type']}' has no from_params(location=, num_workers=, "
                    "name=, **args); give it one (see digideep.memory.Memory.from_params)"
                ) from None
            if not isinstance(memory, TrajectoryMemory):
                raise UsageError(
                    f"memory '{name}': class '{spec['type']}' is not a digideep.memory.TrajectoryMemory "
                    "(store, prepare_restore, restore, state_dict); give it those methods "
                    "(see digideep.memory.RolloutMemory)"
                )
            memories[name] = memory
            memory_types[name] = spec["type"]

    explorers = {
        mode: Explorer(session, agents, mode=mode, env=env_params, **explorer_params[mode])
        for mode in modes
        if mode in explorer_params
    }
    train = explorer_params.get("train", {})
    frames_per_chunk = train.get("n_steps", 0) * train.get("num_workers", 1)
    durable = {name: memory for name, memory in memories.items() if isinstance(memory, DurableMemory)}
    return Built(
        agents, memories, durable, explorers, agent_memory, agent_types, memory_types, frames_per_chunk
    )


def check_classes(info: dict[str, Any], path: Path) -> None:
    """Check that every class a checkpoint names can still be imported.

    Raises:
        UsageError: naming the checkpoint file and the missing class.
    """
    params = info["params"]
    named = [(f"agent '{n}'", s.get("type")) for n, s in params.get("agents", {}).items()]
    named += [(f"memory '{n}'", s.get("type")) for n, s in params.get("memory", {}).items()]
    for what, dotted in named:
        try:
            import_object(dotted)
        except ImportError as error:
            fix = "" if dotted.startswith("digideep.") else f"; {FIX}"  # a user's own class
            raise UsageError(
                f"checkpoint file '{path / 'runner.json'}' names {what} class '{dotted}', which cannot be imported ({error}){fix}"
            ) from None


def copy_normalizers(source: Explorer, target: Explorer) -> None:
    """Give ``target`` (test or eval explorer) the normaliser statistics of ``source``."""
    target.load_normalizer_state_dict(source.normalizer_state_dict())


def load_normalizers(target: Explorer, train_explorer_state: dict[str, Any] | None) -> None:
    """Load normaliser statistics from a saved train explorer state (for play)."""
    if train_explorer_state is not None:
        saved = train_explorer_state["wrappers"]
        target.load_normalizer_state_dict(
            {k: {"statistics": s["statistics"]} for k, s in saved.items() if "statistics" in s}
        )


def resolved_settings(agents: dict[str, Any]) -> dict[str, str]:
    """What the params left to the machine, as each agent decided it
    (:meth:`~digideep.agents.base.AgentBase.resolved_settings`), as
    ``{"agents/<name>/resolved/<setting>": value}``."""
    return {
        f"agents/{name}/resolved/{setting}": value
        for name, agent in agents.items()
        for setting, value in agent.resolved_settings().items()
    }
