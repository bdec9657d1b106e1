"""Twin Delayed Deep Deterministic Policy Gradient."""

from digideep.agents.td3.agent import TD3

__all__ = ["TD3"]
