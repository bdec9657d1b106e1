"""The ``sweep`` flow: a grid of cpanel values x seeds, each a run of a train deployment.

Every combination becomes a flow run of ``deployment`` (``run_deployment``), so the runs spread over
every worker serving that deployment's work pool. The sweep waits for all of them and prints a
summary table. Needs a Prefect server with the train deployments (see docs/workflows.md, "Prefect").

Example parameters::

    {"deployment": "train/pendulum-sac", "grid": {"lr": [0.001, 0.0003]}, "seeds": [0, 1, 2]}
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from prefect import flow, get_run_logger
from prefect.deployments import run_deployment
from prefect.flow_runs import wait_for_flow_run
from prefect.utilities.asyncutils import run_coro_as_sync

from digideep.storage.location import Location


def combinations(grid: dict[str, list[Any]], seeds: list[int]) -> list[dict[str, Any]]:
    """Every cpanel override of the grid, once per seed (``seed`` is a cpanel key)."""
    keys = sorted(grid)
    return [
        {**dict(zip(keys, values, strict=True)), "seed": seed}
        for values in itertools.product(*(grid[k] for k in keys))
        for seed in seeds
    ]


def summary_table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width table of the runs: cpanel, state, frames and best test return."""
    header = ["cpanel", "state", "frames", "best test return", "session"]
    lines = [header] + [
        [
            json.dumps(r["cpanel"]),
            r["state"],
            str(r.get("frames", "")),
            _fmt(r.get("best_test_return")),
            r.get("session", ""),
        ]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in lines)


def _fmt(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else ""


@flow(name="sweep", persist_result=False)
def sweep(
    deployment: str = "train/pendulum-sac",
    grid: dict[str, list[Any]] | None = None,
    seeds: list[int] | None = None,
    base_cpanel: dict[str, Any] | None = None,
    session_path: str = "data/sessions",
    poll_seconds: float = 5.0,
) -> list[dict[str, Any]]:
    """Launch one train run per grid point and seed, wait for all, return and print a summary.

    Args:
        deployment: ``<flow name>/<deployment name>`` of a train deployment.
        grid: cpanel key -> values to try.
        seeds: seeds to run for every grid point.
        base_cpanel: cpanel overrides shared by every run (the grid's values win).
        session_path: where the train runs keep their sessions (passed to them, and read back): a
            folder every worker mounts, or a URL such as ``s3://bucket/sessions``.
        poll_seconds: unused: the sweep now waits on the server's events (kept so that deployments
            and scripts that pass it still validate).
    """
    logger = get_run_logger()
    runs = []
    for point in combinations(grid or {}, seeds if seeds is not None else [0]):
        cpanel = {**(base_cpanel or {}), **point}
        parameters = {"cpanel": cpanel, "session_path": session_path}
        flow_run = run_deployment(deployment, parameters=parameters, timeout=0, as_subflow=True)
        runs.append((cpanel, flow_run.id))
        logger.info("launched %s with cpanel %s", flow_run.name, json.dumps(cpanel))
    states = _wait(runs)
    rows = []
    for cpanel, flow_run_id in runs:
        row: dict[str, Any] = {
            "cpanel": cpanel,
            "flow_run_id": str(flow_run_id),
            "state": states[flow_run_id],
        }
        row.update(_session_result(Location(session_path), str(flow_run_id)))
        rows.append(row)
    logger.info("sweep of %d runs:\n%s", len(rows), summary_table(rows))
    return rows


def _wait(runs: list[tuple[dict[str, Any], Any]]) -> dict[Any, str]:
    """The final state type of every run, waiting on the server's events (no polling, no time limit)."""
    return {
        flow_run_id: run_coro_as_sync(wait_for_flow_run(flow_run_id, timeout=None)).state.type.value
        for _, flow_run_id in runs
    }


def _session_result(root: Location, flow_run_id: str) -> dict[str, Any]:
    """Frames and best test return from the session of a train flow run (found by its flow-run id)."""
    for session in root.children():
        try:
            info = (session / "session.json").read_json()
        except (FileNotFoundError, NotADirectoryError, ValueError):
            continue
        if info.get("prefect_flow_run_id") == flow_run_id:
            try:
                result = (session / "done.json").read_json()
            except FileNotFoundError:
                result = {}
            return {"session": session.name, **result}
    return {}
