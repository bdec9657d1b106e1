"""A run's checkpointable state: the ``states.pt`` of a checkpoint, and its restore.

:class:`RunState` composes the ``state_dict()`` of every stateful part of a run (counters, agents,
explorers, memories, the Runner's Monitor, the random generators and the metrics journal's offset)
and restores them in one step, the memories checked before anything changes
(:meth:`RunState.prepare_memories`). The Runner holds one; :mod:`digideep.pipeline.checkpointing`
writes its state and :mod:`digideep.pipeline.resuming` restores it.
"""

from __future__ import annotations

from typing import Any

from digideep.environment.explorer import Explorer
from digideep.memory import Readback, TrajectoryMemory
from digideep.pipeline.components import load_normalizers
from digideep.pipeline.counters import Counters
from digideep.pipeline.rng import rng_state, set_rng_state
from digideep.tracking.journal import MetricsJournal
from digideep.utility.monitoring import Monitor

__all__ = ["RunState"]


class RunState:
    """The stateful parts of a run, saved and restored together.

    Args:
        counters: the run's progress counters (restored in place).
        agents: ``{name: agent}``.
        explorers: ``{mode: explorer}``.
        memories: ``{name: memory}`` (empty when the run does not train).
        monitor: the Runner's own Monitor (the process-wide one is not checkpointed).
        journal: the session's metrics journal, or None (rewound on restore).
    """

    def __init__(
        self,
        counters: Counters,
        agents: dict[str, Any],
        explorers: dict[str, Explorer],
        memories: dict[str, TrajectoryMemory],
        monitor: Monitor,
        journal: MetricsJournal | None,
    ) -> None:
        self.counters = counters
        self.agents = agents
        self.explorers = explorers
        self.memories = memories
        self.monitor = monitor
        self.journal = journal

    def state_dict(self) -> dict[str, Any]:
        """Every component's state, the counters, the Monitor, the RNGs and the journal's offset."""
        return {
            "counters": self.counters.state_dict(),
            "agents": {name: agent.state_dict() for name, agent in self.agents.items()},
            "explorers": {mode: explorer.state_dict() for mode, explorer in self.explorers.items()},
            "memories": {name: memory.state_dict() for name, memory in self.memories.items()},
            "monitor": self.monitor.state_dict(),
            "rng": rng_state(),
            "journal": self.journal.state_dict() if self.journal is not None else {},
        }

    def prepare_memories(self, state: dict[str, Any]) -> dict[str, Readback]:
        """Read back and check every memory as ``state`` restores it, changing nothing (no file, no
        pointer; see :meth:`digideep.memory.Memory.prepare_restore`).

        Raises:
            DamagedMemoryError: a memory lacks a chunk file or a chunk fails its checksum.
        """
        return {
            name: memory.prepare_restore(state["memories"][name]) for name, memory in self.memories.items()
        }

    def load_state_dict(self, state: dict[str, Any], prepared: dict[str, Readback] | None = None) -> None:
        """Restore :meth:`state_dict` into the components built from the same params.

        ``prepared``: :meth:`prepare_memories`'s for this ``state`` (made first when not given), so
        that a damaged memory is found before any memory, or the journal, changes.
        """
        prepared = self.prepare_memories(state) if prepared is None else prepared
        self.counters.load_state_dict(state["counters"])
        for name, agent in self.agents.items():
            agent.load_state_dict(state["agents"][name])
        for mode, explorer in self.explorers.items():
            if mode in state["explorers"]:
                explorer.load_state_dict(state["explorers"][mode])
        for name, memory in self.memories.items():
            memory.restore(state["memories"][name], prepared[name])
        self.monitor.load_state_dict(state["monitor"])
        set_rng_state(state["rng"])
        if self.journal is not None and "offset" in state["journal"]:
            # the replayed iterations append their records again
            self.journal.rewind(state["journal"]["offset"], checkpoint=self.counters.iteration)

    def load_policies(self, state: dict[str, Any]) -> None:
        """Restore only what acting needs: the agents, and the explorers' normalisers from the saved
        train explorer (play builds no memory and no train explorer)."""
        for name, agent in self.agents.items():
            agent.load_state_dict(state["agents"][name])
        train_explorer = state["explorers"].get("train")
        for explorer in self.explorers.values():
            load_normalizers(explorer, train_explorer)
