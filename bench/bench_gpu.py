"""Off-policy speed on one GPU: digideep's SAC and TD3 update modes against Stable-Baselines3 and a
minimal CUDA-graph SAC written here as the ceiling, all on the same device in the same run.

    python bench/bench_gpu.py [--device cuda] [--grad-steps 1000] [--repeats 3] [--frames 20000]
        [--learning-starts 5000] [--update-mode cudagraphs] [--replay-device auto|host|device|both]
        [--acting-device auto|host|device|both] [--deterministic] [--only updates|end-to-end] [--quick]
    python bench/bench_gpu.py --device cpu --quick      # a CPU smoke run of the same code paths

Goals (the issue): "SAC and TD3 >= 800 gradient steps/s at HalfCheetah sizes on one H100 (SB3 there:
99 and 195; digideep's last measure: 191 and 365), and HalfCheetah SAC end to end >= 750 frames/s
with tracking, tests and checkpoints on. Without a GPU, bench_gpu.py skips in one line."

What it measures:

- Gradient steps per second at HalfCheetah sizes (obs 17, act 6, 256x256 networks, batch 256), float32,
  torch's default matmul precision (no TF32), each figure the median of ``--repeats`` timings of
  ``--grad-steps`` steps, all sides interleaved, with ``torch.cuda.synchronize()`` around every
  timed region:

  - digideep SAC and TD3, ``update_mode`` eager, compile and cudagraphs (CUDA only): one
    ``agent.learn(data)`` call, its one update function (``gradient_step``) per minibatch, the random
    draws and the one read of the metrics included. ``data``: ``--grad-steps`` random minibatches made
    on the device once (no replay sampling: the end-to-end figure has it).
  - SB3's SAC and TD3 on the same device: ``model.train(gradient_steps=N, batch_size=256)`` on a
    replay buffer of 100,000 random transitions; SB3's own sampling and host-to-device copies are
    included, as SB3 trains (its buffer lives in host memory and it reads each loss to the host).
  - the ceiling: a minimal SAC update written below (CleanRL's: two critics as ``nn.Sequential``, a
    tanh-Gaussian actor, the target under ``no_grad``, fused capturable Adam, the temperature learned,
    Polyak with ``torch._foreach_lerp_``), the whole step captured in one ``torch.cuda.CUDAGraph``
    with static inputs, each step copying its minibatch into them and replaying. It has none of
    digideep's generality (ensembles, variants, metrics), so it bounds what an update mode can reach.
    On the CPU it runs eagerly.

  The first call of each (compiling, or the warm-up and capture of the CUDA graphs) is timed apart
  and printed as ``first call``. TD3's ratio to the ceiling is against the SAC ceiling: a TD3 step
  does less work (its actor steps every second step), so TD3 can pass it.

- HalfCheetah-v5 SAC end to end: ``params.mujoco_sac`` through the real Runner (``open_run`` and
  ``run_training``, as ``digideep train --no-prefect`` does) on ``--device`` with ``update_mode``
  ``--update-mode`` (cudagraphs on CUDA, eager on the CPU) and ``replay_device`` ``--replay-device``
  (``auto``: on CUDA the device sampler, indices drawn on the GPU and rows gathered from the memory's
  device mirror, no host gather or copy per iteration; ``host`` for the numpy sampler and a
  host-to-device copy of every iteration's minibatches) and ``acting_device`` ``--acting-device``
  (``auto`` and ``host``: the Explorer's actions from a copy of the policy on the CPU, refreshed after
  each update; ``device``: from the policy on the GPU). ``both`` for either setting makes one run per
  value, one after the other in this process, and prints the ratio of each pair that differs in that
  setting alone. ``--deterministic`` runs the whole process in deterministic mode (it cannot be turned
  off again in a process, so its cost is a ratio to another process's figures). MLflow tracking to a
  temporary sqlite store, for ``--frames`` frames (``--n-steps`` per iteration, ``learning_starts``
  random frames first), in two epochs, each ending with a test stage (one deterministic episode; at
  the defaults 10 % of the training frames, the shipped file's ratio) and a checkpoint (at the
  defaults every 10,000 frames, ten times as often as shipped).
  Printed: training frames per second from the end of the first learning iteration to the end of
  the last stage (tests, logs and checkpoints included), the first learning iteration (it compiles
  or captures) apart, the seconds per stage in that window, and the whole run's rate.

How to read it: ratios are measured in the same run on the same device; absolute figures depend on
the GPU, its host CPU (kernel launches at these sizes are host-bound) and the load. On the CPU
(``--device cpu``) the output says it is a smoke run: its numbers test the code paths and are not
the GPU figures the goals are about; the cudagraphs cells are skipped there with a note.

It has run on one H100 (docs/gpu.md, "Measured on an H100", has the figures): SAC 1,494 and TD3
2,424 gradient steps/s in ``cudagraphs`` mode, HalfCheetah SAC end to end 575 and 512 frames/s.

Stable-Baselines3 is a bench extra (``pip install stable-baselines3``); without it the SB3 rows are
missing and the ratios are to the ceiling only.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # the temporary store's INFO lines
sys.path.insert(0, str(ROOT))  # params/ beside digideep/

import gymnasium as gym  # noqa: E402  (after the path and MUJOCO_GL above)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import interleaved, machine, timed  # noqa: E402
from torch import nn  # noqa: E402

from digideep.agents.base import OnDevice  # noqa: E402
from digideep.agents.off_policy import Transitions  # noqa: E402
from digideep.agents.sac import SAC  # noqa: E402
from digideep.agents.td3 import TD3  # noqa: E402
from digideep.agents.update_modes import compiler_missing  # noqa: E402
from digideep.pipeline.devices import configure_determinism  # noqa: E402
from digideep.pipeline.params import resolve_params  # noqa: E402
from digideep.pipeline.training import open_run, run_training  # noqa: E402

try:
    import stable_baselines3 as sb3
except ImportError:  # the bench extra is not installed
    sb3 = None

OBS_DIM, ACT_DIM, BATCH, HIDDEN, REPLAY = 17, 6, 256, [256, 256], 100_000
GOAL_STEPS, GOAL_FRAMES = 800, 750
"""The issue's goals on one H100: gradient steps/s of SAC and TD3, and SAC end-to-end frames/s."""

SKIP_LINE = "bench_gpu.py: no CUDA device here (torch.cuda.is_available() is False); nothing measured"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU): timed regions start and end here."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def synchronized(run: Callable[[], Any], device: torch.device) -> Callable[[], None]:
    """``run`` followed by :func:`synchronize`, so that a timing covers the device's work."""

    def call() -> None:
        run()
        synchronize(device)

    return call


# -- minibatches ---------------------------------------------------------------------------------
def device_minibatches(steps: int, device: torch.device, seed: int = 0) -> Transitions:
    """``steps`` random minibatches of ``BATCH`` transitions on ``device``, made once."""
    generator = torch.Generator().manual_seed(seed)
    shape = (steps, BATCH)
    return Transitions(
        observations=torch.randn(*shape, OBS_DIM, generator=generator).to(device),
        actions=(torch.rand(*shape, ACT_DIM, generator=generator) * 2 - 1).to(device),
        rewards=torch.randn(*shape, generator=generator).to(device),
        next_observations=torch.randn(*shape, OBS_DIM, generator=generator).to(device),
        terminals=(torch.rand(*shape, generator=generator) < 0.001).float().to(device),
    )


# -- digideep ------------------------------------------------------------------------------------
def digideep_update(name: str, mode: str, data: Transitions, device: torch.device) -> Callable[[], None]:
    """One ``agent.learn(data)`` call of digideep's SAC or TD3 in ``update_mode=mode``."""
    cls = {"SAC": SAC, "TD3": TD3}[name]
    agent = cls(
        "agent",
        OnDevice(device),
        gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
        gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32),
        batch_size=BATCH,
        hidden_sizes=HIDDEN,
        updates_per_iteration=int(data.actions.shape[0]),
        learning_starts=0,
        update_mode=mode,
    )
    return synchronized(lambda: agent.learn(data), device)


def mode_unavailable(mode: str, device: torch.device) -> str | None:
    """Why ``mode`` cannot run on ``device`` (the note printed in its cell), or None."""
    if mode == "cudagraphs" and device.type != "cuda":
        return "skipped: CUDA graphs need a CUDA device"
    if mode == "compile" and device.type == "cpu" and compiler_missing():
        return "skipped: compile needs a C++ compiler on the CPU"
    return None


# -- Stable-Baselines3 ---------------------------------------------------------------------------
def sb3_update(name: str, grad_steps: int, device: torch.device) -> Callable[[], None]:
    """SB3's ``train(gradient_steps=grad_steps)`` on ``device``, its buffer filled with random transitions."""
    cls = {"SAC": sb3.SAC, "TD3": sb3.TD3}[name]
    model = cls(
        "MlpPolicy",
        gym.make("HalfCheetah-v5"),
        batch_size=BATCH,
        buffer_size=REPLAY,
        learning_starts=10**9,
        device=device,
        policy_kwargs={"net_arch": HIDDEN},
        seed=0,
    )
    model.learn(total_timesteps=10)  # sets up the logger; no training before learning_starts
    buffer, rng = model.replay_buffer, np.random.default_rng(0)
    buffer.observations[:, 0] = rng.standard_normal((REPLAY, OBS_DIM), dtype=np.float32)
    buffer.next_observations[:, 0] = rng.standard_normal((REPLAY, OBS_DIM), dtype=np.float32)
    buffer.actions[:, 0] = rng.uniform(-1, 1, (REPLAY, ACT_DIM)).astype(np.float32)
    buffer.rewards[:, 0] = rng.standard_normal(REPLAY).astype(np.float32)
    buffer.dones[:, 0] = (rng.random(REPLAY) < 0.001).astype(np.float32)
    buffer.pos, buffer.full = 0, True
    return synchronized(lambda: model.train(gradient_steps=grad_steps, batch_size=BATCH), device)


# -- the ceiling: a minimal SAC step, captured whole -----------------------------------------------
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def mlp(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, HIDDEN[0]),
        nn.ReLU(),
        nn.Linear(HIDDEN[0], HIDDEN[1]),
        nn.ReLU(),
        nn.Linear(HIDDEN[1], outputs),
    )


class CeilingSAC:
    """CleanRL's SAC update at HalfCheetah sizes, nothing more; on CUDA the whole step is one graph.

    Args:
        device: where it runs.
        graphed: capture the step in a ``torch.cuda.CUDAGraph`` (CUDA only) instead of running it eagerly.
    """

    gamma = 0.99  # discount
    tau = 0.005  # Polyak coefficient of the target critics
    lr = 3e-4  # Adam learning rate of actor, critics and temperature
    target_entropy = -float(ACT_DIM)  # the SAC paper's heuristic
    WARMUP = 3  # eager steps on a side stream before the capture (as digideep's CudaGraphUpdate)

    def __init__(self, device: torch.device, graphed: bool) -> None:
        self.device, self.graphed = device, graphed
        self.qf1, self.qf2 = mlp(OBS_DIM + ACT_DIM, 1).to(device), mlp(OBS_DIM + ACT_DIM, 1).to(device)
        self.qf1_target, self.qf2_target = copy.deepcopy(self.qf1), copy.deepcopy(self.qf2)
        self.actor = mlp(OBS_DIM, 2 * ACT_DIM).to(device)  # mean and log std
        self.log_alpha = torch.zeros(1, device=device, requires_grad=True)
        self.q_params = [*self.qf1.parameters(), *self.qf2.parameters()]
        self.target_params = [*self.qf1_target.parameters(), *self.qf2_target.parameters()]
        capturable = device.type == "cuda"
        options = {"lr": self.lr, "fused": True, "capturable": capturable}
        self.q_optimizer = torch.optim.Adam(self.q_params, **options)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), **options)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], **options)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: list[torch.Tensor] = []
        self.outputs: tuple[torch.Tensor, ...] = ()

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Tanh-Gaussian actions ``(B, A)`` and their log-probabilities ``(B,)``."""
        mean, log_std = self.actor(obs).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        noise = torch.randn_like(mean)
        actions = torch.tanh(mean + log_std.exp() * noise)
        gaussian = -0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
        return actions, (gaussian - torch.log(1 - actions.pow(2) + 1e-6)).sum(-1)

    def step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminals: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """One SAC gradient step; returns ``(qf_loss, actor_loss, alpha_loss)``, detached."""
        alpha = self.log_alpha.detach().exp()
        # soft Q target under no_grad
        with torch.no_grad():
            next_actions, next_log_prob = self.sample(next_obs)
            next_input = torch.cat([next_obs, next_actions], -1)
            next_q = torch.min(self.qf1_target(next_input), self.qf2_target(next_input)).view(-1)
            target = rewards + (1 - terminals) * self.gamma * (next_q - alpha * next_log_prob)
        # critics
        q_input = torch.cat([obs, actions], -1)
        qf1, qf2 = self.qf1(q_input).view(-1), self.qf2(q_input).view(-1)
        qf_loss = nn.functional.mse_loss(qf1, target) + nn.functional.mse_loss(qf2, target)
        self.q_optimizer.zero_grad(set_to_none=True)
        qf_loss.backward()
        self.q_optimizer.step()
        # actor against the updated critics (no critic weight gradients)
        for param in self.q_params:
            param.requires_grad_(False)
        pi_actions, log_prob = self.sample(obs)
        pi_input = torch.cat([obs, pi_actions], -1)
        q_pi = torch.min(self.qf1(pi_input), self.qf2(pi_input)).view(-1)
        actor_loss = (alpha * log_prob - q_pi).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optimizer.step()
        for param in self.q_params:
            param.requires_grad_(True)
        # temperature
        alpha_loss = (-self.log_alpha.exp() * (log_prob.detach() + self.target_entropy)).mean()
        self.alpha_optimizer.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_optimizer.step()
        # Polyak average of the target critics
        with torch.no_grad():
            torch._foreach_lerp_(self.target_params, self.q_params, self.tau)
        return qf_loss.detach(), actor_loss.detach(), alpha_loss.detach()

    def capture(self, batch: tuple[torch.Tensor, ...]) -> None:
        """Warm up on a side stream, then capture one step into the graph, its inputs static."""
        self.inputs = [t.clone() for t in batch]
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(self.WARMUP):
                self.step(*self.inputs)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = self.step(*self.inputs)

    def learn(self, data: Transitions) -> None:
        """One step per minibatch of ``data`` (``(N, B, ...)`` tensors): copy in and replay, or run eagerly."""
        for i in range(data.actions.shape[0]):
            batch = tuple(field[i] for field in data)
            if not self.graphed:
                self.outputs = self.step(*batch)
                continue
            if self.graph is None:
                self.capture(batch)
            for static, tensor in zip(self.inputs, batch, strict=True):
                static.copy_(tensor, non_blocking=True)
            self.graph.replay()


def ceiling_update(data: Transitions, device: torch.device) -> Callable[[], None]:
    ceiling = CeilingSAC(device, graphed=device.type == "cuda")
    return synchronized(lambda: ceiling.learn(data), device)


# -- gradient steps/s ----------------------------------------------------------------------------
MODES = ("eager", "compile", "cudagraphs")


def bench_updates(args: argparse.Namespace, device: torch.device) -> None:
    ceiling_rate: float | None = None
    for name in ("SAC", "TD3"):
        data = device_minibatches(args.grad_steps, device)
        runs: dict[str, Callable[[], None]] = {}
        notes: dict[str, str] = {}
        for mode in MODES:
            label = f"digideep {mode}"
            notes[label] = mode_unavailable(mode, device) or ""
            if not notes[label]:
                runs[label] = digideep_update(name, mode, data, device)
        if sb3 is not None:
            runs["sb3"] = sb3_update(name, args.grad_steps, device)
        else:
            notes["sb3"] = "skipped: stable-baselines3 is not installed"
        ceiling_label = "ceiling (CUDA graph)" if device.type == "cuda" else "ceiling (eager on the CPU)"
        if name == "SAC":
            runs[ceiling_label] = ceiling_update(data, device)
        first = {}
        for label, run in runs.items():  # compiles, or warms up and captures: timed apart
            synchronize(device)
            first[label] = timed(run)
        rates = interleaved(runs, args.repeats, args.grad_steps, before=lambda _: synchronize(device))
        ceiling_rate = rates.get(ceiling_label, ceiling_rate)
        print(
            f"{name} gradient steps/s ({args.grad_steps} steps per timing, median of {args.repeats}; "
            f"first call: compile or warm-up and capture included)"
        )
        for label in [*notes, *(k for k in runs if k not in notes)]:
            if label not in runs:
                print(f"  {label:<27} {notes[label]}")
                continue
            rate = rates[label]
            ratios = []
            if "sb3" in rates and label != "sb3":
                ratios.append(f"{rate / rates['sb3']:5.2f}x sb3")
            if ceiling_rate and not label.startswith("ceiling"):
                ratios.append(f"{rate / ceiling_rate:5.2f}x ceiling{'' if name == 'SAC' else ' (SAC)'}")
            print(
                f"  {label:<27} {rate:8.1f}  {'  '.join(ratios):<34} "
                f"first call {first[label]:6.2f} s, {args.grad_steps / rate:6.2f} s once warm"
            )
        if device.type == "cuda":
            best = max((rates[k], k) for k in rates if k.startswith("digideep"))
            verdict = "met" if best[0] >= GOAL_STEPS else "not met"
            print(f"  goal >= {GOAL_STEPS} steps/s on one H100: {verdict} ({best[1]}: {best[0]:.1f})")


# -- end to end ----------------------------------------------------------------------------------
def bench_end_to_end(args: argparse.Namespace, device: torch.device) -> None:
    """One end-to-end run, or one per combination where ``--acting-device`` or ``--replay-device`` is
    ``both``, one after the other in this process, with the ratio of each pair that differs in one
    setting alone."""
    options = {
        "acting_device": ["host", "device"] if args.acting_device == "both" else [args.acting_device],
        "replay_device": ["host", "device"] if args.replay_device == "both" else [args.replay_device],
    }
    combinations = [
        dict(zip(options, values, strict=True)) for values in itertools.product(*options.values())
    ]
    rates = [end_to_end(args, device, **settings) for settings in combinations]
    for name, values in options.items():
        if len(values) < 2:
            continue
        for settings, rate in zip(combinations, rates, strict=True):
            if settings[name] != values[0]:
                continue
            other = rates[combinations.index({**settings, name: values[1]})]
            rest = ", ".join(f"{k} {v}" for k, v in settings.items() if k != name) or "-"
            print(
                f"{name} {values[0]} / {values[1]} ({rest}): {rate / other:.2f}x "
                f"({rate:.1f} against {other:.1f} frames/s after learning starts)"
            )


def end_to_end(
    args: argparse.Namespace, device: torch.device, acting_device: str, replay_device: str
) -> float:
    """One end-to-end run (module doc); prints its figures and returns its frames/s once learning runs."""
    iterations, epochs = args.frames // args.n_steps, 2
    if args.frames % (epochs * args.n_steps) or args.learning_starts >= args.frames:
        raise SystemExit(
            f"--frames ({args.frames}) must be a multiple of 2 x --n-steps ({args.n_steps}) and more "
            f"than --learning-starts ({args.learning_starts})"
        )
    mode = args.update_mode or ("cudagraphs" if device.type == "cuda" else "eager")
    overrides = {
        "model_name": "HalfCheetah-v5",
        "learning_starts": args.learning_starts,
        "n_steps": args.n_steps,
        "epoch_size": iterations // epochs,
        "number_epochs": epochs,
        "test_interval": 1,  # a test stage at the end of each epoch
        "save_interval": 1,  # and a checkpoint
        "test_episodes": 1,
        "test_win_size": 1,
        "buffer_size": args.frames,
        "update_mode": mode,
        "replay_device": replay_device,
        "acting_device": acting_device,
        "device": str(device),
        "torch_threads": args.threads,
    }
    with tempfile.TemporaryDirectory() as folder:
        resolved = resolve_params("params.mujoco_sac", overrides=overrides)
        resolved.params["tracking"] = {
            "enabled": True,
            "args": {"tracking_uri": f"sqlite:///{Path(folder) / 'mlflow.db'}"},
        }
        handle = open_run(
            resolved,
            session_name="bench-gpu",
            session_path=Path(folder) / "sessions",
            deterministic=args.deterministic,
        )
        runner = handle.runner
        seconds: dict[str, float] = {}
        marks: dict[str, float] = {}  # "learning": the end of the first learning iteration

        def call(stage: str, function: Callable[[], Any]) -> Any:
            start = time.perf_counter()
            result = function()
            end = time.perf_counter()
            if "learning" in marks:
                seconds[stage] = seconds.get(stage, 0.0) + end - start
            elif stage == "update" and runner.counters.frames >= args.learning_starts:
                marks.update(learning=end, frames=runner.counters.frames, first_update=end - start)
            marks["end"] = end
            return result

        start = time.perf_counter()
        reason = run_training(handle, call)
        total = time.perf_counter() - start
        if reason != "finished":
            raise RuntimeError(f"the end-to-end run stopped early: {reason}")
        frames = runner.counters.frames
        replay, acting = runner.agents["agent"].replay_device, runner.agents["agent"].acting_device
    window = marks["end"] - marks["learning"]
    rate = (frames - marks["frames"]) / window
    print(
        f"HalfCheetah-v5 SAC end to end ({frames} frames, learning_starts {args.learning_starts}, "
        f"update_mode {mode}, replay on the {replay}, acting on the {acting}, MLflow sqlite tracking, "
        f"{epochs} tests and {epochs} checkpoints)"
    )
    print(
        f"  {rate:.1f} frames/s after learning starts ({frames - marks['frames']} frames in {window:.1f} s, "
        "tests, logs and checkpoints included)"
    )
    print(
        f"  the first learning iteration's update: {marks['first_update']:.1f} s "
        f"({args.n_steps} gradient steps, compile or capture included); the whole run: {frames / total:.1f} "
        f"frames/s over {total:.1f} s (random warm start, closing and model logging included)"
    )
    print(
        "  seconds per stage after learning starts: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items())
    )
    if device.type == "cuda":
        verdict = "met" if rate >= GOAL_FRAMES else "not met"
        print(f"  goal >= {GOAL_FRAMES} frames/s on one H100: {verdict}")
    return rate


# -- main ----------------------------------------------------------------------------------------
def header(device: torch.device) -> str:
    versions = f"torch {torch.__version__}, stable-baselines3 {sb3.__version__ if sb3 else 'not installed'}"
    precision = f"float32 matmul precision {torch.get_float32_matmul_precision()}"
    if device.type == "cuda":
        return (
            f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda}), {versions}, {precision}; "
            f"host {machine()}"
        )
    return (
        f"CPU SMOKE RUN: these numbers test the code paths and are not the GPU figures the goals are "
        f"about; {versions}, {precision}; {machine()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu for a smoke run")
    parser.add_argument("--grad-steps", type=int, help="gradient steps per timing (1000; --quick 100)")
    parser.add_argument("--repeats", type=int, help="timings per figure, median reported (3; --quick 1)")
    parser.add_argument("--frames", type=int, help="end-to-end training frames (20000; --quick 2000)")
    parser.add_argument(
        "--learning-starts", type=int, help="random frames before learning (5000; --quick 1000)"
    )
    parser.add_argument("--n-steps", type=int, help="frames per iteration (1000; --quick 500)")
    parser.add_argument(
        "--update-mode",
        choices=["eager", "compile", "cudagraphs", "auto"],
        help="the end-to-end run's update_mode (cudagraphs on CUDA, eager on the CPU)",
    )
    parser.add_argument(
        "--replay-device",
        choices=["auto", "host", "device", "both"],
        default="auto",
        help="the end-to-end run's replay_device (auto: the device sampler on CUDA, the host on the CPU); "
        "both: one run of each",
    )
    parser.add_argument(
        "--acting-device",
        choices=["auto", "host", "device", "both"],
        default="auto",
        help="the end-to-end run's acting_device (auto: a host copy of the policy); both: one run of each",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="deterministic mode (digideep train --deterministic) for the whole process: it cannot be "
        "turned off again, so its cost is the ratio to another process's figures",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads, both sides (1)")
    parser.add_argument("--only", choices=["updates", "end-to-end"], help="run one part")
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer steps, frames and repeats")
    args = parser.parse_args()
    defaults = {"grad_steps": (1000, 100), "repeats": (3, 1), "frames": (20_000, 2000)}
    defaults.update(learning_starts=(5000, 1000), n_steps=(1000, 500))
    for key, (full, quick) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(SKIP_LINE)
        return
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    configure_determinism(args.deterministic)  # before the first CUDA matrix product, for cuBLAS
    print(header(device) + ("; deterministic mode" if args.deterministic else ""), flush=True)
    if args.only in (None, "updates"):
        bench_updates(args, device)
    if args.only in (None, "end-to-end"):
        bench_end_to_end(args, device)


if __name__ == "__main__":
    main()
