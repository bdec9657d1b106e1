"""TD3 policy: the deterministic actor-critic of DDPG with twin critics."""

from __future__ import annotations

from digideep.agents.ddpg.policy import DeterministicPolicy

__all__ = ["DeterministicPolicy"]
