"""The options that train, resume and play share, the options of a new run, and the exit statuses."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from digideep.errors import UsageError
from digideep.storage.location import DEFAULT_ROOT, is_url

__all__ = [
    "EXIT_STATUS",
    "EXIT_USAGE",
    "NEW_RUN_OPTIONS",
    "add_common_options",
    "add_train_options",
    "add_trial_option",
    "json_object",
    "new_run_options",
    "split_session",
]

EXIT_USAGE = 2
EXIT_STATUS = (
    "exit status: 0 trained (or stopped at max_iterations or max_wall_time), 2 bad input; "
    "130 stopped by Ctrl-C (SIGINT), 143 stopped by SIGTERM: both after writing a checkpoint, "
    "with one line saying how to resume (digideep resume SESSION), or before the session existed, "
    "with nothing written"
)
"""The exit statuses of training, in ``--help`` (the stop codes are a shell's: 128 + the signal)."""

NEW_RUN_OPTIONS = {
    "params": "--params",
    "cpanel": "--cpanel",
    "session_name": "--session-name",
    "msg": "--msg",
    "dry_run": "--dry-run",
    "benchmark": "--benchmark",
}
"""Options of a new run, which resume and play refuse (``dest``: option)."""


def add_train_options(parser: argparse.ArgumentParser, required: bool) -> None:
    """The options of a new run, then the common ones (``required``: whether ``--params`` is)."""
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
    add_common_options(parser)
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
    parser.add_argument(
        "--benchmark",
        metavar="JSON",
        help='the benchmark cell this run is, as digideep slurm benchmark writes it ({"name": ..., '
        '"algorithm": ..., "env": ..., "seed": ..., "variant": ..., "parent_run_id": ...}): '
        "its MLflow run is tagged and nested as the benchmark flow's cells are",
    )
    add_trial_option(parser)


def add_trial_option(parser: argparse.ArgumentParser) -> None:
    """``--trial``: the Optuna trial a run is, for train and resume (a resumed trial reports again)."""
    parser.add_argument(
        "--trial",
        metavar="JSON",
        help='the Optuna trial this run is, as digideep slurm tune writes it ({"storage": ..., "study": ..., '
        '"number": ..., "pruner": ..., "pruner_args": ..., "parent_run_id": ...}): the run reports its test '
        "returns to the trial and stops when the study prunes it; a new run's MLflow run is tagged and "
        "nested as the tune flow's trials are",
    )


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """``--session-path``, ``--log-level``, ``--device`` and ``--deterministic``."""
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


def json_object(text: str, option: str, holding: str) -> dict[str, Any]:
    """The JSON object that the command line gives as ``option`` (e.g. ``--trial``).

    Raises:
        UsageError: invalid JSON (``invalid --X JSON at char N: ...``), or JSON that is not an
            object (``--X must be a JSON object <holding>, got ...``, ``holding`` saying what it
            holds, e.g. ``of keyword arguments``).
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"invalid {option} JSON at char {error.pos}: {error.msg}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{option} must be a JSON object {holding}, got {text}")
    return value


def new_run_options(args: argparse.Namespace) -> str:
    """The options of a new run given in ``args``, e.g. ``"--cpanel and --session-name"`` (or "")."""
    given = [
        option for dest, option in NEW_RUN_OPTIONS.items() if getattr(args, dest, None) not in (None, False)
    ]
    return " and ".join(given)


def split_session(session: str, session_path: str) -> tuple[str, str]:
    """Accept a session name (under ``session_path``), a path to the session folder or its URL."""
    if is_url(session):
        root, _, name = session.rstrip("/").rpartition("/")
        return root, name
    path = Path(session)
    if path.is_dir() and (path / "params.json").exists():
        return str(path.parent), path.name
    return session_path, session
