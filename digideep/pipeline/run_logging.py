"""The session's ``log.txt``: a copy of the process's log lines while a run holds the session.

The run (:func:`digideep.pipeline.training.open_run`) attaches a :class:`RunLog` once it holds the
session and closes it when the run ends; the Session itself only keeps the folder and its lock. A
URL session's ``log.txt`` lives in its local working folder and is uploaded by
:class:`~digideep.storage.upload_cache.UploadCache`.
"""

from __future__ import annotations

import logging
from pathlib import Path

__all__ = ["LOG_FORMAT", "RunLog"]

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
"""The format of a line of ``log.txt`` (``flows/recovery.py`` parses it back)."""


class RunLog:
    """Copies every record of the root logger into ``path`` (appending), until :meth:`close`.

    Args:
        path: the log file, e.g. ``<session>/log.txt``; a resumed run's log goes on where it ended.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handler: logging.Handler | None = logging.FileHandler(path, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logging.getLogger().addHandler(self._handler)

    def close(self) -> None:
        """Detach the file from the root logger and close it. Safe to call twice."""
        if self._handler is not None:
            logging.getLogger().removeHandler(self._handler)
            self._handler.close()
            self._handler = None

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunLog({str(self.path)!r})"
