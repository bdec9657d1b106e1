"""Wall-clock time to a fixed number of frames, SAC against Stable-Baselines3, with both final returns.

    python bench/bench_time_to_return.py --frames 1000000 --seeds 0 1 [--learning-starts 10000]

digideep runs the shipped ``params/mujoco_sac.py`` (HalfCheetah-v5 unless ``--env``) through the
Runner's iterations (explore, store, sample, update; tracking, logging and checkpoints left out, as
SB3 neither tracks nor saves here); SB3 runs ``SAC("MlpPolicy")`` with the same hyperparameters
(lr 3e-4, batch 256, tau 0.005, gamma 0.99, 256x256, buffer 1e6, automatic temperature, one gradient
step per frame, ``learning_starts``). Both use ``--threads`` torch threads and one environment. Each
seed runs digideep then SB3, so the machine's load hits both alike; the figure to read is the ratio
of wall-clock times. The final return is the mean of ``--episodes`` deterministic episodes on a fresh
environment (digideep: its Runner's test stage; SB3: ``evaluate_policy``).

digideep's schedule is the params file's (``--n-steps``, 1 as shipped: a frame, then a gradient step,
as SB3 alternates them); ``--n-steps N`` collects N frames, then makes N gradient steps. The frame and
gradient-step counts are the same, ``frames - learning_starts`` gradient steps on each side (the table
prints both counts): SB3 learns once it has collected more than ``learning_starts`` frames, digideep
once its memory holds ``learning_starts`` transitions, an iteration earlier, so digideep's side is
given ``learning_starts + 1`` (and ``--learning-starts`` must be a multiple of ``--n-steps``; it then
acts randomly for one frame more than SB3). Before that, digideep made a chunk more: 6,000 steps to
SB3's 5,000 at 6,000 frames and ``--learning-starts 1000`` with 1,000-frame chunks.

Stable-Baselines3 is a bench extra (``pip install stable-baselines3``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # params/ beside digideep/

import gymnasium as gym
import numpy as np
import torch
from common import machine

from digideep.pipeline.devices import DeviceChoice, set_torch_threads
from digideep.pipeline.runner import Runner
from digideep.storage.session import Session
from params import mujoco_sac

try:
    import stable_baselines3 as sb3
    from stable_baselines3.common.evaluation import evaluate_policy
except ImportError:  # the bench extra is not installed
    sb3 = None


def digideep_run(args: argparse.Namespace, seed: int, root: Path) -> tuple[float, float, int]:
    """``(seconds, mean deterministic return, gradient steps)`` of the shipped SAC params cut to ``args.frames``."""
    iterations = args.frames // args.n_steps  # a multiple (main checks)
    cpanel = {
        **mujoco_sac.cpanel,
        "model_name": args.env,
        "seed": seed,
        "n_steps": args.n_steps,
        "number_epochs": iterations,
        "epoch_size": 1,
        "learning_starts": args.learning_starts + 1,  # SB3's num_timesteps > learning_starts (docstring)
        "torch_threads": args.threads,
        "test_interval": iterations,
        "test_episodes": args.episodes,
        "test_win_size": args.episodes,
        "save_interval": 10**9,
    }
    params = mujoco_sac.gen_params(cpanel)
    params["tracking"] = {"enabled": False}
    params["runner"]["stats_interval"] = 0
    session = Session(root=root, name=f"sac-{seed}")
    set_torch_threads(args.threads)
    runner = Runner(session, params, devices=DeviceChoice("cpu"), modes=tuple(params["explorer"]))
    try:
        start = time.perf_counter()
        for _ in range(iterations):  # explore, store, sample, update: no logging, no checkpoint
            runner.iterate()
        seconds = time.perf_counter() - start
        runner.test()  # untimed, as SB3's evaluation
        returns = runner.monitor.window_values("/explore/test/episode_return")
        steps = runner.agents["agent"].updates
    finally:
        runner.close()
        session.close()
    return seconds, float(np.mean(returns[-args.episodes :])), steps


def sb3_run(args: argparse.Namespace, seed: int) -> tuple[float, float, int]:
    """``(seconds, mean deterministic return, gradient steps)`` of SB3's SAC with the same hyperparameters."""
    model = sb3.SAC(
        "MlpPolicy",
        gym.make(args.env),
        learning_rate=3e-4,
        buffer_size=1_000_000,
        learning_starts=args.learning_starts,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        policy_kwargs={"net_arch": [256, 256]},
        device="cpu",
        seed=seed,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=args.frames)
    seconds = time.perf_counter() - start
    mean, _ = evaluate_policy(model, gym.make(args.env), n_eval_episodes=args.episodes, deterministic=True)
    return seconds, float(mean), int(model._n_updates)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=1_000_000, help="environment frames per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds, each run on both sides")
    parser.add_argument("--env", default="HalfCheetah-v5", help="Gymnasium MuJoCo id")
    parser.add_argument("--learning-starts", type=int, default=mujoco_sac.cpanel["learning_starts"])
    parser.add_argument("--n-steps", type=int, default=mujoco_sac.cpanel["n_steps"], help="digideep chunk")
    parser.add_argument("--episodes", type=int, default=10, help="deterministic episodes of the final return")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both sides")
    args = parser.parse_args()
    if args.frames < 1 or args.learning_starts >= args.frames:
        parser.error(f"need 0 <= --learning-starts < --frames, got {args.learning_starts} and {args.frames}")
    if args.frames % args.n_steps or args.learning_starts % args.n_steps:
        parser.error(
            f"--frames ({args.frames}) and --learning-starts ({args.learning_starts}) must be multiples of "
            f"--n-steps ({args.n_steps}), so that both sides make the same frames and gradient steps"
        )
    if sb3 is None:
        parser.error("stable-baselines3 is not installed: pip install stable-baselines3 (the bench extra)")
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), stable-baselines3 {sb3.__version__}, "
        f"{machine()}; {args.env}, "
        f"{args.frames} frames, learning_starts {args.learning_starts}"
    )
    print(
        f"{'seed':>4} {'digideep s':>11} {'sb3 s':>9} {'speed-up':>9} {'digideep return':>16} {'sb3 return':>11} "
        f"{'gradient steps (digideep, sb3)':>31}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            ours, our_return, our_steps = digideep_run(args, seed, Path(folder))
            theirs, their_return, their_steps = sb3_run(args, seed)
            print(
                f"{seed:>4} {ours:>11.1f} {theirs:>9.1f} {theirs / ours:>8.2f}x {our_return:>16.1f} "
                f"{their_return:>11.1f} {our_steps:>22,} {their_steps:>8,}",
                flush=True,
            )


if __name__ == "__main__":
    main()
