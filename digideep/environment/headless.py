"""Off-screen rendering with its platform chosen explicitly, so that no renderer probes for a display.

digideep renders to arrays only (``render_mode="rgb_array"``, for videos), never to a window. Left to
choose, the renderers look for a display first:

- SDL, which pygame runs on (Gymnasium's classic-control and Box2D environments, Pendulum-v1
  among them, call ``pygame.display.init()`` even to draw into an array), tries X11, then Wayland,
  whose client library prints ``error: XDG_RUNTIME_DIR is invalid or not set in the environment.``
  when that variable is unset (a shell over ``su``, ``sudo``, cron, a container), and only then
  settles on its off-screen driver;
- MuJoCo through Gymnasium tries GLFW first when ``MUJOCO_GL`` is unset, which on a machine without a
  display ends in ``mujoco.FatalError: an OpenGL platform library has not been loaded``.

:func:`render_off_screen` sets what the user has not set: ``SDL_VIDEODRIVER=dummy`` (pygame then
draws on surfaces in memory and never opens a display), and ``MUJOCO_GL=egl`` where there is no
display (neither ``DISPLAY`` nor ``WAYLAND_DISPLAY``) and no OpenGL platform is named
(``PYOPENGL_PLATFORM``). Both are read when rendering starts (SDL's
video init, Gymnasium's MuJoCo renderer), so setting them in a worker before its env is made is in
time. dm_control reads ``MUJOCO_GL`` when it is first imported: a process that imported it already
keeps the backend it chose then.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping

__all__ = ["render_off_screen"]

log = logging.getLogger(__name__)


def render_off_screen(env: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Choose headless rendering platforms where the environment names none.

    Args:
        env: the environment to complete (this process's by default).

    Returns:
        The variables set, by name (empty when the user had set them all, or a display is there
        for MuJoCo).
    """
    chosen = {}
    if "SDL_VIDEODRIVER" not in env:
        chosen["SDL_VIDEODRIVER"] = "dummy"
    chosen_gl = "MUJOCO_GL" in env or "PYOPENGL_PLATFORM" in env
    if not chosen_gl and not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        chosen["MUJOCO_GL"] = "egl"
    env.update(chosen)
    if chosen:
        log.debug("off-screen rendering: %s", ", ".join(f"{key}={value}" for key, value in chosen.items()))
    return chosen
