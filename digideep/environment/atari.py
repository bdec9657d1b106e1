"""Atari 2600 games through ``ale-py`` (ROMs ship with it): registration and the standard preprocessing.

Install with ``pip install 'digideep[atari]'``. :func:`register` (called by
:class:`~digideep.environment.make_environment.MakeEnvironment` for ``ALE/...`` ids and the legacy
``...NoFrameskip-v4`` ones) registers ale-py's ids with Gymnasium.

Every Atari id is made with ``frameskip=1`` and ``obs_type="grayscale"`` and then wrapped, from the
inside out, as::

    gymnasium.make(id, frameskip=1, obs_type="grayscale", **env_kwargs)
    RecordEpisodeStatistics          # the real game: unclipped score, all lives, length in frames
    AtariPreprocessing               # the DeepMind preprocessing below

so the returns the Monitor logs are full-game scores, in train mode too (the original Digideep logged
clipped per-life returns). :class:`AtariPreprocessing` follows the wrappers of Stable-Baselines3's
``AtariWrapper`` that CleanRL's ``ppo_atari.py`` uses (Mnih et al. 2015, Machado et al. 2018):

- up to ``noop_max`` (30) no-op actions after a real reset;
- ``FIRE`` (then action 2) after every reset in games that need it to start;
- ``frame_skip`` (4) repeats of each action, the observation the maximum of the last two frames;
- train only, ``terminal_on_life_loss``: a lost life ends the agent's episode (``terminated``), and
  the next ``reset`` continues the same game with one no-op step instead of restarting it;
- ``screen_size`` (84) square grayscale frames, resized with area interpolation (cv2's ``INTER_AREA``
  as two small matrix products, so OpenCV is not needed; values can differ from cv2's by 1);
- train only, ``clip_reward``: rewards clipped to their sign;
- ``frame_stack`` (4) frames stacked first: ``(frame_stack, 84, 84) uint8``, channels first for torch.

Outside train mode (the test and eval explorers) an episode is a whole game and rewards are the
real score. The wrapper's state (frame stack, max-pool buffer, lives, game-over flag) is in plain
attributes, and the emulator's state in ``ale.cloneState(include_rng=True)``:
:class:`~digideep.environment.wrappers.EnvState` captures both, so a checkpoint resumes bit-identically.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from digideep.errors import UsageError

__all__ = [
    "INSTALL_HINT",
    "AtariPreprocessing",
    "AtariUnavailableError",
    "check_options",
    "is_atari",
    "make_kwargs",
    "register",
]

log = logging.getLogger(__name__)

PREFIX = "ALE/"
INSTALL_HINT = "pip install 'digideep[atari]'"
ENTRY_POINT = "ale_py.env:AtariEnv"
_DEFAULTS: dict[str, Any] = {
    "noop_max": 30,
    "frame_skip": 4,
    "screen_size": 84,
    "terminal_on_life_loss": True,
    "clip_reward": True,
    "frame_stack": 4,
    "fire_reset": True,
}

_registered = False


class AtariUnavailableError(UsageError, ValueError):
    """``ale-py`` is not installed (a usage error: the CLI prints one line)."""


def _looks_atari(model_name: str) -> bool:
    return model_name.startswith(PREFIX) or "NoFrameskip" in model_name


def register(model_name: str | None = None) -> bool:
    """Register ale-py's ids with Gymnasium (idempotent); True when they are registered.

    Args:
        model_name: the id asked for: only one that looks like an Atari id (``ALE/...``,
            ``...NoFrameskip...``) registers them (so that other unknown ids are not answered with
            Atari suggestions), and raises when ale-py is missing. None: register when installed.

    Raises:
        AtariUnavailableError: ale-py is missing and ``model_name`` needs it (one line naming the fix).
    """
    global _registered
    if _registered:
        return True
    if model_name is not None and not _looks_atari(model_name):
        return False
    try:
        import ale_py
    except ImportError:
        if model_name is not None and _looks_atari(model_name):
            raise AtariUnavailableError(
                f"Atari id '{model_name}' needs ale-py; install it with {INSTALL_HINT}"
            ) from None
        return False
    gym.register_envs(ale_py)
    _registered = True
    return True


def is_atari(model_name: str) -> bool:
    """Whether ``model_name`` is a registered ale-py id (call :func:`register` first)."""
    spec = gym.registry.get(model_name)
    return spec is not None and spec.entry_point == ENTRY_POINT


def check_options(options: dict[str, Any] | None, model_name: str) -> dict[str, Any]:
    """Validate the ``atari`` options of ``MakeEnvironment`` and fill the defaults (module doc).

    Raises:
        ValueError: options for an id that is not an Atari one, an unknown key or a bad value.
    """
    if options and not is_atari(model_name):
        raise ValueError(f"atari options apply to ale-py ids (ALE/...) only, got model_name '{model_name}'")
    options = dict(options or {})
    unknown = sorted(set(options) - set(_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown atari option(s) {unknown}; valid: {', '.join(_DEFAULTS)}")
    checked = {**_DEFAULTS, **options}
    for key in ("frame_skip", "screen_size", "frame_stack"):
        if not isinstance(checked[key], int) or checked[key] < 1:
            raise ValueError(f"atari {key} must be a positive int, got {checked[key]!r}")
    if not isinstance(checked["noop_max"], int) or checked["noop_max"] < 0:
        raise ValueError(f"atari noop_max must be an int >= 0, got {checked['noop_max']!r}")
    return checked


def make_kwargs(env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``gymnasium.make`` keywords of an Atari id: the emulator steps single grayscale frames.

    Raises:
        ValueError: ``env_kwargs`` ask for another frameskip or observation type.
    """
    for key, wanted in (("frameskip", 1), ("obs_type", "grayscale")):
        if env_kwargs.get(key, wanted) != wanted:
            raise ValueError(
                f"Atari env_kwargs {key}={env_kwargs[key]!r} conflicts with the preprocessing; set the "
                "atari option frame_skip instead (the emulator must run with frameskip=1, grayscale)"
            )
    return {**env_kwargs, "frameskip": 1, "obs_type": "grayscale"}


def _area_weights(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Area interpolation along one axis: ``(indices, weights)``, both ``(size_out, K)``.

    Output pixel ``i`` is ``sum_k weights[i, k] * input[indices[i, k]]``: the input pixels its span
    ``[i * s, (i + 1) * s)`` (``s = size_in / size_out``) covers, weighted by the covered fraction
    (cv2's ``INTER_AREA`` when shrinking). Unused slots have weight 0.
    """
    scale = size_in / size_out
    spans = []
    for out in range(size_out):
        start, end = out * scale, (out + 1) * scale
        sources = range(math.floor(start), min(math.ceil(end), size_in))
        spans.append([(src, (min(end, src + 1) - max(start, src)) / scale) for src in sources])
    width = max(len(span) for span in spans)
    indices = np.zeros((size_out, width), np.intp)
    weights = np.zeros((size_out, width), np.float32)
    for out, span in enumerate(spans):
        for k, (src, weight) in enumerate(span):
            indices[out, k], weights[out, k] = src, weight
    return indices, weights


class AtariPreprocessing(gym.Wrapper):
    """The DeepMind Atari preprocessing with a frame stack (module doc), on a grayscale ``frameskip=1`` env.

    Args:
        env: an ale-py env made with ``frameskip=1, obs_type="grayscale"`` (:func:`make_kwargs`).
        train: apply ``terminal_on_life_loss`` and ``clip_reward`` (the train explorer only).
        noop_max, frame_skip, screen_size, terminal_on_life_loss, clip_reward, frame_stack,
        fire_reset: the options of :func:`check_options`.

    Observation: ``(frame_stack, screen_size, screen_size) uint8``.
    """

    def __init__(
        self,
        env: gym.Env,
        train: bool = True,
        noop_max: int = 30,
        frame_skip: int = 4,
        screen_size: int = 84,
        terminal_on_life_loss: bool = True,
        clip_reward: bool = True,
        frame_stack: int = 4,
        fire_reset: bool = True,
    ) -> None:
        super().__init__(env)
        base = env.unwrapped
        shape = env.observation_space.shape
        if getattr(base, "_frameskip", 1) != 1 or shape is None or len(shape) != 2:
            raise ValueError(
                "AtariPreprocessing needs an ale-py env made with frameskip=1 and obs_type='grayscale', "
                f"got frameskip {getattr(base, '_frameskip', '?')} and observations {shape}"
            )
        self.noop_max, self.frame_skip, self.screen_size = noop_max, frame_skip, screen_size
        self.life_loss = bool(train and terminal_on_life_loss)
        self.clip_reward = bool(train and clip_reward)
        meanings = base.get_action_meanings()
        self.fire = bool(fire_reset and len(meanings) >= 3 and meanings[1] == "FIRE")
        # sparse area weights: faster than a dense matrix product, which BLAS threads also contend for
        self._rows = _area_weights(shape[0], screen_size)
        self._cols = _area_weights(shape[1], screen_size)
        # state (plain attributes: EnvState captures them)
        self.pool = np.zeros((2, *shape), np.uint8)  # the last two raw frames of a skip
        self.frames = np.zeros((frame_stack, screen_size, screen_size), np.uint8)
        self.lives = 0
        self.game_over = True
        self.observation_space = spaces.Box(0, 255, self.frames.shape, dtype=np.uint8)

    # -- frames ----------------------------------------------------------------------------------
    def _resize(self, frame: np.ndarray) -> np.ndarray:
        """``(H, W) uint8`` -> ``(screen_size, screen_size) uint8`` by area interpolation."""
        (rows, row_w), (cols, col_w) = self._rows, self._cols
        tall = np.einsum("okw,ok->ow", frame[rows], row_w)  # (size, W) float32
        resized = np.einsum("hok,ok->ho", tall[:, cols], col_w)
        return np.rint(resized, out=resized).astype(np.uint8)

    def _push(self, frame: np.ndarray) -> np.ndarray:
        self.frames[:-1] = self.frames[1:]
        self.frames[-1] = self._resize(frame)
        return self.frames.copy()

    def _lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())

    # -- reset -----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        """A new game (noops, FIRE), or after a lost life in train mode one no-op step of the same game."""
        if self.game_over or not self.life_loss or seed is not None:
            frame, info = self.env.reset(seed=seed, options=options)
            noops = int(self.np_random.integers(1, self.noop_max + 1)) if self.noop_max else 0
            for _ in range(noops):
                frame, _, terminated, truncated, info = self.env.step(0)
                if terminated or truncated:
                    frame, info = self.env.reset()
        else:
            frame, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                frame, info = self.env.reset()
        if self.fire:
            for action in (1, 2):
                frame, _, terminated, truncated, info = self.env.step(action)
                if terminated or truncated:
                    frame, info = self.env.reset()
        self.game_over = False
        self.lives = self._lives()
        self.frames[:] = 0
        for _ in range(len(self.frames)):
            obs = self._push(frame)
        return obs, info

    # -- step ------------------------------------------------------------------------------------
    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """``frame_skip`` emulator steps: summed reward (sign-clipped in train mode), max of the last two frames."""
        total, terminated, truncated, info = 0.0, False, False, {}
        for index in range(self.frame_skip):
            frame, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if index >= self.frame_skip - 2:
                self.pool[index - (self.frame_skip - 2)] = frame
            if terminated or truncated:
                break
        if self.frame_skip > 1 and index == self.frame_skip - 1:  # a full skip: max of its last two frames
            frame = self.pool.max(axis=0)
        self.game_over = bool(terminated or truncated)
        lives = self._lives()
        if self.life_loss and 0 < lives < self.lives:
            terminated = True  # the agent's episode ends; reset() continues the game
        self.lives = lives
        reward = float(np.sign(total)) if self.clip_reward else total
        return self._push(frame), reward, terminated, truncated, info
