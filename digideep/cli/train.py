"""``digideep train`` and ``digideep resume``: through the Prefect train flow, or ``--no-prefect``.

Every check of the input (params, session name and folder, the MLflow server) runs before anything
is written, so that bad input is one line and exit status 2 with nothing left on disk.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from digideep.cli.options import json_object, new_run_options, split_session
from digideep.errors import UsageError
from digideep.pipeline.params import ResolvedParams, resolve_params
from digideep.pipeline.signals import RunStoppedError, exit_code, raise_if_stopped, stop_requested
from digideep.storage.location import Location
from digideep.storage.session import check_session_exists, check_session_name, check_session_root

__all__ = ["command_resume", "command_train"]

log = logging.getLogger(__name__)


def command_train(args: argparse.Namespace) -> int:
    """Validate the params, then train through the Prefect flow (or ``Runner.train()`` with ``--no-prefect``)."""
    # every check runs before anything touches disk (session.device of the params unless --device)
    resolved = resolve_params(args.params, args.cpanel, device=args.device)
    benchmark = _benchmark_cell(args.benchmark)
    trial = _trial(args.trial)
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
    raise_if_stopped()  # a signal during the checks (a URL store's answer can take seconds)
    if args.dry_run:
        return _dry_run(resolved, args.device, args.deterministic)
    _check_tracking_server(resolved.params, args.session_path)
    raise_if_stopped()
    return _train(
        args.params,
        args.cpanel,
        args.session_name,
        args.session_path,
        resume=False,
        no_prefect=args.no_prefect,
        description=args.msg,
        resolved=resolved,
        device=args.device,
        deterministic=args.deterministic,
        benchmark=benchmark,
        trial=trial,
    )


def _benchmark_cell(text: str | None) -> dict[str, Any] | None:
    """The ``--benchmark`` JSON: the cell a run is (the train flow's ``benchmark`` parameter).

    Raises:
        UsageError: not a JSON object, or one without ``name`` and the cell's keys (one line).
    """
    if text is None:
        return None
    from digideep.tracking.trials import BENCHMARK_CELL_KEYS

    keys = ("name", *BENCHMARK_CELL_KEYS)
    holding = f"with the keys {', '.join(keys)}"
    cell = json_object(text, "--benchmark", holding)
    if any(key not in cell for key in keys):
        raise UsageError(f"--benchmark must be a JSON object {holding}, got {text}")
    return cell


def _trial(text: str | None) -> dict[str, Any] | None:
    """The ``--trial`` JSON: the Optuna trial a run is (the train flow's ``trial`` parameter).

    Raises:
        UsageError: not a JSON object, or one without ``storage``, ``study`` or ``number`` (one line).
    """
    if text is None:
        return None
    from digideep.tracking.trials import TrialReporter

    trial = json_object(text, "--trial", "with the keys storage, study and number")
    TrialReporter.from_parameters(trial)  # its keys checked before anything is written
    return trial


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


def _dry_run(resolved: ResolvedParams, device: str | None, deterministic: bool) -> int:
    """Build everything a run builds (in a temporary session), print the params tree, keep nothing.

    No session folder, no MLflow run, no Prefect flow run: the temporary session (its Zarr memory
    folders and log) is deleted on the way out.
    """
    import tempfile

    from digideep.pipeline.devices import DeviceChoice
    from digideep.pipeline.runner import Runner
    from digideep.storage.session import Session

    devices = DeviceChoice(device, deterministic)  # checked before the scratch session
    with (
        tempfile.TemporaryDirectory(prefix="digideep-dry-run-") as scratch,
        Session(root=scratch, params_name=resolved.module) as session,
    ):
        runner = Runner(session, resolved.params, devices=devices, tracker=None)
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
    raise_if_stopped()  # a signal while it built: nothing printed either
    print(
        json.dumps(
            {"params_module": resolved.module, "cpanel": resolved.cpanel, "params": resolved.params}, indent=2
        )
    )
    return 0


def command_resume(args: argparse.Namespace) -> int:
    """Continue a session from its newest complete checkpoint.

    Raises:
        UsageError: an option of a new run was given.
    """
    given = new_run_options(args)
    if given:
        raise UsageError(
            f"{given} cannot be used with resume: a resumed session keeps its own name, params, cpanel and "
            "description (its params.json); to change them, train a new session with --params"
        )
    trial = _trial(args.trial)
    root, name = split_session(args.session, args.session_path)
    check_session_exists(root, name)  # before a Prefect server and a flow run are started for it
    raise_if_stopped()
    return _train(
        None,
        None,
        name,
        root,
        resume=True,
        no_prefect=args.no_prefect,
        description=None,
        device=args.device,
        deterministic=args.deterministic,
        trial=trial,
    )


def _session_exists(root: Location, name: str) -> bool:
    """Whether session ``name`` exists under ``root`` (any file under its prefix, on object storage)."""
    session = root / name
    return session.exists() if session.is_local else session.is_dir()


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
    device: str | None = None,
    deterministic: bool = False,
    benchmark: dict[str, Any] | None = None,
    trial: dict[str, Any] | None = None,
) -> int:
    """Train a new run (``params`` with ``cpanel``) or resume session ``name`` under ``root``.

    ``device`` and ``deterministic`` (``--device``, ``--deterministic``) go to the run as arguments,
    of :func:`~digideep.pipeline.training.open_run` or of the flow; ``benchmark`` (``--benchmark``)
    tags and nests the new run's MLflow run as a benchmark cell
    (:func:`~digideep.tracking.trials.benchmark_tags`); ``trial`` (``--trial``) makes the run report
    to its Optuna trial (:class:`~digideep.tracking.trials.TrialReporter`) and tags and nests a new
    run's MLflow run as a trial (:func:`~digideep.tracking.trials.trial_tags`).

    With ``--no-prefect`` the run takes ``resolved``, the params :func:`command_train` resolved.
    The Prefect flow is an entry point of its own (deployments and retries call it with a module
    name and a cpanel), so it takes the names and resolves them itself; :func:`command_train`
    resolved them first only so that bad params fail in one line before a flow run exists.

    SIGINT and SIGTERM are recorded from the command's start (:func:`digideep.main.cli`): before
    the session exists one ends the command with nothing written (the temporary Prefect server's start
    included), once it exists the run stops at its first stage boundary with a checkpoint, and after
    training it lets the run close and end as it would have.
    """
    from digideep.pipeline.params import parse_cpanel
    from digideep.pipeline.training import open_run, run_training
    from digideep.tracking.trials import TrialReporter, benchmark_tags, trial_tags

    if no_prefect:
        handle = open_run(
            resolved or params,
            None if resolved else cpanel,
            session_name=name,
            session_path=root,
            resume=resume,
            tags={**trial_tags(trial), **benchmark_tags(benchmark)},
            description=description,
            device=device,
            deterministic=deterministic,
        )
        if handle is not None:
            handle.runner.trial = TrialReporter.from_parameters(trial)
        reason = run_training(handle)
        if handle is not None and exit_code(reason):
            raise RunStoppedError(reason, handle.runner.counters.iteration, handle.session.name, root)
    else:
        train = _train_flow()
        from flows.server import prefect_api

        # the flow's own server (when none is configured) runs in a session of its own, so Ctrl-C
        # reaches only digideep; a signal while it starts ends the command there, with the server
        # stopped. A stopped run raises RunStoppedError.
        with prefect_api(), _refusals_in_one_line():
            raise_if_stopped()
            result = train(
                params=params or "",
                cpanel=parse_cpanel(cpanel),
                session_name=name,
                session_path=root,
                resume=resume,
                description=description,
                benchmark=benchmark,
                trial=trial,
                device=device,
                deterministic=deterministic,
            )
        reason = result["stopped"]
    late = stop_requested()
    if late is not None:  # it came while the finished run closed: that ended as it would have
        log.warning("%s after training had ended: the run closed as it would have (%s)", late, reason)
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


class _UsageErrorRecords(logging.Filter):
    """Drops the flow engine's records of a flow that raised :class:`UsageError`: its traceback
    ("Encountered exception during execution") and its "Finished in state Failed(...)" line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], UsageError):
            return False
        return not (
            record.getMessage().startswith("Finished in state Failed") and "UsageError" in record.getMessage()
        )


@contextmanager
def _refusals_in_one_line() -> Iterator[None]:
    """Bad input found inside the flow (a session with no whole checkpoint, say) stays one line on the
    console, ``digideep: error: ...``, as on the plain loop; the flow run still ends Failed with it."""
    engine = logging.getLogger("prefect.flow_runs")
    refusals = _UsageErrorRecords()
    engine.addFilter(refusals)
    try:
        yield
    finally:
        engine.removeFilter(refusals)
