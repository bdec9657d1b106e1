"""Build vector environments from params: a registered Gymnasium env, wrapper stacks, one copy per worker.

A worker env is, from the inside out::

    gymnasium.make(model_name, max_episode_steps, render_mode, **env_kwargs)   # includes TimeLimit
    <dm_control observation>         # dm_control/... ids only: flat vector (default), dict or pixels
    RecordEpisodeStatistics          # raw episode returns/lengths for the Monitor
    <Atari preprocessing>            # ale-py ids only: noops, frame skip, 84x84 gray, frame stack
    <wrappers from params>           # e.g. gymnasium.wrappers.RescaleAction
    VideoRecorder                    # only when rendering to a video folder
    EnvState                         # capture/restore of the worker's state (checkpoints)

and the vector env around the workers is ``SyncVectorEnv`` (as
:class:`~digideep.environment.vector.LeanSyncVectorEnv`: the same results for less Python per step)
or ``AsyncVectorEnv`` in ``AutoresetMode.SAME_STEP``, then ``<vector_wrappers from params>`` (e.g.
the normalisers), then
:class:`~digideep.environment.wrappers.SingleAgentAdapter` when the action space is not yet a Dict
of agents.

Wrapper stacks are lists of ``{"name": "<import path>", "args": {...}, "enabled": True}``, applied in
order (the first is innermost)::

    wrappers = [{"name": "gymnasium.wrappers.RescaleAction", "args": {"min_action": -1.0, "max_action": 1.0}}]
    vector_wrappers = [{"name": "digideep.environment.wrappers.NormalizeObservation", "args": {"clip": 10.0}},
                       {"name": "digideep.environment.wrappers.NormalizeReward", "args": {"gamma": 0.99}}]

Outside ``mode="train"`` every normaliser is frozen (``frozen = True`` on vector wrappers,
``update_running_mean = False`` on Gymnasium's per-worker ones).

Autoreset mode: ``SAME_STEP``. The step that ends an episode returns the first observation of the
next one and puts the final observation in ``infos["final_obs"]``, so every row of a chunk is a real
transition (``NEXT_STEP`` would spend one step per episode end on a dummy reset transition) and the
layout matches the original Digideep one: ``/masks`` is 0 on the first row of a new episode.

DeepMind Control ids (``dm_control/<domain>-<task>-v0``, through ``shimmy[dm-control]``) register on
demand (:mod:`digideep.environment.dmc`); the ``dm_control`` argument chooses their observations.
Atari ids (``ALE/Pong-v5``, ``PongNoFrameskip-v4``, through ``ale-py``) likewise
(:mod:`digideep.environment.atari`); the preprocessing sits outside ``RecordEpisodeStatistics`` so that
the logged returns are whole-game scores, and the ``atari`` argument changes its options.
"""

from __future__ import annotations

import functools
import importlib
import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit

from digideep.environment import atari as ale
from digideep.environment import dmc
from digideep.environment.headless import render_off_screen
from digideep.environment.spaces import space_to_dict
from digideep.environment.vector import LeanSyncVectorEnv
from digideep.environment.wrappers import EnvState, SingleAgentAdapter, VideoRecorder
from digideep.utility.imports import import_object

__all__ = ["MakeEnvironment"]

log = logging.getLogger(__name__)

VECTORIZATIONS = ("sync", "async", "auto")
MODES = ("train", "test", "eval")


def _check_stack(stack: list[dict], what: str) -> list[dict]:
    checked = []
    for index, entry in enumerate(stack):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError(
                f"{what}[{index}] must be a dict like {{'name': 'gymnasium.wrappers.RescaleAction', "
                f"'args': {{...}}, 'enabled': True}}, got {entry!r}"
            )
        unknown = set(entry) - {"name", "args", "enabled"}
        if unknown:
            raise ValueError(
                f"{what}[{index}] ({entry['name']}) has unknown keys {sorted(unknown)}; use name, args, enabled"
            )
        if not isinstance(entry.get("args", {}), dict):
            raise ValueError(f"{what}[{index}] ({entry['name']}): 'args' must be a dict of keyword arguments")
        if entry.get("enabled", True):
            checked.append({"name": entry["name"], "args": dict(entry.get("args", {}))})
    return checked


def _apply(env: Any, entry: dict, what: str) -> Any:
    try:
        cls = import_object(entry["name"])
    except ImportError as error:
        raise ValueError(f"{what} {error}") from None
    try:
        return cls(env, **entry["args"])
    except TypeError as error:
        raise ValueError(f"{what} '{entry['name']}' rejected args {entry['args']}: {error}") from error


class MakeEnvironment:
    """Builds ``num_workers`` copies of a registered Gymnasium environment with its wrapper stacks.

    Args:
        model_name: the Gymnasium id, e.g. ``"HalfCheetah-v5"``.
        from_module: a module to import first so that a custom environment registers itself.
        vectorization: ``"sync"`` (one process; best for one worker or cheap envs), ``"async"``
            (one subprocess per worker) or ``"auto"`` (async when more than one worker).
        wrappers: per-worker wrapper stack (module doc).
        vector_wrappers: vector-env wrapper stack (module doc).
        env_kwargs: keyword arguments for ``gymnasium.make``.
        max_episode_steps: overrides the registered time limit.
        dm_control: options of ``dm_control/...`` ids: ``observation`` (``"flat"``: one vector, the
            default; ``"dict"``: the suite's Dict; ``"pixels"``: a ``(height, width, 3) uint8`` image),
            ``width``, ``height`` (84) and ``camera_id`` (0) of the image (:mod:`~digideep.environment.dmc`).
        atari: options of ale-py ids (:func:`~digideep.environment.atari.check_options`): ``noop_max``
            (30), ``frame_skip`` (4), ``screen_size`` (84), ``frame_stack`` (4), ``fire_reset``, and the
            train-only ``terminal_on_life_loss`` and ``clip_reward`` (both True).

    Raises:
        ValueError: for an unknown environment, vectorization or a malformed wrapper entry.
        UsageError: a ``dm_control/...`` id without dm_control installed, or an Atari id without
            ale-py (one line naming the fix).
    """

    def __init__(
        self,
        model_name: str,
        from_module: str | None = None,
        vectorization: str = "sync",
        wrappers: list[dict] | None = None,
        vector_wrappers: list[dict] | None = None,
        env_kwargs: dict | None = None,
        max_episode_steps: int | None = None,
        dm_control: dict[str, Any] | None = None,
        atari: dict[str, Any] | None = None,
    ) -> None:
        if vectorization not in VECTORIZATIONS:
            raise ValueError(f"vectorization must be one of {VECTORIZATIONS}, got {vectorization!r}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1 or None, got {max_episode_steps}")
        self.model_name = model_name
        self.from_module = from_module
        self.vectorization = vectorization
        self.wrappers = _check_stack(list(wrappers or []), "wrappers")
        self.vector_wrappers = _check_stack(list(vector_wrappers or []), "vector_wrappers")
        self.env_kwargs = dict(env_kwargs or {})
        self.max_episode_steps = max_episode_steps
        # checked options for dm_control ids (None otherwise; options for other ids raise)
        self.dm_control = (
            dmc.check_options(dm_control, model_name) if dm_control or dmc.is_dm_control(model_name) else None
        )
        self._register()
        # checked options for ale-py ids (None otherwise; options for other ids raise)
        self.atari = ale.check_options(atari, model_name) if atari or ale.is_atari(model_name) else None
        self._spaces: tuple[spaces.Space, spaces.Dict] | None = None

    def _register(self) -> None:
        if self.from_module:
            try:
                importlib.import_module(self.from_module)
            except ImportError as error:
                raise ValueError(f"cannot import from_module '{self.from_module}': {error}") from error
        if self.dm_control is not None:
            dmc.register()  # on demand: registers shimmy's ids (and fixes dm_control for MuJoCo 4)
        elif self.model_name not in gym.registry:
            ale.register(self.model_name)  # on demand; raises for ALE/... ids without ale-py
        if self.model_name not in gym.registry:
            hint = (
                "set from_module to the module that registers it"
                if not self.from_module
                else (f"'{self.from_module}' did not register it")
            )
            raise ValueError(f"unknown Gymnasium environment '{self.model_name}'; {hint}")

    def make_env(
        self,
        rank: int = 0,
        mode: str = "train",
        render: bool = False,
        video_folder: str | Path | None = None,
        step_limit: int | None = None,
    ) -> gym.Env:
        """One worker env with its per-worker wrappers (module doc); runs in the worker's process.

        ``step_limit`` truncates episodes after that many agent steps, counted outside every wrapper
        but the video recorder (which then keeps the cut episode's video): for an Atari id
        ``max_episode_steps`` counts emulator frames (the time limit sits under the frame skip), this
        counts the agent's steps. The play tool's ``--n-step`` uses it."""
        self._register()
        kwargs = dict(self.env_kwargs)
        if self.max_episode_steps is not None:
            kwargs["max_episode_steps"] = self.max_episode_steps
        if render:
            kwargs["render_mode"] = "rgb_array"
            render_off_screen()
        if self.atari is not None:
            kwargs = ale.make_kwargs(kwargs)
        env = gym.make(self.model_name, **kwargs)
        if self.dm_control is not None:
            env = dmc.wrap(env, self.dm_control)
        env = RecordEpisodeStatistics(env)
        if self.atari is not None:
            env = ale.AtariPreprocessing(env, train=mode == "train", **self.atari)
        for entry in self.wrappers:
            env = _apply(env, entry, "wrapper")
        if mode != "train":
            _freeze_chain(env)
        if step_limit is not None:
            env = TimeLimit(env, step_limit)
        if render and video_folder is not None:
            env = VideoRecorder(env, video_folder, prefix=mode, rank=rank)
        return EnvState(env)

    def create_envs(
        self,
        num_workers: int,
        mode: str,
        seed: int,
        render: bool = False,
        video_folder: str | Path | None = None,
    ) -> VectorEnv:
        """The vector env of ``num_workers`` workers in ``AutoresetMode.SAME_STEP`` (not reset yet).

        Args:
            num_workers: number of parallel environments.
            mode: ``"train"``, ``"test"`` or ``"eval"``; normalisers are frozen outside train.
            seed: kept for the contract; the Explorer seeds through ``reset(seed=seed)``, which gives
                worker ``i`` the seed ``seed + i``.
            render: make workers with ``render_mode="rgb_array"``.
            video_folder: with ``render``, write one MP4 per episode there.
        """
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        del seed  # seeding happens at reset, see the docstring
        fns = [
            functools.partial(self.make_env, rank=i, mode=mode, render=render, video_folder=video_folder)
            for i in range(num_workers)
        ]
        use_async = self.vectorization == "async" or (self.vectorization == "auto" and num_workers > 1)
        if use_async:  # workers ignore a terminal's Ctrl-C: the run closes them after its checkpoint
            from digideep.utility.processes import ignoring_sigint

            workers = [ignoring_sigint(fn) for fn in fns]
            envs: VectorEnv = AsyncVectorEnv(workers, copy=False, autoreset_mode=AutoresetMode.SAME_STEP)
        else:
            envs = LeanSyncVectorEnv(fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP)
        for entry in self.vector_wrappers:
            envs = _apply(envs, entry, "vector wrapper")
        if not _is_agent_dict(envs.single_action_space):
            envs = SingleAgentAdapter(envs)
        if mode != "train":
            _freeze_chain(envs)
        return envs

    @property
    def time_limit(self) -> int | None:
        """Steps after which an episode is truncated (``max_episode_steps`` or the registered limit)."""
        if self.max_episode_steps is not None:
            return self.max_episode_steps
        return gym.spec(self.model_name).max_episode_steps

    def spaces(self) -> tuple[spaces.Space, spaces.Dict]:
        """``(observation_space, action_space)`` of one worker after all wrappers; the action space is a
        Dict keyed by agent name."""
        if self._spaces is None:
            saved, self.vectorization = self.vectorization, "sync"
            try:
                envs = self.create_envs(1, "test", seed=0)
            finally:
                self.vectorization = saved
            self._spaces = (envs.single_observation_space, envs.single_action_space)
            envs.close()
        return self._spaces

    def get_spec(self) -> dict[str, Any]:
        """A plain-dict spec: ``model_name``, ``observation_space``, ``action_space`` (see
        :func:`~digideep.environment.spaces.space_to_dict`), ``agents`` (names), ``max_episode_steps``."""
        observation_space, action_space = self.spaces()
        return {
            "model_name": self.model_name,
            "observation_space": space_to_dict(observation_space),
            "action_space": space_to_dict(action_space),
            "agents": list(action_space.spaces),
            "max_episode_steps": self.time_limit,
        }


def _is_agent_dict(space: spaces.Space) -> bool:
    """A Dict action space is taken as one entry per agent."""
    return isinstance(space, spaces.Dict)


def _freeze_chain(env: Any) -> None:
    """Freeze every normaliser in a wrapper chain (per-worker or vector)."""
    while env is not None:
        if hasattr(type(env), "frozen") or "frozen" in vars(env):
            env.frozen = True
        elif "_update_running_mean" in vars(env):
            env.update_running_mean = False
        env = getattr(env, "env", None)
