"""What the tune and benchmark flows share: train runs launched once, watched, retried in place.

Both flows start train runs of a deployment (``run_deployment``) so that they spread over every
worker of its pool, a few at a time. A run is launched with an idempotency key that names it within
its study or benchmark, so launching it again (the parent flow retried after a crash) returns the
same flow run instead of a second one. A run that fails or crashes is set back to Scheduled: Prefect
runs it again as the same flow run, which resumes its session from its newest checkpoint
(``flows/train.py``). Both flows keep one MLflow parent run in an experiment made here if missing.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Any

from prefect import get_run_logger
from prefect.deployments import run_deployment
from prefect.states import Scheduled

FAILED_STATES = {"FAILED", "CRASHED"}
ENDED_STATES = {"COMPLETED", "CANCELLED"} | FAILED_STATES


def launch(client: Any, deployment: str, parameters: dict[str, Any], key: str) -> str:
    """Start a flow run of ``deployment`` as a subflow (or find the one ``key`` started); its id.

    A run found unfinished whose own parent flow run was cancelled (a benchmark or study cancelled,
    then started again under the same name) cannot run again as itself: Prefect's server cancels
    every unfinished subflow of a cancelled flow run. A new run continues its session instead, under
    a key naming the run it continues, so a retry of this flow finds that one.
    """
    flow_run = _start(deployment, parameters, key)
    while (owner := _cancelled_parent(client, flow_run)) is not None:
        from flows.train import session_name_for

        flow_run = _final(client, flow_run)  # (the server cancels it within seconds)
        if flow_run.state is None or not flow_run.state.is_final() or flow_run.state.is_completed():
            break
        session = session_name_for(str(flow_run.id), flow_run.name, flow_run.parameters.get("session_name"))
        get_run_logger().info(
            "%s: its flow run %s was started by flow run %s, since cancelled; a new run continues its session %s",
            key, flow_run.id, owner, session,
        )  # fmt: skip
        flow_run = _start(
            deployment, {**parameters, "session_name": session}, f"{key}:continues:{flow_run.id}"
        )
    return str(flow_run.id)


def _start(deployment: str, parameters: dict[str, Any], key: str) -> Any:
    return run_deployment(deployment, parameters=parameters, timeout=0, as_subflow=True, idempotency_key=key)


def _cancelled_parent(client: Any, flow_run: Any) -> str | None:
    """The id of the flow run that started ``flow_run`` when that one is cancelled and ``flow_run``
    did not complete; else None."""
    if flow_run.parent_task_run_id is None or (flow_run.state is not None and flow_run.state.is_completed()):
        return None
    parent = client.read_flow_run(client.read_task_run(flow_run.parent_task_run_id).flow_run_id)
    if parent.state is None or parent.state.type.value not in {"CANCELLED", "CANCELLING"}:
        return None
    return str(parent.id)


def _final(client: Any, flow_run: Any, timeout: float = 300.0) -> Any:
    """``flow_run`` read again once it is in a final state (or after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not (flow_run.state is not None and flow_run.state.is_final()) and time.monotonic() < deadline:
        time.sleep(2.0)
        flow_run = client.read_flow_run(flow_run.id)
    return flow_run


def state_of(client: Any, flow_run_id: str) -> str:
    """The flow run's state type (``COMPLETED``, ``FAILED``, ...); ``PENDING`` before it has one."""
    state = client.read_flow_run(flow_run_id).state
    return state.type.value if state is not None else "PENDING"


def ended_runs(
    client: Any,
    in_flight: dict[Hashable, str],
    retries: dict[Hashable, int],
    max_retries: int,
    who: str,
) -> dict[Hashable, str]:
    """Look at the running flow runs once; those that ended, with their final state type.

    A failed or crashed run is retried as the same flow run (it resumes from its checkpoint) up to
    ``max_retries`` times, counted in ``retries``; after that it has ended ``FAILED``/``CRASHED``.

    Args:
        client: a synchronous Prefect client.
        in_flight: flow-run ids by the caller's name for them (a trial number, a cell).
        retries: retries made so far by name (updated).
        max_retries: retries of one run before it counts as ended.
        who: the caller, for the retried run's state message (``tune``, ``benchmark``).
    """
    logger = get_run_logger()
    ended: dict[Hashable, str] = {}
    for name, flow_run_id in list(in_flight.items()):
        kind = state_of(client, flow_run_id)
        if kind in FAILED_STATES and retries.get(name, 0) < max_retries:
            retries[name] = retries.get(name, 0) + 1
            client.set_flow_run_state(
                flow_run_id, Scheduled(message=f"retried by its {who} flow"), force=True
            )
            logger.info("%s: train run %s %s; retry %d", name, flow_run_id, kind, retries[name])
        elif kind in ENDED_STATES:
            ended[name] = kind
    return ended


def experiment_id(client: Any, name: str, artifact_location: str | None) -> str:
    """The id of MLflow experiment ``name``, created when missing (by another process meanwhile too),
    tagged to open in MLflow's training view as the tracker's experiments are."""
    from digideep.tracking.naming import open_experiment

    return open_experiment(client, name, artifact_location)
