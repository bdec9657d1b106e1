"""The ``play`` flow: evaluate a checkpoint deterministically, optionally recording videos.

Run locally with ``python flows/play.py data/sessions/S/checkpoints/checkpoint-100 --video``.
"""

from __future__ import annotations

import argparse

from prefect import flow, get_run_logger

from digideep.pipeline.play import play as play_checkpoint


@flow(name="play", persist_result=False)
def play(
    checkpoint: str,
    episodes: int | None = None,
    video: bool = False,
    device: str | None = None,
    deterministic: bool = False,
) -> list[float]:
    """Play ``checkpoint`` for ``episodes`` episodes; return the episode returns.

    Args:
        checkpoint: checkpoint folder, e.g. ``data/sessions/S/checkpoints/checkpoint-100``.
        episodes: episodes to play (default: the eval explorer's ``n_episodes``).
        video: write one MP4 per episode under the session's ``videos/``.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` for every agent; wins over the params'.
        deterministic: deterministic mode, on also when the params ask for it.
    """
    returns = play_checkpoint(
        checkpoint, episodes=episodes, video=video, device=device, deterministic=deterministic
    )
    if returns:
        get_run_logger().info("mean return %.2f over %d episodes", sum(returns) / len(returns), len(returns))
    return returns


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run the play flow locally.")
    parser.add_argument("checkpoint")
    parser.add_argument("--episodes", type=int)
    parser.add_argument("--video", action="store_true")
    arguments = parser.parse_args()
    print(play(arguments.checkpoint, arguments.episodes, arguments.video))
