"""PPO losses (Schulman et al. 2017) and generalized advantage estimation, pure functions.

Follows CleanRL's ``ppo_continuous_action.py`` (clipped surrogate, optionally clipped value loss with
the 0.5 factor, entropy bonus) and the "37 implementation details of PPO".

These functions are the one source of PPO's training: :meth:`PPO.minibatch_step
<digideep.agents.ppo.agent.PPO.minibatch_step>` looks them up here at every step and takes their
gradients by autograd, in every update mode (eager, ``torch.compile``, CUDA graphs). An edit to a loss
here trains as written (``tests/agents/ppo/test_loss_edits.py`` checks it). Compiled code and CUDA graphs
read the clip range as a 0-d tensor, so a loss should take it as ``float | torch.Tensor``.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["entropy_loss", "gae", "normalize_per_minibatch", "policy_loss", "ratio_stats", "value_loss"]


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminals: torch.Tensor,
    truncations: torch.Tensor,
    next_masks: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimates over a chunk, time along the last axis.

    For row ``t`` the bootstrap value is ``values[t + 1]`` while the episode goes on
    (``next_masks[t] == 1``), ``next_values[t]`` (the value of the true final observation) when the
    episode was truncated there, and 0 when it terminated. The recursion stops at every episode end.

    Args:
        rewards: ``(W, T)``.
        values: ``(W, T + 1)`` values of the rows' observations (row ``T``: the final prestep).
        next_values: ``(W, T)`` values of ``/next_observations``; only read where truncated.
        terminals: ``(W, T)`` 1.0 where the transition terminated.
        truncations: ``(W, T)`` 1.0 where it was truncated.
        next_masks: ``(W, T)`` the mask of row ``t + 1``: 0.0 where an episode ended at row ``t``.
        gamma: discount.
        lam: GAE lambda.

    Returns:
        ``(advantages (W, T), returns (W, T))`` with ``returns = advantages + values[:, :T]``.
    """
    num_steps = rewards.shape[-1]
    zero = torch.zeros_like(rewards)
    truncated_value = torch.where((truncations > 0) & (terminals <= 0), next_values, zero)
    bootstrap = torch.where(next_masks > 0, values[..., 1:], truncated_value)  # where: NaN-safe
    deltas = rewards + gamma * bootstrap - values[..., :-1]
    decay = gamma * lam * next_masks
    # The recursion runs in NumPy on time-major copies: a step is two ufunc calls on a row view, which
    # dispatch faster than torch's indexing (docs/measurements.md). The same float32 products and
    # sums, so the same numbers as the torch loop.
    deltas_t = deltas.detach().cpu().reshape(-1, num_steps).T.contiguous().numpy()
    decay_t = decay.detach().cpu().reshape(-1, num_steps).T.contiguous().numpy()
    advantages_t = np.empty_like(deltas_t)
    running = np.zeros_like(deltas_t[0])
    for t in range(num_steps - 1, -1, -1):
        running = np.add(deltas_t[t], np.multiply(decay_t[t], running), out=advantages_t[t])
    advantages = torch.from_numpy(advantages_t.T.copy()).reshape(deltas.shape).to(deltas.device)
    return advantages, advantages + values[..., :-1]


def policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped surrogate ``-mean(min(r A, clip(r, 1 - eps, 1 + eps) A))``, ``r = pi / pi_old``.

    Args:
        log_prob: ``(B,)`` under the current policy.
        old_log_prob: ``(B,)`` when the actions were taken.
        advantages: ``(B,)`` (normalized by the caller if wanted).
        clip_range: ``eps`` (a float, or a 0-d tensor for compiled code).

    Returns:
        ``(loss, log_ratio)``: the scalar loss and the detached ``(B,)`` ``log r`` for :func:`ratio_stats`.
    """
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    clipped = ratio.clamp(1.0 - clip_range, 1.0 + clip_range)
    loss = -torch.minimum(ratio * advantages, clipped * advantages).mean()
    return loss, log_ratio.detach()


def ratio_stats(log_ratio: torch.Tensor, clip_range: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(clip_fraction, approx_kl)`` of detached log-ratios ``(N,)``.

    ``clip_fraction`` is the share of ``|r - 1| > eps``; ``approx_kl`` the ``mean((r - 1) - log r)``
    estimator (CleanRL, "Approximating KL divergence", J. Schulman).
    """
    ratio = log_ratio.exp()
    clip_fraction = ((ratio - 1.0).abs() > clip_range).float().mean()
    return clip_fraction, ((ratio - 1.0) - log_ratio).mean()


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip_range: float | torch.Tensor | None,
) -> torch.Tensor:
    """``0.5 mean((V - R)^2)``, or with ``clip_range`` the pessimistic clipped form
    ``0.5 mean(max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2))``.

    Args:
        values: ``(B,)`` current values.
        old_values: ``(B,)`` values when the data was collected.
        returns: ``(B,)`` GAE returns.
        clip_range: ``eps``, or None for no clipping.

    Returns:
        scalar.
    """
    squared = (values - returns).pow(2)
    if clip_range is not None:
        clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
        squared = torch.maximum(squared, (clipped - returns).pow(2))
    return 0.5 * squared.mean()


def entropy_loss(entropy: torch.Tensor) -> torch.Tensor:
    """``-mean(entropy)``: minimizing it with a positive coefficient encourages exploration."""
    return -entropy.mean()


def normalize_per_minibatch(advantages: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Normalize each consecutive slice of ``batch_size`` rows to zero mean and unit std.

    The same as normalizing inside every minibatch (SB3, CleanRL), done in one batched operation.
    A trailing slice of one row is left as is.

    Args:
        advantages: ``(N,)``.
        batch_size: minibatch size.

    Returns:
        ``(N,)``.
    """
    full = advantages.shape[0] // batch_size * batch_size
    parts = []
    if full:
        head = advantages[:full].reshape(-1, batch_size)
        parts.append(((head - head.mean(1, keepdim=True)) / (head.std(1, keepdim=True) + 1e-8)).reshape(-1))
    tail = advantages[full:]
    if tail.shape[0] > 1:
        tail = (tail - tail.mean()) / (tail.std() + 1e-8)
    parts.append(tail)
    return torch.cat(parts) if len(parts) > 1 else parts[0]
