"""Which lines of a killed attempt's ``log.txt`` a retry sends to Prefect (:func:`flows.recovery.unsent_tail`).

The end to end case (a deployment run killed with SIGKILL, retried on a real server) is
tests/flows/test_train_flow.py; these pin the matching on a log as the session writes it.
"""

from __future__ import annotations

import logging
import sys

from digideep.pipeline.run_logging import LOG_FORMAT
from flows.recovery import unsent_tail


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
