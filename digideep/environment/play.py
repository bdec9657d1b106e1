"""Try environments without an agent: list registered ids with their spaces, or run one with random actions.

The original Digideep's ``play`` tool, on Gymnasium's registry::

    python -m digideep.environment.play --list-include 'Pendulum|Hopper' [--list-exclude 'v4$']
    python -m digideep.environment.play --model Hopper-v5 --runs 3 --n-step 1000 [--no-action]
                                        [--delay 20] [--video data/videos] [--from-module M] [--seed 0]
    digideep envs ...                   # the same, through the console script

Listing constructs only the environments whose id matches the filters (``re.search``), one at a time,
and prints ``id  obs <space>  act <space>``; an environment that fails to build is listed with its
error instead of stopping the listing. Running prints one line per run (an episode, cut after
``--n-step`` steps): its return, its length and the environment's steps per second (the time spent in
``step`` and in drawing the action; ``--delay`` waits are left out). Gymnasium and MuJoCo ids work;
DeepMind Control ids (``dm_control/...``) do once ``pip install 'digideep[dmc]'`` installed them, and
Atari ids (``ALE/...``, with the DeepMind preprocessing) once ``pip install 'digideep[atari]'`` did.
Those suites register their ids on demand: a listing whose ``--list-include`` can match a
``dm_control/...`` (or ``ALE/...``) id registers that suite first, so ``--list-include dm_control``
lists them; a listing without ``--list-include`` shows what is registered already.

Bad input (an unknown id, a bad regular expression, a module that does not import) prints one line,
``digideep: error: ...``, with the closest registered ids for an unknown one, and exits with code 2.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import re
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from digideep.errors import UsageError

__all__ = ["RunResult", "cli", "list_envs", "play_env", "zero_action"]

EXIT_USAGE = 2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    """One run of :func:`play_env`: ``episode_return`` (sum of rewards), ``length`` (steps),
    ``steps_per_second`` (steps over the seconds spent stepping and drawing actions) and how the run
    ended: ``"terminated"``, ``"truncated"`` (the environment's time limit) or ``"cut"`` (``n_step``)."""

    episode_return: float
    length: int
    steps_per_second: float
    ending: str


def import_from_module(module: str | None) -> None:
    """Import ``module`` so that the environments it registers are known.

    Raises:
        UsageError: the module does not import.
    """
    if not module:
        return
    if str(Path.cwd()) not in sys.path:  # as ``python -m`` does: the project's modules import
        sys.path.insert(0, str(Path.cwd()))
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise UsageError(f"cannot import --from-module '{module}': {error}") from None


def check_registered(model_name: str, from_module: str | None = None) -> None:
    """Raise :class:`UsageError` naming the closest registered ids when ``model_name`` is unknown."""
    if model_name.startswith("dm_control/"):
        from digideep.environment import dmc

        dmc.register()  # on demand; without dm_control installed, one line naming the fix
    elif model_name not in gym.registry:
        from digideep.environment import atari

        atari.register(model_name)  # ALE/... ids; without ale-py, one line naming the fix
    if model_name in gym.registry:
        return
    close = difflib.get_close_matches(model_name, list(gym.registry), n=3, cutoff=0.6)
    if not close:  # 'hopper' finds 'Hopper-v5': compare without case and version
        lowered = {key.lower(): key for key in gym.registry}
        close = [lowered[k] for k in difflib.get_close_matches(model_name.lower(), list(lowered), n=3)]
    hint = (
        f"closest registered ids: {', '.join(close)}" if close else "list the ids with --list-include REGEX"
    )
    where = f" (after importing '{from_module}')" if from_module else ""
    raise UsageError(f"unknown environment '{model_name}'{where}; {hint}")


def _compile(pattern: str | None, option: str) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as error:
        raise UsageError(f"{option} '{pattern}' is not a valid regular expression: {error}") from None


def list_envs(include: str | None = None, exclude: str | None = None) -> Iterator[tuple[str, str]]:
    """Yield ``(id, description)`` for every registered id that ``include`` matches and ``exclude``
    does not (``re.search``; None matches every id, respectively none).

    The description is ``obs <observation space>  act <action space>`` of the environment built with
    ``gymnasium.make(id)``, or ``error: <type>: <message>`` when it fails to build. Environments are
    built one at a time, only for matching ids, and closed at once.

    Raises:
        UsageError: a pattern is not a valid regular expression.
    """
    keep, drop = _compile(include, "--list-include"), _compile(exclude, "--list-exclude")
    if keep is not None:
        _register_suites(keep)
    for env_id in sorted(gym.registry):
        if (keep is not None and not keep.search(env_id)) or (drop is not None and drop.search(env_id)):
            continue
        yield env_id, _describe(env_id)


def _register_suites(keep: re.Pattern[str]) -> None:
    """Register the on-demand suites (dm_control, Atari) whose ids ``keep`` can match.

    A suite counts as asked for when the pattern matches one of its ids or names its prefix; it
    is registered when installed and skipped quietly otherwise (``--model`` names the fix).
    """
    from digideep.environment import atari, dmc

    asks = {
        "dm_control": ("dm_control/cartpole-swingup-v0", "dm_control/walker-walk-v0", "dm_control"),
        "atari": ("ALE/Pong-v5", "ALE/Breakout-v5", "PongNoFrameskip-v4", "ALE"),
    }
    if any(keep.search(sample) for sample in asks["dm_control"]):
        try:
            dmc.register()
        except dmc.DMCUnavailableError as error:
            log.info("not listing dm_control ids: %s", error)
    if any(keep.search(sample) for sample in asks["atari"]):
        atari.register()


def _describe(env_id: str) -> str:
    try:
        with warnings.catch_warnings():  # "out of date" and similar notes would drown the listing
            warnings.simplefilter("ignore")
            env = gym.make(env_id)
    except Exception as error:  # any failure of a third-party constructor is reported, not raised
        return f"error: {type(error).__name__}: {_one_line(error)}"
    try:
        return f"obs {env.observation_space}  act {env.action_space}"
    finally:
        env.close()


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:197] + "..."


def zero_action(space: spaces.Space) -> Any:
    """The "do nothing" action of ``space``: zeros clipped into a Box's bounds, the first value of a
    Discrete or MultiDiscrete, zeros of a MultiBinary; Dict and Tuple spaces entry by entry."""
    if isinstance(space, spaces.Box):
        return np.clip(np.zeros(space.shape, space.dtype), space.low, space.high).astype(space.dtype)
    if isinstance(space, spaces.Discrete):
        return space.start
    if isinstance(space, spaces.MultiDiscrete):
        return np.array(space.start, dtype=space.dtype)
    if isinstance(space, spaces.MultiBinary):
        return np.zeros(space.shape, dtype=space.dtype)
    if isinstance(space, spaces.Dict):
        return {key: zero_action(sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(zero_action(sub) for sub in space.spaces)
    raise TypeError(f"no zero action for a {type(space).__name__} action space; drop --no-action")


def play_env(
    model_name: str,
    *,
    from_module: str | None = None,
    runs: int = 1,
    n_step: int = 1000,
    no_action: bool = False,
    delay_ms: float = 0.0,
    video: str | Path | None = None,
    seed: int = 0,
) -> Iterator[RunResult]:
    """Run ``model_name`` for ``runs`` episodes of at most ``n_step`` steps with random (or zero)
    actions; yield each run's result as it ends.

    The env is the one training uses (:class:`~digideep.environment.make_environment.MakeEnvironment`'s
    worker, without parameter-file wrappers). Run ``i`` starts with ``reset(seed=seed + i)`` and draws
    actions from the action space seeded with ``seed + i``. With ``video``, every run is written to
    ``<video>/play-w0-ep<k>.mp4``.

    Raises:
        UsageError: unknown id (naming the closest ones), an environment that fails to build, a bad
            argument, a module that does not import.
    """
    from digideep.environment.make_environment import MakeEnvironment

    if runs < 1 or n_step < 1 or delay_ms < 0:
        raise UsageError(
            f"--runs and --n-step must be >= 1 and --delay >= 0, got {runs}, {n_step}, {delay_ms}"
        )
    import_from_module(from_module)
    check_registered(model_name, from_module)
    maker = MakeEnvironment(model_name, from_module=from_module)
    cuts = maker.time_limit is None or n_step < maker.time_limit
    # the cut counts agent steps (an Atari env's own limit counts emulator frames) and sits inside
    # the video recorder, so that a cut run's video is kept
    try:
        env = maker.make_env(
            rank=0,
            mode="play",
            render=video is not None,
            video_folder=video,
            step_limit=n_step if cuts else None,
        )
    except Exception as error:  # a missing optional package or a broken third-party env: one line
        raise UsageError(
            f"environment '{model_name}' could not be built: {type(error).__name__}: {_one_line(error)}"
        ) from error
    try:
        for run in range(runs):
            yield _one_run(env, seed + run, n_step if cuts else None, no_action, delay_ms / 1000.0)
    finally:
        env.close()


def _one_run(env: gym.Env, seed: int, cut_at: int | None, no_action: bool, delay: float) -> RunResult:
    env.reset(seed=seed)
    env.action_space.seed(seed)
    total, length, busy, ending = 0.0, 0, 0.0, ""
    while not ending:
        start = time.perf_counter()
        action = zero_action(env.action_space) if no_action else env.action_space.sample()
        _, reward, terminated, truncated, _ = env.step(action)
        busy += time.perf_counter() - start
        total += float(reward)
        length += 1
        if terminated:
            ending = "terminated"
        elif truncated:
            ending = "cut" if length == cut_at else "truncated"
        if delay:
            time.sleep(delay)
    return RunResult(total, length, length / busy if busy > 0 else float("inf"), ending)


def build_parser(prog: str = "python -m digideep.environment.play") -> argparse.ArgumentParser:
    """The tool's argument parser (also behind ``digideep envs``)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="List registered environments with their spaces, or run one with random actions.",
    )
    parser.add_argument("--list-include", metavar="REGEX", help="list the ids this matches (re.search)")
    parser.add_argument("--list-exclude", metavar="REGEX", help="leave out the ids this matches")
    parser.add_argument("--model", metavar="ID", help="run this environment id, e.g. Hopper-v5")
    parser.add_argument("--from-module", metavar="M", help="module to import first (it registers custom ids)")
    parser.add_argument("--runs", type=int, default=1, metavar="N", help="episodes to run (default: 1)")
    parser.add_argument(
        "--n-step", type=int, default=1000, metavar="N", help="cut each run after N steps (default: 1000)"
    )
    parser.add_argument("--no-action", action="store_true", help="send zero actions instead of random ones")
    parser.add_argument(
        "--delay", type=float, default=0.0, metavar="MS", help="wait MS milliseconds after every step"
    )
    parser.add_argument("--video", metavar="DIR", help="write an MP4 of every run into DIR")
    parser.add_argument("--seed", type=int, default=0, help="seed of run 0; run i uses seed + i (default: 0)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Do what the parsed arguments ask; print to stdout. Raises :class:`UsageError` on bad input."""
    listing = args.list_include is not None or args.list_exclude is not None
    if listing == (args.model is not None):
        raise UsageError(
            "give either --list-include/--list-exclude REGEX to list ids or --model ID to run one"
        )
    if listing:
        import_from_module(args.from_module)
        found = 0
        for env_id, description in list_envs(args.list_include, args.list_exclude):
            print(f"{env_id:<40} {description}", flush=True)
            found += 1
        print(f"{found} environment(s)")
        return 0
    results = play_env(
        args.model,
        from_module=args.from_module,
        runs=args.runs,
        n_step=args.n_step,
        no_action=args.no_action,
        delay_ms=args.delay,
        video=args.video,
        seed=args.seed,
    )
    for index, result in enumerate(results):
        ending = f"cut at {args.n_step} steps" if result.ending == "cut" else result.ending
        print(
            f"run {index}: return {result.episode_return:.2f}, length {result.length} ({ending}), "
            f"{result.steps_per_second:.0f} steps/s",
            flush=True,
        )
    if args.video:
        print(f"videos in {args.video}")
    return 0


def cli(argv: Sequence[str] | None = None, prog: str = "python -m digideep.environment.play") -> int:
    """Parse ``argv`` and run; bad input prints ``digideep: error: <message>`` and returns 2."""
    args = build_parser(prog).parse_args(argv)
    try:
        return run(args)
    except UsageError as error:
        print(f"digideep: error: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(cli())
