"""Which lines of a killed attempt's ``log.txt`` a retry sends to Prefect (:func:`flows.recovery.unsent_tail`),
and how a retry waits for an earlier attempt that still holds the session (a real holding process).

The end to end case (a deployment run killed with SIGKILL, retried on a real server) is
tests/flows/test_train_flow.py; these pin the matching on a log as the session writes it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from digideep.pipeline.run_logging import LOG_FORMAT
from digideep.pipeline.signals import StoppedBeforeStartError, catch_stop_signals
from digideep.storage.location import Location
from digideep.storage.session_lock import FolderLock
from flows.recovery import unsent_tail, wait_for_earlier_attempt


def log_lines(records: list[tuple[str, str]], error_at: int | None = None) -> list[str]:
    """``records`` (logger, message) formatted as the session's log.txt has them; one with a traceback."""
    formatter = logging.Formatter(LOG_FORMAT)
    lines = []
    for index, (name, message) in enumerate(records):
        record = logging.LogRecord(name, logging.INFO, __file__, 1, message, None, None)
        if index == error_at:
            try:
                raise RuntimeError("injected")
            except RuntimeError:
                record.exc_info = sys.exc_info()
        lines.extend(formatter.format(record).splitlines())
    return lines


RECORDS = [("digideep.pipeline.runner", f"epoch {i}/6") for i in range(1, 7)]


def test_the_lines_after_the_last_record_prefect_holds_are_sent():
    lines = log_lines(RECORDS)
    assert unsent_tail(lines, RECORDS[:4]) == lines[4:]
    assert unsent_tail(lines, RECORDS) == []


def test_a_records_traceback_goes_with_it_and_the_tail_is_bounded():
    lines = log_lines(RECORDS, error_at=3)
    assert any(line.startswith("Traceback") for line in lines)
    held = [
        (name, message + "\nTraceback ...") if i == 3 else (name, message)
        for i, (name, message) in enumerate(RECORDS[:4])
    ]
    assert unsent_tail(lines, held) == lines[-2:]  # epochs 5 and 6, not the held record's traceback
    assert unsent_tail(lines, [], limit=3) == lines[-3:]  # Prefect holds none: the newest lines


HOLD = """
import sys, time
from pathlib import Path
from digideep.storage.session_lock import FolderLock
lock = FolderLock(Path(sys.argv[1]))
lock.acquire(sys.argv[1])
print("held", flush=True)
time.sleep(float(sys.argv[2]))
lock.release()
"""


@contextmanager
def held(folder: Path, seconds: float) -> Iterator[subprocess.Popen]:
    """A process holding the session lock of ``folder`` for ``seconds`` (an attempt that runs on)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def test_a_retry_waits_for_an_earlier_attempt_that_still_holds_the_session(tmp_path, caplog):
    logger = logging.getLogger("test.recovery")
    with caplog.at_level(logging.INFO, "test.recovery"), held(tmp_path, 2.0) as holder:
        waited = wait_for_earlier_attempt(Location(tmp_path), 2, logger, poll=0.1)
        assert holder.wait(timeout=30) == 0  # it let go at the end of its 2 s
    assert waited > 1.0
    assert f"attempt 2: session {tmp_path} is still in use by process {holder.pid} on" in caplog.text
    assert "is free after" in caplog.text
    lock = FolderLock(tmp_path)
    lock.acquire(tmp_path)  # the retry's Session takes it next
    lock.release()


def test_a_retry_after_a_kill_finds_the_session_free_and_waits_for_nothing(tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        assert wait_for_earlier_attempt(Location(tmp_path), 2, logging.getLogger("test.recovery")) == 0.0
    assert "in use" not in caplog.text


def test_a_stop_signal_ends_the_wait(tmp_path):
    with held(tmp_path, 60.0), catch_stop_signals(), pytest.raises(StoppedBeforeStartError):
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for_earlier_attempt(Location(tmp_path), 2, logging.getLogger("test.recovery"), poll=0.1)
