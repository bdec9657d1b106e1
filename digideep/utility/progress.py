"""Training progress: a rich progress bar under the log lines on a terminal, plain lines elsewhere.

On a terminal the console log handler is :class:`rich.logging.RichHandler` and the bar a
:class:`rich.progress.Progress`, both on :data:`CONSOLE`, so log records print above the bar. When
stderr is a file or a pipe (CI, ``nohup``, a Prefect worker) the handler is a plain
``StreamHandler`` with one line per record and there is no bar: the per-epoch log lines
(:func:`digideep.pipeline.reporting.progress_line`) are the progress report.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

__all__ = ["CONSOLE", "REFRESH_SECONDS", "ProgressBar", "StderrHandler", "console_handler"]

CONSOLE = Console(stderr=True)
PLAIN_FORMAT = "%(asctime)s %(levelname)-7s %(message)s"


def console_handler() -> logging.Handler:
    """The console log handler: rich on a terminal (above the bar), plain lines elsewhere."""
    if CONSOLE.is_terminal:
        return RichHandler(console=CONSOLE, show_path=False, log_time_format="%H:%M:%S")
    handler = StderrHandler()
    handler.setFormatter(logging.Formatter(PLAIN_FORMAT, "%H:%M:%S"))
    return handler


class StderrHandler(logging.StreamHandler):
    """Plain lines to whatever ``sys.stderr`` is when a record is written.

    The console handler is installed once per process (``digideep.main``), while ``sys.stderr`` can
    be replaced after that and the replacement closed (pytest's capture, a caller that redirects
    stderr around an in-process ``cli()`` call); a handler holding the stream it was created with
    would then write into a closed file.
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        """Ignored: the stream is always the current ``sys.stderr``."""


REFRESH_SECONDS = 0.1
"""The shortest interval between two refreshes the Runner asks of the bar (:meth:`ProgressBar.due`)."""


class ProgressBar:
    """Iterations done, frames, train and test return, frames per second and time remaining.

    Does nothing when :data:`CONSOLE` is not a terminal (``enabled`` is False).

    Args:
        total: iterations of the whole run.
        completed: iterations already done (a resumed run).
    """

    def __init__(self, total: int, completed: int = 0) -> None:
        self.enabled = CONSOLE.is_terminal
        self._progress = Progress(
            TextColumn("epoch {task.fields[epoch]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[frames]:,} frames"),
            TextColumn("train {task.fields[train]} test {task.fields[test]}"),
            TextColumn("{task.fields[fps]:,.0f} frames/s"),
            TimeRemainingColumn(),
            console=CONSOLE,
        )
        self._task = self._progress.add_task(
            "train", total=total, completed=completed, epoch="", frames=0, train="-", test="-", fps=0.0
        )
        self._restore: list[tuple[logging.StreamHandler, Any]] = []
        self._shown = -math.inf

    def due(self) -> bool:
        """Whether :data:`REFRESH_SECONDS` passed since the last :meth:`update` (iterations of one
        frame come faster than a terminal shows them; what the fields cost is then spent less often)."""
        return self.enabled and time.monotonic() - self._shown >= REFRESH_SECONDS

    def update(self, completed: int, **fields: Any) -> None:
        """Show ``completed`` iterations and any of the fields ``epoch`` ("3/20"), ``frames``,
        ``fps``, ``train`` and ``test`` (returns); a field not given keeps the value shown before.
        """
        if self.enabled:
            self._shown = time.monotonic()
            for mode in ("train", "test"):
                if isinstance(fields.get(mode), float | int):
                    fields[mode] = f"{fields[mode]:.1f}"
            self._progress.update(self._task, completed=completed, **fields)

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            self._progress.start()  # from here sys.stderr is rich's proxy, which prints above the bar
            for handler in (*logging.getLogger().handlers, *logging.getLogger("prefect").handlers):
                if isinstance(handler, logging.StreamHandler) and handler.stream is sys.__stderr__:
                    self._restore.append((handler, handler.setStream(sys.stderr)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handler, stream in self._restore:
            handler.setStream(stream)
        self._restore.clear()
        if self.enabled:
            self._progress.stop()
