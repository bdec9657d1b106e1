"""The local working folder of a session on object storage, and what is uploaded from it.

A URL session (``s3://bucket/runs/<name>``) writes most files straight to the store, but files that
grow line by line are kept in a local working folder, ``data/cache/<name>-<hash of the URL>/``
(:func:`working_folder`), and uploaded: ``log.txt`` and the metrics journal ``metrics.jsonl`` at
every checkpoint (before its commit, by the Runner) and when the run ends, ``videos/`` and the
learning curve when it ends (:meth:`UploadCache.upload_all`). Reopening a URL session to run it
downloads the log and the journal first (:func:`restore_working_files`), so the log goes on and the
journal is rewound to the checkpoint as on disk. For a local session every method is a no-op: its
files are in place.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from digideep.storage.files import atomic_write_bytes
from digideep.storage.location import Location

__all__ = ["CACHE_ROOT", "UPLOADED", "UploadCache", "restore_working_files", "working_folder"]

log = logging.getLogger(__name__)

CACHE_ROOT = Path("data") / "cache"
"""Local working folders of sessions on object storage (``<name>-<hash of the URL>``)."""
UPLOADED = ("log.txt", "metrics.jsonl", "learning_curve.png")
"""Files of a URL session's working folder that are uploaded to it (with ``videos/``)."""
RESTORED = ("log.txt", "metrics.jsonl")
"""Files downloaded into the working folder when a URL session is reopened to run."""


def working_folder(url: str, name: str) -> Path:
    """The local working folder of the URL session ``url``: ``data/cache/<name>-<8 hex of the URL>``."""
    return CACHE_ROOT / f"{name}-{hashlib.sha256(url.encode()).hexdigest()[:8]}"


def restore_working_files(location: Location, folder: Path) -> None:
    """Download the log and the journal of the URL session at ``location`` into ``folder``.

    A file the session does not hold yet is removed from ``folder`` (a stale copy of an earlier run).
    """
    for name in RESTORED:
        local = folder / name
        try:
            atomic_write_bytes(local, (location / name).read_bytes())
        except FileNotFoundError:
            local.unlink(missing_ok=True)


class UploadCache:
    """Uploads a URL session's working files to it; does nothing for a local session.

    Args:
        location: the session (a local folder or a URL).
        folder: the local folder the files are written in: the session's folder, or for a URL
            session its working folder (:func:`working_folder`).
    """

    def __init__(self, location: Location, folder: Path) -> None:
        self.location = location
        self.folder = folder
        self.remote = not location.is_local

    def upload(self, *names: str) -> None:
        """Copy working-folder files (``log.txt``, ``metrics.jsonl``, ...) to the URL session.

        Missing files are skipped.
        """
        if not self.remote:
            return
        for name in names:
            local = self.folder / name
            if local.is_file():
                (self.location / name).put_file(local)

    def upload_all(self) -> None:
        """Upload the log, the journal, the learning curve and the videos not yet uploaded."""
        if not self.remote:
            return
        self.upload(*UPLOADED)
        videos = self.folder / "videos"
        if videos.is_dir():
            present = (self.location / "videos").files()
            for video in sorted(videos.rglob("*")):
                name = video.relative_to(videos).as_posix()
                if video.is_file() and name not in present:
                    (self.location / "videos" / name).put_file(video)

    def close(self) -> None:
        """Upload everything at the end of a run; a failure costs a warning (the checkpoints are
        committed; losing a log tail is not fatal)."""
        try:
            self.upload_all()
        except Exception as error:
            log.warning("could not upload the session's files to %s: %s", self.location.url, error)

    def __repr__(self) -> str:
        return f"UploadCache({self.location.url!r})"
