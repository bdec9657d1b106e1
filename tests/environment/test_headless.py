"""Videos render off-screen with nothing set: no display, no XDG_RUNTIME_DIR, no MUJOCO_GL.

As a user runs the tool in a shell over ``su`` or ``sudo`` on a machine without a display: before
digideep chose the platforms, Pendulum's video printed libwayland's ``error: XDG_RUNTIME_DIR is
invalid or not set in the environment.`` (SDL probing Wayland) and Hopper's failed with
``mujoco.FatalError`` (Gymnasium trying GLFW).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from digideep.environment.headless import render_off_screen

REPO = Path(__file__).resolve().parents[2]
CHOSEN_BY_A_USER = ("XDG_RUNTIME_DIR", "DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER", "MUJOCO_GL",
                    "PYOPENGL_PLATFORM")  # fmt: skip


@pytest.mark.parametrize("model", ["Pendulum-v1", "Hopper-v5"])
def test_a_video_renders_quietly_without_display_runtime_dir_or_mujoco_gl(tmp_path: Path, model: str) -> None:
    env = {key: value for key, value in os.environ.items() if key not in CHOSEN_BY_A_USER}
    result = subprocess.run(
        [sys.executable, "-m", "digideep.environment.play", "--model", model, "--runs", "1", "--n-step", "3",
         "--video", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "XDG_RUNTIME_DIR" not in result.stderr and "error" not in result.stderr.lower(), result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["play-w0-ep0000.mp4"]
    assert (tmp_path / "play-w0-ep0000.mp4").stat().st_size > 0


def test_the_users_own_choices_win() -> None:
    headless: dict[str, str] = {}
    assert render_off_screen(headless) == {"SDL_VIDEODRIVER": "dummy", "MUJOCO_GL": "egl"}
    assert headless == {"SDL_VIDEODRIVER": "dummy", "MUJOCO_GL": "egl"}
    desktop = {"DISPLAY": ":0", "SDL_VIDEODRIVER": "x11"}
    assert render_off_screen(desktop) == {}  # GLFW has a display to use; SDL's driver is the user's
    assert desktop == {"DISPLAY": ":0", "SDL_VIDEODRIVER": "x11"}
    assert render_off_screen({"MUJOCO_GL": "osmesa"}) == {"SDL_VIDEODRIVER": "dummy"}
