"""How many Prefect tasks an iteration of the ``train`` flow runs: the task-cost model of ``tasks="auto"``.

Orchestration is the flows' concern, not the library's: the Runner's stages run the same code
whichever granularity :class:`TaskGranularity` picks, so the choice never changes what is trained.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field

from digideep.pipeline.runner import ITERATION_STAGES

__all__ = ["SERVER_SECONDS_PER_TASK_RUN", "TASK_BUDGET", "TaskGranularity"]

# under "digideep": the flow raises that logger to INFO, and PREFECT_LOGGING_EXTRA_LOGGERS sends it to the UI
log = logging.getLogger(f"digideep.{__name__}")

TASK_BUDGET = 0.03
"""The share of an iteration's work that orchestration may cost (``tasks="auto"``)."""

SERVER_SECONDS_PER_TASK_RUN = 0.040
"""Server CPU per task run that ``tasks="auto"`` adds to the cost it measures in the flow's thread.

The server's share cannot be seen from the flow; this is what ``bench/bench_orchestration.py``
measured for the stack's Prefect server on PostgreSQL (40-50 ms per task run, PostgreSQL's own
processes included; SQLite's ephemeral server: ~20 ms), see docs/tracking-prefect.md. Counting it
keeps the choice right where the server shares the machine's cores, and errs towards fewer tasks.
"""


@dataclass
class TaskGranularity:
    """Chooses between a task per stage and a task per iteration from measured timing (``tasks="auto"``).

    The first iterations run a task per stage while :meth:`observe` records, for each stage call, its
    seconds in the driver (the task run) and in the stage body. After ``measured`` iterations past
    the first (which carries one-off start-up costs) :attr:`per_iteration` is decided, once: a task
    per stage while ``4 x (in-thread cost per task run + server_seconds)`` stays within ``budget`` of
    the iteration's work, else a task per iteration (four times fewer task runs). The stages run the
    same Runner code either way, so the choice never changes what is trained.

    Args:
        budget: the share of an iteration's work orchestration may cost.
        server_seconds: server CPU per task run counted on top of the in-thread cost.
        measured: iterations measured (after the first) before deciding.
    """

    budget: float = TASK_BUDGET
    server_seconds: float = SERVER_SECONDS_PER_TASK_RUN
    measured: int = 2
    per_iteration: bool | None = None  # None until decided
    _iterations: int = 0
    _overhead: list[float] = field(default_factory=list)  # seconds around each stage body
    _work: list[float] = field(default_factory=list)  # seconds of stage bodies per iteration
    _current: float = 0.0

    def observe(self, stage: str, outer: float, inner: float) -> None:
        """Record one stage call of an iteration: ``outer`` seconds in the driver, ``inner`` in the body."""
        if self.per_iteration is not None or stage not in ITERATION_STAGES:
            return
        self._current += inner
        if self._iterations > 0:  # the first iteration starts environments, tasks and clients
            self._overhead.append(max(outer - inner, 0.0))
        if stage == "update":
            if self._iterations > 0:
                self._work.append(self._current)
            self._iterations += 1
            self._current = 0.0
            if len(self._work) >= self.measured:
                self.decide()

    def decide(self) -> bool:
        """Fix :attr:`per_iteration` from the figures so far, log them once, and return it."""
        work = statistics.median(self._work)
        in_thread = statistics.median(self._overhead)
        cost = len(ITERATION_STAGES) * (in_thread + self.server_seconds)
        self.per_iteration = cost > self.budget * work
        if self.per_iteration:
            log.info(
                "one Prefect task per iteration: iterations are short (%.0f ms of work), and a task per "
                "stage would add about %.0f %% to each",
                1e3 * work,
                100 * cost / work,
            )
        else:
            log.info(
                "one Prefect task per stage: iterations are long enough (%.0f ms of work) that the tasks "
                "add about %.1f %% to each",
                1e3 * work,
                100 * cost / work,
            )
        log.debug(
            "tasks=auto: %d stages x (%.1f ms in the flow's thread + %.1f ms on the server), budget %.0f %%",
            len(ITERATION_STAGES),
            1e3 * in_thread,
            1e3 * self.server_seconds,
            100 * self.budget,
        )
        return self.per_iteration
