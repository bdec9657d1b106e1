"""TD3 losses (Fujimoto et al. 2018), pure functions; DDPG uses them with one critic.

Shapes: ``B`` transitions, ``E`` critics. All tensors float32. The target and the actor loss take the
critics already reduced to one value per transition
(:meth:`~digideep.agents.td3.policy.DeterministicPolicy.target_q` and ``actor_q``).

These are the one definition of the losses: the agent's ``gradient_step`` trains with their autograd
gradients in every ``update_mode``, so an edit here is what trains.
"""

from __future__ import annotations

import torch

__all__ = ["actor_loss", "critic_loss", "q_target", "smoothed_target_actions"]


def q_target(
    rewards: torch.Tensor, terminals: torch.Tensor, next_q: torch.Tensor, gamma: float
) -> torch.Tensor:
    """``y = r + gamma (1 - terminal) Q'(s', mu'(s'))``.

    Args:
        rewards: ``(B,)``.
        terminals: ``(B,)``, 1.0 where the episode terminated (truncation is not a terminal).
        next_q: ``(B,)`` the target critics at the next state and the target actor's action, reduced
            (TD3: their minimum).
        gamma: discount.

    Returns:
        ``(B,)`` targets (compute under ``torch.no_grad()``).
    """
    return rewards + gamma * (1.0 - terminals) * next_q


def critic_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over critics of the mean squared TD error.

    Args:
        q: ``(B, E)`` online critics at the stored ``(s, a)``.
        target: ``(B,)``, no gradient.

    Returns:
        scalar.
    """
    return (q - target.unsqueeze(-1)).pow(2).mean(dim=0).sum()


def actor_loss(q_pi: torch.Tensor) -> torch.Tensor:
    """``-mean Q(s, mu(s))``: the deterministic policy gradient (TD3: through the first critic).

    Args:
        q_pi: ``(B,)`` the critics at the actor's actions, reduced (TD3: the first one), critic weights
            detached by the caller.

    Returns:
        scalar.
    """
    return -q_pi.mean()


def smoothed_target_actions(
    next_actions: torch.Tensor, noise: torch.Tensor, policy_noise: float, noise_clip: float
) -> torch.Tensor:
    """TD3's target policy smoothing: ``clip(mu'(s') + clip(policy_noise * noise, -noise_clip, noise_clip), -1, 1)``.

    Args:
        next_actions: ``(B, A)`` target actor's actions in normalized units.
        noise: ``(B, A)`` standard normal draws.
        policy_noise: std of the smoothing noise (normalized units; 0.2 in the paper).
        noise_clip: bound of the smoothing noise (0.5 in the paper).

    Returns:
        ``(B, A)`` in ``[-1, 1]``.
    """
    smoothing = (noise * policy_noise).clamp(-noise_clip, noise_clip)
    return (next_actions + smoothing).clamp(-1.0, 1.0)
