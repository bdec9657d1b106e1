"""TD3 (Fujimoto et al. 2018): DDPG with twin critics, target policy smoothing and delayed actor updates.

Defaults follow the paper, SB3 and CleanRL: two critics, ``policy_frequency`` 2, smoothing noise 0.2
clipped at 0.5, Gaussian exploration noise 0.1, ``lr`` 3e-4 (CleanRL; SB3 uses 1e-3).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from digideep.agents.ddpg.agent import DDPG

__all__ = ["TD3"]


class TD3(DDPG):
    """Twin Delayed DDPG; every argument of :class:`~digideep.agents.ddpg.agent.DDPG` applies."""

    def __init__(
        self,
        name: str,
        session: Any,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        lr: float = 3e-4,
        num_critics: int = 2,
        policy_frequency: int = 2,
        target_policy_noise: float = 0.2,
        target_noise_clip: float = 0.5,
        **params: Any,
    ) -> None:
        super().__init__(
            name,
            session,
            observation_space,
            action_space,
            lr=lr,
            num_critics=num_critics,
            policy_frequency=policy_frequency,
            target_policy_noise=target_policy_noise,
            target_noise_clip=target_noise_clip,
            **params,
        )
