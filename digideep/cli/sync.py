"""``digideep runs sync``: send what a session's MLflow run lacks, and end the run."""

from __future__ import annotations

import argparse

from digideep.cli.options import add_common_options, split_session

__all__ = ["command_sync", "sync_parser"]


def command_sync(args: argparse.Namespace) -> int:
    """Send what a session's metrics journal, checkpoints and models hold that its MLflow run lacks,
    and end the run."""
    from digideep.pipeline.training import held_session
    from digideep.tracking.tracker import sync_session

    root, name = split_session(args.session, args.session_path)
    with held_session(root, name) as session:  # refused while training runs; logs to log.txt, uploads
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


def sync_parser() -> argparse.ArgumentParser:
    """The parser of ``digideep runs sync`` (``digideep`` hands it everything after the two words)."""
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
    add_common_options(parser)
    return parser
