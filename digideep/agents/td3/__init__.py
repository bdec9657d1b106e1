"""Twin Delayed Deep Deterministic Policy Gradient (and the update DDPG specializes)."""

from digideep.agents.td3.agent import TD3

__all__ = ["TD3"]
