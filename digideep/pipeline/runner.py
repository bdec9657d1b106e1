"""The Runner: owns explorers, memories and agents, and runs training as a schedule of stages.

Glossary (see also ``docs/architecture.md``):

- **iteration**: ``explore`` one chunk (``n_steps`` steps of every train worker), ``store`` it in the
  memories, ``sample`` each agent's batches and ``update`` each agent once;
- **epoch**: ``epoch_size`` iterations, followed by ``test`` (every ``test_interval`` epochs), ``log``
  (every epoch) and ``checkpoint`` (every ``save_interval`` epochs, and always at the end);
- **frames**: environment transitions collected by the train explorer (steps x workers); the step
  axis of every logged metric.

The stages are plain methods over the Runner's state. :meth:`Runner.train` walks the schedule and
calls each stage through a ``call(stage, function)`` hook: the plain loop calls them directly,
the Prefect flow (``flows/train.py``) wraps each in a task. One schedule, two drivers.
Stages exchange only small values (counts, metric dicts, paths); the chunk and the batches stay
inside the Runner. The rest of a run's life has modules of its own:
:mod:`~digideep.pipeline.training` opens and closes it, :mod:`~digideep.pipeline.checkpointing`
writes its checkpoints, :mod:`~digideep.pipeline.run_state` is what they hold,
:mod:`~digideep.pipeline.resuming` rebuilds a Runner from one, and :mod:`~digideep.pipeline.reporting`
makes the log stage's metrics and the progress figures.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import numpy as np

from digideep.memory import Readback
from digideep.pipeline import components
from digideep.pipeline.checkpointing import Checkpointer, runner_info
from digideep.pipeline.counters import Counters, WallClock
from digideep.pipeline.devices import DeviceChoice
from digideep.pipeline.evaluation import EvaluationProtocol
from digideep.pipeline.reporting import Reporter, progress_line
from digideep.pipeline.rng import seed_everything
from digideep.pipeline.run_state import RunState
from digideep.pipeline.runner_settings import RunnerSettings
from digideep.pipeline.signals import StopOnSignals
from digideep.storage.lease import LEASE_MARGIN
from digideep.storage.session import Session
from digideep.tracking.journal import JOURNAL_FILE, MetricsJournal
from digideep.utility.monitoring import Monitor
from digideep.utility.profiling import KeepTime
from digideep.utility.stats import StatsSampler

__all__ = ["ITERATION_STAGES", "IterationGroup", "Runner", "StageCall"]

log = logging.getLogger(__name__)

ITERATION_STAGES = ("explore", "store", "sample", "update")
StageCall = Callable[[str, Callable[[], Any]], Any]
"""``call(stage_name, stage_function) -> result``: how a driver runs one stage."""
IterationGroup = Callable[[], int]
"""``group() -> n``: how many iterations the next stage runs (0: the iteration's four stages)."""


def call_directly(stage: str, function: Callable[[], Any]) -> Any:
    """The plain driver: run the stage in place."""
    return function()


class Runner:
    """Builds the components of a run from its params tree and trains them.

    Args:
        session: the run's Session.
        params: the resolved params tree (see ``params/*.py``).
        devices: where the agents train and whether deterministic mode is on (``--device``,
            ``--deterministic``); it takes ``session.device`` and ``session.deterministic`` of the
            params where those are open. Auto by default.
        tracker: optional experiment tracker with ``flush(force)``, ``log_checkpoint(path, kept)`` and
            ``finish(status)`` that sends what ``journal`` holds (see ``digideep.tracking``).
        modes: which explorers to build (``train``/``test`` for training, ``eval`` for play).
        journal: the session's metrics journal; ``<session>/metrics.jsonl`` by default when training.

    Attributes:
        monitor: the run's own :class:`~digideep.utility.monitoring.Monitor`: episode statistics of
            the explorers, the agents' update metrics and CPU/GPU figures. :meth:`log` summarises it
            together with the process-wide ``monitor`` (ad-hoc values from anywhere, such as the
            sampler's debug units) and resets both; only this one is checkpointed.
        state: the run's checkpointable state (:class:`~digideep.pipeline.run_state.RunState`).
        checkpoints: what writes its checkpoints (:class:`~digideep.pipeline.checkpointing.Checkpointer`).
        reporter: what makes its log stage's metrics and progress figures
            (:class:`~digideep.pipeline.reporting.Reporter`).
    """

    def __init__(
        self,
        session: Session,
        params: dict[str, Any],
        *,
        devices: DeviceChoice | None = None,
        tracker: Any = None,
        modes: tuple[str, ...] = ("train", "test"),
        journal: MetricsJournal | None = None,
    ) -> None:
        self.session = session
        self.params = params
        self.tracker = tracker
        if journal is None and "train" in modes:
            journal = MetricsJournal(session.path / JOURNAL_FILE)
        self.journal = journal
        self.settings = settings = RunnerSettings.from_params(params["runner"])
        self.devices = devices if devices is not None else DeviceChoice()
        self.devices.configure(params.get("session", {}))  # before any agent picks its device
        seed_everything(settings.seed)

        self.counters = Counters()
        self.clock = WallClock(self.counters)
        self.built = components.build(session, self.devices, params, modes=modes)
        self.agents = self.built.agents
        self.memories = self.built.memories
        if session.remote:  # a host that lost the session's lease writes no chunk beside the new holder
            for memory in self.built.durable.values():
                memory.guard_writes(functools.partial(session.ensure_held, LEASE_MARGIN))
        self.explorers = self.built.explorers
        self.monitor = Monitor()
        for explorer in self.explorers.values():
            if explorer.win_size:
                for name in explorer.metric_names:
                    self.monitor.set_window(name, explorer.win_size)
        self._chunk: dict[str, np.ndarray] | None = None
        self._batches: dict[str, Any] | None = None
        self._stop_reason: str | None = None
        self._evaluation: float | None = None  # the last test's mean return, until the log stage sends it
        self.trial: Any = None  # a digideep.tracking.trials.TrialReporter when the run is a tune trial
        self.state = RunState(
            self.counters, self.agents, self.explorers, self.memories, self.monitor, self.journal
        )
        self.checkpoints = Checkpointer(
            session,
            self.state,
            durable=self.built.durable,
            keep=settings.keep_checkpoints,
        )
        self.reporter = Reporter(
            self.counters,
            self.monitor,
            self.journal,
            self.clock,
            number_epochs=settings.number_epochs,
            epoch_size=settings.epoch_size,
        )

    # -- the stages of one iteration ----------------------------------------------------------
    def explore(self) -> int:
        """Run the train explorer for one chunk; return the number of frames it collected."""
        with KeepTime("explore"):
            self._chunk = self.explorers["train"].update()
        self._record_episodes(self.explorers["train"], self._chunk)
        frames = self.built.frames_per_chunk
        self.counters.frames += frames
        return frames

    def store(self) -> int:
        """Store the explored chunk in every memory; return the number of memories written."""
        if self._chunk is None:
            raise RuntimeError("store() needs a chunk: call explore() first")
        with KeepTime("store"):
            for memory in self.memories.values():
                memory.store(self._chunk)
        self._chunk = None
        return len(self.memories)

    def sample(self) -> int:
        """Let each agent's sampler draw this iteration's batches; return the number of agents."""
        with KeepTime("sample"):
            self._batches = {
                name: agent.sample(self.memories[self.built.agent_memory[name]])
                for name, agent in self.agents.items()
            }
        return len(self._batches)

    def update(self) -> dict[str, float]:
        """Update each agent from its batches; return the metrics (``/agents/<name>/<metric>``)."""
        if self._batches is None:
            raise RuntimeError("update() needs batches: call sample() first")
        metrics: dict[str, float] = {}
        with KeepTime("update"):
            for name, agent in self.agents.items():
                for key, value in agent.update(self._batches[name]).items():
                    metrics[f"/agents/{name}/{key}"] = value
        self._batches = None
        for key, value in metrics.items():
            self.monitor(key, value)
        self.counters.iteration += 1
        return metrics

    # -- the stages of an epoch's end ---------------------------------------------------------
    @property
    def epoch(self) -> int:
        """Epochs completed."""
        return self.counters.iteration // self.settings.epoch_size

    @property
    def at_epoch_end(self) -> bool:
        """Whether the last iteration completed an epoch (test, log and checkpoint come next)."""
        return self.counters.iteration % self.settings.epoch_size == 0

    def test_due(self) -> bool:
        """Every ``test_interval`` epochs, and at the last epoch (so the last evaluation lands at the
        frame budget, :mod:`digideep.pipeline.evaluation`); never with ``test_interval`` 0."""
        if "test" not in self.explorers or self.settings.test_interval <= 0:
            return False
        return self.epoch % self.settings.test_interval == 0 or self.epoch == self.settings.number_epochs

    def save_due(self) -> bool:
        return self.settings.save_interval > 0 and self.epoch % self.settings.save_interval == 0

    def test(self) -> float:
        """Run the test explorer (deterministic, train normalisers copied in); return its mean return."""
        with KeepTime("test"):
            tester = self.explorers["test"]
            components.copy_normalizers(self.explorers["train"], tester)
            chunk = tester.update()
        self._record_episodes(tester, chunk)
        returns = chunk.episodes.returns
        self._evaluation = float(np.mean(returns)) if len(returns) else None
        stats = self.monitor.summary().get(tester.metric_names[0])
        mean = stats["mean"] if stats else math.nan
        self.counters.last_test_return = mean
        if self.trial is not None:  # a trial of a tune study: report; stop here when it is pruned
            self.trial.report(self, mean)
        return mean

    def _record_episodes(self, explorer: Any, chunk: Any) -> None:
        """Put the returns and lengths of the episodes that ended in ``chunk`` into the Monitor."""
        return_name, length_name = explorer.metric_names
        for value, length in zip(chunk.episodes.returns, chunk.episodes.lengths, strict=True):
            self.monitor(return_name, float(value))
            self.monitor(length_name, float(length))

    def log(self) -> dict[str, float]:
        """Summarise the Monitor and Profiler since the last log into metrics; send and print them."""
        metrics = self.reporter.metrics(self._evaluation)
        self._evaluation = None
        if self.tracker is not None:
            self.tracker.flush(force=False)
        log.info(progress_line(self.reporter.progress(), metrics))
        self.reporter.reset()
        return metrics

    def checkpoint(self) -> str:
        """Write a checkpoint of the run into its session and commit it; return its folder
        (:meth:`~digideep.pipeline.checkpointing.Checkpointer.save`)."""
        started = time.perf_counter()
        self.clock.account()
        self.counters.record_checkpoint()
        return self.checkpoints.save(self.runner_info(), self.tracker, started)

    # -- the schedule -------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """Whether ``number_epochs`` epochs are done."""
        return self.epoch >= self.settings.number_epochs

    def stop_reason(self) -> str | None:
        """Why training should stop now (finished, a limit, a signal), or None to go on."""
        if self._stop_reason:
            return self._stop_reason
        if self.finished:
            return "finished"
        if (
            self.settings.max_iterations is not None
            and self.counters.iteration >= self.settings.max_iterations
        ):
            return f"max_iterations={self.settings.max_iterations} reached"
        if self.settings.max_wall_time is not None and self.clock.now() >= self.settings.max_wall_time:
            return f"max_wall_time={self.settings.max_wall_time}s reached"
        return None

    def request_stop(self, reason: str) -> None:
        """Finish the current iteration, checkpoint and stop (what SIGINT/SIGTERM do)."""
        self._stop_reason = reason

    def iterate(self, iterations: int = 1) -> dict[str, float]:
        """Whole iterations (explore, store, sample, update) as one stage: up to ``iterations`` of them,
        fewer when an epoch ends or training should stop first. Returns the last update's metrics."""
        metrics = self._iteration()
        for _ in range(iterations - 1):
            if self.at_epoch_end or self.stop_reason() is not None:
                break
            self.session.ensure_held()
            metrics = self._iteration()
        return metrics

    def _iteration(self) -> dict[str, float]:
        self.explore()
        self.store()
        self.sample()
        return self.update()

    def schedule(self, group: IterationGroup | None = None) -> Iterator[tuple[str, Callable[[], Any]]]:
        """The stages to run, in order, until training stops. Both drivers walk this.

        Args:
            group: asked before each iteration how many iterations the next stage runs: 0 (or no
                ``group``) yields the iteration's four stages, ``n >= 1`` one ``iterate`` stage of up
                to ``n`` iterations (fewer, coarser Prefect tasks when iterations are short).
        """
        while self.stop_reason() is None:
            self.session.ensure_held()  # a URL session whose lease was lost stops here, writing nothing
            iterations = group() if group is not None else 0
            if iterations:
                yield "iterate", functools.partial(self.iterate, iterations)
            else:
                yield from (("explore", self.explore), ("store", self.store))
                yield from (("sample", self.sample), ("update", self.update))
            if self.at_epoch_end:
                if self.test_due():
                    yield "test", self.test
                yield "log", self.log
                if self.save_due():
                    yield "checkpoint", self.checkpoint
        # stopped mid-epoch at a limit: log the partial epoch, then save it. A stop that was requested
        # (a signal) only saves it: the resumed run logs the whole epoch at its end, as a run never
        # stopped does, so MLflow and the journal get no step more (the checkpoint keeps the Monitor)
        if self._stop_reason is None and self.counters.frames != self.counters.last_log_frames:
            yield "log", self.log
        if self.counters.last_checkpoint != self.counters.iteration:
            yield "checkpoint", self.checkpoint

    def train(self, call: StageCall = call_directly, group: IterationGroup | None = None) -> str:
        """Train until finished, a limit or a signal; return why it stopped.

        A first SIGINT or SIGTERM finishes the iteration, checkpoints and returns; a second SIGINT
        interrupts at once. ``group`` is passed to :meth:`schedule`.
        """
        self.clock.start()
        with (
            StopOnSignals(self.request_stop),
            StatsSampler(self.settings.stats_interval, self.monitor)
            if self.settings.stats_interval
            else nullcontext(),
        ):
            for stage, function in self.schedule(group):
                call(stage, function)
        reason = self.stop_reason() or "finished"
        self.clock.account()
        if reason == "finished":
            self.session.mark_done(
                iterations=self.counters.iteration,
                frames=self.counters.frames,
                best_test_return=self.counters.best_test_return,
            )
        log.info(
            "training stopped: %s (iteration %d, %d frames)",
            reason,
            self.counters.iteration,
            self.counters.frames,
        )
        return reason

    def resolved_settings(self) -> dict[str, str]:
        """What the params left to the machine, as it was decided, and the evaluation protocol
        (``eval/*``), as MLflow params: each agent's
        :meth:`~digideep.agents.base.AgentBase.resolved_settings`, e.g. its update mode and where it
        samples its replay (``{"agents/<name>/resolved/update_mode": "eager"}``)."""
        protocol = EvaluationProtocol.of_params(self.params) if self.settings.test_interval > 0 else None
        agents = components.resolved_settings(self.agents)
        return {**agents, **(protocol.mlflow_params() if protocol else {})}

    def runner_info(self) -> dict[str, Any]:
        """What ``runner.json`` holds besides the versions (:func:`~digideep.pipeline.checkpointing.runner_info`)."""
        classes = self.built.class_paths()
        return runner_info(self.session, self.params, self.counters, classes, self.resolved_settings())

    def state_dict(self) -> dict[str, Any]:
        """The run's state, ``states.pt`` of a checkpoint (:meth:`~digideep.pipeline.run_state.RunState.state_dict`)."""
        return self.state.state_dict()

    def load_state_dict(self, state: dict[str, Any], prepared: dict[str, Readback] | None = None) -> None:
        """Restore :meth:`state_dict` (:meth:`~digideep.pipeline.run_state.RunState.load_state_dict`)."""
        self.state.load_state_dict(state, prepared)

    def stage_label(self, stage: str) -> str:
        """A readable name for a stage run, e.g. ``explore[epoch 3, iteration 120]``."""
        return f"{stage}[epoch {self.epoch}, iteration {self.counters.iteration}]"

    def close(self) -> None:
        """Close the environments, then wait for the memories' background writes and end their
        threads, so nothing writes into the session after its lock is released.

        A background write that failed since the last checkpoint is logged, not raised: resume
        returns the memory to that checkpoint, and a failure of the run itself is already on its
        way up (a lost lease refuses every write after it).
        """
        for explorer in self.explorers.values():
            explorer.close()
        for name, memory in self.built.durable.items():
            try:
                memory.close()
            except Exception as error:  # reported; the run resumes from its checkpoint
                log.warning(
                    "memory '%s': a background write after the last checkpoint failed: %s", name, error
                )
