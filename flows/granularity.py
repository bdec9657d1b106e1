"""How many iterations a Prefect task of the ``train`` flow runs: the task-cost model of ``tasks="auto"``.

Orchestration is the flows' concern, not the library's: the Runner's stages run the same code
whichever granularity :class:`TaskGranularity` picks, so the choice never changes what is trained.
"""

from __future__ import annotations

import logging
import math
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
    """Chooses how many iterations each task of the train flow runs, from measured timing (``tasks="auto"``).

    Called before each iteration (it is the schedule's
    :data:`~digideep.pipeline.runner.IterationGroup`), it answers 0, a task per stage, while the first
    iterations run that way and :meth:`observe` records, for each stage call, its seconds in the
    driver (the task run) and in the stage body. After ``measured`` iterations past the first (which
    carries one-off start-up costs) it decides, once: a task per stage while ``4 x (in-thread cost per
    task run + server_seconds)`` stays within ``budget`` of the iteration's work; else tasks of ``n``
    whole iterations, ``n`` the fewest whose one task run stays within ``budget`` of their work.

    From then on every ``iterate`` task's timing updates the work per iteration (the median of the
    last ``window`` tasks) and with it ``n``, so the group follows the iterations when they change
    length (random warm-up actions take a fraction of a millisecond a frame, gradient steps several).
    The stages run the same Runner code whatever the grouping, so the choice never changes what is
    trained.

    Args:
        budget: the share of an iteration's work orchestration may cost.
        server_seconds: server CPU per task run counted on top of the in-thread cost.
        measured: iterations measured (after the first) before deciding.
        most: the largest group (1 where ``iterate`` carries a timeout meant for one iteration).
        window: ``iterate`` tasks whose timing sets the group size.
    """

    budget: float = TASK_BUDGET
    server_seconds: float = SERVER_SECONDS_PER_TASK_RUN
    measured: int = 2
    most: int | None = None
    window: int = 5
    iterations: int | None = None  # None until decided; then 0 (a task per stage) or the group size
    _iterations_seen: int = 0
    _overhead: list[float] = field(default_factory=list)  # seconds around each stage body
    _work: list[float] = field(default_factory=list)  # seconds of stage bodies per iteration
    _current: float = 0.0

    def __call__(self) -> int:
        """Iterations the next task runs: 0 (a task per stage) until decided, then the choice."""
        return self.iterations or 0

    def observe(self, stage: str, outer: float, inner: float, iterations: int = 1) -> None:
        """Record one stage call: ``outer`` seconds in the driver, ``inner`` in the body, and (for
        ``iterate``) the iterations it ran."""
        if stage == "iterate":
            if self.iterations and iterations > 0:
                self._overhead = [*self._overhead, max(outer - inner, 0.0)][-self.window :]
                self._work = [*self._work, inner / iterations][-self.window :]
                self._regroup()
            return
        if self.iterations is not None or stage not in ITERATION_STAGES:
            return
        self._current += inner
        if self._iterations_seen > 0:  # the first iteration starts environments, tasks and clients
            self._overhead.append(max(outer - inner, 0.0))
        if stage == "update":
            if self._iterations_seen > 0:
                self._work.append(self._current)
            self._iterations_seen += 1
            self._current = 0.0
            if len(self._work) >= self.measured:
                self.decide()

    def decide(self) -> int:
        """Fix the granularity from the figures so far, log it, and return :attr:`iterations`."""
        work, cost = self._figures()
        per_stage = len(ITERATION_STAGES) * cost
        if per_stage <= self.budget * work:
            self.iterations = 0
            log.info(
                "one Prefect task per stage: iterations are long enough (%.1f ms of work) that the tasks "
                "add about %.1f %% to each",
                1e3 * work,
                100 * per_stage / work,
            )
        else:
            self.iterations = self._group(work, cost)
            self._log_group(work, cost)
        log.debug(
            "tasks=auto: %.1f ms a task run in the flow's thread + %.1f ms on the server, budget %.0f %%",
            1e3 * (cost - self.server_seconds),
            1e3 * self.server_seconds,
            100 * self.budget,
        )
        return self.iterations

    def _figures(self) -> tuple[float, float]:
        """The work of one iteration and the cost of one task run (in-thread and server), in seconds."""
        work = max(statistics.median(self._work), 1e-9)
        return work, statistics.median(self._overhead) + self.server_seconds

    def _group(self, work: float, cost: float) -> int:
        group = max(1, math.ceil(cost / (self.budget * work)))
        return group if self.most is None else min(group, self.most)

    def _regroup(self) -> None:
        work, cost = self._figures()
        group = self._group(work, cost)
        previous, self.iterations = self.iterations or 1, group
        if group >= 2 * previous or 2 * group <= previous:  # a new phase of the run, not noise
            self._log_group(work, cost)

    def _log_group(self, work: float, cost: float) -> None:
        group = self.iterations or 1
        log.info(
            "Prefect tasks of %d iteration%s each: iterations are short (%.1f ms of work), and a task "
            "per stage would add about %.0f %% to each",
            group,
            "" if group == 1 else "s",
            1e3 * work,
            100 * len(ITERATION_STAGES) * cost / work,
        )
