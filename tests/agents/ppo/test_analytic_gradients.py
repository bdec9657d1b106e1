"""PPO's hand-written gradients: the same loss, parts and gradients as autograd's, and used only where
they apply."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from digideep.agents.ppo import PPO
from digideep.agents.ppo import losses as ppo_losses
from digideep.agents.ppo.agent import Minibatch
from tests.agents.analytic_checks import ACTIONS, OBSERVATIONS, SESSION, moved_agent
from tests.agents.ppo.test_acting import trained_agent

NAMES = ("loss", "policy loss", "value loss", "entropy", "log-ratio")


def minibatch(agent: PPO, rows: int = 64) -> Minibatch:
    """Random rows whose stored log-probabilities and values are far enough from the policy's that
    both clips are active for many of them."""
    observations, actions = torch.randn(rows, 17), torch.randn(rows, 6)
    with torch.no_grad():
        log_probs, _ = agent.policy.log_prob_entropy(agent.policy.distribution(observations), actions)
        values = agent.policy.value(observations)
    advantages = ppo_losses.normalize_per_minibatch(torch.randn(rows), rows)
    return Minibatch(
        observations,
        actions,
        log_probs + 0.3 * torch.randn(rows),
        values + 0.3 * torch.randn(rows),
        advantages,
        values + torch.randn(rows),
    )


def assert_same_as_autograd(agent: PPO, batch: Minibatch, clip: float) -> None:
    """The analytic step and autograd on ``agent._loss``: equal outputs and equal gradients."""
    expected = agent._loss(batch.observations, batch, clip)
    agent.flat.zero_grad()
    expected[0].backward()
    expected_grads = [p.grad.clone() for p in agent.policy.parameters()]

    agent.flat.param.grad.fill_(float("nan"))  # every gradient must be written, none accumulated
    got = agent._analytic(batch.observations, batch, clip)
    # log-densities near -10 are summed in another order: about 1e-6 apart, absolute
    for name, ours, theirs in zip(NAMES, got, expected, strict=True):
        torch.testing.assert_close(
            ours, theirs.detach(), rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}"
        )
    for (name, parameter), theirs in zip(agent.policy.named_parameters(), expected_grads, strict=True):
        torch.testing.assert_close(
            parameter.grad, theirs, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"ent_coef": 0.01},
        {"clip_value_loss": False, "vf_coef": 1.0},
        {"activation": "relu", "hidden_sizes": (32, 16, 8)},
        {"hidden_sizes": ()},
    ],
    ids=["defaults", "entropy bonus", "unclipped value loss", "relu 3 layers", "linear"],
)
@pytest.mark.parametrize("clip", [0.2, 0.01])
def test_loss_parts_and_gradients_equal_autograds_with_both_clips_active(args: dict, clip: float) -> None:
    agent = moved_agent(PPO, **args)
    assert agent._analytic is not None
    batch = minibatch(agent)
    ratio = (agent._loss(batch.observations, batch, clip)[4]).exp()
    assert ((ratio - 1).abs() > clip).float().mean() > 0.2, "the surrogate's clip is active"
    assert ((agent.policy.value(batch.observations) - batch.values).abs() > clip).float().mean() > 0.2
    assert_same_as_autograd(agent, batch, clip)


def test_on_a_real_chunk_after_an_update_the_gradients_are_autograds() -> None:
    agent, chunk = trained_agent()  # Pendulum, one update through the analytic step
    assert agent._analytic is not None
    data = agent._prepare(chunk)
    batch = Minibatch(*(data[k].reshape(-1, *data[k].shape[2:])[:16] for k in Minibatch._fields))
    batch = batch._replace(advantages=ppo_losses.normalize_per_minibatch(batch.advantages, 16))
    assert_same_as_autograd(agent, batch, agent.clip_range)


def test_the_update_trains_with_it_as_with_autograd() -> None:
    """Whole updates from one seed: the same metrics up to float rounding (parameters are not compared:
    Adam turns rounding in near-zero gradients into steps of ``lr``)."""
    fast, chunk = trained_agent()  # the same chunk for both: it was explored before their first update
    slow, _ = trained_agent(analytic_gradients=False)
    assert fast._analytic is not None and slow._analytic is None
    ours, theirs = fast.update(chunk), slow.update(chunk)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert ours[key] == pytest.approx(theirs[key], rel=1e-2, abs=1e-3), key


class OwnLoss(PPO):
    """A research variant: a changed loss must be trained by autograd, not by the hand-written step."""

    def _loss(self, features, batch, clip):
        loss, *rest = super()._loss(features, batch, clip)
        return (loss + 0.0 * self.policy.log_std.sum(), *rest)


@pytest.mark.parametrize(
    ("make", "applies"),
    [
        (lambda: PPO("agent", SESSION, OBSERVATIONS, ACTIONS), True),
        (lambda: PPO("agent", SESSION, OBSERVATIONS, ACTIONS, analytic_gradients=False), False),
        (lambda: OwnLoss("agent", SESSION, OBSERVATIONS, ACTIONS), False),
        (lambda: PPO("agent", SESSION, OBSERVATIONS, ACTIONS, recurrent=True), False),
        (lambda: PPO("agent", SESSION, OBSERVATIONS, gym.spaces.Discrete(3)), False),
        (lambda: PPO("agent", SESSION, OBSERVATIONS, ACTIONS, activation="elu"), False),
    ],
    ids=["mlp", "turned off", "overridden loss", "gru", "discrete", "elu"],
)
def test_it_applies_to_feed_forward_gaussian_mlps_with_the_shipped_loss(make, applies: bool) -> None:
    agent = make()
    assert (agent._analytic is not None) is applies
    if not applies:
        return
    batch = minibatch(agent)
    assert_same_as_autograd(agent, batch, agent.clip_range)
