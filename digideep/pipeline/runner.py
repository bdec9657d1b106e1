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
inside the Runner. The checkpoint stage and the Runner's state (``state_dict``, ``from_checkpoint``)
live in :mod:`digideep.pipeline.runner_state`.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import numpy as np

from digideep.errors import UsageError
from digideep.pipeline import components
from digideep.pipeline.counters import Counters
from digideep.pipeline.devices import configure_determinism, requested_determinism
from digideep.pipeline.evaluation import RETURN_METRIC, EvaluationProtocol
from digideep.pipeline.reporting import Progress, metrics_from_summaries, progress_fields, progress_line
from digideep.pipeline.rng import seed_everything
from digideep.pipeline.runner_state import RunnerStateMixin, resume_checkpoint
from digideep.pipeline.session import Session
from digideep.pipeline.signals import StopOnSignals
from digideep.pipeline.upload_cache import UploadCache
from digideep.storage.checkpoint import find_checkpoints
from digideep.storage.lease import LEASE_MARGIN
from digideep.storage.location import Location
from digideep.tracking.journal import JOURNAL_FILE, MetricsJournal
from digideep.utility.monitoring import Monitor, monitor
from digideep.utility.profiling import KeepTime, profiler
from digideep.utility.stats import StatsSampler

__all__ = ["ITERATION_STAGES", "IterationGroup", "Runner", "StageCall", "resume_checkpoint"]

log = logging.getLogger(__name__)

ITERATION_STAGES = ("explore", "store", "sample", "update")
StageCall = Callable[[str, Callable[[], Any]], Any]
"""``call(stage_name, stage_function) -> result``: how a driver runs one stage."""
IterationGroup = Callable[[], int]
"""``group() -> n``: how many iterations the next stage runs (0: the iteration's four stages)."""


def call_directly(stage: str, function: Callable[[], Any]) -> Any:
    """The plain driver: run the stage in place."""
    return function()


class Runner(RunnerStateMixin):
    """Builds the components of a run from its params tree and trains them.

    Args:
        session: the run's Session.
        params: the resolved params tree (see ``params/*.py``).
        tracker: optional experiment tracker with ``flush(force)``, ``log_checkpoint(path, kept)`` and
            ``finish(status)`` that sends what ``journal`` holds (see ``digideep.tracking``).
        modes: which explorers to build (``train``/``test`` for training, ``eval`` for play).
        journal: the session's metrics journal; ``<session>/metrics.jsonl`` by default when training.
        uploads: what uploads a URL session's working files at each checkpoint (before its commit);
            the session's own :class:`~digideep.pipeline.upload_cache.UploadCache` by default.

    Attributes:
        monitor: the run's own :class:`~digideep.utility.monitoring.Monitor`: episode statistics of
            the explorers, the agents' update metrics and CPU/GPU figures. :meth:`log` summarises it
            together with the process-wide ``monitor`` (ad-hoc values from anywhere, such as the
            sampler's debug units) and resets both; only this one is checkpointed.
    """

    def __init__(
        self,
        session: Session,
        params: dict[str, Any],
        *,
        tracker: Any = None,
        modes: tuple[str, ...] = ("train", "test"),
        journal: MetricsJournal | None = None,
        uploads: UploadCache | None = None,
    ) -> None:
        self.session = session
        self.uploads = uploads if uploads is not None else UploadCache(session.location, session.path)
        self.params = params
        self.tracker = tracker
        if journal is None and "train" in modes:
            journal = MetricsJournal(session.path / JOURNAL_FILE)
        self.journal = journal
        settings = params["runner"]
        self.number_epochs: int = settings["number_epochs"]
        self.epoch_size: int = settings["epoch_size"]
        self.test_interval: int = settings.get("test_interval", 1)
        self.save_interval: int = settings.get("save_interval", 1)
        self.keep_checkpoints: int = settings.get("keep_checkpoints", 3)
        self.max_wall_time: float | None = settings.get("max_wall_time")
        self.max_iterations: int | None = _iteration_cap(settings.get("max_iterations"))
        self.seed: int = settings.get("seed", 0)
        self.stats_interval: float = settings.get(
            "stats_interval", 5.0
        )  # seconds between CPU/GPU samples; 0: off
        device_settings = params.get("session", {})
        session.configure_device(device_settings.get("device"))  # before any agent picks its device
        configure_determinism(
            requested_determinism(session.deterministic, device_settings.get("deterministic"))
        )
        seed_everything(self.seed)

        self.counters = Counters()
        self.built = components.build(session, params, modes=modes)
        self.agents = self.built.agents
        for name, agent in self.agents.items():
            if agent.update_mode is not None and "train" in modes:  # (play builds agents that never learn)
                log.info(
                    "agent '%s': the update runs %s (%s)", name, agent.update_mode, agent.update_mode_reason
                )
        self.memories = self.built.memories
        if (
            session.remote
        ):  # a host that lost the session's lease writes no memory chunk beside the new holder
            for memory in self.memories.values():
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
        self._wall_start: float | None = None
        self._log_start = time.perf_counter()

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
        return self.counters.iteration // self.epoch_size

    @property
    def at_epoch_end(self) -> bool:
        """Whether the last iteration completed an epoch (test, log and checkpoint come next)."""
        return self.counters.iteration % self.epoch_size == 0

    def test_due(self) -> bool:
        """Every ``test_interval`` epochs, and at the last epoch (so the last evaluation lands at the
        frame budget, :mod:`digideep.pipeline.evaluation`); never with ``test_interval`` 0."""
        if "test" not in self.explorers or self.test_interval <= 0:
            return False
        return self.epoch % self.test_interval == 0 or self.epoch == self.number_epochs

    def save_due(self) -> bool:
        return self.save_interval > 0 and self.epoch % self.save_interval == 0

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
        summary = {**monitor.summary(), **self.monitor.summary()}  # the process-wide one: ad-hoc values
        metrics = metrics_from_summaries(summary, profiler.summary())
        metrics["charts/frames_per_second"] = self._frames_per_second()
        self._log_start = time.perf_counter()
        self.counters.last_log_frames = self.counters.frames
        metrics["charts/epoch"] = float(self.epoch)
        metrics["charts/iteration"] = float(self.counters.iteration)
        if self._evaluation is not None:  # this epoch's evaluation alone, unlike the windowed test return
            metrics[RETURN_METRIC] = self._evaluation
            self._evaluation = None
        if self.journal is not None:  # on disk first; the tracker sends what the journal holds
            self.journal.append(self.counters.frames, metrics)
        if self.tracker is not None:
            self.tracker.flush(force=False)
        log.info(progress_line(self.progress(), metrics))
        self.monitor.reset()
        monitor.reset()
        profiler.reset()
        return metrics

    # -- the schedule -------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """Whether ``number_epochs`` epochs are done."""
        return self.epoch >= self.number_epochs

    def stop_reason(self) -> str | None:
        """Why training should stop now (finished, a limit, a signal), or None to go on."""
        if self._stop_reason:
            return self._stop_reason
        if self.finished:
            return "finished"
        if self.max_iterations is not None and self.counters.iteration >= self.max_iterations:
            return f"max_iterations={self.max_iterations} reached"
        if self.max_wall_time is not None and self._wall_time_now() >= self.max_wall_time:
            return f"max_wall_time={self.max_wall_time}s reached"
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
        self._wall_start = time.perf_counter()
        with (
            StopOnSignals(self.request_stop),
            StatsSampler(self.stats_interval, self.monitor) if self.stats_interval else nullcontext(),
        ):
            for stage, function in self.schedule(group):
                call(stage, function)
        reason = self.stop_reason() or "finished"
        self._account_wall_time()
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

    def trained_checkpoints(self) -> dict[str, Location]:
        """What training produced: ``{"final": newest checkpoint, "best": best-testing one}``.

        The caller logs them as models once :meth:`train` returned ``"finished"`` (the tracker's
        ``log_models``, see :func:`digideep.pipeline.training.run_training`); a checkpoint that
        retention removed is left out.
        """
        found = {c.iteration: c.location for c in find_checkpoints(self.session.checkpoints_location)}
        wanted = {"final": self.counters.last_checkpoint, "best": self.counters.best_checkpoint}
        return {which: found[iteration] for which, iteration in wanted.items() if iteration in found}

    def status_fields(self) -> dict[str, Any]:
        """The progress bar's fields between logs: returns so far this interval, speed since the last log."""
        summary = self.monitor.summary()
        metrics = {
            f"explore/{mode}/episode_return": summary[name]["mean"]
            for mode in ("train", "test")
            if (name := f"/explore/{mode}/episode_return") in summary
        }
        metrics["charts/frames_per_second"] = self._frames_per_second()
        return progress_fields(self.progress(), metrics)

    def progress(self) -> Progress:
        """Where the run stands, for the progress line and bar."""
        return Progress(
            epoch=self.epoch,
            number_epochs=self.number_epochs,
            iteration=self.counters.iteration,
            epoch_size=self.epoch_size,
            frames=self.counters.frames,
            wall_time=self._wall_time_now(),
        )

    def _frames_per_second(self) -> float:
        """Train frames per second since the last log stage."""
        elapsed = max(time.perf_counter() - self._log_start, 1e-9)
        return (self.counters.frames - self.counters.last_log_frames) / elapsed

    def resolved_settings(self) -> dict[str, str]:
        """The agents' resolved settings and the evaluation protocol (``eval/*``), as MLflow params."""
        protocol = EvaluationProtocol.of_params(self.params) if self.test_interval > 0 else None
        return {**super().resolved_settings(), **(protocol.mlflow_params() if protocol else {})}

    def stage_label(self, stage: str) -> str:
        """A readable name for a stage run, e.g. ``explore[epoch 3, iteration 120]``."""
        return f"{stage}[epoch {self.epoch}, iteration {self.counters.iteration}]"

    # -- wall time ----------------------------------------------------------------------------
    def _wall_time_now(self) -> float:
        running = time.perf_counter() - self._wall_start if self._wall_start is not None else 0.0
        return self.counters.wall_time + running

    def _account_wall_time(self) -> None:
        if self._wall_start is not None:
            now = time.perf_counter()
            self.counters.wall_time += now - self._wall_start
            self._wall_start = now

    def close(self) -> None:
        """Close the environments, then wait for the memories' background writes and end their
        threads, so nothing writes into the session after its lock is released.

        A background write that failed since the last checkpoint is logged, not raised: resume
        returns the memory to that checkpoint, and a failure of the run itself is already on its
        way up (a lost lease refuses every write after it).
        """
        for explorer in self.explorers.values():
            explorer.close()
        for name, memory in self.memories.items():
            try:
                memory.close()
            except Exception as error:  # reported; the run resumes from its checkpoint
                log.warning(
                    "memory '%s': a background write after the last checkpoint failed: %s", name, error
                )


def _iteration_cap(max_iterations: int | None) -> int | None:
    """``max_iterations`` from params, lowered by ``$DIGIDEEP_MAX_ITERATIONS`` when that is set.

    The variable smoke-tests a parameter file (``DIGIDEEP_MAX_ITERATIONS=1 digideep train ...``):
    the run stops after that many iterations with a checkpoint, as at any limit.
    """
    cap = os.environ.get("DIGIDEEP_MAX_ITERATIONS")
    if not cap:
        return max_iterations
    if not cap.isdigit() or int(cap) < 1:
        raise UsageError(f"DIGIDEEP_MAX_ITERATIONS must be a positive integer, got '{cap}'")
    return int(cap) if max_iterations is None else min(int(cap), max_iterations)
