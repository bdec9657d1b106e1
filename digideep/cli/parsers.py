"""The parsers of ``digideep`` and ``python -m digideep.main``, and the commands with parsers of
their own (``runs``, ``envs``), which load their modules only when they run."""

from __future__ import annotations

import argparse

from digideep.cli.options import (
    EXIT_STATUS,
    NEW_RUN_OPTIONS,
    add_common_options,
    add_train_options,
    add_trial_option,
)
from digideep.cli.play import command_play

__all__ = [
    "build_cli_parser",
    "build_main_parser",
    "command_envs",
    "command_resume",
    "command_runs",
    "command_train",
]


def command_train(args: argparse.Namespace) -> int:
    """Train from a parameter file (:func:`digideep.cli.train.command_train`)."""
    from digideep.cli.train import command_train as train  # torch loads only when a command trains

    return train(args)


def command_resume(args: argparse.Namespace) -> int:
    """Continue a session from its newest checkpoint (:func:`digideep.cli.train.command_resume`)."""
    from digideep.cli.train import command_resume as resume

    return resume(args)


def command_runs(args: argparse.Namespace) -> int:
    """List, compare or browse the runs tracked in MLflow."""
    from digideep.cli.runs import main_runs  # MLflow loads only when the command runs

    return main_runs(args.rest)


def command_envs(args: argparse.Namespace) -> int:
    """List registered environments with their spaces, or run one with random actions."""
    from digideep.environment.play import cli as envs_cli

    return envs_cli(args.rest, prog="digideep envs")


def build_cli_parser() -> argparse.ArgumentParser:
    """The ``digideep`` parser: a subcommand each, its function in ``func``."""
    parser = argparse.ArgumentParser(
        prog="digideep",
        description="Deep reinforcement learning with resumable Prefect pipelines, Zarr memory and MLflow tracking.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = sub.add_parser(
        "train",
        help="train from a parameter file",
        description="Train from a parameter file.",
        epilog=EXIT_STATUS,
    )
    add_train_options(train, required=True)
    train.set_defaults(func=command_train)

    resume = sub.add_parser(
        "resume", help="continue a session from its newest checkpoint", epilog=EXIT_STATUS
    )
    resume.add_argument("session", help="session name (under --session-path) or path")
    add_common_options(resume)
    resume.add_argument("--no-prefect", action="store_true", help="run the plain Runner.train() loop")
    add_trial_option(resume)
    for option in NEW_RUN_OPTIONS.values():  # taken, to be refused in one line by command_resume
        if option == "--dry-run":
            resume.add_argument(option, action="store_true", help=argparse.SUPPRESS)
        else:
            resume.add_argument(option, help=argparse.SUPPRESS)
    resume.set_defaults(func=command_resume)

    play = sub.add_parser("play", help="run a checkpoint's policy deterministically and print the returns")
    play.add_argument(
        "checkpoint",
        help="checkpoint folder (e.g. data/sessions/S/checkpoints/checkpoint-100), or a session (its folder or "
        "its name under --session-path) to play its newest checkpoint",
    )
    play.add_argument("--video", action="store_true", help="write an MP4 per episode under <session>/videos")
    play.add_argument(
        "--episodes", type=int, help="episodes to play (default: the eval explorer's n_episodes)"
    )
    add_common_options(play)
    play.set_defaults(func=command_play)

    runs = sub.add_parser(
        "runs",
        help="list runs tracked in MLflow; 'runs compare RUN|EXPERIMENT|STUDY...' plots their curves; "
        "'runs register RUN' registers its policy model; 'runs export' writes runs to files for "
        "'report --from'; 'runs ui' starts the MLflow UI",
        add_help=False,
    )
    runs.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        help="[compare RUN ... | ui] and options (see 'digideep runs --help')",
    )
    runs.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    runs.set_defaults(func=command_runs)

    from digideep.report.cli import add_report_parser  # rliable loads only when a report runs

    add_report_parser(sub)

    from digideep.benchmark_cli import add_benchmark_parser

    add_benchmark_parser(sub)

    from digideep.cli.slurm import add_slurm_parser

    add_slurm_parser(sub)

    envs = sub.add_parser(
        "envs",
        help="list registered environments with their spaces, or run one with random actions "
        "(see 'digideep envs --help')",
        add_help=False,
    )
    envs.add_argument("rest", nargs=argparse.REMAINDER, help="options of python -m digideep.environment.play")
    return parser


def build_main_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m digideep.main``, the original entry point (``--resume``, ``--play``)."""
    parser = argparse.ArgumentParser(
        prog="python -m digideep.main",
        description="digideep, original entry point: train, resume or play.",
        epilog=EXIT_STATUS,
    )
    add_train_options(parser, required=False)
    parser.add_argument("--resume", metavar="SESSION", help="continue SESSION from its newest checkpoint")
    parser.add_argument(
        "--play", action="store_true", help="play the checkpoint given with --load-checkpoint"
    )
    parser.add_argument("--load-checkpoint", metavar="PATH", help="checkpoint folder to play")
    parser.add_argument("--video", action="store_true", help="with --play: write an MP4 per episode")
    parser.add_argument("--episodes", type=int, help="with --play: episodes to play")
    return parser
