"""The crash watcher: a flow run whose heartbeats stopped is marked Crashed within a bounded time.

Prefect leaves a flow run RUNNING when its host vanishes (the worker and the flow process die with
it, so nothing reports the crash: Prefect issue 16746). Prefect 3.8's flow engine already emits a
``prefect.flow-run.heartbeat`` event from a daemon thread of the flow process every
``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (30 s at the least; the stack sets 30), so the beats
go on while a stage is busy in a long update, checkpoint or upload: the thread needs only a moment
of the GIL, which numpy, torch and I/O release. No stage emits anything.

Every ``--interval`` seconds the watcher reads the RUNNING flow runs and, for each, the newest
heartbeat the server received. A run whose latest sign of life (its newest heartbeat, or the start
of its RUNNING state when none arrived yet) is older than ``--crash-after`` seconds (120 by
default: four missed beats) is set to Crashed with a message saying why. A run is therefore marked
at most ``crash-after + interval`` seconds after its last beat, and never while its process lives.
With ``--retries N`` a crashed run is put back in the queue (Scheduled, as the UI's Retry does)
until it has run N + 1 times; any worker of its pool picks it up and the train flow resumes its
session from the newest checkpoint.

The automation proposed for this in Prefect's docs ("no heartbeat for 90 s -> Crashed") has crashed
healthy runs (Prefect issues 16459, 18653, 20887) when heartbeats came from the event loop or when
automation triggers fired on stale state; this watcher reads the current state and the newest beat
on every pass instead.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import time

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.events.filters import EventFilter, EventNameFilter, EventOccurredFilter, EventResourceFilter
from prefect.states import Crashed, Scheduled

from digideep.utility.processes import stop_on_signals

logger = logging.getLogger("digideep_stack.watcher")
HEARTBEAT = "prefect.flow-run.heartbeat"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def last_sign_of_life(client, run: FlowRun, since: datetime.datetime) -> datetime.datetime:
    """The newest heartbeat the server received for ``run`` after ``since``, or its RUNNING start."""
    page = client.read_events(
        EventFilter(
            occurred=EventOccurredFilter(since=since, until=_now() + datetime.timedelta(minutes=5)),
            event=EventNameFilter(name=[HEARTBEAT]),
            resource=EventResourceFilter(id=[f"prefect.flow-run.{run.id}"]),
        ),
        limit=1,
    )
    beats = [event.received for event in page.events]
    started = run.state.timestamp if run.state is not None else run.start_time
    return max([moment for moment in [*beats, started] if moment is not None])


def check_once(crash_after: float, retries: int = 0) -> list[FlowRun]:
    """Mark RUNNING flow runs silent for more than ``crash_after`` seconds Crashed; return them."""
    crashed = []
    with get_client(sync_client=True) as client:
        running = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))
            )
        )
        now = _now()
        since = now - datetime.timedelta(seconds=3 * crash_after)
        for run in running:
            silent = (now - last_sign_of_life(client, run, since)).total_seconds()
            if silent <= crash_after:
                continue
            message = f"No heartbeat for {silent:.0f} s (bound {crash_after:.0f} s): the flow process or its host died"
            result = client.set_flow_run_state(run.id, Crashed(message=message), force=True)
            if result.status.value != "ACCEPT":
                continue
            logger.warning("flow run %s (%s): %s; marked Crashed", run.name, run.id, message)
            crashed.append(run)
            if run.run_count <= retries:
                client.set_flow_run_state(
                    run.id,
                    Scheduled(message=f"Retried by the crash watcher ({run.run_count}/{retries})"),
                    force=True,
                )
                logger.warning("flow run %s rescheduled (retry %d of %d)", run.name, run.run_count, retries)
    return crashed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Mark flow runs whose heartbeats stopped as Crashed.")
    parser.add_argument("--crash-after", type=float, default=120.0, help="seconds without a heartbeat")
    parser.add_argument(
        "--interval", type=float, default=None, help="seconds between checks (crash-after / 8)"
    )
    parser.add_argument("--retries", type=int, default=0, help="put a crashed run back in the queue N times")
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    interval = arguments.interval or max(arguments.crash_after / 8, 1.0)
    logger.info("watching RUNNING flow runs: Crashed after %.0f s without a heartbeat", arguments.crash_after)
    with stop_on_signals():
        try:
            while True:
                try:
                    check_once(arguments.crash_after, arguments.retries)
                except Exception as error:  # the server restarting, a network hiccup: try again
                    logger.warning(
                        "check failed: %s", str(error).splitlines()[0] if str(error) else repr(error)
                    )
                time.sleep(interval)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    raise SystemExit(main())
