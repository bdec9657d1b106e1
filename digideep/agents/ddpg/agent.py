"""DDPG (Lillicrap et al. 2016) as the special case of TD3 that SB3 makes it: one critic, no target
policy smoothing, and an actor step every gradient step (``policy_frequency`` 1 by default; CleanRL's
DDPG uses 2, which the MuJoCo parameter file keeps).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from digideep.agents.td3.agent import TD3

__all__ = ["DDPG"]


class DDPG(TD3):
    """Deep Deterministic Policy Gradient for Box action spaces.

    Args:
        name: the agent's name (its key in the trajectory, ``/agents/<name>/...``).
        session: what picks the agent's device (:class:`~digideep.agents.base.AgentSession`).
        observation_space: the single-environment observation space.
        action_space: this agent's action space.
        lr: learning rate of actor and critic (SB3: 1e-3; the DDPG paper: 1e-4 actor, 1e-3 critic).
        policy_frequency: gradient steps per actor step and target update (1; CleanRL's DDPG: 2).
        **params: :class:`~digideep.agents.td3.agent.TD3` arguments other than ``num_critics``,
            ``target_policy_noise`` and ``target_noise_clip`` (``actor_lr``, ``critic_lr``,
            ``noise_type``, ``noise_std``, ``gamma``, ``tau``, ``batch_size``, ...).
    """

    def __init__(
        self,
        name: str,
        session: Any,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        lr: float = 1e-3,
        policy_frequency: int = 1,
        **params: Any,
    ) -> None:
        fixed = sorted({"num_critics", "target_policy_noise", "target_noise_clip"} & set(params))
        if fixed:
            raise ValueError(f"DDPG has one critic and no target smoothing; drop {fixed} or use TD3")
        super().__init__(
            name,
            session,
            observation_space,
            action_space,
            lr=lr,
            policy_frequency=policy_frequency,
            num_critics=1,
            target_policy_noise=0.0,
            **params,
        )
