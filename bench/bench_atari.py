"""Atari: memory per transition, PPO frames/s against Stable-Baselines3, and the Explorer's overhead.

    python bench/bench_atari.py [--iterations 2] [--repeats 3] [--threads 1] [--quick]

- Memory: one real Pong chunk (8 envs x 128 steps, random actions) kept plain and in the
  RolloutMemory (stacked frames held once, :mod:`digideep.memory.frames`): bytes per transition of
  the whole chunk and of the observation keys, and the cost of ``store``, of reading the whole chunk
  (what PPO does) and of gathering one 256-row minibatch, each against the plain path. Also the
  replay Memory's Zarr copy on disk, uncompressed and with ``compression="images"``.
- PPO on PongNoFrameskip-v4 with CleanRL's settings (``params/atari_ppo.py``: 8 envs, 128 steps,
  4 epochs, minibatch 256, the Nature CNN): environment frames per second (agent steps, each 4
  emulator frames) including the updates. digideep runs Explorer + RolloutMemory + PPO with the
  envs in subprocesses (``vectorization="async"``, the parameter file's choice on several cores) and
  in this process (``"sync"``); SB3 runs ``PPO("CnnPolicy")`` with ``make_atari_env`` (its default
  DummyVecEnv, in process) and ``VecFrameStack(4)``, ``PPO.learn`` for the same frames. All timings
  interleaved in one run.
- Acting: the Explorer's ``update()`` with the CNN policy against the same vector env stepped
  with random actions (no agent), 8 envs x 128 steps.

Each figure is the median of ``--repeats`` timings after one warm-up; compare ratios, not absolute
numbers (the machine's other load affects every side). Needs ale-py (``pip install 'digideep[atari]'``)
and Stable-Baselines3 (a bench extra); without either it prints one line and exits.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import interleaved, machine

try:
    import ale_py  # noqa: F401
    import cv2  # noqa: F401  (SB3's AtariWrapper resizes with it)
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack
except ImportError as error:  # an optional extra is missing
    MISSING: str | None = error.name
else:
    MISSING = None

GAME, WORKERS, STEPS, MINIBATCH = "PongNoFrameskip-v4", 8, 128, 256


def report(title: str, rates: dict[str, float], baseline: str, unit: str) -> None:
    print(title)
    for name, rate in rates.items():
        ratio = f"  {rate / rates[baseline]:5.2f}x {baseline}" if name != baseline else ""
        print(f"  {name:<28} {rate:10.1f} {unit}{ratio}")


def ppo_parts(vectorization: str) -> tuple[Any, Any, Any, Any]:
    """``(agent, explorer, memory, env params)`` as ``params/atari_ppo.py`` builds them, on the CPU."""
    from digideep.agents.base import OnDevice
    from digideep.agents.ppo import PPO
    from digideep.environment.explorer import Explorer
    from digideep.environment.make_environment import MakeEnvironment
    from digideep.memory import RolloutMemory
    from params import atari_ppo

    params = atari_ppo.gen_params({**atari_ppo.cpanel, "model_name": GAME, "vectorization": vectorization})
    env = params["env"]
    session = OnDevice(torch.device("cpu"))
    observation_space, action_space = MakeEnvironment(**env).spaces()
    args = params["agents"]["agent"]["args"]
    agent = PPO("agent", session, observation_space, action_space["agent"], **args)
    explorer = Explorer(session, {"agent": agent}, "train", env, WORKERS, STEPS, seed=0)
    return agent, explorer, RolloutMemory(WORKERS), env


def bench_memory(repeats: int) -> None:
    from digideep.memory import Memory, RolloutMemory

    _, explorer, _, _ = ppo_parts("sync")
    chunk = dict(explorer.update())
    explorer.close()
    transitions = WORKERS * (STEPS + 1)
    plain_bytes = sum(v.nbytes for v in chunk.values())
    image_keys = [k for k in chunk if "observations" in k]
    memory = RolloutMemory(WORKERS)
    memory.store(chunk)
    held_images = sum(memory._chunks[-1][k].nbytes for k in image_keys)
    plain_images = sum(chunk[k].nbytes for k in image_keys)
    print(f"Memory, one chunk of {WORKERS} envs x {STEPS} steps (+ final prestep), random actions, {GAME}")
    print(
        f"  bytes per transition: plain {plain_bytes / transitions:,.0f}, frames once "
        f"{memory.nbytes / transitions:,.0f} ({plain_bytes / memory.nbytes:.1f}x less); observation keys "
        f"alone {plain_images / transitions:,.0f} -> {held_images / transitions:,.0f}"
    )
    disk = {}
    with tempfile.TemporaryDirectory() as folder:
        for compression in (None, "images"):
            path = Path(folder) / f"{compression}.zarr"
            with Memory(path, WORKERS, STEPS + 1, compression=compression) as replay:
                replay.store(chunk)
                replay.flush()
            disk[compression] = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    print(
        f"  replay Memory on disk (Zarr), bytes per transition: uncompressed {disk[None] / transitions:,.0f}, "
        f"compression='images' {disk['images'] / transitions:,.0f} (the RAM ring keeps stacks whole)"
    )
    plain, frames = RolloutMemory(WORKERS, frames=False), RolloutMemory(WORKERS)
    rng = np.random.default_rng(0)
    workers, rows = rng.integers(0, WORKERS, MINIBATCH), rng.integers(0, STEPS, MINIBATCH)
    for title, runs in (
        ("store one chunk", {"plain": lambda: plain.store(chunk), "frames": lambda: frames.store(chunk)}),
        ("read the whole chunk (PPO's sample)", {"plain": plain.last_chunk, "frames": frames.last_chunk}),
        (
            f"gather a {MINIBATCH}-row minibatch of both observation keys",
            {
                name: (lambda m=m: [m.gather(k, workers, rows) for k in image_keys])
                for name, m in (("plain", plain), ("frames", frames))
            },
        ),
    ):
        rates = interleaved(runs, max(repeats, 5), 1.0)
        print(f"  {title}: " + ", ".join(f"{name} {1e3 / rate:.2f} ms" for name, rate in rates.items()))


def bench_ppo(iterations: int, repeats: int, quick: bool) -> None:
    frames_per_timing = iterations * WORKERS * STEPS
    runs: dict[str, Any] = {}
    closers = []
    for vectorization in ("sync",) if quick else ("async", "sync"):
        agent, explorer, memory, _ = ppo_parts(vectorization)
        closers.append(explorer.close)

        def run(agent=agent, explorer=explorer, memory=memory) -> None:
            for _ in range(iterations):
                memory.store(explorer.update())
                agent.update(agent.sample(memory))

        runs[f"digideep {vectorization}"] = run
    envs = VecFrameStack(make_atari_env(GAME, n_envs=WORKERS, seed=0), n_stack=4)
    closers.append(envs.close)
    model = sb3.PPO(
        "CnnPolicy",
        envs,
        n_steps=STEPS,
        batch_size=MINIBATCH,
        n_epochs=4,
        learning_rate=2.5e-4,
        clip_range=0.1,
        ent_coef=0.01,
        vf_coef=0.5,
        device="cpu",
        seed=0,
    )
    runs["sb3 (DummyVecEnv)"] = lambda: model.learn(frames_per_timing, reset_num_timesteps=False)
    rates = interleaved(runs, repeats, frames_per_timing)
    report(
        f"PPO {GAME}, {WORKERS} envs x {STEPS} steps, 4 epochs, minibatch {MINIBATCH}: agent steps/s "
        f"incl. updates ({iterations} iteration(s) a timing)",
        rates,
        "sb3 (DummyVecEnv)",
        "steps/s",
    )
    for close in closers:
        close()


def bench_acting(repeats: int) -> None:
    _, explorer, _, _ = ppo_parts("sync")
    envs = explorer.envs
    rng = np.random.default_rng(0)
    actions = rng.integers(0, envs.single_action_space["agent"].n, (STEPS, WORKERS))

    def raw() -> None:
        for action in actions:
            envs.step({"agent": action})

    rates = interleaved({"raw vector env": raw, "Explorer + CNN": explorer.update}, repeats, WORKERS * STEPS)
    report(f"Acting, {WORKERS} envs in process (sync) x {STEPS} steps", rates, "raw vector env", "steps/s")
    spent = 1e6 / rates["Explorer + CNN"] - 1e6 / rates["raw vector env"]
    print(f"  {spent:.0f} us per agent step beside the env (the CNN's forward for {WORKERS} envs, buffers)")
    explorer.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=2, help="PPO iterations per timing")
    parser.add_argument("--repeats", type=int, default=3, help="timings per figure (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both sides)")
    parser.add_argument(
        "--quick", action="store_true", help="one iteration, one timing, sync only (smoke run)"
    )
    parser.add_argument("--only", choices=["memory", "ppo", "acting"], help="run one part")
    args = parser.parse_args()
    if MISSING is not None:
        print(
            f"bench_atari: skipped, {MISSING} is not installed (pip install 'digideep[atari]' stable-baselines3 opencv-python-headless)"
        )
        return
    if args.quick:
        args.iterations, args.repeats = 1, 1
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), stable-baselines3 {sb3.__version__}; {machine()}"
    )
    if args.only in (None, "memory"):
        bench_memory(args.repeats)
    if args.only in (None, "acting"):
        bench_acting(args.repeats)
    if args.only in (None, "ppo"):
        bench_ppo(args.iterations, args.repeats, args.quick)


if __name__ == "__main__":
    main()
