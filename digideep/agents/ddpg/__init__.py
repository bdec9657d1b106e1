"""Deep Deterministic Policy Gradient."""

from digideep.agents.ddpg.agent import DDPG

__all__ = ["DDPG"]
