"""A REDQ-style SAC (Chen, Wang, Zhou, Ross 2021, "Randomized Ensembled Double Q-Learning"), written
outside the library as a researcher writes a variant: its losses, then its update, on SAC's extension
points. ``docs/new-agent.md`` walks through it; ``tests/docs/test_examples.py`` trains it in every
update mode that runs on the machine and resumes it after a kill.

REDQ differs from SAC in three places: an ensemble of ``N`` critics (10 in the paper), a Q target
that takes the minimum over a random subset of ``M`` of them (2), and an actor that follows the mean
of all ``N``. Its high update-to-data ratio (20 gradient steps per frame in the paper) is a parameter
(``updates_per_step``), not code.
"""

from __future__ import annotations

from typing import Any

import torch

from digideep.agents.off_policy import Transitions
from digideep.agents.sac import SAC
from digideep.agents.sac import losses as sac_losses
from digideep.agents.utils import minimize, polyak_update


# --8<-- [start:losses]
def subset_min(next_q: torch.Tensor, subset: int) -> torch.Tensor:
    """``(B,)`` minimum over a random subset of ``subset`` critics of ``next_q`` ``(B, N)``: REDQ's
    in-target minimization. The subset is drawn with ``torch.rand`` (one draw per step, on the
    tensors' device), which compiled code and CUDA graphs replay as they should."""
    chosen = torch.rand(next_q.shape[-1], device=next_q.device).argsort()[:subset]
    return next_q[:, chosen].min(dim=-1).values


def actor_loss(log_prob: torch.Tensor, q_pi: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """``mean(alpha log pi(a|s) - mean_i Q_i(s, a))``: the actor follows the ensemble's mean."""
    return (alpha * log_prob - q_pi.mean(dim=-1)).mean()


# --8<-- [end:losses]


# --8<-- [start:agent]
class REDQ(SAC):
    """SAC with ``num_critics`` critics, a target over a random subset of ``target_subset`` of them,
    and an actor on their mean.

    Args:
        num_critics: the ensemble (N, 10 in the paper).
        target_subset: critics in each target's minimum (M, 2 in the paper).
        **params: :class:`~digideep.agents.sac.SAC` arguments.
    """

    def __init__(self, *args: Any, num_critics: int = 10, target_subset: int = 2, **params: Any) -> None:
        if not 1 <= target_subset <= num_critics:
            raise ValueError(f"need 1 <= target_subset <= num_critics, got {target_subset}, {num_critics}")
        self.target_subset = int(target_subset)
        super().__init__(*args, num_critics=num_critics, **params)

    def gradient_step(
        self, batch: Transitions, noise: torch.Tensor, *, actor_step: bool
    ) -> dict[str, torch.Tensor]:
        """One REDQ gradient step: SAC's, with REDQ's target and actor loss."""
        policy, obs = self.policy, batch.observations
        alpha = policy.log_alpha.detach().exp()
        with torch.no_grad():
            next_actions, next_log_prob = policy.sample(batch.next_observations, noise[0])
            next_q = policy.q_values(batch.next_observations, next_actions, target=True)  # (B, N)
            soft_value = subset_min(next_q, self.target_subset) - alpha * next_log_prob
            target = batch.rewards + self.gamma * (1.0 - batch.terminals) * soft_value
        q = policy.q_values(obs, batch.actions)
        qf_loss = sac_losses.critic_loss(q, target)  # every critic regresses on the same target
        minimize(self.critic_optimizer, qf_loss, self._critic_params)
        metrics = {"losses/qf_loss": qf_loss.detach(), "losses/qf_values": q.detach().mean()}

        if actor_step:
            pi_actions, log_prob = policy.sample(obs, noise[1])
            q_pi = policy.q_values(obs, pi_actions, detach=True)
            loss = actor_loss(log_prob, q_pi, alpha)
            if self.autotune:
                loss = loss + sac_losses.alpha_loss(policy.log_alpha, log_prob, self.target_entropy)
            minimize(self.actor_optimizer, loss, self._actor_params)
            metrics["losses/entropy"] = -log_prob.detach().mean()

        polyak_update(self._target_params, self._critic_params, self.tau)
        return metrics


# --8<-- [end:agent]
