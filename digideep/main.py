"""Command line: ``python -m digideep.main`` (the original entry point) and the ``digideep`` script.

::

    python -m digideep.main --params params.pendulum_sac [--cpanel JSON] [--session-name N]
                            [--session-path P] [--log-level L] [--no-prefect] [--msg TEXT] [--dry-run]
                            [--device auto|cpu|cuda|cuda:N] [--deterministic]
    python -m digideep.main --params path/to/my_params.py ...   # a parameter file anywhere
    python -m digideep.main --resume SESSION
    python -m digideep.main --play --load-checkpoint PATH

    digideep train --params params.pendulum_sac [--cpanel JSON] ...
    digideep resume SESSION
    digideep play CHECKPOINT [--video]
    digideep runs [compare RUN|EXPERIMENT|STUDY ...]
    digideep runs register RUN [--name N] [--model model|best_model]
    digideep runs sync SESSION [--tracking-uri URI]
    digideep envs --list-include REGEX | --model ID ...     # python -m digideep.environment.play

``--device`` and ``--deterministic`` work with every command but ``runs`` (see
:mod:`digideep.pipeline.devices`). Bad input prints one line, ``digideep: error: <what is wrong and how to fix it>``, on stderr and exits
with code 2, before anything is written to disk. Training stopped by Ctrl-C or SIGTERM writes its
checkpoint, prints one line saying how to resume it and exits with 130 or 143 (:data:`EXIT_STATUS`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from digideep.errors import UsageError
from digideep.pipeline.devices import DETERMINISTIC_ENV, DEVICE_ENV, check_device
from digideep.pipeline.params import ResolvedParams, resolve_params
from digideep.pipeline.session import (
    DEFAULT_ROOT,
    check_session_exists,
    check_session_name,
    check_session_root,
)
from digideep.pipeline.signals import RunStoppedError, exit_code
from digideep.utility.location import Location, is_url
from digideep.utility.progress import console_handler

__all__ = ["cli", "main"]

log = logging.getLogger("digideep")
EXIT_USAGE = 2
EXIT_STATUS = (
    "exit status: 0 trained (or stopped at max_iterations or max_wall_time), 2 bad input; "
    "130 stopped by Ctrl-C (SIGINT), 143 stopped by SIGTERM: both after writing a checkpoint, "
    "with one line saying how to resume (digideep resume SESSION)"
)
"""The exit statuses of training, in ``--help`` (the stop codes are a shell's: 128 + the signal)."""


def _add_train_options(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument(
        "--params",
        required=required,
        metavar="MODULE",
        help="parameter file: a module name (params.pendulum_sac: the current folder's params/ if it "
        "has one, else the files installed with digideep) or a path to a .py file anywhere, each with "
        "cpanel and gen_params",
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
    parser.add_argument(
        "--msg",
        metavar="TEXT",
        help="the run's description: MLflow's note (mlflow.note.content) and 'description' in session.json",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the params, build the envs and agents, print the params tree; write nothing",
    )


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--session-path",
        metavar="PATH",
        default=str(DEFAULT_ROOT),
        help=f"folder holding sessions (default: {DEFAULT_ROOT}), or a URL such as s3://bucket/sessions "
        "(credentials and endpoint from the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="console log level (default: INFO)",
    )
    parser.add_argument(
        "--device",
        metavar="DEVICE",
        help="auto, cpu, cuda or cuda:N for every agent; overrides session.device of the params "
        "(default: auto, which puts off-policy and CNN agents on CUDA and small on-policy MLPs on the CPU)",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="deterministic algorithms (repeatable runs on one GPU, at some cost in speed)",
    )


def _setup_logging(level: str) -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_digideep_console", False) for h in root.handlers):
        handler = console_handler()  # rich above the progress bar on a terminal, plain lines elsewhere
        handler._digideep_console = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level)
    for noisy in (
        "httpx",
        "httpcore",
        "alembic",
        "urllib3",
        "git",
        "botocore",
        "aiobotocore",
        "s3fs",
    ):  # request-level chatter of libraries
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))


# -- commands -----------------------------------------------------------------------------------
def command_train(args: argparse.Namespace) -> int:
    """Validate the params, then train through the Prefect flow (or ``Runner.train()`` with ``--no-prefect``)."""
    resolved = resolve_params(args.params, args.cpanel)  # every check runs before anything touches disk
    if args.session_name is not None:
        check_session_name(args.session_name)
    check_session_root(args.session_path)  # a local folder: not a file, writable
    root = Location(args.session_path)
    root.check()  # a URL: the store answers and the bucket exists (seconds), before anything is written
    if args.session_name and _session_exists(root, args.session_name):
        raise UsageError(
            f"session '{(root / args.session_name).url}' already exists; "
            "resume it with 'digideep resume' or choose another --session-name"
        )
    if args.dry_run:
        return _dry_run(resolved)
    _check_tracking_server(resolved.params, args.session_path)
    return _train(
        args.params,
        args.cpanel,
        args.session_name,
        args.session_path,
        resume=False,
        no_prefect=args.no_prefect,
        description=args.msg,
        resolved=resolved,
    )


def _check_tracking_server(params: dict[str, Any], session_path: str) -> None:
    """Refuse a new run whose MLflow server does not answer (one request), before anything is written.

    Only where the run would fail on it: tracking on and ``required`` (the default), and a server
    (``http(s)://``; an embedded store is created with the run). The run's tracker would fail the same
    way, but after making its session (deleted again) and, under Prefect, inside a flow run.

    Raises:
        UsageError: one line naming the server and the error.
    """
    settings = params.get("tracking", {})
    options = settings.get("args", {})
    if not (settings.get("enabled", True) and options.get("required", True) and options.get("enabled", True)):
        return
    from digideep.tracking.failures import http_limits, one_line
    from digideep.tracking.naming import data_root_of, is_http_uri, tracking_uri_of

    uri = tracking_uri_of(options.get("tracking_uri"), data_root_of(session_path))
    if not is_http_uri(uri):
        return
    from mlflow import MlflowClient

    try:
        with http_limits(retries=0, timeout=int(options.get("connect_timeout", 5))):
            MlflowClient(uri).search_experiments(max_results=1)
    except Exception as error:
        raise UsageError(
            f"MLflow tracking at {uri} does not answer ({one_line(error)}); check that the server is "
            "reachable, point MLFLOW_TRACKING_URI at one that is, or turn tracking off"
        ) from None


def _dry_run(resolved: ResolvedParams) -> int:
    """Build everything a run builds (in a temporary session), print the params tree, keep nothing.

    No session folder, no MLflow run, no Prefect flow run: the temporary session (its Zarr memory
    folders and log) is deleted on the way out.
    """
    import tempfile

    from digideep.pipeline.runner import Runner
    from digideep.pipeline.session import Session

    with (
        tempfile.TemporaryDirectory(prefix="digideep-dry-run-") as scratch,
        Session(root=scratch, params_name=resolved.module) as session,
    ):
        runner = Runner(session, resolved.params, tracker=None)
        try:
            observation_space, action_space = runner.explorers["train"].make_environment.spaces()
            log.info(
                "dry run of %s: built %d agent(s), %d memory(ies), explorers %s; observations %s, "
                "actions %s; nothing written",
                resolved.module,
                len(runner.agents),
                len(runner.memories),
                sorted(runner.explorers),
                observation_space,
                action_space,
            )
        finally:
            runner.close()
    print(
        json.dumps(
            {"params_module": resolved.module, "cpanel": resolved.cpanel, "params": resolved.params}, indent=2
        )
    )
    return 0


NEW_RUN_OPTIONS = {
    "params": "--params",
    "cpanel": "--cpanel",
    "session_name": "--session-name",
    "msg": "--msg",
    "dry_run": "--dry-run",
}
"""Options of a new run, which resume and play refuse (``dest``: option)."""


def _new_run_options(args: argparse.Namespace) -> str:
    """The options of a new run given in ``args``, e.g. ``"--cpanel and --session-name"`` (or "")."""
    given = [
        option for dest, option in NEW_RUN_OPTIONS.items() if getattr(args, dest, None) not in (None, False)
    ]
    return " and ".join(given)


def command_resume(args: argparse.Namespace) -> int:
    """Continue a session from its newest complete checkpoint.

    Raises:
        UsageError: an option of a new run was given (resume used to ignore it).
    """
    given = _new_run_options(args)
    if given:
        raise UsageError(
            f"{given} cannot be used with resume: a resumed session keeps its own name, params, cpanel and "
            "description (its params.json); to change them, train a new session with --params"
        )
    root, name = _split_session(args.session, args.session_path)
    check_session_exists(root, name)  # before a Prefect server and a flow run are started for it
    return _train(None, None, name, root, resume=True, no_prefect=args.no_prefect, description=None)


def _session_exists(root: Location, name: str) -> bool:
    """Whether session ``name`` exists under ``root`` (any file under its prefix, on object storage)."""
    session = root / name
    return session.exists() if session.is_local else session.is_dir()


def _split_session(session: str, session_path: str) -> tuple[str, str]:
    """Accept a session name (under ``session_path``), a path to the session folder or its URL."""
    if is_url(session):
        root, _, name = session.rstrip("/").rpartition("/")
        return root, name
    path = Path(session)
    if path.is_dir() and (path / "params.json").exists():
        return str(path.parent), path.name
    return session_path, session


def _train(
    params: str | None,
    cpanel: str | None,
    name: str | None,
    root: str,
    *,
    resume: bool,
    no_prefect: bool,
    description: str | None,
    resolved: ResolvedParams | None = None,
) -> int:
    """Train a new run (``params`` with ``cpanel``) or resume session ``name`` under ``root``.

    With ``--no-prefect`` the run takes ``resolved``, the params :func:`command_train` resolved.
    The Prefect flow is an entry point of its own (deployments and retries call it with a module
    name and a cpanel), so it takes the names and resolves them itself; :func:`command_train`
    resolved them first only so that bad params fail in one line before a flow run exists.
    """
    from digideep.pipeline.params import parse_cpanel
    from digideep.pipeline.training import open_run, run_training
    from digideep.utility.processes import stop_on_signals

    if no_prefect:
        handle = open_run(
            resolved or params,
            None if resolved else cpanel,
            session_name=name,
            session_path=root,
            resume=resume,
            description=description,
        )
        reason = run_training(handle)
        if handle is not None and exit_code(reason):
            raise RunStoppedError(reason, handle.runner.counters.iteration, handle.session.name, root)
    else:
        train = _train_flow()
        from flows.server import prefect_api

        # the flow's own server (when none is configured) runs in a session of its own, so Ctrl-C
        # stops only the run; SIGTERM and SIGHUP outside training interrupt like Ctrl-C does, so
        # that the server is stopped on every way out. A stopped run raises RunStoppedError.
        with stop_on_signals(), prefect_api():
            result = train(
                params=params or "",
                cpanel=parse_cpanel(cpanel),
                session_name=name,
                session_path=root,
                resume=resume,
                description=description,
            )
        reason = result["stopped"]
    log.info("done: %s", reason)
    return 0


def _train_flow() -> Callable[..., dict[str, Any]]:
    """The Prefect ``train`` flow, from the ``flows`` package installed with digideep.

    Imported here, when a command runs it: the library never imports prefect.

    Raises:
        UsageError: the ``flows`` package is not installed (an install older than this layout).
    """
    try:
        from flows.train import train
    except ModuleNotFoundError as error:
        if error.name not in ("flows", "flows.train"):
            raise  # flows is there but something it imports is missing: show it
        raise UsageError(
            "the Prefect flows (package 'flows') are not installed with digideep; reinstall it "
            "('pip install .' in the repository) or pass --no-prefect"
        ) from None
    return train


def command_play(args: argparse.Namespace) -> int:
    """Play a checkpoint deterministically and print the returns."""
    from digideep.pipeline.play import play

    returns = play(
        _checkpoint_to_play(args.checkpoint, args.session_path), episodes=args.episodes, video=args.video
    )
    for index, value in enumerate(returns):
        print(f"episode {index}: return {value:.2f}")
    if returns:
        print(f"mean return {sum(returns) / len(returns):.2f} over {len(returns)} episodes")
    return 0


def _checkpoint_to_play(target: str, session_path: str) -> str:
    """A checkpoint folder as given; for a session (its folder, or its name under ``session_path``) the
    newest whole checkpoint.

    Raises:
        UsageError: the session has no whole checkpoint yet.
    """
    from digideep.pipeline.checkpoint import latest_checkpoint

    if is_url(target):
        return target  # a checkpoint on object storage, named in full
    session = Path(target)
    if not (session / "params.json").is_file() and not is_url(session_path):
        session = Path(session_path) / target
    if not (session / "params.json").is_file():
        return target  # a checkpoint folder (play checks it)
    found = latest_checkpoint(session / "checkpoints")
    if found is None:
        raise UsageError(f"session '{session}' has no whole checkpoint yet; train it longer or resume it")
    log.info("playing the session's newest checkpoint, %s", found.path)
    return str(found.path)


def command_runs(args: argparse.Namespace) -> int:
    """List, compare or browse the runs tracked in MLflow."""
    from digideep.tracking.runs import main_runs

    return main_runs(args.rest)


def command_envs(args: argparse.Namespace) -> int:
    """List registered environments with their spaces, or run one with random actions."""
    from digideep.environment.play import cli as envs_cli

    return envs_cli(args.rest, prog="digideep envs")


def command_sync(args: argparse.Namespace) -> int:
    """Send what a session's metrics journal, checkpoints and models hold that its MLflow run lacks,
    and end the run."""
    from digideep.pipeline.session import Session
    from digideep.tracking.tracker import sync_session

    root, name = _split_session(args.session, args.session_path)
    with Session(root=root, name=name, resume=True) as session:  # refused while training runs
        params = session.read_json("params.json")
        cpanel = session.read_json("cpanel.json")
        options = dict(params.get("tracking", {}).get("args", {}))
        if args.tracking_uri:
            options["tracking_uri"] = args.tracking_uri
        info = session.info()
        print(
            sync_session(
                session.path,
                info,
                params,
                cpanel,
                done=session.is_done,
                record=session.update_info,
                checkpoints=session.checkpoints_location,
                **options,
            )
        )
    return 0


def _sync_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="digideep runs sync",
        description="Send a session's metrics journal (each step once), and the checkpoints and models "
        "its MLflow run lacks, to MLflow: after a server outage, or a run trained with tracking off; a "
        "finished session's run gets its learning curve and ends FINISHED once it holds all of it.",
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
        "train",
        help="train from a parameter file",
        description="Train from a parameter file.",
        epilog=EXIT_STATUS,
    )
    _add_train_options(train, required=True)
    train.set_defaults(func=command_train)

    resume = sub.add_parser(
        "resume", help="continue a session from its newest checkpoint", epilog=EXIT_STATUS
    )
    resume.add_argument("session", help="session name (under --session-path) or path")
    _add_common_options(resume)
    resume.add_argument("--no-prefect", action="store_true", help="run the plain Runner.train() loop")
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
    _add_common_options(play)
    play.set_defaults(func=command_play)

    runs = sub.add_parser(
        "runs",
        help="list runs tracked in MLflow; 'runs compare RUN|EXPERIMENT|STUDY...' plots their curves; "
        "'runs register RUN' registers its policy model; 'runs ui' starts the MLflow UI",
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

    envs = sub.add_parser(
        "envs",
        help="list registered environments with their spaces, or run one with random actions "
        "(see 'digideep envs --help')",
        add_help=False,
    )
    envs.add_argument("rest", nargs=argparse.REMAINDER, help="options of python -m digideep.environment.play")
    return parser


def _build_main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m digideep.main",
        description="digideep, original entry point: train, resume or play.",
        epilog=EXIT_STATUS,
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
    # the user's own code in the current folder imports, as under `python -m`: their params/ and the
    # agent classes their params name. Resume and play also put back the folders the session
    # recorded (digideep.utility.user_code), so they import that code from any folder. digideep's
    # flows and shipped params are installed packages and import from any folder.
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    # a temporary Prefect server started for the run must not try to send telemetry: off-line it
    # logs an ERROR line (the Makefile sets the same); a user's own setting wins
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    try:
        with _device_options(getattr(args, "device", None), getattr(args, "deterministic", False)):
            return func(args)
    except UsageError as error:
        print(f"digideep: error: {_refused_credentials(error) or error}", file=sys.stderr)
        return EXIT_USAGE
    except RunStoppedError as stopped:  # a signal stopped training after its checkpoint
        print(f"digideep: {stopped}", file=sys.stderr)
        return stopped.exit_code
    except KeyboardInterrupt as interrupt:  # before or after training, or a second Ctrl-C
        name = str(interrupt) if str(interrupt) in signal.Signals.__members__ else "SIGINT"
        print(f"digideep: interrupted by {name}", file=sys.stderr)
        return 128 + signal.Signals[name]
    except Exception as error:
        refused = _refused_credentials(error)
        if refused is None:
            raise
        print(f"digideep: error: {refused}", file=sys.stderr)
        return EXIT_USAGE


def _refused_credentials(error: BaseException) -> str | None:
    """One line for a server that answered 401 (a wrong password), or None for any other error.

    Prefect's client raises ``httpx.HTTPStatusError`` with the response; MLflow's raises
    ``MlflowException`` whose message carries the status (the tracker's own one-line UsageError
    quotes it). Causes and contexts are followed, since a flow run wraps the error it met.
    """
    import httpx  # Prefect's HTTP client (installed with prefect and mlflow)

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, httpx.HTTPStatusError) and error.response.status_code == 401:
            url = os.environ.get("PREFECT_API_URL", "the Prefect server")
            return f"the Prefect server at {url} refused the credentials (401); check PREFECT_API_AUTH_STRING"
        if "MlflowException" in f"{type(error).__name__} {error}" and "error code 401" in str(error):
            url = os.environ.get("MLFLOW_TRACKING_URI", "the MLflow server")
            return (
                f"the MLflow server at {url} refused the credentials (401); "
                "check MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
            )
        error = error.__cause__ or error.__context__
    return None


@contextmanager
def _device_options(device: str | None, deterministic: bool) -> Iterator[None]:
    """Check ``--device`` and hand it and ``--deterministic`` to the run through the environment.

    The Session and the Runner read ``$DIGIDEEP_DEVICE`` and ``$DIGIDEEP_DETERMINISTIC`` (the Prefect
    flow runs in this process, so both drivers see them); the previous values come back afterwards.

    Raises:
        UsageError: ``device`` is malformed or does not exist here (before anything touches disk).
    """
    if device is not None:
        check_device(device)
    chosen = {DEVICE_ENV: device, DETERMINISTIC_ENV: "1" if deterministic else None}
    before = {name: os.environ.get(name) for name, value in chosen.items() if value is not None}
    for name in before:
        os.environ[name] = str(chosen[name])
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``digideep`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["runs", "sync"]:
        args = _sync_parser().parse_args(argv[2:])
        return _run(command_sync, args)
    if argv[:1] == ["runs"]:  # 'runs' has its own parser: hand it everything after the word
        return _run(command_runs, argparse.Namespace(rest=argv[1:], log_level="WARNING"))
    if argv[:1] == ["envs"]:  # so has 'envs' (digideep.environment.play)
        return _run(command_envs, argparse.Namespace(rest=argv[1:], log_level="WARNING"))
    args = _build_cli_parser().parse_args(argv)
    return _run(args.func, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m digideep.main``."""
    parser = _build_main_parser()
    args = parser.parse_args(argv)
    given = _new_run_options(args) if args.play else ""
    if given:  # (resume refuses them in command_resume, for `digideep resume` too)
        print(
            f"digideep: error: {given} cannot be used with --play: a checkpoint plays with the params "
            "of its own session",
            file=sys.stderr,
        )
        return EXIT_USAGE
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
