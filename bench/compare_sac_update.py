"""Diagnostic (issue #31 item 4): one SAC update of digideep and of Stable-Baselines3 from the same
weights, the same batch and the same noise, term by term; then a few hundred updates on fixed batches.

    MUJOCO_GL=egl python bench/compare_sac_update.py [--steps 200] [--frames 3000] [--seed 0] [--quick]

What it does:

1. digideep: ``params.mujoco_sac`` on Hopper-v5 through a real Runner (one worker, CPU, one thread,
   the memory cut to ``--frames`` rows); its train explorer collects ``--frames`` warm-start frames
   (uniform random actions: Hopper falls, so the batch holds terminals) and the agent's own sampler
   draws the minibatches (``agent.sampler(memory)``, ``agent.prepare``).
   SB3: ``SAC("MlpPolicy", Hopper-v5, seed=seed, device="cpu")`` with its defaults.
2. SB3's initial actor, critics, target critics and ``log_ent_coef`` are copied into digideep's
   networks (actor ``latent_pi`` + ``mu`` + ``log_std`` -> one MLP whose head is ``[mu; log_std]``;
   ``qf0``/``qf1`` -> the ensemble's stacked ``(E, in, out)`` weights, transposed).
3. One update each, every term caught by spies on the libraries' own code (SB3's ``SAC.train`` with its
   replay sample and ``Normal.rsample`` patched to return the batch and the noise; digideep's
   ``SAC.learn`` with ``step_noise`` patched and its loss functions and ``minimize`` wrapped): log
   probabilities, target Q, Q, critic loss, actor loss, temperature loss, gradients of every network,
   weights after Adam and the target critics after Polyak.
4. ``--steps`` updates from the same start on fixed batches and noise, for digideep as shipped and for
   digideep with SB3's differences patched in one after another (the log-probability's ``1e-6``,
   the critic loss's ``0.5``, SB3's unfused Adam): the relative weight distance after 1, 10, 50, ...
   steps shows which difference makes the trajectories part; beside them the noise floor, SB3 against
   SB3 with every weight one float32 ulp off (rounding alone parts two runs after about 100 steps).
5. The schedule-level differences (counted, not run): gradient steps, the exploration policy's lag,
   warm-up actions, observation handling, terminal and truncation handling, the log-std clamp.

What it prints: one table per stage (``digideep``, ``SB3``, ``max |diff|`` and, where the two differ by
a known factor, the ratio), then the divergence table and the schedule notes. ``--quick`` (one chunk
of 1,000 frames, 20 steps) prints the same tables smaller. Nothing is written to disk but a temporary
session folder, deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(ROOT))  # params/ beside digideep/

import gymnasium as gym  # noqa: E402  (after the path and MUJOCO_GL above)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from digideep.agents.off_policy import Transitions  # noqa: E402
from digideep.agents.sac import agent as sac_agent  # noqa: E402
from digideep.agents.sac import losses as sac_losses  # noqa: E402
from digideep.agents.sac import policy as sac_policy  # noqa: E402
from digideep.agents.utils import adam_step  # noqa: E402

ENV = "Hopper-v5"


# -- building both sides ---------------------------------------------------------------------------
def build_digideep(root: Path, seed: int, frames: int) -> tuple[Any, dict[str, Any]]:
    """A Runner of ``params.mujoco_sac`` on Hopper-v5 that has explored and stored ``frames`` frames."""
    from digideep.pipeline.devices import DeviceChoice
    from digideep.pipeline.params import resolve_params
    from digideep.pipeline.runner import Runner
    from digideep.storage.session import Session

    overrides = {"model_name": ENV, "seed": seed, "buffer_size": max(frames, 10_000), "torch_threads": 1}
    params = resolve_params("params.mujoco_sac", overrides=overrides).params
    params["tracking"] = {"enabled": False}
    params["runner"]["stats_interval"] = 0
    session = Session(root=root, name="compare")
    runner = Runner(session, params, devices=DeviceChoice("cpu"), modes=("train",))
    for _ in range(-(-frames // runner.built.frames_per_chunk)):
        runner.explore()
        runner.store()
    return runner, params


def fresh_agent(runner: Any, params: dict[str, Any]) -> Any:
    """A new agent built as the Runner builds one (``components.build``)."""
    agent = runner.agents["agent"]
    return type(agent)(
        name="agent",
        session=runner.devices,
        observation_space=agent.observation_space,
        action_space=agent.action_space,
        **params["agents"]["agent"]["args"],
    )


def build_sb3(seed: int) -> Any:
    """``SAC("MlpPolicy", Hopper-v5)`` with SB3's defaults, a silent logger."""
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import Logger

    model = SAC("MlpPolicy", gym.make(ENV), seed=seed, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


# -- the layer map ---------------------------------------------------------------------------------
def sb3_actor_layers(model: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """SB3's actor as ``(weight (out, in), bias (out,))`` per digideep layer (head: ``[mu; log_std]``)."""
    actor = model.actor
    hidden = [m for m in actor.latent_pi if isinstance(m, torch.nn.Linear)]
    layers = [(m.weight, m.bias) for m in hidden]
    layers.append(
        (torch.cat([actor.mu.weight, actor.log_std.weight]), torch.cat([actor.mu.bias, actor.log_std.bias]))
    )
    return layers


def sb3_critic_layers(critic: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """SB3's critics as digideep's stacked ``(E, in, out)`` weights and ``(E, 1, out)`` biases."""
    members = [[m for m in q if isinstance(m, torch.nn.Linear)] for q in critic.q_networks]
    return [
        (torch.stack([m[i].weight.T for m in members]), torch.stack([m[i].bias[None] for m in members]))
        for i in range(len(members[0]))
    ]


def dd_actor_layers(agent: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(m.weight, m.bias) for m in agent.policy.actor if isinstance(m, torch.nn.Linear)]


def dd_critic_layers(critic: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    weights, biases = critic.layer_params()
    return list(zip(weights, biases, strict=True))


def flat(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    return [t.detach() for layer in layers for t in layer]


def networks(model: Any, agent: Any) -> dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]]:
    """``{network: (digideep tensors, SB3 tensors in digideep's layout)}``."""
    return {
        "actor": (flat(dd_actor_layers(agent)), flat(sb3_actor_layers(model))),
        "critic": (flat(dd_critic_layers(agent.policy.critic)), flat(sb3_critic_layers(model.critic))),
        "critic_target": (
            flat(dd_critic_layers(agent.policy.critic_target)),
            flat(sb3_critic_layers(model.critic_target)),
        ),
        "log_alpha": ([agent.policy.log_alpha.detach()], [model.log_ent_coef.detach()]),
    }


def copy_sb3_into(model: Any, agent: Any) -> None:
    """SB3's weights and ``log_ent_coef`` into digideep's networks (in place)."""
    with torch.no_grad():
        for ours, theirs in networks(model, agent).values():
            for a, b in zip(ours, theirs, strict=True):
                a.copy_(b)


def distance(ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> tuple[float, float]:
    """``(max |diff|, max |diff| / max |w|)`` over a network's tensors."""
    diff = max(float((a - b).abs().max()) for a, b in zip(ours, theirs, strict=True))
    scale = max(float(b.abs().max()) for b in theirs)
    return diff, diff / max(scale, 1e-30)


# -- data and noise --------------------------------------------------------------------------------
def batches(agent: Any, memory: Any, steps: int) -> Transitions:
    """``steps`` minibatches drawn by the agent's own sampler, on the device: ``(N, B, ...)``."""
    data = agent.prepare(agent.sampler(memory))
    return Transitions(*(field[:steps] for field in data))


def sb3_samples(data: Transitions, step: int) -> Any:
    """Step ``step`` of ``data`` as SB3's ``ReplayBufferSamples`` (rewards and dones ``(B, 1)``)."""
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    return ReplayBufferSamples(
        observations=data.observations[step],
        actions=data.actions[step],
        next_observations=data.next_observations[step],
        dones=data.terminals[step][:, None],
        rewards=data.rewards[step][:, None],
    )


@contextlib.contextmanager
def sb3_feeding(model: Any, data: Transitions, noise: torch.Tensor) -> Iterator[None]:
    """SB3 samples ``data`` in order and draws ``noise[i, 1]`` (actor) then ``noise[i, 0]`` (next)."""
    steps = iter(range(data.actions.shape[0]))
    queue: list[torch.Tensor] = []

    def sample(batch_size: int, env: Any = None) -> Any:
        del batch_size, env
        i = next(steps)
        queue.extend([noise[i, 1], noise[i, 0]])  # SB3 samples the actor's action first
        return sb3_samples(data, i)

    def rsample(self: torch.distributions.Normal, sample_shape: Any = ()) -> torch.Tensor:
        del sample_shape
        return self.loc + queue.pop(0) * self.scale  # Normal.rsample's own arithmetic

    with (
        mock.patch.object(model.replay_buffer, "sample", sample),
        mock.patch.object(torch.distributions.Normal, "rsample", rsample),
    ):
        yield


def run_sb3(model: Any, data: Transitions, noise: torch.Tensor) -> None:
    """``SAC.train`` one gradient step per minibatch (SB3 alternates one frame and one step)."""
    with sb3_feeding(model, data, noise):
        for _ in range(data.actions.shape[0]):
            model.train(gradient_steps=1, batch_size=data.actions.shape[1])


def run_digideep(agent: Any, data: Transitions, noise: torch.Tensor) -> None:
    """``SAC.learn`` with the given noise (digideep's ``step_noise`` is ``(N, 2, B, A)``)."""
    with mock.patch.object(agent, "step_noise", lambda _data: noise):
        agent.learn(data)


# -- stage 3: one update, term by term -------------------------------------------------------------
def spy_sb3(model: Any) -> tuple[dict[str, Any], contextlib.ExitStack]:
    """Record SB3's terms during one ``train`` step: log-probs, Q, target Q, losses, gradients."""
    seen: dict[str, Any] = {"log_prob": []}
    stack = contextlib.ExitStack()
    actor = model.actor
    original_alp = actor.action_log_prob

    def action_log_prob(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        actions, log_prob = original_alp(obs)
        seen["log_prob"].append((actions.detach().clone(), log_prob.detach().clone()))
        return actions, log_prob

    original_mse = F.mse_loss

    def mse_loss(q: torch.Tensor, target: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        seen.setdefault("q", []).append(q.detach().clone())
        seen["target"] = target.detach().clone()
        return original_mse(q, target, *args, **kwargs)

    def grab(name: str, params: list[torch.Tensor], step: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            seen[name] = [p.grad.detach().clone() for p in params]
            return step(*args, **kwargs)

        return wrapped

    def record(key: str, value: Any, *args: Any, **kwargs: Any) -> None:
        seen[key] = value

    original_target = model.critic_target.forward

    def target_forward(obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = original_target(obs, actions)
        seen["next_q"] = torch.cat(out, dim=1).detach().clone()
        return out

    stack.enter_context(mock.patch.object(actor, "action_log_prob", action_log_prob))
    stack.enter_context(mock.patch.object(model.critic_target, "forward", target_forward))
    stack.enter_context(mock.patch.object(F, "mse_loss", mse_loss))
    for name, optimizer in (
        ("grad_actor", actor.optimizer),
        ("grad_critic", model.critic.optimizer),
        ("grad_log_alpha", model.ent_coef_optimizer),
    ):
        params = [p for group in optimizer.param_groups for p in group["params"]]
        stack.enter_context(mock.patch.object(optimizer, "step", grab(name, params, optimizer.step)))
    stack.enter_context(mock.patch.object(model.logger, "record", record))
    return seen, stack


def spy_digideep() -> tuple[dict[str, Any], contextlib.ExitStack]:
    """Record digideep's terms during one ``gradient_step``: the loss functions' inputs and outputs and
    the gradients ``minimize`` takes."""
    seen: dict[str, Any] = {"grads": []}
    stack = contextlib.ExitStack()

    def wrap(name: str, function: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def wrapped(*args: Any) -> torch.Tensor:
            out = function(*args)
            seen[name] = (
                [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args],
                out.detach(),
            )
            return out

        return wrapped

    def minimize(optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: list[torch.Tensor]) -> None:
        grads = torch.autograd.grad(loss, params)
        seen["grads"].append([g.detach().clone() for g in grads])
        adam_step(optimizer, grads)

    for name in ("soft_q_target", "critic_loss", "actor_loss", "alpha_loss"):
        stack.enter_context(mock.patch.object(sac_losses, name, wrap(name, getattr(sac_losses, name))))
    stack.enter_context(mock.patch.object(sac_agent, "minimize", minimize))
    return seen, stack


def row(name: str, ours: Any, theirs: Any, note: str = "") -> None:
    """One line: digideep, SB3, max |diff| (tensors: their mean; the diff elementwise), a note."""
    a = torch.as_tensor(ours, dtype=torch.float64)
    b = torch.as_tensor(theirs, dtype=torch.float64)
    diff = float((a - b).abs().max()) if a.shape == b.shape else float("nan")
    print(f"  {name:<34} {float(a.mean()):>13.6g} {float(b.mean()):>13.6g} {diff:>11.3g}  {note}")


def grad_rows(name: str, ours: list[torch.Tensor], theirs: list[torch.Tensor], factor: float = 1.0) -> None:
    """Gradient norms and the largest elementwise difference after scaling digideep's by ``factor``."""
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape, f"{name}: {tuple(a.shape)} against {tuple(b.shape)}"
    norm_a = math.sqrt(sum(float(g.double().pow(2).sum()) for g in ours))
    norm_b = math.sqrt(sum(float(g.double().pow(2).sum()) for g in theirs))
    diff = max(float((factor * a - b).abs().max()) for a, b in zip(ours, theirs, strict=True))
    rel = diff / max(max(float(b.abs().max()) for b in theirs), 1e-30)
    note = (
        f"ratio of norms {norm_a / max(norm_b, 1e-30):.6f}; max |{factor:g} dd - sb3| / max |sb3| {rel:.2e}"
    )
    print(f"  {'grad ' + name + ' (norm)':<34} {norm_a:>13.6g} {norm_b:>13.6g} {diff:>11.3g}  {note}")


def sb3_actor_grads(model: Any, grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """SB3's actor gradients (its optimizer's order) in digideep's layout (head ``[mu; log_std]``)."""
    named = dict(zip([n for n, _ in model.actor.named_parameters()], grads, strict=True))
    hidden = [n for n in named if n.startswith("latent_pi")]
    out = [named[n] for n in hidden]
    out += [
        torch.cat([named["mu.weight"], named["log_std.weight"]]),
        torch.cat([named["mu.bias"], named["log_std.bias"]]),
    ]
    return out


def sb3_critic_grads(model: Any, grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """SB3's critic gradients in digideep's stacked layout."""
    named = dict(zip([n for n, _ in model.critic.named_parameters()], grads, strict=True))
    out = []
    layers = sorted({n.split(".")[1] for n in named if n.startswith("qf0.")}, key=int)
    for layer in layers:
        out.append(
            torch.stack([named[f"qf{e}.{layer}.weight"].T for e in range(len(model.critic.q_networks))])
        )
        out.append(
            torch.stack([named[f"qf{e}.{layer}.bias"][None] for e in range(len(model.critic.q_networks))])
        )
    return out


def one_update(model: Any, agent: Any, data: Transitions, noise: torch.Tensor) -> None:
    """Stage 3: the terms of one update and the weights after it."""
    one = Transitions(*(field[:1] for field in data))
    with torch.no_grad():  # digideep's actions of this step (its actor changes only at the actor step)
        dd_next_actions = agent.policy.sample(one.next_observations[0], noise[0, 0])[0]
        dd_pi_actions = agent.policy.sample(one.observations[0], noise[0, 1])[0]
    theirs, sb3_stack = spy_sb3(model)
    with sb3_stack:
        run_sb3(model, one, noise[:1])
    ours, dd_stack = spy_digideep()
    with dd_stack:
        run_digideep(agent, one, noise[:1])

    print(f"\n== one update (batch {one.actions.shape[1]}, {int(one.terminals.sum())} terminals in it) ==")
    print(f"  {'term':<34} {'digideep':>13} {'SB3':>13} {'max |diff|':>11}")
    (t_args, target) = ours["soft_q_target"]
    _, _, next_q, next_log_prob, alpha, gamma = t_args
    sb3_pi, sb3_next = theirs["log_prob"]
    row("next log pi(a'|s')", next_log_prob, sb3_next[1], "squash correction: exact vs log(1 - a^2 + 1e-6)")
    row("next actions a'", dd_next_actions, sb3_next[0], "tanh(mean + std * noise), the same noise")
    row("target min_i Q'_i(s', a')", next_q, theirs["next_q"].amin(dim=1))
    row("target y", target, theirs["target"][:, 0], f"gamma {gamma}, alpha {float(alpha):g}")
    row("Q(s, a) critic 1", ours["critic_loss"][0][0][:, 0], theirs["q"][0][:, 0])
    row("Q(s, a) critic 2", ours["critic_loss"][0][0][:, 1], theirs["q"][1][:, 0])
    qf_loss = float(ours["critic_loss"][1])
    row(
        "critic loss",
        qf_loss,
        theirs["train/critic_loss"],
        f"ratio {qf_loss / theirs['train/critic_loss']:.6f}: SB3 takes 0.5 * sum of MSEs (Adam-invariant)",
    )
    a_args, actor_loss = ours["actor_loss"]
    row("log pi(a|s) (actor step)", a_args[0], sb3_pi[1], "")
    row("actions a ~ pi(s) (actor step)", dd_pi_actions, sb3_pi[0], "the replay's s, fresh a")
    row("actor loss", float(actor_loss), theirs["train/actor_loss"], "both: critics after their step")
    alpha_loss = ours["alpha_loss"][1]
    row(
        "temperature loss",
        float(alpha_loss),
        theirs["train/ent_coef_loss"],
        "both: -mean(log_alpha (logp + H))",
    )
    row(
        "alpha used in the step",
        float(alpha),
        theirs["train/ent_coef"],
        "both: exp(log_alpha) before its step",
    )
    critic_grads, actor_grads = ours["grads"]
    half = len(critic_grads) // 2  # digideep's critic parameters: every layer's weight, then every bias
    critic_grads = [g for pair in zip(critic_grads[:half], critic_grads[half:], strict=True) for g in pair]
    grad_rows("critic", critic_grads, sb3_critic_grads(model, theirs["grad_critic"]), factor=0.5)
    grad_rows("actor", actor_grads[:-1], sb3_actor_grads(model, theirs["grad_actor"]))
    grad_rows("log_alpha", actor_grads[-1:], theirs["grad_log_alpha"])
    print("  after one step of Adam and the Polyak average: max |diff| (max |diff| / max |w|)")
    for name, (a, b) in networks(model, agent).items():
        diff, rel = distance(a, b)
        print(f"    {name:<14} {diff:.3g} ({rel:.2e})")
    for name, optimizer in (("SB3 actor", model.actor.optimizer), ("SB3 critic", model.critic.optimizer)):
        print(f"  {name} Adam: {settings(optimizer)}")
    print(f"  SB3 temperature Adam: {settings(model.ent_coef_optimizer)}")
    print(f"  digideep critic Adam: {settings(agent.critic_optimizer)}")
    print(f"  digideep actor + log_alpha Adam: {settings(agent.actor_optimizer)}")


def settings(optimizer: torch.optim.Optimizer) -> str:
    groups = optimizer.param_groups
    keys = ("lr", "betas", "eps", "weight_decay", "amsgrad", "fused", "foreach")
    return "; ".join(", ".join(f"{k}={g.get(k)}" for k in keys) for g in groups)


# -- stage 4: many updates -------------------------------------------------------------------------
def sb3_log_prob_gaussian(
    mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """SB3's ``SquashedDiagGaussianDistribution`` log-probability, for the ablation only."""
    std = log_std.exp()
    u = mean + noise * std
    actions = torch.tanh(u)
    gaussian = torch.distributions.Normal(mean, std).log_prob(u).sum(dim=-1)
    return actions, gaussian - torch.log(1 - actions**2 + 1e-6).sum(dim=-1)


def unfused(agent: Any) -> None:
    """SB3's Adam: torch's default implementation on the CPU (single tensor), not the fused kernel."""
    for optimizer in (agent.critic_optimizer, agent.actor_optimizer):
        for group in optimizer.param_groups:
            group["fused"], group["foreach"] = False, False


VARIANTS: list[tuple[str, list[str]]] = [
    ("as shipped", []),
    ("+ SB3 log-prob (1e-6)", ["log_prob"]),
    ("+ 0.5 critic loss", ["log_prob", "half"]),
    ("+ unfused Adam", ["log_prob", "half", "adam"]),
]


@contextlib.contextmanager
def variant(agent: Any, patches: list[str]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        if "log_prob" in patches:
            stack.enter_context(mock.patch.object(sac_policy, "squashed_gaussian", sb3_log_prob_gaussian))
        if "half" in patches:
            full = sac_losses.critic_loss
            stack.enter_context(mock.patch.object(sac_losses, "critic_loss", lambda q, t: 0.5 * full(q, t)))
        if "adam" in patches:
            unfused(agent)
        yield


def divergence(
    runner: Any, params: dict[str, Any], seed: int, data: Transitions, noise: torch.Tensor, marks: list[int]
) -> Any:
    """Stage 4: ``N`` steps from SB3's initial weights, one step at a time, per variant; returns the last
    variant's digideep agent."""
    steps = data.actions.shape[0]
    probe = data.observations[0]
    agent = None
    print(f"\n== {steps} updates from the same start, the same batches and noise ==")
    print("  relative distance max |dd - sb3| / max |sb3| of each network after the step; alpha: |diff|")
    header = "".join(f"{'step ' + str(m):>11}" for m in marks)
    for name, patches in VARIANTS:
        model, agent = build_sb3(seed), fresh_agent(runner, params)
        copy_sb3_into(model, agent)
        table: dict[str, list[str]] = {
            "actor": [],
            "critic": [],
            "critic_target": [],
            "alpha": [],
            "mean action": [],
        }
        start = time.perf_counter()
        with variant(agent, patches):
            for i in range(steps):
                one = Transitions(*(field[i : i + 1] for field in data))
                run_sb3(model, one, noise[i : i + 1])
                run_digideep(agent, one, noise[i : i + 1])
                if i + 1 in marks:
                    nets = networks(model, agent)
                    for key in ("actor", "critic", "critic_target"):
                        table[key].append(f"{distance(*nets[key])[1]:>11.2e}")
                    alpha_sb3 = float(model.log_ent_coef.detach().exp())
                    table["alpha"].append(f"{abs(agent.alpha - alpha_sb3):>11.2e}")
                    with torch.no_grad():
                        ours = torch.tanh(agent.policy.actor_head(probe)[0])
                        theirs = model.actor(probe, deterministic=True)
                    table["mean action"].append(f"{float((ours - theirs).abs().max()):>11.2e}")
        seconds = time.perf_counter() - start
        print(
            f"  {name} ({seconds:.1f} s; alpha after: digideep {agent.alpha:.6f}, SB3 {float(model.log_ent_coef.detach().exp()):.6f})"
        )
        print(f"    {'':<14}{header}")
        for key, values in table.items():
            print(f"    {key:<14}{''.join(values)}")
    return agent


def floor(seed: int, data: Transitions, noise: torch.Tensor, marks: list[int]) -> None:
    """The noise floor: SB3 against SB3 whose weights are nudged by one float32 ulp (``nextafter``
    towards zero), the same batches and noise: how far float32 rounding alone carries two runs."""
    model, other = build_sb3(seed), build_sb3(seed)
    with torch.no_grad():
        for p in other.policy.parameters():
            p.copy_(torch.nextafter(p, torch.zeros_like(p)))
    table: dict[str, list[str]] = {"actor": [], "critic": []}
    for i in range(data.actions.shape[0]):
        one = Transitions(*(field[i : i + 1] for field in data))
        run_sb3(model, one, noise[i : i + 1])
        run_sb3(other, one, noise[i : i + 1])
        if i + 1 in marks:
            ours = {"actor": flat(sb3_actor_layers(other)), "critic": flat(sb3_critic_layers(other.critic))}
            theirs = {"actor": flat(sb3_actor_layers(model)), "critic": flat(sb3_critic_layers(model.critic))}
            for key in table:
                table[key].append(f"{distance(ours[key], theirs[key])[1]:>11.2e}")
    print("  noise floor: SB3 against SB3 with every weight one ulp off")
    header = "".join(f"{'step ' + str(m):>11}" for m in marks)
    print(f"    {'':<14}{header}")
    for key, values in table.items():
        print(f"    {key:<14}{''.join(values)}")


def squash_table(agent: Any, data: Transitions, noise: torch.Tensor) -> None:
    """The one difference in the mathematics: ``log(1 - tanh(u)^2)`` exact (digideep) against SB3's
    ``log(1 - tanh(u)^2 + 1e-6)`` in float32, and their derivatives, per action dimension."""
    print("\n== squash correction per action dimension, float32: digideep exact, SB3 + 1e-6 ==")
    print(f"  {'u':>5} {'dd log(1-a^2)':>14} {'SB3':>10} {'dd d/du':>9} {'SB3 d/du':>9}")
    for value in (0.0, 2.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0):
        u = torch.tensor([value], requires_grad=True)
        ours = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        theirs = torch.log(1 - torch.tanh(u) ** 2 + 1e-6)
        (g_ours,) = torch.autograd.grad(ours.sum(), u)
        (g_theirs,) = torch.autograd.grad(theirs.sum(), u)
        ours, theirs = ours.detach(), theirs.detach()
        print(
            f"  {value:>5g} {float(ours):>14.4f} {float(theirs):>10.4f} {float(g_ours):>9.4f} {float(g_theirs):>9.4f}"
        )
    with torch.no_grad():
        mean, log_std = agent.policy.actor_head(data.observations[-1])
        u = mean + log_std.exp() * noise[-1, 1]
    print(
        f"  |u| of the actor's pre-tanh samples after {data.actions.shape[0]} steps: max {float(u.abs().max()):.2f}, "
        f"share above 5: {float((u.abs() > 5).float().mean()):.2%} (where the two differ by > 0.5 %)"
    )


# -- stage 5: schedule -----------------------------------------------------------------------------
def schedule(runner: Any, memory: Any, frames: int, learning_starts: int, n_steps: int) -> None:
    """What differs around the update: counts, lag, warm-up, observations, episode ends, clamps."""
    print("\n== schedule and data (not in one update) ==")
    chunks = frames // n_steps
    dd_steps = sum(n_steps for c in range(1, chunks + 1) if c * n_steps >= learning_starts)
    print(
        f"  gradient steps for {frames} frames, learning_starts {learning_starts}, n_steps {n_steps}: "
        f"digideep {dd_steps}, SB3 {frames - learning_starts} (+{dd_steps / (frames - learning_starts) - 1:.1%})"
    )
    lags = []
    for t in range(learning_starts + 1, frames + 1):  # frame t (1-based), acted by a policy after ... updates
        sb3 = t - learning_starts - 1
        dd = n_steps * (-(-t // n_steps) - 1) - learning_starts + n_steps
        lags.append(dd - sb3)
    print(
        f"  updates the acting policy has had at frame t, digideep minus SB3: {min(lags)} to {max(lags)}, "
        f"mean {np.mean(lags):.0f} (digideep acts a whole chunk with one policy, made after the previous "
        "chunk's updates; its first 1,000 updates see only the random warm-up frames; SB3 steps after every frame)"
    )
    agent = runner.agents["agent"]
    space = agent.action_space
    print(
        f"  actions: {ENV} bounds [{space.low.min():g}, {space.high.max():g}]: digideep's [-1, 1] scaling is the "
        "identity here; warm-up: uniform in the bounds on both (digideep _uniform_actions, SB3 action_space.sample)"
    )
    env = runner.params["env"]
    print(
        f"  observations: digideep wrappers {env['wrappers']}, vector wrappers {env['vector_wrappers']} "
        "(no normalisation); SB3 MlpPolicy: none either (FlattenExtractor, float32)"
    )
    rows = memory.valid_rows()
    workers = np.zeros_like(rows)
    terminals = memory.gather("/terminals", workers, rows).reshape(-1)
    truncations = memory.gather("/truncations", workers, rows).reshape(-1)
    obs = memory.gather("/observations", workers, rows)
    nxt = memory.gather("/next_observations", workers, rows)
    masks = memory.gather("/masks", workers, rows).reshape(-1)
    cont = np.flatnonzero(masks[1:] == 1)  # row t + 1 continues the episode of row t
    mismatch = float(np.abs(nxt[cont] - obs[cont + 1]).max()) if cont.size else 0.0
    ends = np.flatnonzero(masks[1:] == 0)
    print(
        f"  stored: {rows.size} transitions, {int(terminals.sum())} terminals, {int(truncations.sum())} "
        f"truncations; next_observations equal the next row's observation within episodes (max |diff| "
        f"{mismatch:g}); every episode end is a terminal or truncation: "
        f"{bool(np.all((terminals[ends] + truncations[ends]) > 0))}"
    )
    print(
        "  truncation: digideep stores /terminals = terminated only (the target bootstraps through a time "
        "limit, next_observations = final_obs); SB3: dones * (1 - TimeLimit.truncated) with "
        "handle_timeout_termination=True (default), next_obs = terminal_observation: the same"
    )
    print(
        f"  log-std clamp: digideep [{sac_policy.LOG_STD_MIN:g}, {sac_policy.LOG_STD_MAX:g}], "
        f"SB3 [{sb3_bounds()}]; target entropy: digideep {agent.target_entropy:g}, SB3 -dim(A) = "
        f"{-float(np.prod(space.shape)):g}; deterministic action: tanh(mean) on both"
    )


def sb3_bounds() -> str:
    from stable_baselines3.sac import policies

    return f"{policies.LOG_STD_MIN:g}, {policies.LOG_STD_MAX:g}"


def truncation_probe(root: Path, seed: int) -> None:
    """A Hopper whose time limit is 5 steps: what digideep stores at a truncation."""
    from digideep.pipeline.devices import DeviceChoice
    from digideep.pipeline.params import resolve_params
    from digideep.pipeline.runner import Runner
    from digideep.storage.session import Session

    overrides = {"model_name": ENV, "seed": seed, "buffer_size": 1000, "n_steps": 20, "torch_threads": 1}
    params = resolve_params("params.mujoco_sac", overrides=overrides).params
    params["tracking"] = {"enabled": False}
    params["runner"]["stats_interval"] = 0
    params["env"]["max_episode_steps"] = 5
    session = Session(root=root, name="truncation")
    runner = Runner(session, params, devices=DeviceChoice("cpu"), modes=("train",))
    try:
        runner.explore()
        runner.store()
        memory = runner.memories["train"]
        rows = memory.valid_rows()
        workers = np.zeros_like(rows)
        get = {
            k: memory.gather(k, workers, rows) for k in ("/terminals", "/truncations", "/next_observations")
        }
        obs = memory.gather("/observations", workers, rows)
        cut = np.flatnonzero(get["/truncations"].reshape(-1) > 0)
        print(
            f"  time limit 5: truncated rows {cut.tolist()}, /terminals there {get['/terminals'].reshape(-1)[cut].tolist()}"
            f"; their next_observations differ from the next row's (a reset) observation: "
            f"{bool(all(np.abs(get['/next_observations'][i] - obs[i + 1]).max() > 0 for i in cut if i + 1 < rows.size))}"
        )
    finally:
        runner.close()
        session.close()


# -- main ------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="updates of the divergence run")
    parser.add_argument(
        "--frames", type=int, default=3000, help="random warm-start frames the batches come from"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke mode: 1,000 frames, 20 steps")
    args = parser.parse_args()
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        sys.exit(
            "compare_sac_update.py needs Stable-Baselines3, a bench extra: pip install stable-baselines3"
        )
    if args.quick:
        args.frames, args.steps = 1000, 20
    torch.set_num_threads(1)
    marks = sorted(
        {m for m in (1, 2, 5, 10, 20, 50, 100, 125, 150, 175, 200, 500, 1000) if m <= args.steps}
        | {args.steps}
    )

    with tempfile.TemporaryDirectory() as folder:
        runner, params = build_digideep(Path(folder), args.seed, args.frames)
        try:
            memory = runner.memories["train"]
            agent = runner.agents["agent"]
            data = batches(agent, memory, args.steps)
            generator = torch.Generator().manual_seed(args.seed)
            noise = torch.randn(*data.actions.shape[:1], 2, *data.actions.shape[1:], generator=generator)
            print(
                f"{ENV}: {memory.size} stored frames (random actions), {args.steps} minibatches of "
                f"{data.actions.shape[1]} from digideep's sampler; noise (N, 2, B, A) = {tuple(noise.shape)}"
            )
            model = build_sb3(args.seed)
            copy_sb3_into(model, agent)
            start = {k: distance(*v)[0] for k, v in networks(model, agent).items()}
            print(f"  weights copied SB3 -> digideep, max |diff| per network: {start}")
            one_update(model, agent, data, noise)
            last = divergence(runner, params, args.seed, data, noise, marks)
            floor(args.seed, data, noise, marks)
            squash_table(last, data, noise)
            schedule(runner, memory, 50_000, 10_000, runner.built.frames_per_chunk)
        finally:
            runner.close()
            runner.session.close()
        truncation_probe(Path(folder), args.seed)


if __name__ == "__main__":
    main()
