"""One MP4 file per episode from a worker's ``rgb_array`` frames (imageio with ffmpeg).

The recorder sits inside the worker, under the vector env's autoreset, so it sees the last frame of
every episode. MuJoCo renders off-screen with ``MUJOCO_GL=egl``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
import imageio.v2 as imageio
import numpy as np

__all__ = ["VideoRecorder"]

log = logging.getLogger(__name__)


class VideoRecorder(gym.Wrapper):
    """Write every complete episode of this worker to ``<folder>/<prefix>-w<rank>-ep<k>.mp4``.

    Frames stream into the file while the episode runs (one episode of 480x480 frames would not fit
    in memory otherwise). The file is opened at the first step after a reset, so a reset with no step
    after it writes nothing; an episode still running at :meth:`close` is deleted, so the folder
    holds complete episodes only. ``k`` counts this worker's episodes and skips names already taken.

    Args:
        env: a worker env made with ``render_mode="rgb_array"``.
        folder: where the videos go (created if missing).
        prefix: the file names' prefix (the Explorer passes its mode).
        rank: the worker's index.
        fps: frames per second; default: the env's ``metadata["render_fps"]`` or 30.
    """

    def __init__(
        self, env: gym.Env, folder: str | Path, prefix: str = "video", rank: int = 0, fps: int | None = None
    ) -> None:
        super().__init__(env)
        if env.render_mode != "rgb_array":
            raise ValueError(f"VideoRecorder needs render_mode='rgb_array', the env has {env.render_mode!r}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.prefix, self.rank = prefix, rank
        self.fps = int(fps or env.metadata.get("render_fps") or 30)
        self.episode_index = 0
        self._writer: Any = None
        self._path: Path | None = None
        self._first_frame: np.ndarray | None = None

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self._discard()
        obs, info = self.env.reset(**kwargs)
        self._first_frame = self.env.render()
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._writer is None:
            self._open()
        self._writer.append_data(self.env.render())
        if terminated or truncated:
            self._finish()
        return obs, reward, terminated, truncated, info

    def _open(self) -> None:
        while True:
            path = self.folder / f"{self.prefix}-w{self.rank}-ep{self.episode_index:04d}.mp4"
            self.episode_index += 1
            if not path.exists():
                break
        self._path = path
        self._writer = imageio.get_writer(path, fps=self.fps, macro_block_size=2)
        if self._first_frame is not None:
            self._writer.append_data(self._first_frame)
            self._first_frame = None

    def _finish(self) -> None:
        self._writer.close()
        log.info("wrote episode video %s", self._path)
        self._writer, self._path = None, None

    def _discard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            if self._path is not None:
                self._path.unlink(missing_ok=True)
            self._writer, self._path = None, None

    def state_dict(self) -> dict[str, Any]:
        """The episode counter (frames of a running episode are not checkpointed)."""
        return {"episode_index": self.episode_index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episode_index = int(state["episode_index"])

    def close(self) -> None:
        self._discard()
        super().close()
