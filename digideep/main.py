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
checkpoint, prints one line saying how to resume it and exits with 130 or 143 (:data:`digideep.cli.options.EXIT_STATUS`).
The commands themselves are in :mod:`digideep.cli` (they hand ``--device`` and ``--deterministic`` to
the run as arguments); this module parses, sets up logging, checks ``--device`` and turns errors into
one line and an exit status.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from digideep.errors import UsageError
from digideep.pipeline.signals import (
    RunStoppedError,
    StoppedBeforeStartError,
    catch_stop_signals,
    raise_if_stopped,
)

# Nothing heavier at the top: `digideep train` and `resume` catch SIGINT and SIGTERM before the
# commands (torch, MLflow, Prefect: seconds of imports) are imported; see _catching_stop_signals.

__all__ = ["cli", "main"]


def _setup_logging(level: str) -> None:
    from digideep.utility.progress import console_handler

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


def _run(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    from digideep.cli.options import EXIT_USAGE

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
        raise_if_stopped()  # a signal while digideep was starting
        _check_device_option(getattr(args, "device", None))
        return func(args)
    except UsageError as error:
        print(f"digideep: error: {_refused_credentials(error) or error}", file=sys.stderr)
        return EXIT_USAGE
    except (RunStoppedError, StoppedBeforeStartError) as stopped:
        # a signal stopped training after its checkpoint, or came before the session existed
        print(f"digideep: {stopped}", file=sys.stderr)
        return stopped.exit_code
    except KeyboardInterrupt as interrupt:  # a second Ctrl-C, or a command that does not catch signals
        return _interrupted(interrupt)
    except Exception as error:
        refused = _refused_credentials(error)
        if refused is None:
            raise
        print(f"digideep: error: {refused}", file=sys.stderr)
        return EXIT_USAGE


def _interrupted(interrupt: KeyboardInterrupt) -> int:
    """One line and 128 + the signal for a KeyboardInterrupt (``str(interrupt)`` names the signal, or not)."""
    name = str(interrupt) if str(interrupt) in signal.Signals.__members__ else "SIGINT"
    print(f"digideep: interrupted by {name}", file=sys.stderr)
    return 128 + signal.Signals[name]


def _catching_stop_signals(training: bool) -> AbstractContextManager[None]:
    """For ``train`` and ``resume``: SIGINT and SIGTERM recorded from here on, before the commands'
    imports (a Ctrl-C raised inside an import can be lost, or turned into another error); the command
    acts on the record (:mod:`digideep.pipeline.signals`)."""
    return catch_stop_signals() if training else nullcontext()


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


def _check_device_option(device: str | None) -> None:
    """Check ``--device`` before anything touches disk; the commands hand it and ``--deterministic``
    to the run as arguments (``device`` and ``deterministic`` of
    :func:`~digideep.pipeline.training.open_run`, of the Session and of the ``train`` flow).

    Raises:
        UsageError: ``device`` is malformed or does not exist here.
    """
    if device is not None:
        from digideep.pipeline.devices import check_device

        check_device(device)


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``digideep`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with _catching_stop_signals(argv[:1] in (["train"], ["resume"])):
        try:
            return _cli(argv)
        except KeyboardInterrupt as interrupt:  # a second Ctrl-C during the imports
            return _interrupted(interrupt)


def _cli(argv: list[str]) -> int:
    from digideep.cli.parsers import build_cli_parser, command_envs, command_runs
    from digideep.cli.sync import command_sync, sync_parser

    if argv[:2] == ["runs", "sync"]:
        args = sync_parser().parse_args(argv[2:])
        return _run(command_sync, args)
    if argv[:1] == ["runs"]:  # 'runs' has its own parser: hand it everything after the word
        return _run(command_runs, argparse.Namespace(rest=argv[1:], log_level="WARNING"))
    if argv[:1] == ["envs"]:  # so has 'envs' (digideep.environment.play)
        return _run(command_envs, argparse.Namespace(rest=argv[1:], log_level="WARNING"))
    args = build_cli_parser().parse_args(argv)
    return _run(args.func, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m digideep.main``."""
    given = list(sys.argv[1:] if argv is None else argv)
    with _catching_stop_signals("--play" not in given and not {"-h", "--help"} & set(given)):
        try:
            return _main(given)
        except KeyboardInterrupt as interrupt:  # a second Ctrl-C during the imports
            return _interrupted(interrupt)


def _main(argv: list[str]) -> int:
    from digideep.cli.options import EXIT_USAGE, new_run_options
    from digideep.cli.parsers import build_main_parser
    from digideep.cli.play import command_play
    from digideep.cli.train import command_resume, command_train

    parser = build_main_parser()
    args = parser.parse_args(argv)
    given = new_run_options(args) if args.play else ""
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
