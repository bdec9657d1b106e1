"""SAC losses (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"), pure functions.

Shapes: ``B`` transitions, ``E`` critics (2 for twin critics). All tensors float32. The targets and
the actor loss take the critics already reduced to one value per transition
(:meth:`~digideep.agents.sac.policy.SACPolicy.target_q` and ``actor_q``: their minimum in SAC).

These are the one definition of the losses: the agent's ``gradient_step`` trains with their autograd
gradients in every ``update_mode``, so an edit here is what trains.
"""

from __future__ import annotations

import torch

__all__ = ["actor_loss", "alpha_loss", "critic_loss", "soft_q_target"]


def soft_q_target(
    rewards: torch.Tensor,
    terminals: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor | float,
    gamma: float,
) -> torch.Tensor:
    """``y = r + gamma (1 - terminal) (Q'(s', a') - alpha log pi(a'|s'))``.

    Args:
        rewards: ``(B,)``.
        terminals: ``(B,)``, 1.0 where the episode terminated (truncation is not a terminal).
        next_q: ``(B,)`` the target critics at ``(s', a' ~ pi(s'))``, reduced (SAC: their minimum).
        next_log_prob: ``(B,)`` ``log pi(a'|s')``.
        alpha: entropy temperature.
        gamma: discount.

    Returns:
        ``(B,)`` targets (compute under ``torch.no_grad()``).
    """
    soft_value = next_q - alpha * next_log_prob
    return rewards + gamma * (1.0 - terminals) * soft_value


def critic_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over critics of the mean squared TD error (CleanRL's ``qf1_loss + qf2_loss``).

    Args:
        q: ``(B, E)`` online critics at the stored ``(s, a)``.
        target: ``(B,)`` targets, no gradient.

    Returns:
        scalar.
    """
    return (q - target.unsqueeze(-1)).pow(2).mean(dim=0).sum()


def actor_loss(log_prob: torch.Tensor, q_pi: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """``mean(alpha log pi(a|s) - Q(s, a))`` with ``a ~ pi(s)`` reparameterized.

    Args:
        log_prob: ``(B,)``.
        q_pi: ``(B,)`` the critics at the policy's actions, reduced (SAC: their minimum), critic
            weights detached by the caller.
        alpha: entropy temperature, no gradient.

    Returns:
        scalar.
    """
    return (alpha * log_prob - q_pi).mean()


def alpha_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """Temperature loss ``-mean(log_alpha (log pi(a|s) + target_entropy))`` (SB3's form).

    Args:
        log_alpha: ``(1,)`` learnable log-temperature.
        log_prob: ``(B,)``; detached here, so only ``log_alpha`` gets a gradient.
        target_entropy: usually ``-act_dim``.

    Returns:
        scalar.
    """
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()
