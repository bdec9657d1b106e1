"""Learning check: does a speed change still learn? digideep against Stable-Baselines3, one protocol.

    python bench/bench_learning.py --algo sac --env Hopper-v5 --frames 50000 --learning-starts 10000 \\
        --seeds 0 1 --sides digideep sb3 [--eval-episodes 10] [--jobs 1] [--json results.json] \\
        [--device cuda --cpanel '{"update_mode": "cudagraphs"}']

What it measures: the mean return of the final deterministic policy after ``--frames`` environment
frames, for each (side, seed) cell, beside the wall-clock seconds the training took. Every change
meant to make training faster is checked with it: a speed-up that learns worse is not one.

The protocol, the same for both sides:

- each cell trains in a process of its own (``--jobs`` at a time, one by default: cells that share
  the cores slow each other down), with ``--threads`` torch threads (1) and one environment;
- digideep trains the shipped parameter file (``params.mujoco_sac``, or ``params.mujoco_td3`` with
  ``--algo td3``) through the library as ``digideep train --no-prefect`` does (``open_run`` then
  ``run_training``: checkpoints, logs and the metrics journal included; MLflow tracking off), with
  the cpanel overrides ``model_name``, ``seed``, ``learning_starts``, ``device`` (``--device``, cpu
  by default), ``torch_threads`` and those of ``--cpanel`` (a GPU run's update mode, say), and a
  schedule cut to exactly ``--frames`` frames: ``n_steps`` frames per iteration (``--n-steps``,
  1 as shipped), epochs of 1,000 frames (of ``n_steps`` where it does not divide 1,000), the test
  stage once, at the end. Everything else is the
  file's own;
- SB3 trains ``SAC("MlpPolicy", env, learning_starts=..., seed=seed, device="cpu")`` (``TD3``
  likewise) with SB3's defaults otherwise, ``learn(total_timesteps=frames)``; with ``--sb3-chunk
  N`` SB3 runs digideep's chunked schedule instead (``train_freq=N, gradient_steps=N``), to tell
  what the schedule alone does;
- evaluation: ``--eval-episodes`` (10) deterministic episodes of the final policy on a fresh
  environment seeded ``seed + 10000`` (training uses ``seed``): digideep's own test stage, once,
  at the end of the run (its test explorer, train normalisers copied in); SB3's ``evaluate_policy``.

How to read it: the table has one row per cell (mean and std of the evaluation episodes' returns,
seconds of training, training frames per second), then the mean over seeds of each side, then the
machine. Compare returns, not seconds: the seconds exclude evaluation but include what each side
does while training (digideep's checkpoints and logs; SB3 has none). Both sides alternate one frame
and one gradient step (with ``--n-steps N`` digideep runs chunks of N frames and N steps, as
``--sb3-chunk N`` makes SB3 do); digideep learns from the iteration whose chunk brings the memory to
``learning_starts``, SB3 once it holds more: digideep makes ``frames - learning_starts + n_steps``
gradient steps (40,001 at the reference settings), SB3 ``frames -
learning_starts`` (40,000); short smoke runs exaggerate the difference. Two seeds tell a broken learner from a working one, not small differences: for those use
more seeds. SB3's defaults differ from the shipped files where noted in them (SB3's TD3 uses no
exploration noise and 400x300 networks by default; SAC's defaults match params.mujoco_sac).

Reference (Hopper-v5, 50,000 frames, learning_starts 10,000, seeds 0 and 1, 10 episodes): SB3 SAC
528 and 546; digideep SAC with autograd 2,641 and 1,565 (its former hand-written gradients: 419 and
354). ``tests/agents/test_learning.py::test_sac_learns_hopper`` asserts at least 800 on each seed.

``--json PATH`` writes the cells, the per-side means, the settings and the versions for a results
table. Stable-Baselines3 is a bench extra (``pip install stable-baselines3``).

Parity over seeds and environments: run each environment (or each seed) with ``--json``, then

    python bench/bench_learning.py --combine hopper-seed*.json walker-seed*.json

prints, per environment and over all of them, each side's mean with its 95 % stratified bootstrap
interval, the difference of the means (digideep minus SB3) with its interval, and P(digideep > SB3)
with its interval, every statistic from rliable (``digideep.report.statistics``, as ``digideep
report`` computes them). Files of different settings (algorithm, frames, learning_starts,
evaluation episodes, n_steps, threads, device) are refused in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(ROOT))  # params/ beside digideep/

import numpy as np  # noqa: E402  (after the path and MUJOCO_GL above)
from common import machine  # noqa: E402

PARAMS = {"sac": "params.mujoco_sac", "td3": "params.mujoco_td3"}
"""The shipped parameter file each algorithm trains on the digideep side."""

SIDES = ("digideep", "sb3")
EVAL_SEED_OFFSET = 10_000
"""Evaluation envs are seeded ``seed + EVAL_SEED_OFFSET`` (digideep's test explorer: the same)."""

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def epoch_iterations(n_steps: int) -> int:
    """Iterations of an epoch: 1,000 frames' worth where ``n_steps`` divides 1,000 (as shipped), else 1."""
    return 1000 // n_steps if 1000 % n_steps == 0 else 1


# -- one cell, in its own process -----------------------------------------------------------------
def digideep_cell(args: argparse.Namespace, seed: int, folder: Path) -> dict[str, Any]:
    """Train the shipped params file as ``digideep train --no-prefect`` does; evaluate in its test stage."""
    from digideep.pipeline.params import resolve_params
    from digideep.pipeline.training import open_run, run_training

    epoch_size = epoch_iterations(args.n_steps)
    epochs = args.frames // (args.n_steps * epoch_size)
    overrides = {
        "model_name": args.env,
        "seed": seed,
        "learning_starts": args.learning_starts,
        "n_steps": args.n_steps,  # frames per iteration (one worker)
        "epoch_size": epoch_size,  # 1,000 frames an epoch where n_steps divides it
        "number_epochs": epochs,  # epochs x epoch_size x n_steps = --frames exactly
        "test_interval": epochs,  # the test stage runs once, at the end
        "test_episodes": args.eval_episodes,
        "test_win_size": args.eval_episodes,
        "torch_threads": args.threads,
        "device": args.device,
        **args.cpanel,  # --cpanel: e.g. the update mode or acting device of a GPU run
    }
    resolved = resolve_params(PARAMS[args.algo], overrides=overrides)
    resolved.params["tracking"] = {"enabled": False}
    handle = open_run(resolved, session_name=f"{args.algo}-{args.env}-seed{seed}", session_path=folder)
    runner = handle.runner
    test_seconds = 0.0

    def call(stage: str, function: Any) -> Any:  # the plain driver, timing the test stage apart
        nonlocal test_seconds
        start = time.perf_counter()
        try:
            return function()
        finally:
            if stage == "test":
                test_seconds += time.perf_counter() - start

    start = time.perf_counter()
    reason = run_training(handle, call)
    seconds = time.perf_counter() - start - test_seconds
    if reason != "finished":
        raise RuntimeError(f"digideep training stopped early: {reason}")
    returns = runner.monitor.window_values("/explore/test/episode_return")
    return {"returns": returns, "seconds": seconds, "frames": runner.counters.frames}


def sb3_cell(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Train SB3's SAC (or TD3) with its defaults and ``learning_starts``; ``evaluate_policy`` it."""
    import gymnasium as gym
    import stable_baselines3 as sb3
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    algorithm = {"sac": sb3.SAC, "td3": sb3.TD3}[args.algo]
    chunk = {"train_freq": args.sb3_chunk, "gradient_steps": args.sb3_chunk} if args.sb3_chunk > 1 else {}
    model = algorithm(
        "MlpPolicy",
        gym.make(args.env),
        learning_starts=args.learning_starts,
        seed=seed,
        device="cpu",
        **chunk,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=args.frames)
    seconds = time.perf_counter() - start
    evaluation = DummyVecEnv([lambda: Monitor(gym.make(args.env))])
    evaluation.seed(seed + EVAL_SEED_OFFSET)  # used by the first reset, in evaluate_policy
    returns, _ = evaluate_policy(
        model, evaluation, n_eval_episodes=args.eval_episodes, deterministic=True, return_episode_rewards=True
    )
    evaluation.close()
    return {"returns": [float(r) for r in returns], "seconds": seconds, "frames": model.num_timesteps}


def run_cell(args: argparse.Namespace) -> None:
    """The child process: train and evaluate one (side, seed) cell; write its JSON to ``--cell-out``."""
    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    side, seed = args.cell[0], int(args.cell[1])
    folder = Path(args.cell_out).parent
    result = digideep_cell(args, seed, folder) if side == "digideep" else sb3_cell(args, seed)
    Path(args.cell_out).write_text(json.dumps({"side": side, "seed": seed, **result}))


# -- the matrix, from the parent ------------------------------------------------------------------
def launch(args: argparse.Namespace, side: str, seed: int, workdir: Path) -> dict[str, Any]:
    """Run one cell in a fresh Python process; return its row (``error`` set when it failed)."""
    folder = workdir / f"{side}-seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    out, log_file = folder / "result.json", folder / "cell.log"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        *("--algo", args.algo, "--env", args.env, "--frames", str(args.frames)),
        *("--learning-starts", str(args.learning_starts), "--eval-episodes", str(args.eval_episodes)),
        *("--n-steps", str(args.n_steps), "--threads", str(args.threads), "--device", args.device),
        *("--sb3-chunk", str(args.sb3_chunk), "--cpanel", json.dumps(args.cpanel)),
        *("--cell", side, str(seed), "--cell-out", str(out)),
    ]
    environment = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, str(args.threads))}
    print(f"  {side} seed {seed}: training (log: {log_file})", file=sys.stderr, flush=True)
    with log_file.open("w") as log:
        done = subprocess.run(command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
    row: dict[str, Any] = {"side": side, "seed": seed}
    if done.returncode != 0 or not out.exists():
        tail = "".join(log_file.read_text().splitlines(keepends=True)[-20:])
        print(f"  {side} seed {seed}: failed (exit {done.returncode}):\n{tail}", file=sys.stderr, flush=True)
        return {**row, "error": f"exit {done.returncode}", "mean": None, "std": None}
    result = json.loads(out.read_text())
    returns = result["returns"]
    row.update(
        returns=returns,
        mean=float(np.mean(returns)),
        std=float(np.std(returns)),
        episodes=len(returns),
        seconds=result["seconds"],
        frames=result["frames"],
        frames_per_second=result["frames"] / result["seconds"],
    )
    print(f"  {side} seed {seed}: mean return {row['mean']:.1f}", file=sys.stderr, flush=True)
    return row


def side_means(rows: list[dict[str, Any]], sides: list[str]) -> dict[str, dict[str, float]]:
    """Per side: the mean (and std, n) over seeds of the cells' mean returns, seconds and frames/s."""
    means = {}
    for side in sides:
        cells = [r for r in rows if r["side"] == side and "error" not in r]
        if not cells:
            continue
        scores = [r["mean"] for r in cells]
        means[side] = {
            "mean": statistics.fmean(scores),
            "std_over_seeds": statistics.pstdev(scores),
            "seeds": len(cells),
            "seconds": statistics.fmean(r["seconds"] for r in cells),
            "frames_per_second": statistics.fmean(r["frames_per_second"] for r in cells),
        }
    return means


def print_table(rows: list[dict[str, Any]], means: dict[str, dict[str, float]], header: str) -> None:
    print(header)
    print(f"{'side':<9} {'seed':>5} {'mean return':>12} {'std':>8} {'wall s':>9} {'frames/s':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['side']:<9} {r['seed']:>5} {'failed: ' + r['error']:>12}")
            continue
        print(
            f"{r['side']:<9} {r['seed']:>5} {r['mean']:>12.1f} {r['std']:>8.1f} {r['seconds']:>9.1f} "
            f"{r['frames_per_second']:>9.1f}"
        )
    for side, m in means.items():
        print(
            f"{side:<9} {'mean':>5} {m['mean']:>12.1f} {m['std_over_seeds']:>8.1f} {m['seconds']:>9.1f} "
            f"{m['frames_per_second']:>9.1f}   (over {m['seeds']} seed(s); std here: across seeds)"
        )
    print(machine())


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for package in ("torch", "gymnasium", "mujoco", "stable-baselines3"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    with contextlib.suppress(OSError, subprocess.CalledProcessError):  # not a git checkout
        found["digideep commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    return found


# -- parity over several result files --------------------------------------------------------------
SAME_SETTINGS = {
    "algo": None, "frames": None, "learning_starts": None, "eval_episodes": None, "n_steps": None,
    "threads": None, "device": None, "sb3_chunk": 1, "cpanel": {},
}  # fmt: skip
"""Settings every combined file must share (environments and seeds may differ), with the value a
file written before the setting existed had."""


def combine(paths: list[str]) -> str:
    """The parity table of ``--json`` files: per environment and overall, from rliable.

    Raises:
        SystemExit: files of different settings, a cell that failed, or an environment with fewer
            than 2 seeds on a side (one line).
    """
    from digideep.report.statistics import difference_interval, improvement_interval, score_interval

    reports = [json.loads(Path(path).read_text()) for path in paths]
    first = reports[0]["settings"]
    for path, report in zip(paths, reports, strict=True):
        differ = [k for k, d in SAME_SETTINGS.items() if report["settings"].get(k, d) != first.get(k, d)]
        if differ:
            sys.exit(
                f"bench_learning: {path} differs from {paths[0]} in {', '.join(differ)}; combine runs of one protocol"
            )
    scores: dict[str, dict[str, dict[int, float]]] = {}  # env -> side -> seed -> mean return
    for path, report in zip(paths, reports, strict=True):
        for cell in report["cells"]:
            if "error" in cell:
                sys.exit(f"bench_learning: {path}: {cell['side']} seed {cell['seed']} failed; run it again")
            scores.setdefault(report["settings"]["env"], {}).setdefault(cell["side"], {})[cell["seed"]] = (
                cell["mean"]
            )
    lines = [
        f"{first['algo']}: digideep against SB3, {first['frames']} frames, learning_starts "
        f"{first['learning_starts']}, {first['eval_episodes']} deterministic episodes; 95 % stratified "
        "bootstrap intervals (rliable)",
        f"{'env':<13} {'seeds':>5} {'digideep':>24} {'sb3':>24} {'difference':>26} {'P(digideep > sb3)':>22}",
    ]
    columns: dict[str, list[np.ndarray]] = {side: [] for side in SIDES}
    for env, sides in sorted(scores.items()):
        if set(sides) != set(SIDES) or min(len(seeds) for seeds in sides.values()) < 2:
            sys.exit(
                f"bench_learning: {env} needs at least 2 seeds of each side ({', '.join(SIDES)}); run more"
            )
        ours, theirs = (np.array([sides[side][s] for s in sorted(sides[side])]) for side in SIDES)
        mine, ref = score_interval(ours), score_interval(theirs)
        diff = difference_interval(ours[:, None], theirs[:, None])
        better = improvement_interval(ours[:, None], theirs[:, None])
        lines.append(
            f"{env:<13} {len(ours):>2}/{len(theirs):<2} {_interval(mine):>24} {_interval(ref):>24} "
            f"{_interval(diff):>26} {_interval(better, 2):>22}"
        )
        columns["digideep"].append(ours)
        columns["sb3"].append(theirs)
    runs = {side: min(len(c) for c in cols) for side, cols in columns.items()}
    if len(scores) > 1:  # rliable's matrices are (runs, tasks): the first seeds of each environment
        ours, theirs = (np.stack([c[: runs[side]] for c in columns[side]], axis=1) for side in SIDES)
        better = improvement_interval(ours, theirs)
        lines.append(f"{'all':<13} {'':>5} {'':>24} {'':>24} {'':>26} {_interval(better, 2):>22}")
    commits = sorted({r["versions"].get("digideep commit", "?") for r in reports})
    lines.append(f"digideep commit(s): {', '.join(commits)}; {reports[0]['machine']}")
    return "\n".join(lines)


def _interval(interval: Any, digits: int = 1) -> str:
    return f"{interval.point:.{digits}f} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"


def cpanel_json(text: str) -> dict[str, Any]:
    """``--cpanel``'s value: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error})") from error
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object is needed, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algo", choices=sorted(PARAMS), default="sac", help="method (default: sac)")
    parser.add_argument("--env", default="Hopper-v5", help="Gymnasium MuJoCo id (default: Hopper-v5)")
    parser.add_argument(
        "--frames", type=int, default=50_000, help="training frames per cell (default: 50000)"
    )
    parser.add_argument(
        "--learning-starts", type=int, default=10_000, help="random-action frames first (default: 10000)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds (default: 0 1)")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES), help="implementations")
    parser.add_argument(
        "--eval-episodes", type=int, default=10, help="deterministic episodes at the end (default: 10)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="cells trained at once (default: 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per cell (default: 1)")
    parser.add_argument(
        "--n-steps",
        type=int,
        default=1,
        help="digideep frames per iteration (1 as shipped: a frame, then a gradient step; N: chunks of N "
        "frames, then N gradient steps); with its epochs, divides --frames (default: 1)",
    )
    parser.add_argument(
        "--sb3-chunk",
        type=int,
        default=1,
        metavar="N",
        help="SB3 collects N frames with one policy, then makes N gradient steps (train_freq = "
        "gradient_steps = N: digideep's chunked schedule; default 1, SB3's own)",
    )
    parser.add_argument("--device", default="cpu", help="digideep's device: cpu, auto, cuda (SB3: cpu)")
    parser.add_argument(
        "--cpanel",
        type=cpanel_json,
        default={},
        metavar="JSON",
        help='more cpanel overrides for digideep\'s side, e.g. \'{"update_mode": "cudagraphs"}\' on a GPU',
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--workdir", metavar="DIR", help="keep each cell's session and log here (default: temporary)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run that the figures do not come from: 2,000 frames, learning_starts 500, seed 0, "
        "1 episode, n_steps 500 (tests/docs runs the benchmarks this way)",
    )
    parser.add_argument(
        "--combine", nargs="+", metavar="JSON", help="print the parity table of --json files (see above)"
    )
    parser.add_argument("--cell", nargs=2, metavar=("SIDE", "SEED"), help=argparse.SUPPRESS)  # child
    parser.add_argument("--cell-out", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.cell:
        run_cell(args)
        return
    if args.combine:
        print(combine(args.combine))
        return
    if args.quick:
        args.frames, args.learning_starts, args.seeds, args.eval_episodes, args.n_steps = (
            2000,
            500,
            [0],
            1,
            500,
        )
    if args.frames < 1 or not 0 <= args.learning_starts < args.frames:
        parser.error(f"need 0 <= --learning-starts < --frames, got {args.learning_starts} and {args.frames}")
    if args.frames % (args.n_steps * epoch_iterations(args.n_steps)):
        parser.error(
            f"--frames {args.frames} must be a multiple of {args.n_steps * epoch_iterations(args.n_steps)}, "
            f"the frames of a digideep epoch at --n-steps {args.n_steps}"
        )
    if args.jobs < 1 or args.threads < 1 or args.eval_episodes < 1 or args.sb3_chunk < 1:
        parser.error("--jobs, --threads, --eval-episodes and --sb3-chunk must be at least 1")
    if "digideep" in args.sides:
        from digideep.errors import UsageError
        from digideep.pipeline.devices import check_device

        try:  # here, once, rather than in every cell's log
            check_device(args.device)
        except UsageError as error:
            parser.error(f"--device: {error}")
    if "sb3" in args.sides:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            if not args.quick:
                parser.error(
                    "stable-baselines3 is not installed: pip install stable-baselines3 (the bench extra)"
                )
            print("stable-baselines3 is not installed: the smoke run leaves its side out", file=sys.stderr)
            args.sides = [side for side in args.sides if side != "sb3"]
    cells = [(side, seed) for seed in args.seeds for side in args.sides]
    header = (
        f"{args.algo} on {args.env}: {args.frames} frames, learning_starts {args.learning_starts}, "
        f"{args.eval_episodes} deterministic episodes at the end; {args.threads} torch thread(s) a cell, "
        f"{args.jobs} cell(s) at a time; digideep {PARAMS[args.algo]} on {args.device}"
        + (f" with {json.dumps(args.cpanel)}" if args.cpanel else "")
        + (f"; SB3 in chunks of {args.sb3_chunk} frames" if args.sb3_chunk > 1 else "")
    )
    print(header, file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_learning-") as scratch:
        workdir = Path(args.workdir or scratch)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            rows = list(pool.map(lambda cell: launch(args, *cell, workdir), cells))
    means = side_means(rows, args.sides)
    print_table(rows, means, header)
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k not in ("cell", "cell_out", "json", "workdir")}
        report = {
            "settings": {**settings, "params": PARAMS[args.algo], "eval_seed_offset": EVAL_SEED_OFFSET},
            "machine": machine(),
            "versions": versions(),
            "cells": rows,
            "sides": means,
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if any("error" in r for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
