"""TD3 losses (Fujimoto et al. 2018), pure functions.

TD3's critic and actor losses are DDPG's with two critics (the target takes their minimum, the actor
follows the first); what TD3 adds is target policy smoothing (:func:`smoothed_target_actions`, kept
beside the DDPG losses that the shared update uses).
"""

from __future__ import annotations

from digideep.agents.ddpg.losses import actor_loss, critic_loss, q_target, smoothed_target_actions

__all__ = ["actor_loss", "critic_loss", "q_target", "smoothed_target_actions"]
