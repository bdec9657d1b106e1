"""``digideep play``: a checkpoint's policy played deterministically, its returns printed."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from digideep.errors import UsageError
from digideep.storage.location import is_url

__all__ = ["command_play"]

log = logging.getLogger(__name__)


def command_play(args: argparse.Namespace) -> int:
    """Play a checkpoint deterministically and print the returns."""
    from digideep.pipeline.play import play

    returns = play(
        _checkpoint_to_play(args.checkpoint, args.session_path),
        episodes=args.episodes,
        video=args.video,
        device=args.device,
        deterministic=args.deterministic,
    )
    for index, value in enumerate(returns):
        print(f"episode {index}: return {value:.2f}")
    if returns:
        print(f"mean return {sum(returns) / len(returns):.2f} over {len(returns)} episodes")
    return 0


def _checkpoint_to_play(target: str, session_path: str) -> str:
    """A checkpoint folder as given; for a session (its folder, or its name under ``session_path``) the
    newest whole checkpoint.

    Raises:
        UsageError: the session has no whole checkpoint yet.
    """
    from digideep.storage.checkpoint import latest_checkpoint

    if is_url(target):
        return target  # a checkpoint on object storage, named in full
    session = Path(target)
    if not (session / "params.json").is_file() and not is_url(session_path):
        session = Path(session_path) / target
    if not (session / "params.json").is_file():
        return target  # a checkpoint folder (play checks it)
    found = latest_checkpoint(session / "checkpoints")
    if found is None:
        raise UsageError(f"session '{session}' has no whole checkpoint yet; train it longer or resume it")
    log.info("playing the session's newest checkpoint, %s", found.path)
    return str(found.path)
