"""Training on a terminal shows a progress bar under the log lines; elsewhere only plain log lines."""

from __future__ import annotations

import io
import logging
import os
import pty
import re
import select
import subprocess
import sys

from digideep.utility.progress import StderrHandler
from tests.conftest import REPO

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
TRAIN = [
    sys.executable, "-m", "digideep.main", "--params", "docs/examples/cartpole_reinforce.py", "--no-prefect",
    "--session-name", "demo", "--cpanel", '{"number_epochs": 2, "tracking": false}',
]  # fmt: skip


def project(tmp_path):
    (tmp_path / "docs").symlink_to(REPO / "docs")
    return {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "160"}


def test_a_terminal_shows_the_bar_and_the_per_epoch_lines_above_it(tmp_path):
    env = project(tmp_path)
    controller, terminal = pty.openpty()
    process = subprocess.Popen(TRAIN, cwd=tmp_path, env=env, stdin=terminal, stdout=terminal, stderr=terminal)
    os.close(terminal)
    output = b""
    while True:
        if select.select([controller], [], [], 1)[0]:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed: the process exited
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    os.close(controller)
    assert process.wait(timeout=60) == 0
    shown = ESCAPES.sub("", output.decode(errors="replace"))
    assert re.search(
        r"epoch 2/2 .*10/10 5,120 frames train -?\d+\.\d test -?\d+\.\d [\d,]+ frames/s 0:00:00", shown
    )
    assert re.search(r"INFO +epoch 1/2 \| frames 2,560 \| train return", shown)  # printed above the bar


def test_elsewhere_the_output_is_plain_log_lines(tmp_path):
    result = subprocess.run(
        TRAIN, cwd=tmp_path, env=project(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\x1b" not in result.stderr and "\r" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "| frames " in line]
    assert [line.split(" INFO    ")[1].split(" | ")[:2] for line in lines] == [
        ["epoch 1/2", "frames 2,560"],
        ["epoch 2/2", "frames 5,120"],
    ]


def test_the_plain_handler_writes_to_the_current_stderr_even_after_the_first_one_closed(monkeypatch):
    """An in-process cli() under a capture that ends must not leave a handler on a closed file."""
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    handler = StderrHandler()  # made while the first stderr is in place, as cli() under a capture
    record = logging.LogRecord("digideep", logging.INFO, __file__, 1, "first", None, None)
    handler.handle(record)
    first.close()
    monkeypatch.setattr(sys, "stderr", second)
    handler.handle(logging.LogRecord("digideep", logging.INFO, __file__, 1, "second", None, None))
    assert second.getvalue() == "second\n"
