"""A live progress line on a terminal; nothing extra when the output is not one.

On a terminal, :class:`LiveLine` keeps one line at the bottom of the console, rewritten in place
(after every training iteration), and clears it before any log record is printed so that log lines
stay whole. When stderr is a file or a pipe (CI, ``nohup``, a Prefect worker) it does nothing and
the per-epoch log lines are the progress report.
"""

from __future__ import annotations

import logging
import shutil
import sys
from typing import TextIO

__all__ = ["LiveLine"]

_CLEAR = "\r\x1b[K"


class _ClearBeforeRecord(logging.Filter):
    """Clears the live line before a console handler prints a record."""

    def __init__(self, line: LiveLine) -> None:
        super().__init__()
        self.line = line

    def filter(self, record: logging.LogRecord) -> bool:
        self.line.clear()
        return True


class LiveLine:
    """One status line rewritten in place on a terminal.

    Args:
        stream: where to write (stderr by default); the line is shown only if it is a TTY.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self._shown = False
        self._filter = _ClearBeforeRecord(self)
        self._handlers: list[logging.Handler] = []

    def show(self, text: str) -> None:
        """Replace the line with ``text`` (cut to the terminal's width)."""
        if self.enabled:
            width = shutil.get_terminal_size((120, 20)).columns - 1
            self.stream.write(_CLEAR + text[:width])
            self.stream.flush()
            self._shown = True

    def clear(self) -> None:
        if self._shown:
            self.stream.write(_CLEAR)
            self.stream.flush()
            self._shown = False

    def __enter__(self) -> LiveLine:
        if self.enabled:
            for handler in logging.getLogger().handlers:
                if getattr(handler, "stream", None) is self.stream:
                    handler.addFilter(self._filter)
                    self._handlers.append(handler)
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()
        for handler in self._handlers:
            handler.removeFilter(self._filter)
        self._handlers.clear()
