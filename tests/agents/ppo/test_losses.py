"""PPO's pure pieces: GAE at episode ends, the clipped losses, the distributions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch.distributions import Categorical, Normal

from digideep.agents.ppo import losses
from digideep.agents.ppo.policy import ActorCriticPolicy


def reference_gae(rewards, values, next_values, terminals, truncations, gamma, lam):
    """Per-step textbook GAE on one worker, episodes ending at terminals or truncations."""
    T = len(rewards)
    advantages = np.zeros(T)
    running = 0.0
    for t in reversed(range(T)):
        if terminals[t]:
            bootstrap, running = 0.0, 0.0
        elif truncations[t]:
            bootstrap, running = next_values[t], 0.0
        else:
            bootstrap = values[t + 1]
        delta = rewards[t] + gamma * bootstrap - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
    return advantages


def test_gae_matches_reference_across_terminals_and_truncations() -> None:
    rng = np.random.default_rng(0)
    T = 12
    rewards = rng.normal(size=(2, T))
    values = rng.normal(size=(2, T + 1))
    next_values = rng.normal(size=(2, T))
    terminals = np.zeros((2, T))
    truncations = np.zeros((2, T))
    terminals[0, 3] = 1
    truncations[0, 7] = 1
    truncations[1, T - 1] = 1  # truncated on the last row: bootstrap from the final observation
    next_masks = 1.0 - np.maximum(terminals, truncations)
    next_values[0, 3] = np.nan  # a value that must not be read (terminal row)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in locals().items() if isinstance(v, np.ndarray)}
    advantages, returns = losses.gae(
        t["rewards"],
        t["values"],
        t["next_values"],
        t["terminals"],
        t["truncations"],
        t["next_masks"],
        0.9,
        0.8,
    )
    for w in range(2):
        expected = reference_gae(
            rewards[w], values[w], next_values[w], terminals[w], truncations[w], 0.9, 0.8
        )
        np.testing.assert_allclose(advantages[w].numpy(), expected, rtol=1e-12)
    torch.testing.assert_close(returns, advantages + t["values"][:, :-1])


def test_gae_known_values_on_two_steps() -> None:
    # r = [1, 1], V = [0, 0, 10]; gamma 0.5, lambda 1: delta = [1, 1 + 5] -> A = [1 + 0.5 * 6, 6]
    advantages, _ = losses.gae(
        torch.tensor([[1.0, 1.0]]),
        torch.tensor([[0.0, 0.0, 10.0]]),
        torch.zeros(1, 2),
        torch.zeros(1, 2),
        torch.zeros(1, 2),
        torch.ones(1, 2),
        0.5,
        1.0,
    )
    torch.testing.assert_close(advantages, torch.tensor([[4.0, 6.0]]))


def test_policy_loss_clips_the_ratio() -> None:
    advantages = torch.tensor([1.0, 1.0, -1.0])
    old = torch.zeros(3)
    new = torch.log(torch.tensor([1.5, 0.9, 0.5]))
    loss, log_ratio = losses.policy_loss(new, old, advantages, clip_range=0.2)
    # min(r A, clip(r) A): [min(1.5, 1.2), min(0.9, 0.9), min(-0.5, -0.8)] = [1.2, 0.9, -0.8]
    torch.testing.assert_close(loss, torch.tensor(-(1.2 + 0.9 - 0.8) / 3))
    clip_fraction, approx_kl = losses.ratio_stats(log_ratio, 0.2)
    torch.testing.assert_close(clip_fraction, torch.tensor(2 / 3))
    ratio = new.exp()
    torch.testing.assert_close(approx_kl, ((ratio - 1) - new).mean())
    assert not log_ratio.requires_grad


def test_minibatch_normalization_equals_normalizing_each_slice() -> None:
    torch.manual_seed(0)
    advantages = torch.randn(10) * 3 + 1
    out = losses.normalize_per_minibatch(advantages, 4)
    for lo, hi in ((0, 4), (4, 8), (8, 10)):
        part = advantages[lo:hi]
        torch.testing.assert_close(out[lo:hi], (part - part.mean()) / (part.std() + 1e-8))
    torch.testing.assert_close(losses.normalize_per_minibatch(advantages, 3)[9:], advantages[9:])


def test_value_loss_clipped_is_pessimistic() -> None:
    values, old, returns = torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([3.0])
    assert losses.value_loss(values, old, returns, None).item() == 0.5
    # clipped value 0.5 is further from 3 than 2 is: max(1, 6.25) / 2
    assert losses.value_loss(values, old, returns, 0.5).item() == 3.125


def test_gaussian_and_categorical_log_probs_and_entropies() -> None:
    torch.manual_seed(0)
    box = ActorCriticPolicy(3, gym.spaces.Box(-1, 1, (2,)), [8])
    box.log_std.data = torch.tensor([0.3, -0.5])
    features = torch.randn(5, 3)
    actions = torch.randn(5, 2)
    log_prob, entropy = box.log_prob_entropy(box.distribution(features), actions)
    reference = Normal(box.actor(features), box.log_std.exp())
    torch.testing.assert_close(log_prob, reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(entropy, reference.entropy().sum(-1))
    assert box.value(features).shape == (5,)

    cat = ActorCriticPolicy(3, gym.spaces.Discrete(4, start=1), [8], ortho_init=False)
    out = cat.generate_actions(features, torch.zeros(5, 1), torch.ones(5, 1), deterministic=False)
    assert out["actions"].dtype == torch.int64 and set(out["actions"].tolist()) <= {1, 2, 3, 4}
    reference = Categorical(logits=cat.actor(features))
    log_prob, entropy = cat.log_prob_entropy(cat.distribution(features), out["actions"])
    torch.testing.assert_close(log_prob, reference.log_prob(out["actions"] - 1))
    torch.testing.assert_close(out["artifacts"]["action_log_probs"].squeeze(-1), log_prob)
    torch.testing.assert_close(entropy, reference.entropy())


def test_value_loss_reaches_only_the_critic() -> None:
    policy = ActorCriticPolicy(3, gym.spaces.Box(-1, 1, (2,)), [8])
    values = policy.value(torch.randn(4, 3))
    losses.value_loss(values, values.detach(), torch.ones(4), None).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.critic.parameters())
    assert all(p.grad is None for p in policy.actor.parameters())
    assert policy.log_std.grad is None
