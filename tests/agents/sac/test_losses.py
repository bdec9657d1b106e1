"""SAC's pure pieces: known values on tiny inputs, shapes, and where gradients go."""

from __future__ import annotations

import math

import torch
from torch.distributions import Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

from digideep.agents.sac import losses
from digideep.agents.sac.policy import SACPolicy, squashed_gaussian


def test_soft_q_target_known_values_and_no_bootstrap_at_terminals() -> None:
    rewards = torch.tensor([1.0, 2.0])
    terminals = torch.tensor([0.0, 1.0])
    next_q = torch.tensor([3.0, 4.0])
    next_log_prob = torch.tensor([-1.0, 0.5])
    target = losses.soft_q_target(rewards, terminals, next_q, next_log_prob, alpha=0.5, gamma=0.9)
    # row 0: 1 + 0.9 * (3 - 0.5 * -1) = 1 + 0.9 * 3.5; row 1 terminal: the reward only
    torch.testing.assert_close(target, torch.tensor([1.0 + 0.9 * 3.5, 2.0]))


def test_the_policy_reduces_the_critics_by_their_minimum() -> None:
    torch.manual_seed(0)
    policy = SACPolicy(4, 2, [16, 16], num_critics=3)
    obs, actions = torch.randn(8, 4), torch.rand(8, 2) * 2 - 1
    target_q, actor_q = policy.target_q(obs, actions), policy.actor_q(obs, actions)
    assert target_q.shape == actor_q.shape == (8,)
    torch.testing.assert_close(target_q, policy.q_values(obs, actions, target=True).amin(dim=-1))
    torch.testing.assert_close(actor_q, policy.q_values(obs, actions).amin(dim=-1))


def test_critic_actor_and_alpha_losses_known_values() -> None:
    q = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    target = torch.tensor([2.0, 1.0])
    # critic 1: ((1-2)^2 + (3-1)^2)/2 = 2.5; critic 2: (0 + 1)/2 = 0.5
    assert losses.critic_loss(q, target).item() == 3.0
    log_prob = torch.tensor([-1.0, 1.0])
    # mean(0.5 * [-1, 1] - [1, 0]) = mean([-1.5, 0.5]) = -0.5
    assert losses.actor_loss(log_prob, q.amin(dim=-1), 0.5).item() == -0.5
    log_alpha = torch.tensor([math.log(2.0)], requires_grad=True)
    loss = losses.alpha_loss(log_alpha, log_prob, target_entropy=-1.0)
    torch.testing.assert_close(loss, torch.tensor(-(math.log(2.0) * ((-2.0 + 0.0) / 2))))
    loss.backward()
    torch.testing.assert_close(log_alpha.grad, torch.tensor([1.0]))


def test_squashed_gaussian_matches_torch_distributions() -> None:
    torch.manual_seed(0)
    mean, log_std = torch.randn(64, 3), torch.randn(64, 3) * 0.5
    noise = torch.randn(64, 3)
    actions, log_prob = squashed_gaussian(mean, log_std, noise)
    u = (mean + log_std.exp() * noise).double()
    torch.testing.assert_close(actions, torch.tanh(u).float())
    # reference in float64: Gaussian density of u with the tanh change of variables
    gaussian = Normal(mean.double(), log_std.exp().double())
    reference = TransformedDistribution(gaussian, [TanhTransform()])
    expected = gaussian.log_prob(u).sum(-1) - TanhTransform().log_abs_det_jacobian(u, torch.tanh(u)).sum(-1)
    torch.testing.assert_close(log_prob.double(), expected, atol=1e-4, rtol=1e-5)
    inside = torch.tanh(u).abs().amax(-1) < 0.99  # where tanh is invertible in float64
    torch.testing.assert_close(
        log_prob.double()[inside], reference.log_prob(torch.tanh(u)).sum(-1)[inside], atol=1e-3, rtol=1e-5
    )


def test_gradients_reach_only_the_networks_they_should() -> None:
    torch.manual_seed(0)
    policy = SACPolicy(4, 2, [16, 16])
    obs, actions = torch.randn(8, 4), torch.rand(8, 2) * 2 - 1
    # critic loss: critic weights only (the target is computed without gradients)
    with torch.no_grad():
        next_actions, next_log_prob = policy.sample(obs)
        target = losses.soft_q_target(
            torch.ones(8),
            torch.zeros(8),
            policy.target_q(obs, next_actions),
            next_log_prob,
            policy.log_alpha.exp(),
            0.99,
        )
    losses.critic_loss(policy.q_values(obs, actions), target).backward()
    assert all(p.grad is not None for p in policy.critic.parameters())
    assert all(p.grad is None for p in policy.actor.parameters())
    assert all(p.grad is None for p in policy.critic_target.parameters())
    policy.zero_grad(set_to_none=True)
    # actor loss: actor only (critic weights detached, alpha a constant)
    pi_actions, log_prob = policy.sample(obs)
    alpha = policy.log_alpha.detach().exp()
    losses.actor_loss(log_prob, policy.actor_q(obs, pi_actions), alpha).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.actor.parameters())
    assert all(p.grad is None for p in policy.critic.parameters())
    assert policy.log_alpha.grad is None
    policy.zero_grad(set_to_none=True)
    # temperature loss: log_alpha only
    losses.alpha_loss(policy.log_alpha, log_prob, -2.0).backward()
    assert policy.log_alpha.grad is not None
    assert all(p.grad is None for p in policy.actor.parameters())
