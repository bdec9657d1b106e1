"""Play a checkpoint: run its policy deterministically in the eval explorer and report the returns.

The original Digideep built a Runner "either from an existing checkpoint or from the parameters
file"; playing is the first. The session is opened without its lock, so a checkpoint can be played
while its run is still training. Videos (``video=True``) go to ``<session>/videos/`` as one MP4 per
episode.
"""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path

from digideep.agents.update_modes import acting_only
from digideep.errors import UsageError
from digideep.pipeline.devices import DeviceChoice
from digideep.pipeline.resuming import from_checkpoint
from digideep.storage.checkpoint import read_runner_info
from digideep.storage.location import Location, location_of
from digideep.storage.session import Session
from digideep.utility.user_code import IMPORT_PATHS, use_code_folders

__all__ = ["play"]

log = logging.getLogger(__name__)


def play(
    checkpoint: str | Path,
    *,
    episodes: int | None = None,
    video: bool = False,
    device: str | None = None,
    deterministic: bool = False,
) -> list[float]:
    """Run the eval explorer of ``checkpoint`` for ``episodes`` episodes; return their returns.

    ``device`` and ``deterministic`` are ``--device`` and ``--deterministic``
    (:class:`~digideep.pipeline.devices.DeviceChoice`).

    Raises:
        UsageError: the checkpoint is missing, damaged or not inside a session folder, or a class it
            names does not import from the folders recorded with it.
    """
    path = location_of(checkpoint)  # a local folder or a URL (a session on object storage)
    info = read_runner_info(path)
    if path.local is not None:
        folder = path.local.absolute().parent
        root, session_name, folder_name = folder.parent.parent, folder.parent.name, folder.name
    else:  # s3://bucket/<root>/<session>/checkpoints/checkpoint-N
        root, session_name, folder_name = path.url.rstrip("/").rsplit("/", 3)[:3]
    if folder_name != "checkpoints":
        raise UsageError(f"checkpoint '{path}' is not inside a session's checkpoints/ folder")
    params = copy.deepcopy(info["params"])
    eval_params = params["explorer"].get("eval") or dict(params["explorer"]["test"])
    eval_params.update(
        deterministic=True, n_steps=None, n_episodes=episodes or eval_params.get("n_episodes") or 5
    )
    eval_params["render"] = video
    params["explorer"] = {"eval": eval_params}
    for spec in params["agents"].values():  # acting only: a cudagraphs session plays on a CPU too
        spec["args"] = acting_only(spec.get("args", {}))
    # the run's own code imports from the folders it was recorded in, before anything opens
    use_code_folders(info[IMPORT_PATHS], params, f"session '{root}/{session_name}'")
    devices = DeviceChoice(device, deterministic)
    session = Session(root=root, name=session_name, resume=True, lock=False)
    before = set(session.videos_path.glob("*.mp4"))
    runner = from_checkpoint(session, path, devices=devices, modes=("eval",), params=params)
    try:
        chunk = runner.explorers["eval"].update()
    finally:
        runner.close()
        session.close()
    if video:
        _keep_videos(session, path, sorted(set(session.videos_path.glob("*.mp4")) - before))
    # the last step can end more episodes than asked for (several workers): keep the last n
    returns = chunk.episodes.returns.tolist()[-eval_params["n_episodes"] :]
    if returns:
        log.info("played %d episodes: mean return %.2f", len(returns), sum(returns) / len(returns))
    return returns


def _keep_videos(session: Session, checkpoint: Location, videos: list[Path]) -> None:
    """Move this play's videos to ``videos/<checkpoint>-<time>/`` and attach them to the MLflow run."""
    if not videos:
        return
    folder = session.videos_path / f"{checkpoint.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(exist_ok=True)
    for video in videos:
        video.rename(folder / video.name)
    log.info("videos in %s", folder)
    from digideep.tracking.tracker import log_videos  # mlflow is imported only when there are videos

    log_videos(session.info(), folder)
