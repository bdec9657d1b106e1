"""Eval-mode rendering: one MP4 per episode under the session's videos folder."""

from __future__ import annotations

import imageio.v2 as imageio
import numpy as np
import pytest


def test_eval_explorer_writes_one_video_per_episode(make_explorer, session) -> None:
    env = {"model_name": "HalfCheetah-v5", "max_episode_steps": 5, "env_kwargs": {"width": 64, "height": 48}}
    explorer = make_explorer(
        env, session=session, mode="eval", num_workers=1, n_steps=None, n_episodes=2, render=True
    )
    chunk = explorer.update()
    assert chunk["/rewards"].shape == (1, 11, 1)
    explorer.close()  # the third episode has started (SAME_STEP) but has no step: no file for it

    videos = sorted(session.videos_path.glob("*.mp4"))
    assert [v.name for v in videos] == ["eval-w0-ep0000.mp4", "eval-w0-ep0001.mp4"]
    for video in videos:
        reader = imageio.get_reader(video)
        frames = [frame for frame in reader]
        reader.close()
        assert len(frames) == 6  # the reset frame and one per step
        assert frames[0].shape == (48, 64, 3)
        assert not np.array_equal(frames[0], frames[-1])


def test_render_needs_a_session(make_explorer) -> None:
    with pytest.raises(ValueError, match="render=True needs a session"):
        make_explorer({"model_name": "Pendulum-v1"}, render=True)
