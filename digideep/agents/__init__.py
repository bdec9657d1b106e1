"""Agents: :class:`AgentBase` and :class:`PolicyBase`, and one package per method.

Params files name agents by import path: ``digideep.agents.ppo.PPO``, ``digideep.agents.ddpg.DDPG``,
``digideep.agents.sac.SAC``, ``digideep.agents.td3.TD3``.
"""

from digideep.agents.base import AgentBase, PolicyBase

__all__ = ["AgentBase", "PolicyBase"]
