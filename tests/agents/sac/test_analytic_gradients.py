"""SAC's hand-written gradients: the same losses and gradients as autograd's, and used only where they
apply."""

from __future__ import annotations

import pytest
import torch

from digideep.agents.off_policy import Transitions
from digideep.agents.sac import SAC
from tests.agents.analytic_checks import (
    ACTIONS,
    OBSERVATIONS,
    SESSION,
    assert_same_as_autograd,
    learned_alike,
    learned_twice_the_same,
    moved_agent,
    transitions,
)

CONFIGS = pytest.mark.parametrize(
    "args",
    [
        {},
        {"autotune": False, "alpha": 0.2},
        {"activation": "tanh", "hidden_sizes": (64, 32)},
        {"hidden_sizes": (32, 48, 16)},
    ],
    ids=["defaults", "fixed temperature", "tanh 64x32", "3 layers"],
)


def check(agent: SAC, data, alpha: torch.Tensor) -> None:
    """Both steps of ``agent`` on the first minibatch of ``data``, analytic against autograd."""
    analytic = agent._analytic
    assert analytic is not None
    batch = Transitions(*(field[0] for field in data))
    obs, noise = batch.observations, torch.randn(2, *batch.actions.shape)
    critic_args = (batch, noise[0], alpha)
    assert_same_as_autograd(
        lambda: agent._critic_gradients(*critic_args),
        lambda: analytic.critic_gradients(*critic_args),
        analytic.critic_grads,
    )
    assert_same_as_autograd(
        lambda: agent._actor_gradients(obs, noise[1], alpha),
        lambda: analytic.actor_gradients(obs, noise[1], alpha),
        analytic.actor_grads,
    )


@CONFIGS
def test_both_steps_losses_and_gradients_equal_autograds(args: dict) -> None:
    agent = moved_agent(SAC, **args)
    check(agent, transitions(), torch.tensor([0.3]))


def test_where_the_log_std_clamp_is_active_its_gradient_is_zero_as_with_autograd() -> None:
    agent = moved_agent(SAC)
    last = agent.policy.actor[-1]
    with torch.no_grad():  # log-std heads: three pushed above LOG_STD_MAX, three below LOG_STD_MIN
        last.bias[6:9] += 40.0
        last.bias[9:] -= 40.0
    check(agent, transitions(), torch.tensor([0.3]))
    grads = agent._analytic.actor_grads
    assert grads[-2][6:].abs().max() == 0, "no gradient reaches a clamped log-std head's bias"


@CONFIGS
def test_whole_updates_learn_as_with_autograd_and_repeat_bit_for_bit(args: dict) -> None:
    data = transitions(steps=4)
    learned_alike(moved_agent(SAC, **args), moved_agent(SAC, analytic_gradients=False, **args), data)
    learned_twice_the_same(lambda: moved_agent(SAC, **args), data)


class OwnCriticLoss(SAC):
    """A research variant: a changed critic step must be trained by autograd."""

    def _critic_gradients(self, *args):
        return super()._critic_gradients(*args)


@pytest.mark.parametrize(
    ("args", "cls", "applies"),
    [
        ({}, SAC, True),
        ({"analytic_gradients": False}, SAC, False),
        ({"activation": "elu"}, SAC, False),
        ({"precision": "bfloat16"}, SAC, False),
        ({}, OwnCriticLoss, False),
    ],
    ids=["default", "turned off", "elu", "bfloat16", "overridden step"],
)
def test_it_applies_to_float32_relu_or_tanh_networks_with_the_shipped_steps(args, cls, applies) -> None:
    agent = cls("agent", SESSION, OBSERVATIONS, ACTIONS, **args)
    assert (agent._analytic is not None) is applies


def test_after_loading_a_checkpoint_it_reads_the_loaded_weights() -> None:
    """The hand-written path holds views of the parameters; a resumed agent must step with what it
    loaded, not with its initialization."""
    trained, resumed = moved_agent(SAC), SAC("agent", SESSION, OBSERVATIONS, ACTIONS)
    trained.learn(transitions(steps=2))
    resumed.load_state_dict(trained.state_dict())
    batch = Transitions(*(field[0] for field in transitions(seed=2)))
    args = (batch, torch.randn(batch.actions.shape), torch.tensor([0.5]))
    expected = [g.clone() for g in trained._analytic.critic_gradients(*args)[0]]
    for ours, theirs in zip(resumed._analytic.critic_gradients(*args)[0], expected, strict=True):
        assert torch.equal(ours, theirs)
