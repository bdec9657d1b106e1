"""TD3's pure pieces (DDPG uses them with one critic): targets, losses, smoothing, and where gradients go."""

from __future__ import annotations

import torch

from digideep.agents.td3 import losses
from digideep.agents.td3.policy import DeterministicPolicy


def test_smoothing_noise_is_clipped_and_actions_stay_in_bounds() -> None:
    actions = torch.tensor([[0.9, -0.2], [0.0, 0.0]])
    noise = torch.tensor([[10.0, -10.0], [0.5, -1.0]])
    out = losses.smoothed_target_actions(actions, noise, policy_noise=0.2, noise_clip=0.5)
    # row 0: noise clipped to +-0.5, then actions clipped to [-1, 1]; row 1: 0.1 and -0.2
    torch.testing.assert_close(out, torch.tensor([[1.0, -0.7], [0.1, -0.2]]))


def test_the_target_takes_the_minimum_over_the_twin_critics_and_the_actor_the_first() -> None:
    torch.manual_seed(0)
    policy = DeterministicPolicy(3, 2, [8], num_critics=2)
    obs, actions = torch.randn(5, 3), torch.rand(5, 2) * 2 - 1
    target_q, actor_q = policy.target_q(obs, actions), policy.actor_q(obs, actions)
    assert target_q.shape == actor_q.shape == (5,)
    torch.testing.assert_close(target_q, policy.q_values(obs, actions, target=True).amin(dim=-1))
    torch.testing.assert_close(actor_q, policy.q_values(obs, actions)[:, 0])


def test_q_target_bootstraps_unless_terminal() -> None:
    target = losses.q_target(
        torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0]), torch.tensor([10.0, 10.0]), gamma=0.5
    )
    torch.testing.assert_close(target, torch.tensor([6.0, 1.0]))


def test_critic_and_actor_loss_values() -> None:
    assert losses.critic_loss(torch.tensor([[1.0], [3.0]]), torch.tensor([0.0, 1.0])).item() == 2.5
    assert losses.actor_loss(torch.tensor([1.0, 3.0])).item() == -2.0


def test_actor_loss_reaches_only_the_actor() -> None:
    torch.manual_seed(0)
    policy = DeterministicPolicy(3, 2, [8], num_critics=1)
    obs = torch.randn(5, 3)
    losses.actor_loss(policy.actor_q(obs, policy.actor(obs))).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.actor.parameters())
    assert all(p.grad is None for p in policy.critic.parameters())
    assert all(p.grad is None for p in policy.actor_target.parameters())
    policy.zero_grad(set_to_none=True)
    losses.critic_loss(policy.q_values(obs, torch.zeros(5, 2)), torch.zeros(5)).backward()
    assert all(p.grad is not None for p in policy.critic.parameters())
    assert all(p.grad is None for p in policy.actor.parameters())
