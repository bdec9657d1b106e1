"""Agent update speed against Stable-Baselines3, measured in the same run with the same torch threads.

    python bench/bench_agents.py [--threads 1 2] [--grad-steps 300] [--repeats 3] [--ppo-iterations 2]

- SAC and TD3: gradient steps per second at HalfCheetah sizes (obs 17, act 6, 256x256 networks,
  batch 256), replay memories of 100,000 random transitions. digideep times
  ``agent.update(agent.sample(memory))`` with ``updates_per_iteration = grad_steps`` (sampling
  included); SB3 times ``model.train(gradient_steps=grad_steps, batch_size=256)`` (its own sampling
  included). Both in float32; digideep runs its one update function (autograd) with
  ``update_mode="eager"`` and ``"compile"`` (the compiled run's first timing, which compiles, is
  printed apart), and eager with ``precision="bfloat16"`` (autocast), and eager with
  ``replay_device="device"`` (the device sampler a CUDA agent uses: indices drawn by a torch generator,
  rows gathered from the memory's device mirror, here the RAM ring itself). Beside them, the replay
  stage alone, ``agent.prepare(agent.sample(memory))``, with the numpy sampler (``host``) and the
  device sampler, in minibatches per second (alone: ``--only sampling``).
- PPO on HalfCheetah-v5 (1 env, n_steps 2048, 10 epochs, minibatch 64, 64x64 tanh networks):
  environment frames per second including the updates. digideep runs Explorer + RolloutMemory +
  PPO; SB3 runs ``PPO.learn``. Neither normalises observations or rewards. digideep runs its one
  minibatch step (autograd) with ``update_mode="eager"`` and ``"compile"``; the compiled run's first
  iterations, which compile, are timed apart and printed beside the rates. With a second thread count
  digideep also runs 2 workers in async vector envs (n_steps 1024 each, the same 2048 frames,
  ``update_mode="auto"``); the raw env step rate (random actions, no agent) and the same Explorer with
  a random agent are measured beside the Explorer with PPO, so that the acting cost and the Explorer's
  own cost show apart.
- ``--threads 1 2``: every digideep and SB3 figure at each torch thread count, all interleaved; ratios
  against SB3 at the first count.

- Roofline: the matmul FLOPs of one SAC or TD3 gradient step, listed from the networks' shapes (every
  forward, weight-gradient and input-gradient product, as ``(m, k, n)`` shapes), and the time this
  machine's ``torch.mm`` takes for exactly those shapes, measured in the same run. Each off-policy
  rate is also printed as a fraction of that floor (1.0 = nothing but matmuls at torch.mm speed).

Each figure is the median of ``--repeats`` timings, digideep and SB3 interleaved. Ratios are
digideep / SB3. The machine's other load affects both sides; compare ratios, not absolute numbers.
Stable-Baselines3 is a bench extra (``pip install stable-baselines3``); without it only digideep's
absolute figures are printed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import itertools

import gymnasium as gym
import numpy as np
import torch
from common import interleaved as common_interleaved
from common import machine, timed

from digideep.agents.base import OnDevice
from digideep.agents.ppo import PPO
from digideep.agents.sac import SAC
from digideep.agents.td3 import TD3
from digideep.environment.explorer import Explorer
from digideep.memory import Memory, RolloutMemory

try:
    import stable_baselines3 as sb3
except ImportError:  # the bench extra is not installed
    sb3 = None

OBS_DIM, ACT_DIM, BATCH, HIDDEN, REPLAY = 17, 6, 256, [256, 256], 100_000


# -- off-policy ----------------------------------------------------------------------------------
def random_replay(rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = REPLAY
    return {
        "obs": rng.standard_normal((n, OBS_DIM), dtype=np.float32),
        "next_obs": rng.standard_normal((n, OBS_DIM), dtype=np.float32),
        "actions": rng.uniform(-1, 1, (n, ACT_DIM)).astype(np.float32),
        "rewards": rng.standard_normal(n).astype(np.float32),
        "terminals": (rng.random(n) < 0.001).astype(np.float32),
    }


def digideep_off_policy(
    cls: type,
    data: dict[str, np.ndarray],
    grad_steps: int,
    folder: Path,
    sample_only: bool = False,
    **kw: Any,
):
    session = OnDevice(torch.device("cpu"))
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
    agent = cls(
        "agent",
        session,
        obs_space,
        act_space,
        batch_size=BATCH,
        hidden_sizes=HIDDEN,
        updates_per_iteration=grad_steps,
        learning_starts=0,
        **kw,
    )
    variant = "-".join(f"{key}={value}" for key, value in sorted(kw.items())) or "default"
    memory = Memory(folder / f"{cls.__name__}-{variant}.zarr", 1, REPLAY + 1)
    chunk = {
        "/observations": data["obs"][None],
        "/next_observations": data["next_obs"][None],
        "/agents/agent/actions": data["actions"][None],
        "/rewards": data["rewards"][None, :, None],
        "/terminals": data["terminals"][None, :, None],
        "/truncations": np.zeros((1, REPLAY, 1), np.float32),
        "/masks": np.ones((1, REPLAY, 1), np.float32),
    }
    memory.store(chunk)

    def run() -> None:
        agent.update(agent.sample(memory))

    return (lambda: agent.prepare(agent.sample(memory))) if sample_only else run


def sb3_off_policy(name: str, data: dict[str, np.ndarray], grad_steps: int):
    env = gym.make("HalfCheetah-v5")
    cls = {"SAC": sb3.SAC, "TD3": sb3.TD3}[name]
    model = cls(
        "MlpPolicy",
        env,
        batch_size=BATCH,
        buffer_size=REPLAY,
        learning_starts=10**9,
        device="cpu",
        policy_kwargs={"net_arch": HIDDEN},
        seed=0,
    )
    model.learn(total_timesteps=10)  # sets up the logger; no training before learning_starts
    buffer = model.replay_buffer
    n = REPLAY
    buffer.observations[:n, 0] = data["obs"]
    buffer.next_observations[:n, 0] = data["next_obs"]
    buffer.actions[:n, 0] = data["actions"]
    buffer.rewards[:n, 0] = data["rewards"]
    buffer.dones[:n, 0] = data["terminals"]
    buffer.pos, buffer.full = 0, True

    def run() -> None:
        model.train(gradient_steps=grad_steps, batch_size=BATCH)

    return run


def layer_shapes(in_dim: int, out_dim: int) -> list[tuple[int, int]]:
    sizes = [in_dim, *HIDDEN, out_dim]
    return list(itertools.pairwise(sizes))


def matmuls(layers: list[tuple[int, int]], *, weights: bool, inputs: str, count: float) -> list[tuple]:
    """``(m, k, n, count)`` of one forward pass (and its backward) through ``layers`` at batch ``BATCH``.

    ``weights``: weight gradients are computed; ``inputs``: ``"none"``, ``"hidden"`` (input gradients of
    every layer but the first) or ``"all"`` (down to the network's input, e.g. the actions).
    """
    out = []
    for index, (fan_in, fan_out) in enumerate(layers):
        out.append((BATCH, fan_in, fan_out, count))  # forward
        if weights:
            out.append((fan_in, BATCH, fan_out, count))  # dL/dW = x^T g
        if inputs == "all" or (inputs == "hidden" and index > 0):
            out.append((BATCH, fan_out, fan_in, count))  # dL/dx = g W^T
    return out


def update_matmuls(name: str) -> list[tuple]:
    """The matmuls of one gradient step of SAC or TD3 (two critics; TD3's actor every second step)."""
    critic = layer_shapes(OBS_DIM + ACT_DIM, 1)
    if name == "SAC":
        actor = layer_shapes(OBS_DIM, 2 * ACT_DIM)
        return [
            *matmuls(actor, weights=False, inputs="none", count=1),  # next actions, no grad
            *matmuls(critic, weights=False, inputs="none", count=2),  # target critics
            *matmuls(critic, weights=True, inputs="hidden", count=2),  # critic step
            *matmuls(actor, weights=True, inputs="hidden", count=1),  # actor step: actor
            *matmuls(critic, weights=False, inputs="all", count=2),  # ... through both critics
        ]
    actor = layer_shapes(OBS_DIM, ACT_DIM)
    return [
        *matmuls(actor, weights=False, inputs="none", count=1),  # target actor
        *matmuls(critic, weights=False, inputs="none", count=2),  # target critics
        *matmuls(critic, weights=True, inputs="hidden", count=2),  # critic step
        *matmuls(actor, weights=True, inputs="hidden", count=0.5),  # delayed actor step
        *matmuls(critic, weights=False, inputs="all", count=0.5),  # ... through the first critic
    ]


def roofline(name: str, reps: int = 200) -> tuple[float, float]:
    """``(GFLOP per step, steps/s if the step were only its matmuls at this machine's torch.mm speed)``."""
    shapes = update_matmuls(name)
    seconds = flops = 0.0
    for m, k, n, count in shapes:
        a, b, out = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
        for _ in range(10):
            torch.mm(a, b, out=out)
        best = float("inf")
        for _ in range(5):  # the best of 5 blocks: the hardware's rate, not the neighbours' load
            start = time.perf_counter()
            for _ in range(reps // 5):
                torch.mm(a, b, out=out)
            best = min(best, (time.perf_counter() - start) / (reps // 5))
        seconds += count * best
        flops += count * 2 * m * k * n
    return flops / 1e9, 1.0 / seconds


def bench_off_policy(args: argparse.Namespace, folder: Path) -> None:
    data = random_replay(np.random.default_rng(0))
    first = args.threads[0]
    for cls in (SAC, TD3):
        runs = {}
        for threads in args.threads:
            runs[f"digideep eager {threads}t"] = (
                threads,
                digideep_off_policy(cls, data, args.grad_steps, folder, update_mode="eager"),
            )
        compiled = digideep_off_policy(cls, data, args.grad_steps, folder, update_mode="compile")
        torch.set_num_threads(first)
        first_timing = timed(compiled)  # the first update compiles
        runs[f"digideep compile {first}t"] = (first, compiled)
        runs[f"digideep bfloat16 {first}t"] = (
            first,
            digideep_off_policy(
                cls, data, args.grad_steps, folder, update_mode="eager", precision="bfloat16"
            ),
        )
        runs[f"digideep device-replay {first}t"] = (
            first,
            digideep_off_policy(
                cls, data, args.grad_steps, folder, update_mode="eager", replay_device="device"
            ),
        )
        if sb3 is not None:
            for threads in args.threads:
                runs[f"sb3 float32 {threads}t"] = (
                    threads,
                    sb3_off_policy(cls.__name__, data, args.grad_steps),
                )
        rates = interleaved(runs, args.repeats, args.grad_steps)
        torch.set_num_threads(first)
        gflop, floor = roofline(cls.__name__)
        report(f"{cls.__name__} gradient steps/s", rates, f"sb3 float32 {first}t", floor)
        print(
            f"  roofline: {gflop:.2f} GFLOP of matmuls per step, {floor:.0f} steps/s at torch.mm speed ({first}t)"
        )
        print(
            f"  (compile: the first {args.grad_steps} steps, compiling included, took {first_timing:.1f} s; "
            f"{args.grad_steps / rates[f'digideep compile {first}t']:.2f} s once compiled)"
        )
        bench_sampling(cls, data, args, folder)


def bench_sampling(cls: type, data: dict[str, np.ndarray], args: argparse.Namespace, folder: Path) -> None:
    """The replay stage alone, ``agent.prepare(agent.sample(memory))``: host against device sampler."""
    first = args.threads[0]
    runs = {
        f"replay {where} {first}t": (
            first,
            digideep_off_policy(cls, data, args.grad_steps, folder, True, replay_device=where),
        )
        for where in ("host", "device")
    }
    repeats = max(args.repeats, 15)  # a timing is tens of ms: more of them, for a steadier median
    rates = interleaved(runs, repeats, args.grad_steps)
    report(
        f"{cls.__name__} sample + prepare, minibatches/s (median of {repeats})",
        rates,
        f"replay host {first}t",
    )


def interleaved(runs: dict[str, tuple[int, Any]], repeats: int, work: float) -> dict[str, float]:
    """:func:`common.interleaved` of ``{name: (threads, fn)}``, each timed at its own torch thread count."""
    threads = {name: count for name, (count, _) in runs.items()}
    return common_interleaved(
        {name: run for name, (_, run) in runs.items()},
        repeats,
        work,
        before=lambda name: torch.set_num_threads(threads[name]),
    )


# -- PPO -----------------------------------------------------------------------------------------
def digideep_ppo(
    workers: int, iterations: int, vectorization: str, **agent_args: Any
) -> tuple[Any, Any, Explorer]:
    """``(run, act_only, explorer)``: Explorer + RolloutMemory + PPO on 2048-frame chunks."""
    from digideep.environment.make_environment import MakeEnvironment

    session = OnDevice(torch.device("cpu"))
    env_params = {"model_name": "HalfCheetah-v5", "vectorization": vectorization}
    observation_space, action_space = MakeEnvironment(**env_params).spaces()
    agent = PPO(
        "agent", session, observation_space, action_space["agent"], n_epochs=10, batch_size=64, **agent_args
    )
    explorer = Explorer(session, {"agent": agent}, "train", env_params, workers, 2048 // workers, seed=0)
    memory = RolloutMemory(workers)

    def run() -> None:
        for _ in range(iterations):
            memory.store(explorer.update())
            agent.update(agent.sample(memory))

    return run, explorer.update, explorer


def raw_env(steps: int) -> Any:
    """Steps of HalfCheetah-v5 with random actions: the rate the Explorer is measured against."""
    env = gym.make("HalfCheetah-v5")
    env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, *env.action_space.shape)).astype(np.float32)

    def run() -> None:
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()

    return run


def bench_ppo(args: argparse.Namespace) -> None:
    n_steps, iterations, first = 2048, args.ppo_iterations, args.threads[0]
    frames = n_steps * iterations
    run, act_only, explorer = digideep_ppo(1, iterations, "sync", update_mode="eager")
    explorers = [explorer]
    runs: dict[str, tuple[int, Any]] = {f"digideep eager {first}t": (first, run)}
    compiled, _, compiled_explorer = digideep_ppo(1, iterations, "sync", update_mode="compile")
    explorers.append(compiled_explorer)
    torch.set_num_threads(first)
    first_timing = timed(compiled)  # the first update compiles
    runs[f"digideep compile {first}t"] = (first, compiled)
    for threads in args.threads[1:]:
        run2, _, explorer2 = digideep_ppo(2, iterations, "async", update_mode="auto")
        explorers.append(explorer2)
        runs[f"digideep 2w async auto {threads}t"] = (threads, run2)
    if sb3 is not None:
        for threads in args.threads:
            model = sb3.PPO(
                "MlpPolicy",
                gym.make("HalfCheetah-v5"),
                n_steps=n_steps,
                batch_size=64,
                n_epochs=10,
                device="cpu",
                seed=0,
            )
            runs[f"sb3 {threads}t"] = (
                threads,
                lambda model=model: model.learn(total_timesteps=frames, reset_num_timesteps=False),
            )
    rates = interleaved(runs, args.repeats, frames)
    report("PPO frames/s incl. updates", rates, f"sb3 {first}t")
    eager, compile_rate = rates[f"digideep eager {first}t"], rates[f"digideep compile {first}t"]
    print(
        f"  compile / eager: {compile_rate / eager:.2f}x frames/s ({first}t); the first {frames} frames, "
        f"compiling included, took {first_timing:.1f} s, {frames / compile_rate:.1f} s once compiled"
    )
    torch.set_num_threads(first)
    random_explorer = random_agent_explorer(n_steps)
    explorers.append(random_explorer)
    acting = interleaved(
        {
            "explorer": (first, act_only),
            "random": (first, random_explorer.update),
            "raw env": (first, raw_env(n_steps)),
        },
        args.repeats,
        n_steps,
    )
    us = {k: 1e6 / rate for k, rate in acting.items()}
    print(
        f"PPO acting, 1 env: Explorer {acting['explorer']:.0f} steps/s, raw env {acting['raw env']:.0f} "
        f"steps/s: {acting['explorer'] / acting['raw env']:.2f} of the raw rate "
        f"({us['explorer'] - us['raw env']:.0f} us per step beside the env: PPO's acting "
        f"{us['explorer'] - us['random']:.0f} us, the Explorer with a random agent "
        f"{us['random'] - us['raw env']:.0f} us, {acting['random'] / acting['raw env']:.2f} of the raw rate)"
    )
    for each in explorers:
        each.close()


def random_agent_explorer(n_steps: int) -> Explorer:
    """The same Explorer with uniform random actions: what the Explorer costs without PPO's acting."""
    from digideep.environment.make_environment import MakeEnvironment
    from digideep.environment.random_agent import RandomAgent

    session = OnDevice(torch.device("cpu"))
    env_params = {"model_name": "HalfCheetah-v5"}
    _, action_space = MakeEnvironment(**env_params).spaces()
    agent = RandomAgent("agent", session, None, action_space["agent"], seed=0)
    return Explorer(session, {"agent": agent}, "train", env_params, 1, n_steps, seed=0)


def report(title: str, rates: dict[str, float], baseline: str, floor: float | None = None) -> None:
    print(title)
    base = rates.get(baseline)
    for key, rate in rates.items():
        ratio = f"  {rate / base:5.2f}x {baseline}" if base and key != baseline else ""
        share = f"  {rate / floor:4.0%} of roofline" if floor else ""
        print(f"  {key:<26} {rate:9.1f}{ratio}{share}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--threads", type=int, nargs="+", default=[1], help="torch thread counts, each for both sides"
    )
    parser.add_argument("--grad-steps", type=int, default=300, help="gradient steps per timing (SAC/TD3)")
    parser.add_argument("--repeats", type=int, default=3, help="timings per figure (median reported)")
    parser.add_argument("--ppo-iterations", type=int, default=2, help="2048-frame iterations per PPO timing")
    parser.add_argument(
        "--only",
        choices=["off-policy", "sampling", "ppo"],
        help="run one part (off-policy includes sampling)",
    )
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, threads {args.threads}, "
        f"stable-baselines3 {sb3.__version__ if sb3 else 'not installed'}; {machine()}"
    )
    with tempfile.TemporaryDirectory() as folder:
        if args.only in (None, "off-policy"):
            bench_off_policy(args, Path(folder))
        if args.only == "sampling":
            data = random_replay(np.random.default_rng(0))
            for cls in (SAC, TD3):
                bench_sampling(cls, data, args, Path(folder))
        if args.only in (None, "ppo"):
            bench_ppo(args)


if __name__ == "__main__":
    main()
