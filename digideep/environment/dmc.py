"""DeepMind Control Suite through ``shimmy[dm-control]``: registration, observations, physics state.

Install with ``pip install 'digideep[dmc]'``. :func:`register` (called by
:class:`~digideep.environment.make_environment.MakeEnvironment` for any id that starts with
``dm_control/``) imports shimmy, which registers ``dm_control/<domain>-<task>-v0`` for every suite
task (``dm_control/cartpole-swingup-v0``, ``dm_control/walker-walk-v0``, ...) plus the locomotion and
manipulation examples.

Observations (the ``dm_control`` options of ``MakeEnvironment``, :data:`OBSERVATIONS`):

- ``"flat"`` (default): the suite's Dict of state arrays concatenated into one float64 vector, in
  sorted key order (Gymnasium's ``FlattenObservation``; Gymnasium's ``Dict`` sorts its keys);
- ``"dict"``: the Dict as the suite gives it (stored as ``/observations/<key>``);
- ``"pixels"``: an ``(height, width, 3) uint8`` camera image instead of the state
  (:class:`PixelObservation`, 84x84 from camera 0 by default, as in DrQ and the DMC benchmarks).
  digideep's agents are MLPs; pixels are for agents of your own (add
  ``digideep.environment.wrappers.ImageTranspose`` and a frame stack in ``wrappers``).

Episodes: the suite's own time limit (1,000 steps for the suite tasks) ends an episode as a
truncation (dm_env's ``LAST`` step with discount 1), so targets bootstrap through it.

Exact resume of suite (``dm_control.rl.control``) environments is in
:mod:`digideep.environment.wrappers.env_state`, through :func:`suite_environment`.
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import FlattenObservation

from digideep.errors import UsageError

__all__ = [
    "INSTALL_HINT",
    "OBSERVATIONS",
    "PREFIX",
    "DMCUnavailableError",
    "PixelObservation",
    "check_options",
    "is_dm_control",
    "register",
    "suite_environment",
    "wrap",
]

log = logging.getLogger(__name__)

PREFIX = "dm_control/"
INSTALL_HINT = "pip install 'digideep[dmc]'"
OBSERVATIONS = ("flat", "dict", "pixels")
_OPTIONS = ("observation", "width", "height", "camera_id")

_registered = False


class DMCUnavailableError(UsageError, ValueError):
    """``dm_control``/``shimmy`` is not installed (a usage error: the CLI prints one line)."""


def is_dm_control(model_name: str) -> bool:
    """Whether ``model_name`` is a DeepMind Control id (``dm_control/...``)."""
    return model_name.startswith(PREFIX)


def _drop_missing_fields() -> dict[str, list[str]]:
    """Remove the fields of dm_control's MuJoCo field table that the installed MuJoCo lacks.

    dm_control 1.0.50 (the newest as of this writing) lists 9 flex fields (``flex_vertedge``,
    ``flexvert_J``, ...) in ``mjbindings.sizes.array_sizes`` that MuJoCo 4.0.0 removed; it builds its
    named index from that table and fails at the first environment with ``AttributeError: 'MjModel'
    object has no attribute 'flex_vertedge'``. Dropping the entries the installed ``MjModel``/``MjData``
    do not have (none of the suite tasks uses flexes) makes every suite task build, step and render.
    Remove this function once a dm_control release supports the installed MuJoCo: it then finds
    nothing to drop.

    Returns:
        the dropped field names per struct (``{"mjmodel": [...], "mjdata": [...]}``).
    """
    import mujoco
    from dm_control.mujoco.wrapper.mjbindings import sizes

    model = mujoco.MjModel.from_xml_string("<mujoco/>")
    structs = {"mjmodel": model, "mjdata": mujoco.MjData(model)}
    dropped: dict[str, list[str]] = {}
    for struct, instance in structs.items():
        table = sizes.array_sizes[struct]
        missing = [name for name in table if not hasattr(instance, name)]
        for name in missing:
            del table[name]
        if missing:
            dropped[struct] = missing
    if dropped:
        log.debug("dm_control field table: dropped %s (absent from MuJoCo %s)", dropped, mujoco.__version__)
    return dropped


def register() -> None:
    """Make the ``dm_control/...`` ids known to Gymnasium (idempotent).

    Raises:
        DMCUnavailableError: dm_control or shimmy is not installed (one line naming the fix).
    """
    global _registered
    if _registered:
        return
    try:
        _drop_missing_fields()  # before anything else of dm_control reads the table
        import shimmy  # registers the dm_control/... ids on import
        import shimmy.dm_control_compatibility  # shimmy skips dm_control quietly when it is missing
    except ImportError as error:
        raise DMCUnavailableError(
            f"DeepMind Control ids need dm_control and shimmy ({error}); install them with {INSTALL_HINT}"
        ) from None
    del shimmy
    _registered = True


def check_options(options: dict[str, Any] | None, model_name: str) -> dict[str, Any]:
    """Validate the ``dm_control`` options of ``MakeEnvironment`` (module doc); fill the defaults.

    Raises:
        ValueError: options for an id that is not a dm_control one, an unknown key or value.
    """
    if options and not is_dm_control(model_name):
        raise ValueError(
            f"dm_control options apply to dm_control/... ids only, got model_name '{model_name}'"
        )
    options = dict(options or {})
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError(f"unknown dm_control option(s) {unknown}; valid: {', '.join(_OPTIONS)}")
    checked = {"observation": "flat", "width": 84, "height": 84, "camera_id": 0, **options}
    if checked["observation"] not in OBSERVATIONS:
        raise ValueError(
            f"dm_control observation must be one of {OBSERVATIONS}, got {checked['observation']!r}"
        )
    for key in ("width", "height"):
        if not isinstance(checked[key], int) or checked[key] < 1:
            raise ValueError(f"dm_control {key} must be a positive int, got {checked[key]!r}")
    return checked


class PixelObservation(gym.ObservationWrapper):
    """Replace the observation by a camera image: ``(height, width, 3) uint8``.

    The image is ``physics.render(height, width, camera_id)`` of the dm_control environment, drawn
    after every ``reset`` and ``step`` (off-screen: set ``MUJOCO_GL=egl`` on a machine without a display).
    """

    def __init__(self, env: gym.Env, width: int = 84, height: int = 84, camera_id: int = 0) -> None:
        super().__init__(env)
        self.width, self.height, self.camera_id = width, height, camera_id
        self.observation_space = spaces.Box(0, 255, (height, width, 3), dtype=np.uint8)

    def observation(self, observation: Any) -> np.ndarray:
        del observation
        physics = self.env.unwrapped._env.physics
        return physics.render(height=self.height, width=self.width, camera_id=self.camera_id)


def wrap(env: gym.Env, options: dict[str, Any]) -> gym.Env:
    """Apply the observation option (:func:`check_options`) to a freshly made dm_control env."""
    if options["observation"] == "flat":
        return FlattenObservation(env)
    if options["observation"] == "pixels":
        return PixelObservation(env, options["width"], options["height"], options["camera_id"])
    return env


def suite_environment(env: gym.Env) -> Any:
    """The ``dm_control.rl.control.Environment`` behind a shimmy env (a suite task), else None.

    Composer environments (the locomotion and manipulation examples) return None: their state lives
    in entities and hooks that :mod:`~digideep.environment.wrappers.env_state` does not capture.
    """
    inner = getattr(env, "_env", None)
    if inner is None or type(inner).__module__ != "dm_control.rl.control":
        return None
    return inner
