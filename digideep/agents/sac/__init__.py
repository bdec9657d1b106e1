"""Soft Actor-Critic."""

from digideep.agents.sac.agent import SAC

__all__ = ["SAC"]
