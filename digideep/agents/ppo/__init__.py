"""Proximal Policy Optimization."""

from digideep.agents.ppo.agent import PPO

__all__ = ["PPO"]
