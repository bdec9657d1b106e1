"""The faults, one function per kind: each runs a session into its fault and returns where it struck.

A kind gets a :class:`Trial` (its session, driver, environment and random stream) and leaves the
session to :func:`bench.faults.trial.judge`, which resumes it to its end and compares it.
"""

from __future__ import annotations

import random
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.faults.run import Driver, Ended, Process, journal_records
from digideep.storage.checkpoint import COMMIT_FILE, STATES_FILE, find_checkpoints

STOP_BOUND = 60.0
"""Seconds a Ctrl-C or SIGTERM may take to stop a run (it takes a few): past it the stop hangs."""
LOST_AFTER = 5.0
"""Seconds after a stop's signal past which a run that writes ``done.json`` trained on: the signal was lost."""
OUTAGE_SECONDS = (18.0, 22.0)
"""How long the object store stays down in an ``s3-outage`` trial (under the 120 s of retries)."""

ORPHANS = [0]
"""Processes that commands killed with SIGKILL left running, over the benchmark (the bench stops them)."""


@dataclass
class Trial:
    """One faulted session and what its fault needs; a kind fills in ``where`` and the rest."""

    root: Path | str  # the session path: a folder, or s3://bucket/sessions
    name: str
    driver: Driver
    env: dict[str, str]
    cpanel: dict
    wall: float  # seconds the reference run of this path took
    rng: random.Random
    logs: Path
    where: str = ""
    stop_steps: set[int] = field(default_factory=set)  # steps of a stop's own checkpoint
    problem: str | None = None  # a fault that went wrong itself (a stop that hung, a traceback)
    cwd: Path | None = None

    @property
    def last_record(self) -> int:
        """The journal record a kill may follow at most: a few before the run's end (10 of 6 epochs)."""
        return 2 * self.cpanel["number_epochs"] - 2

    @property
    def session(self) -> Path:
        return Path(self.root) / self.name

    def start(self, command: list[str], tag: str) -> Process:
        kwargs = {"cwd": self.cwd} if self.cwd is not None else {}
        return Process(command, self.env, self.logs / f"{self.name}-{tag}.log", **kwargs)

    def train(self) -> Process:
        return self.start(self.driver.train(self.root, self.name, self.cpanel), "train")

    def note(self, ended: Ended | None, what: str) -> None:
        """Add ``what`` to ``where``; a kill that found processes left running says how many."""
        self.where = f"{self.where}, {what}" if self.where else what
        if ended is None:
            self.where += " (ended first)"
        elif ended.orphans:
            ORPHANS[0] += ended.orphans
            self.where += f" ({ended.orphans} process(es) of it left running, stopped by the bench)"


def after_record(trial: Trial, records: int, delay: float) -> Callable[[], bool]:
    """True ``delay`` seconds after the journal holds ``records`` records."""
    seen: list[float] = []

    def condition() -> bool:
        if not seen and journal_records(trial.session) >= records:
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= delay

    return condition


def kill_random(trial: Trial) -> None:
    """SIGKILL up to 1.5 s after a random journal record (a random moment of an iteration)."""
    records, delay = trial.rng.randint(1, trial.last_record), trial.rng.uniform(0.0, 1.5)
    trial.note(
        trial.train().kill_when(after_record(trial, records, delay)),
        f"killed {delay:.2f} s after record {records}",
    )


def kill_at_checkpoint(trial: Trial) -> None:
    """SIGKILL while the n-th checkpoint is written (its files, no commit yet), or once committed."""
    nth, staging = trial.rng.randint(1, 3), trial.rng.random() < 0.5
    checkpoints = trial.session / "checkpoints"

    def condition() -> bool:
        done = len(list(checkpoints.glob(f"checkpoint-*/{COMMIT_FILE}")))
        written = {f.parent for f in checkpoints.glob(f"checkpoint-*/{STATES_FILE}")}
        writing = staging and any(not (folder / COMMIT_FILE).exists() for folder in written)
        return done >= nth or (done == nth - 1 and writing)

    state = "while written" if staging else "committed"
    trial.note(trial.train().kill_when(condition), f"killed at checkpoint {nth} ({state})")


def kill_after_journal(trial: Trial) -> None:
    """SIGKILL right after the metrics journal grew (while the tracker's thread sends and flushes)."""
    records = trial.rng.randint(1, trial.last_record)
    trial.note(trial.train().kill_when(after_record(trial, records, 0.0)), f"killed after record {records}")


def kill_resume_too(trial: Trial) -> None:
    """A random kill, then the resume itself killed at a random moment."""
    kill_random(trial)
    if (trial.session / "session.json").exists() and not (trial.session / "done.json").exists():
        resume = trial.start(trial.driver.resume(trial.root, trial.name), "resume-killed")
        delay = trial.rng.uniform(0.05, 0.5) * trial.wall  # start-up, rebuild, replay
        trial.note(
            resume.kill_when(lambda: time.monotonic() - resume.started >= delay),
            f"resume killed after {delay:.1f} s",
        )


def kill_finished(trial: Trial) -> None:
    """SIGKILL right after ``done.json`` appears (before the MLflow run is ended)."""
    trial.note(trial.train().kill_when((trial.session / "done.json").exists), "killed after done.json")


def kill_while_store_created(trial: Trial) -> None:
    """SIGKILL 0-0.5 s after the embedded MLflow store began to be built in a fresh data root.

    The trial's environment has no ``MLFLOW_TRACKING_URI``: the run creates ``<data>/mlflow.db``
    beside its sessions folder, in a temporary file (``.mlflow.db.<pid>.building``) renamed into place.
    """
    data, delay, began = Path(trial.root).parent, trial.rng.uniform(0.0, 0.5), []

    def condition() -> bool:
        if not began and any(data.glob(".mlflow.db.*")):
            began.append(time.monotonic())
        return bool(began) and time.monotonic() - began[0] >= delay

    ended = trial.train().kill_when(condition)
    left = "store whole" if (data / "mlflow.db").exists() else "no store"
    trial.note(ended, f"killed {delay:.2f} s into the store's creation ({left})")


def stop_with(signum: int) -> Callable[[Trial], None]:
    """A Ctrl-C (SIGINT) or SIGTERM to the process group at a random moment (one in five while the
    command starts, else up to 1.5 s after a random journal record); it must exit within
    :data:`STOP_BOUND` with 128 + signal and one line saying how to resume (or 0 when it had finished)."""

    def stop(trial: Trial) -> None:
        process = trial.train()
        if trial.rng.random() < 0.2:  # while it starts: imports, checks, stores, the Prefect server
            moment, delay = 0, trial.rng.uniform(0.5, 5.0)
            due = lambda: time.monotonic() - process.started >= delay  # noqa: E731
        else:  # mid-training: up to 1.5 s after a random journal record
            moment, delay = trial.rng.randint(1, trial.last_record), trial.rng.uniform(0.0, 1.5)
            due = after_record(trial, moment, delay)
        while process.running() and not due():
            time.sleep(0.01)
        signalled, signalled_at = time.monotonic(), time.time()
        process.signal_group(signum)
        ended = process.wait(timeout=STOP_BOUND)
        seconds = time.monotonic() - signalled
        name = signal.Signals(signum).name
        when = f"{delay:.1f} s after record {moment}" if moment else f"{delay:.1f} s after the start"
        trial.note(ended, f"{name} {when}, exit {ended.code} in {seconds:.1f} s")
        stopped = re.search(rf"digideep: stopped by {name} at iteration (\d+)", ended.stderr)
        if stopped:
            trial.stop_steps.add(int(stopped.group(1)) * trial.cpanel["n_steps"])
        done = trial.session / "done.json"
        if "Traceback" in ended.stderr or seconds >= STOP_BOUND:
            trial.problem = f"the stop: {ended.last_line()}"
        elif done.exists() and done.stat().st_mtime > signalled_at + LOST_AFTER:
            trial.problem = f"the {name} was lost: the run trained on and finished {done.stat().st_mtime - signalled_at:.0f} s later, exit {ended.code}"
        elif ended.code == -signum and (trial.session / "done.json").exists():
            trial.where += " (the signal ended it after training, with no line)"
        elif ended.code not in (0, 128 + signum) or (
            ended.code == 0 and not (trial.session / "done.json").exists()
        ):
            trial.problem = f"the stop exited {ended.code}: {ended.last_line()}"

    return stop


def s3_outage(outage) -> Callable[[Trial], None]:
    """The store (moto behind :class:`tests.s3.StoreOutage`) goes down for ~20 s at a random moment."""

    def cut(trial: Trial) -> None:
        process = trial.train()
        delay, seconds = trial.rng.uniform(0.1, 0.7) * trial.wall, trial.rng.uniform(*OUTAGE_SECONDS)
        while process.running() and time.monotonic() - process.started < delay:
            time.sleep(0.01)
        back = outage.down_for(seconds) if process.running() else None
        ended = process.wait()
        if back is not None:
            back.join()
        trial.note(ended, f"store down {seconds:.0f} s from {delay:.1f} s, exit {ended.code}")
        if ended.code != 0 and not ended.one_line_refusal:
            trial.problem = f"the run: {ended.last_line()}"

    return cut


def damaged(damage: Callable[[Trial], str]) -> Callable[[Trial], None]:
    """SIGKILL after a random checkpoint (and a moment more), then ``damage`` the session."""

    def fault(trial: Trial) -> None:
        nth, delay = (
            trial.rng.randint(1, min(3, trial.cpanel["number_epochs"] - 1)),
            trial.rng.uniform(0.0, 1.0),
        )
        checkpoints, reached = trial.session / "checkpoints", []

        def condition() -> bool:
            if not reached and checkpoints.is_dir() and len(find_checkpoints(checkpoints)) >= nth:
                reached.append(time.monotonic())
            return bool(reached) and time.monotonic() - reached[0] >= delay

        trial.note(trial.train().kill_when(condition), f"killed {delay:.1f} s after checkpoint {nth}")
        trial.note(Ended(0, ""), damage(trial))

    return fault


def flip_low_bit(file: Path, rng: random.Random, align: int = 4) -> int:
    """Flip the lowest bit of a random ``align``-aligned byte of ``file`` (a float32's lowest mantissa bit)."""
    data = bytearray(file.read_bytes())
    offset = rng.randrange(0, len(data) // align) * align
    data[offset] ^= 1
    file.write_bytes(bytes(data))
    return offset


def damage_chunk(trial: Trial) -> str:
    """A low bit flipped in a random chunk file of the replay memory's log (rows or final presteps)."""
    store = trial.session / "memory" / "train.zarr"
    chunks = sorted(f for f in store.rglob("c/**/*") if f.is_file())
    file = trial.rng.choice(chunks)
    offset = flip_low_bit(file, trial.rng)
    return f"bit flipped at byte {offset} of {file.relative_to(store)}"


def damage_checkpoint(trial: Trial) -> str:
    """A low bit flipped in the newest checkpoint's ``states.pt``."""
    newest = find_checkpoints(trial.session / "checkpoints")[-1].path
    offset = flip_low_bit(newest / "states.pt", trial.rng, align=1)
    return f"bit flipped at byte {offset} of {newest.name}/states.pt (ring {trial.cpanel['buffer_size']})"
