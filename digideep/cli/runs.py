"""``digideep runs``: list, compare and register the runs tracked in MLflow, and start its UI.

Imported when the command runs; MLflow loads once its arguments parse, so ``--help`` and bad input answer
at once. ``digideep runs sync`` is :mod:`digideep.cli.sync`.

::

    digideep runs [--experiment NAME] [--metric KEY] [--tracking-uri URI] [--session-path P | --data-root DIR]
    digideep runs compare RUN|EXPERIMENT|STUDY ... [--metric KEY] [--out PNG]
    digideep runs register RUN [--name NAME] [--model model|best_model]
    digideep runs export --benchmark NAME [--experiment E] [--tag KEY=VALUE ...] --out FOLDER [--finished]
    digideep runs ui [--port PORT]

The table shows the train return (``last``, ``best``) and the deterministic test return
(``test_last``, ``test_best``); the trials of a tune study (``flows/tune.py``) are listed under their
study's parent run. The runs are read by :mod:`digideep.tracking.runs`; ``export`` writes a selection's
runs into a folder of JSON files that ``digideep report --from FOLDER`` reads
(:mod:`digideep.report.export`).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from digideep.errors import UsageError
from digideep.tracking.naming import (
    TEST_RETURN_METRIC,
    TRAIN_RETURN_METRIC,
    add_store_options,
    data_root_of,
    is_http_uri,
    resolve_tracking_uri,
)
from digideep.utility.processes import check_port_free, stop_on_signals, stop_tree

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = ["main_runs"]


STORE_HELP = (
    "The store is --tracking-uri, else $MLFLOW_TRACKING_URI, else the embedded store that 'digideep "
    "train' writes beside its sessions folder: data/mlflow.db for the default data/sessions, and "
    "for 'digideep train --session-path P' the same store with 'digideep runs --session-path P' "
    "(P/../mlflow.db; data/mlflow.db for an s3:// P)."
)


SUBCOMMANDS = """commands:
  digideep runs [--experiment E]                 list the runs of every experiment (or of E)
  digideep runs compare RUN|EXPERIMENT|STUDY...  plot their learning curves into a PNG
  digideep runs register RUN [--name N]          register a run's policy as an MLflow model
  digideep runs export --benchmark B --out DIR   write a benchmark's runs to JSON files for a report
  digideep runs sync SESSION                     send what a session's MLflow run lacks (after an outage)
  digideep runs ui [--port P]                    start the MLflow UI on 127.0.0.1

'digideep runs COMMAND --help' shows a command's options."""


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"digideep runs{' ' + command if command else ''}",
        description=textwrap.fill(STORE_HELP, 100),
        epilog=None if command else SUBCOMMANDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_options(parser)
    if command == "export":
        from digideep.report.cli import add_selection_options

        add_selection_options(parser)
        parser.add_argument("--out", required=True, metavar="FOLDER", help="a new (or empty) folder")
        parser.add_argument(
            "--finished",
            action="store_true",
            help="only runs that finished (default: every run, each with its status)",
        )
        return parser
    parser.add_argument(
        "--metric",
        default=TEST_RETURN_METRIC if command == "compare" else TRAIN_RETURN_METRIC,
        help="return metric (default: %(default)s)",
    )
    if command == "compare":
        parser.add_argument(
            "run_ids", nargs="+", metavar="RUN", help="run ids, experiment names or tune study names"
        )
        parser.add_argument(
            "--out", help="PNG to write (default: runs_compare.png in the data folder, beside the store)"
        )
    elif command == "register":
        parser.add_argument("run_id", metavar="RUN", help="a run id from 'digideep runs'")
        parser.add_argument("--name", help="registered model name (default: the run's experiment name)")
        parser.add_argument(
            "--model", default="model", help="the run's logged model: model (final) or best_model"
        )
        parser.add_argument("--alias", help="also point this alias at the new version (models:/NAME@ALIAS)")
    elif command == "ui":
        parser.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default: %(default)s)")
    else:
        parser.add_argument("--experiment", help="experiment name (default: every experiment with runs)")
    return parser


def main_runs(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """``digideep runs [compare RUN ... | register RUN | export | ui]``: returns the exit code; bad input
    raises UsageError."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out = out or sys.stdout
    command = argv[0] if argv and argv[0] in ("compare", "register", "export", "ui") else ""
    args = _parser(command).parse_args(argv[1:] if command else argv)
    if args.session_path is not None:  # the store the tracker chose for sessions there
        args.data_root = str(data_root_of(args.session_path))
    if command == "ui":
        return _run_ui(args.tracking_uri, args.data_root, args.port)
    from digideep.tracking.failures import http_limits  # MLflow loads once the arguments are good

    with http_limits(
        retries=2, timeout=30
    ):  # a server that stops answering fails the command, never hangs it
        return _list_or_compare(command, args, out)


def _list_or_compare(command: str, args: argparse.Namespace, out: TextIO) -> int:
    if command == "export":
        return _export(args, out)
    from digideep.tracking.runs import compare_runs, format_table, list_runs, open_client

    client = open_client(args.tracking_uri, args.data_root)
    if command == "register":
        return _register(client, args, out)
    if command == "compare":
        target = args.out or Path(args.data_root) / "runs_compare.png"
        png = compare_runs(args.run_ids, args.metric, target, client=client)
        out.write(f"wrote {png}\n")
        return 0
    names = [args.experiment] if args.experiment else _experiments_with_runs(client)
    if not names:
        out.write(f"no runs at {client.tracking_uri}\n")
    for name in names:
        out.write(
            f"experiment {name}\n{format_table(list_runs(name, metric=args.metric, client=client))}\n\n"
        )
    return 0


def _register(client: MlflowClient, args: argparse.Namespace, out: TextIO) -> int:
    from digideep.tracking.model import MODEL_ARTIFACTS, register_model

    which = {artifact: key for key, artifact in MODEL_ARTIFACTS.items()}.get(args.model)
    if which is None:
        raise UsageError(f"unknown model '{args.model}'; choose one of {sorted(MODEL_ARTIFACTS.values())}")
    name = args.name
    if not name:
        try:
            run = client.get_run(args.run_id)
        except Exception:
            raise UsageError(
                f"no run '{args.run_id}' at {client.tracking_uri}; list runs with 'digideep runs'"
            ) from None
        name = client.get_experiment(run.info.experiment_id).name
    version = register_model(client, args.run_id, name, which, alias=args.alias)
    alias = f" (alias '{args.alias}')" if args.alias else ""
    out.write(f"registered {args.model} of run {args.run_id} as '{name}' version {version}{alias}\n")
    return 0


def _export(args: argparse.Namespace, out: TextIO) -> int:
    from digideep.report.export import check_new_folder, export_runs
    from digideep.report.records import Criteria
    from digideep.report.selection import check_criteria
    from digideep.tracking.runs import open_client

    check_criteria(args.benchmark, args.experiment, args.tag)  # the cheap checks before the store opens
    criteria = Criteria(args.benchmark, args.experiment, tuple(args.tag))
    check_new_folder(Path(args.out))
    client = open_client(args.tracking_uri, args.data_root)
    export = export_runs(client, criteria, Path(args.out), finished_only=args.finished)
    out.write(f"wrote {len(export.records)} runs of {export.description} to {export.folder}\n")
    return 0


def _experiments_with_runs(client: MlflowClient) -> list[str]:
    experiments = client.search_experiments(order_by=["name ASC"])
    return [e.name for e in experiments if client.search_runs([e.experiment_id], max_results=1)]


def _run_ui(tracking_uri: str | None, data_root: str, port: int) -> int:
    uri, artifacts = resolve_tracking_uri(tracking_uri, data_root)
    if is_http_uri(uri):
        raise UsageError(f"the tracking server at {uri} serves the UI already; open it in a browser")
    check_port_free(port, "the MLflow UI")
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    if artifacts:
        command += ["--artifacts-destination", artifacts]
    # MLflow's job runner (for GenAI jobs digideep never submits) is 8 more processes importing mlflow,
    # which print KeyboardInterrupt tracebacks when the UI stops during their start; a user's setting wins
    environment = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}
    with stop_on_signals():  # Ctrl-C, SIGTERM and SIGHUP stop mlflow ui and its workers
        ui = subprocess.Popen(command, start_new_session=True, env=environment)
        try:
            return ui.wait()
        except KeyboardInterrupt:
            return 130
        finally:
            stop_tree(ui, first=signal.SIGTERM)
