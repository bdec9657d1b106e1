"""``digideep report``: the statistics of a benchmark (or any selection of runs) from MLflow.

::

    digideep report --benchmark NAME [--experiment E] [--tag KEY=VALUE ...] [--compare A B]
                    [--from FOLDER ... [--with-store]] [--last N] [--reps 2000] [--seed 0] [--out DIR]
                    [--tracking-uri URI | --session-path P | --data-root DIR]

Prints the per-environment table, writes the PNG figures, ``table.txt`` and one self-contained
``report.html`` under ``--out`` (default ``<data_root>/reports/<name>/``), and logs them as artifacts
``report/...`` of the benchmark's parent run when the selection is a benchmark read from the store.
``--from FOLDER`` (repeatable) reads the folders of ``digideep runs export`` (or every export below a
folder that collects them) instead of the store, or beside it with ``--with-store``. Every check runs
before anything is written; bad input is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from digideep.errors import UsageError
from digideep.report import DEFAULT_REPS
from digideep.report.selection import check_criteria
from digideep.tracking.naming import add_store_options, data_root_of

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from digideep.report.build import Report
    from digideep.report.selection import Selection

__all__ = ["add_report_parser", "add_selection_options", "command_report", "write_report"]

ARTIFACT_PATH = "report"


def add_report_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``report`` to the ``digideep`` command's subparsers; returns its parser."""
    parser = subparsers.add_parser(
        "report",
        help="statistics of a benchmark's runs (rliable): table, figures and an HTML report",
        description="Mean and 95 %% stratified bootstrap intervals per environment, normalised "
        "aggregates (IQM, mean, median, optimality gap), performance profiles, sample-efficiency "
        "curves and P(A > B), computed with rliable from the runs' eval/return. The store is "
        "--tracking-uri, else $MLFLOW_TRACKING_URI, else the embedded store of 'digideep runs'.",
    )
    add_selection_options(parser)
    parser.add_argument(
        "--from",
        dest="exports",
        action="append",
        default=[],
        metavar="FOLDER",
        help="read the runs of an export folder of 'digideep runs export', or of every export in the folders "
        "below FOLDER, instead of the store (repeatable)",
    )
    parser.add_argument(
        "--with-store", action="store_true", help="with --from: read the store's matching runs too"
    )
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="P(A > B) between two algorithms")
    parser.add_argument(
        "--last", type=int, default=1, help="score = mean of the last N evaluations (default: %(default)s)"
    )
    parser.add_argument(
        "--at",
        type=int,
        metavar="FRAMES",
        help="score every run at this evaluation frame, as if it were the budget; runs still training "
        "count once they have reached it (default: the budget)",
    )
    parser.add_argument(
        "--reps", type=int, default=DEFAULT_REPS, help="bootstrap resamples (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: <data-root>/reports/<name>)")
    parser.add_argument("--references", metavar="TOML", help="reference scores (default: the shipped file)")
    add_store_options(parser)
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.set_defaults(func=command_report)
    return parser


def add_selection_options(parser: argparse.ArgumentParser) -> None:
    """``--benchmark``, ``--experiment`` and ``--tag``: which runs to read (all given must match; a tag
    key given more than once matches any of its values)."""
    select = parser.add_argument_group("selection (runs matching all of them)")
    select.add_argument("--benchmark", metavar="NAME", help="the cells of benchmark NAME")
    select.add_argument("--experiment", metavar="NAME", help="runs of MLflow experiment NAME")
    select.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="runs tagged KEY=VALUE (repeatable; one KEY repeated: any of its values)",
    )


def command_report(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Select, check, compute, then print and write the report; bad input raises UsageError."""
    from digideep.report.build import build_report  # rliable, pandas and matplotlib: only when used
    from digideep.report.references import load_references
    from digideep.report.table import format_report
    from digideep.tracking.failures import http_limits

    out = out or sys.stdout
    _check_numbers(args)
    if args.session_path is not None:  # the store the tracker chose for sessions there
        args.data_root = str(data_root_of(args.session_path))
    references = load_references(args.references) if args.references else load_references()
    with http_limits(retries=2, timeout=30):  # a server that stops answering fails the command
        client, selection = _select(args)
        report = build_report(selection, references, args.last, args.reps, args.seed, args.compare)
        folder = Path(args.out) if args.out else Path(args.data_root) / "reports" / _name(args)
        text = format_report(report)
        written = write_report(report, folder, text, _command(args))
        out.write(text)
        if client is not None and selection.parent_run_id:
            for path in written:
                client.log_artifact(selection.parent_run_id, str(path), ARTIFACT_PATH)
            out.write(f"logged {len(written)} files as '{ARTIFACT_PATH}/' of run {selection.parent_run_id}\n")
    out.write(f"wrote {folder / 'report.html'}\n")
    return 0


def write_report(report: Report, folder: Path, text: str, command: str) -> list[Path]:
    """Write the figures, ``table.txt`` and ``report.html`` into ``folder``, each atomically."""
    from digideep.report.html import render_html
    from digideep.storage.files import atomic_write_bytes, atomic_write_text

    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--out {folder} is a file; name a folder")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, png in report.figures.items():
        atomic_write_bytes(folder / name, png)
        written.append(folder / name)
    atomic_write_text(folder / "table.txt", text)
    atomic_write_text(folder / "report.html", render_html(report, command))
    return [*written, folder / "table.txt", folder / "report.html"]


def _select(args: argparse.Namespace) -> tuple[MlflowClient | None, Selection]:
    """The store's client (None when only export folders are read) and the selection of the runs."""
    from digideep.report.export import describe_exports, read_exports
    from digideep.report.records import Criteria, parent_run_id, read_store, store_name
    from digideep.report.selection import select_records
    from digideep.tracking.runs import open_client

    criteria = Criteria(args.benchmark, args.experiment, tuple(args.tag))
    exports = [export for folder in args.exports for export in read_exports(Path(folder))]
    client, records, sources, parent = None, [], [], None
    if args.with_store or not exports:
        client = open_client(args.tracking_uri, args.data_root)
        records = read_store(client, criteria)
        sources.append(store_name(client.tracking_uri))
        parent = parent_run_id(client, args.benchmark)
    for export in exports:
        records += [r for r in export.records if criteria.matches(r)]
        sources.append(str(export.folder))
    # without criteria, the exports' own selections name the runs
    description = criteria.describe() or describe_exports(exports)
    return client, select_records(records, description, sources, args.last, parent, args.at)


def _check_numbers(args: argparse.Namespace) -> None:
    if args.with_store or not args.exports:  # the store needs criteria; an export is a selection already
        check_criteria(args.benchmark, args.experiment, args.tag)  # before the store is opened
    if args.with_store and not args.exports:
        raise UsageError("--with-store adds the store's runs to those of --from FOLDER; name a folder")
    seen: set[Path] = set()
    for folder in args.exports:
        if Path(folder).resolve() in seen:
            raise UsageError(f"--from {folder} is given twice; name each export folder once")
        seen.add(Path(folder).resolve())
    if args.last < 1:
        raise UsageError(f"--last {args.last} must be at least 1 (1: the final evaluation)")
    if args.reps < 100:
        raise UsageError(
            f"--reps {args.reps} is too few for a 95 % interval; use at least 100 (default 2000)"
        )
    if args.compare and args.compare[0] == args.compare[1]:
        raise UsageError(f"--compare names {args.compare[0]} twice; name two different algorithms")
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is a file; name a folder")


def _name(args: argparse.Namespace) -> str:
    """The default folder name: the benchmark, else the experiment, else the tags."""
    folders = "_".join(Path(folder).name for folder in args.exports)
    name = args.benchmark or args.experiment or "_".join(args.tag) or folders or "report"
    return re.sub(r"[^\w.=-]+", "_", name)


def _command(args: argparse.Namespace) -> str:
    """The command line that makes this report again (defaults written out)."""
    words = ["digideep", "report"]
    for option in ("benchmark", "experiment"):
        if getattr(args, option):
            words += [f"--{option}", getattr(args, option)]
    for tag in args.tag:
        words += ["--tag", tag]
    for folder in args.exports:
        words += ["--from", folder]
    if args.with_store:
        words.append("--with-store")
    if args.compare:
        words += ["--compare", *args.compare]
    if args.at is not None:
        words += ["--at", str(args.at)]
    words += ["--last", str(args.last), "--reps", str(args.reps), "--seed", str(args.seed)]
    if args.references:
        words += ["--references", args.references]
    if args.tracking_uri:
        words += ["--tracking-uri", args.tracking_uri]
    return shlex.join(words)
