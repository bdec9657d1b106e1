"""Command line: ``python -m digideep.main`` (the original entry point) and the ``digideep`` script.

::

    python -m digideep.main --params params.pendulum_sac [--cpanel JSON] [--session-name N]
                            [--session-path P] [--log-level L] [--no-prefect]
    python -m digideep.main --resume SESSION
    python -m digideep.main --play --load-checkpoint PATH

    digideep train --params params.pendulum_sac [--cpanel JSON] ...
    digideep resume SESSION
    digideep play CHECKPOINT [--video]
    digideep runs [compare RUN ...]
    digideep runs sync SESSION [--tracking-uri URI]

Bad input prints one line, ``digideep: error: <what is wrong and how to fix it>``, on stderr and exits
with code 2, before anything is written to disk.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from digideep.errors import UsageError
from digideep.pipeline.params import resolve_params
from digideep.pipeline.session import DEFAULT_ROOT

__all__ = ["cli", "main"]

log = logging.getLogger("digideep")
EXIT_USAGE = 2


def _add_train_options(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument(
        "--params",
        required=required,
        metavar="MODULE",
        help="parameter file, e.g. params.pendulum_sac (a module under ./params with cpanel and gen_params)",
    )
    parser.add_argument(
        "--cpanel", metavar="JSON", help="cpanel overrides as a JSON object, e.g. '{\"seed\": 1}'"
    )
    parser.add_argument(
        "--session-name", metavar="NAME", help="session folder name (default: time and params name)"
    )
    _add_common_options(parser)
    parser.add_argument(
        "--no-prefect",
        action="store_true",
        help="run the plain Runner.train() loop instead of the Prefect train flow",
    )


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--session-path",
        metavar="PATH",
        default=str(DEFAULT_ROOT),
        help=f"folder holding sessions (default: {DEFAULT_ROOT})",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="console log level (default: INFO)",
    )


def _setup_logging(level: str) -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_digideep_console", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S"))
        handler._digideep_console = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("httpx", "httpcore", "alembic", "urllib3", "git"):  # request-level chatter of libraries
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))


# -- commands -----------------------------------------------------------------------------------
def command_train(args: argparse.Namespace) -> int:
    """Validate the params, then train through the Prefect flow (or ``Runner.train()`` with ``--no-prefect``)."""
    resolve_params(args.params, args.cpanel)  # every check runs before anything touches disk
    if args.session_name and (Path(args.session_path) / args.session_name).exists():
        raise UsageError(
            f"session '{Path(args.session_path) / args.session_name}' already exists; "
            "resume it with 'digideep resume' or choose another --session-name"
        )
    return _train(
        args.params,
        args.cpanel,
        args.session_name,
        args.session_path,
        resume=False,
        no_prefect=args.no_prefect,
    )


def command_resume(args: argparse.Namespace) -> int:
    """Continue a session from its newest complete checkpoint."""
    root, name = _split_session(args.session, args.session_path)
    return _train(None, None, name, root, resume=True, no_prefect=args.no_prefect)


def _split_session(session: str, session_path: str) -> tuple[str, str]:
    """Accept a session name (under ``session_path``) or a path to the session folder."""
    path = Path(session)
    if path.is_dir() and (path / "params.json").exists():
        return str(path.parent), path.name
    return session_path, session


def _train(
    params: str | None, cpanel: str | None, name: str | None, root: str, *, resume: bool, no_prefect: bool
) -> int:
    from digideep.pipeline.params import parse_cpanel
    from digideep.pipeline.training import open_run, run_training

    if no_prefect:
        handle = open_run(params, cpanel, session_name=name, session_path=root, resume=resume)
        reason = run_training(handle)
    else:
        _import_flows()
        from flows.train import train

        result = train(
            params=params or "",
            cpanel=parse_cpanel(cpanel),
            session_name=name,
            session_path=root,
            resume=resume,
        )
        reason = result["stopped"]
    log.info("done: %s", reason)
    return 0


def _import_flows() -> None:
    """Check that ``flows/`` is in the project folder (``_run`` put that folder on the import path)."""
    root = Path.cwd()
    if not (root / "flows" / "train.py").is_file():
        raise UsageError(f"no flows/train.py under {root}; run from the project folder or pass --no-prefect")


def command_play(args: argparse.Namespace) -> int:
    """Play a checkpoint deterministically and print the returns."""
    from digideep.pipeline.play import play

    returns = play(args.checkpoint, episodes=args.episodes, video=args.video)
    for index, value in enumerate(returns):
        print(f"episode {index}: return {value:.2f}")
    if returns:
        print(f"mean return {sum(returns) / len(returns):.2f} over {len(returns)} episodes")
    return 0


def command_runs(args: argparse.Namespace) -> int:
    """List, compare or browse the runs tracked in MLflow."""
    from digideep.tracking.runs import main_runs

    return main_runs(args.rest)


def command_sync(args: argparse.Namespace) -> int:
    """Send what a session's metrics journal holds that its MLflow run lacks, and end the run."""
    from digideep.pipeline.session import Session
    from digideep.tracking.tracker import sync_session

    root, name = _split_session(args.session, args.session_path)
    with Session(root=root, name=name, resume=True) as session:  # refused while training runs
        params = session.read_json("params.json")
        cpanel = session.read_json("cpanel.json")
        options = dict(params.get("tracking", {}).get("args", {}))
        if args.tracking_uri:
            options["tracking_uri"] = args.tracking_uri
        print(sync_session(session, params, cpanel, **options))
    return 0


def _sync_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="digideep runs sync",
        description="Send a session's metrics journal to MLflow (each step once): after a server "
        "outage, or a run trained with tracking off; a finished session's run gets its learning "
        "curve and ends FINISHED.",
    )
    parser.add_argument("session", help="session name (under --session-path) or path")
    parser.add_argument(
        "--tracking-uri",
        help="MLflow store to send to (default: the session's own run, else $MLFLOW_TRACKING_URI "
        "or the embedded store); another store than the session's gets a new run",
    )
    _add_common_options(parser)
    return parser


# -- parsers ------------------------------------------------------------------------------------
def _build_cli_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="digideep",
        description="Deep reinforcement learning with resumable Prefect pipelines, Zarr memory and MLflow tracking.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = sub.add_parser(
        "train", help="train from a parameter file", description="Train from a parameter file."
    )
    _add_train_options(train, required=True)
    train.set_defaults(func=command_train)

    resume = sub.add_parser("resume", help="continue a session from its newest checkpoint")
    resume.add_argument("session", help="session name (under --session-path) or path")
    _add_common_options(resume)
    resume.add_argument("--no-prefect", action="store_true", help="run the plain Runner.train() loop")
    resume.set_defaults(func=command_resume)

    play = sub.add_parser("play", help="run a checkpoint's policy deterministically and print the returns")
    play.add_argument("checkpoint", help="checkpoint folder, e.g. data/sessions/S/checkpoints/checkpoint-100")
    play.add_argument("--video", action="store_true", help="write an MP4 per episode under <session>/videos")
    play.add_argument(
        "--episodes", type=int, help="episodes to play (default: the eval explorer's n_episodes)"
    )
    _add_common_options(play)
    play.set_defaults(func=command_play)

    runs = sub.add_parser(
        "runs",
        help="list runs tracked in MLflow; 'runs compare RUN...' plots their curves; 'runs ui' starts the MLflow UI",
        add_help=False,
    )
    runs.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        help="[compare RUN ... | ui] and options (see 'digideep runs --help')",
    )
    runs.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    runs.set_defaults(func=command_runs)
    return parser


def _build_main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m digideep.main", description="digideep, original entry point: train, resume or play."
    )
    _add_train_options(parser, required=False)
    parser.add_argument("--resume", metavar="SESSION", help="continue SESSION from its newest checkpoint")
    parser.add_argument(
        "--play", action="store_true", help="play the checkpoint given with --load-checkpoint"
    )
    parser.add_argument("--load-checkpoint", metavar="PATH", help="checkpoint folder to play")
    parser.add_argument("--video", action="store_true", help="with --play: write an MP4 per episode")
    parser.add_argument("--episodes", type=int, help="with --play: episodes to play")
    return parser


def _run(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    _setup_logging(args.log_level)
    if str(Path.cwd()) not in sys.path:  # as `python -m` does: params, flows and agents of the project import
        sys.path.insert(0, str(Path.cwd()))
    try:
        return func(args)
    except UsageError as error:
        print(f"digideep: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("digideep: interrupted", file=sys.stderr)
        return 130


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``digideep`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["runs", "sync"]:
        args = _sync_parser().parse_args(argv[2:])
        return _run(command_sync, args)
    if argv[:1] == ["runs"]:  # 'runs' has its own parser: hand it everything after the word
        return _run(command_runs, argparse.Namespace(rest=argv[1:], log_level="WARNING"))
    args = _build_cli_parser().parse_args(argv)
    return _run(args.func, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m digideep.main``."""
    parser = _build_main_parser()
    args = parser.parse_args(argv)
    if args.play:
        if not args.load_checkpoint:
            parser.error("--play needs --load-checkpoint PATH")
        args.checkpoint = args.load_checkpoint
        return _run(command_play, args)
    if args.resume:
        args.session = args.resume
        return _run(command_resume, args)
    if not args.params:
        parser.error("one of --params, --resume or --play is required")
    return _run(command_train, args)


if __name__ == "__main__":
    sys.exit(main())
