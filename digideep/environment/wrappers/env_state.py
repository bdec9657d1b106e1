"""Capture and restore one worker's environment mid-episode: RNG, physics and wrapper counters.

:class:`EnvState` is the outermost wrapper of every worker that
:class:`~digideep.environment.make_environment.MakeEnvironment` builds. It works the same in a
``SyncVectorEnv`` and in an ``AsyncVectorEnv`` (whose workers live in subprocesses), through the
vector env's ``call`` and ``set_attr``::

    states = envs.call("capture_state")                  # one saveable dict per worker
    envs.set_attr("pending_state", list(states))         # per-worker values
    restored = envs.call("apply_pending_state")          # one bool per worker

What a capture holds:

- the base environment's simple attributes (numbers, strings, arrays, its ``np_random`` generator):
  for classic-control environments this is the whole state (``state``, ``steps_beyond_terminated``);
- for MuJoCo environments, every fixed-size array of ``MjData`` and ``time``: the integration state
  and the derived quantities (``xipos``, ``cfrc_ext``) that some rewards read before stepping, so
  that the next steps repeat bit for bit;
- for DeepMind Control suite environments (``dm_control/...`` through shimmy), the physics'
  integration state (``mjSTATE_INTEGRATION``: plain ``get_state()`` leaves out the solver's warm
  start, and contact tasks then drift by 1e-15 within a few steps), the model fields that tasks set
  per episode (target positions, terrain), the task's ``RandomState`` and simple attributes and the
  environment's step counter; restored inside ``physics.reset_context()``;
- for Atari environments (ale-py), the emulator's ``cloneState(include_rng=True)`` (the sticky-action
  RNG included) as a uint8 array;
- every wrapper's simple attributes (``TimeLimit._elapsed_steps``, ``RecordEpisodeStatistics``
  sums, ``FrameStackObservation`` queues, gymnasium normaliser statistics), or its ``state_dict()``
  where it has one.

An environment counts as *capturable* when it is MuJoCo-based, a DeepMind Control suite task, an
Atari game, has a
``state`` attribute (classic control) or defines ``state_dict()``/``load_state_dict()`` itself
(dm_control's composer tasks, the locomotion and manipulation examples, are not capturable). Others are restored by starting a
new episode; the Explorer logs that.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from digideep.environment.dmc import suite_environment
from digideep.environment.wrappers.saveable import from_saveable, is_saveable, to_saveable

__all__ = ["EnvState", "env_kind"]

_SKIP_ATTRS = frozenset(
    {
        "env",
        "_saved_kwargs",
        "_cached_spec",
        "spec",
        "_metadata",
        "metadata",
        "_action_space",
        "_observation_space",
        "action_space",
        "observation_space",
        "render_mode",
        "screen",
        "clock",
        "isopen",
        "pending_state",
        "_previous_data",
    }
)
_MJ_DYNAMIC = ("efc_", "iefc_", "island_", "map_efc2iefc", "map_iefc2efc", "iacc", "ifrc_")
# MjModel fields that dm_control suite tasks write in initialize_episode (grep of dm_control/suite)
_DMC_MODEL_FIELDS = (
    "body_pos",
    "dof_damping",
    "geom_pos",
    "geom_rgba",
    "geom_size",
    "hfield_data",
    "light_pos",
    "site_pos",
    "site_rgba",
    "site_size",
    "wrap_prm",
)


def env_kind(env: gym.Env) -> str:
    """``"custom"`` (own state_dict), ``"mujoco"``, ``"dm_control"``, ``"ale"`` (Atari), ``"classic"``
    (has ``state``) or ``"none"``."""
    if callable(getattr(env, "state_dict", None)) and callable(getattr(env, "load_state_dict", None)):
        return "custom"
    if _mujoco_data(env) is not None:
        return "mujoco"
    if suite_environment(env) is not None:
        return "dm_control"
    if callable(getattr(getattr(env, "ale", None), "cloneState", None)):
        return "ale"
    if hasattr(env, "state"):
        return "classic"
    return "none"


def _mujoco_data(env: gym.Env) -> Any:
    data = getattr(env, "data", None)
    if data is None or type(data).__name__ != "MjData":
        return None
    return data


def _capture_attrs(obj: object) -> dict[str, Any]:
    return {k: v for k, v in vars(obj).items() if k not in _SKIP_ATTRS and is_saveable(v)}


def _restore_attrs(obj: object, attrs: dict[str, Any]) -> None:
    for name, value in attrs.items():
        current = getattr(obj, name, None)
        if isinstance(current, np.random.Generator) and isinstance(value, np.random.Generator):
            current.bit_generator.state = value.bit_generator.state
        elif (
            isinstance(current, np.ndarray)
            and isinstance(value, np.ndarray)
            and current.shape == value.shape
            and current.flags.writeable
        ):
            current[...] = value
        else:
            setattr(obj, name, value)


def _capture_mujoco(data: Any) -> dict[str, Any]:
    arrays = {}
    for name in dir(data):
        if name.startswith("_") or name.startswith(_MJ_DYNAMIC):
            continue
        value = getattr(data, name, None)
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            arrays[name] = value.copy()
    return {"time": float(data.time), "arrays": arrays}


def _restore_mujoco(data: Any, physics: dict[str, Any]) -> None:
    for name, value in physics["arrays"].items():
        target = getattr(data, name, None)
        if isinstance(target, np.ndarray) and target.shape == value.shape:
            target[...] = value
    data.time = physics["time"]


def _integration() -> int:
    """``mjSTATE_INTEGRATION``: everything ``mj_step`` reads, the solver's warm start included."""
    import mujoco

    return int(mujoco.mjtState.mjSTATE_INTEGRATION)


def _capture_dm_control(inner: Any) -> dict[str, Any]:
    physics, task = inner.physics, inner.task
    model = physics.model.ptr
    return {
        "state": physics.get_state(_integration()).copy(),
        "model": {name: np.array(getattr(model, name)) for name in _DMC_MODEL_FIELDS},
        "random": task.random.get_state(),
        "task": _capture_attrs(task),
        "step_count": int(inner._step_count),
        "reset_next_step": bool(inner._reset_next_step),
    }


def _restore_dm_control(inner: Any, saved: dict[str, Any]) -> None:
    physics, task = inner.physics, inner.task
    model = physics.model.ptr
    with physics.reset_context():  # resets the data, then mj_forward once the state is in
        for name, value in saved["model"].items():
            getattr(model, name)[...] = value
        physics.set_state(saved["state"], _integration())
    if model.nhfield and physics.contexts:  # the renderer keeps its own copy of the terrain
        import mujoco

        with physics.contexts.gl.make_current() as ctx:
            for index in range(model.nhfield):
                ctx.call(mujoco.mjr_uploadHField, model, physics.contexts.mujoco.ptr, index)
    task.random.set_state(saved["random"])
    _restore_attrs(task, saved["task"])
    inner._step_count, inner._reset_next_step = saved["step_count"], saved["reset_next_step"]


class EnvState(gym.Wrapper):
    """Outermost per-worker wrapper that captures and restores the worker's state (module doc).

    Attributes:
        pending_state: a capture set through ``VectorEnv.set_attr`` and applied by
            :meth:`apply_pending_state`.
    """

    pending_state: dict | None = None

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.pending_state = None

    def _chain(self) -> list[gym.Env]:
        chain, env = [], self.env
        while isinstance(env, gym.Wrapper):
            chain.append(env)
            env = env.env
        return chain

    def capturable(self) -> bool:
        """Whether :meth:`capture_state` holds the full state of this environment."""
        return env_kind(self.unwrapped) != "none"

    def capture_state(self) -> dict[str, Any]:
        """The worker's state as a saveable dict (tensors, numbers, strings, lists, dicts)."""
        base = self.unwrapped
        kind = env_kind(base)
        wrappers = []
        for wrapper in self._chain():
            if callable(getattr(wrapper, "state_dict", None)):
                wrappers.append({"class": type(wrapper).__name__, "state_dict": wrapper.state_dict()})
            else:
                wrappers.append({"class": type(wrapper).__name__, "attrs": _capture_attrs(wrapper)})
        state: dict[str, Any] = {"kind": kind, "wrappers": wrappers, "base": _capture_attrs(base)}
        if kind == "custom":
            state["custom"] = base.state_dict()
        elif kind == "mujoco":
            state["physics"] = _capture_mujoco(_mujoco_data(base))
        elif kind == "dm_control":
            state["dm_control"] = _capture_dm_control(suite_environment(base))
        elif kind == "ale":
            emulator = base.ale.cloneState(include_rng=True).serialize()
            state["ale"] = np.frombuffer(emulator, dtype=np.uint8).copy()
        return to_saveable(state)

    def restore_state(self, state: dict[str, Any]) -> bool:
        """Restore a :meth:`capture_state` dict; False (nothing changed) when it cannot apply here."""
        chain = self._chain()
        base = self.unwrapped
        saved_classes = [w["class"] for w in state["wrappers"]]
        if saved_classes != [type(w).__name__ for w in chain] or state["kind"] != env_kind(base):
            return False
        if state["kind"] == "none":
            return False
        for wrapper, saved in zip(chain, state["wrappers"], strict=True):
            if "state_dict" in saved:
                wrapper.load_state_dict(saved["state_dict"])
            else:
                _restore_attrs(wrapper, from_saveable(saved["attrs"]))
        _restore_attrs(base, from_saveable(state["base"]))
        if state["kind"] == "custom":
            base.load_state_dict(state["custom"])
        elif state["kind"] == "mujoco":
            _restore_mujoco(_mujoco_data(base), from_saveable(state["physics"]))
        elif state["kind"] == "dm_control":
            _restore_dm_control(suite_environment(base), from_saveable(state["dm_control"]))
        elif state["kind"] == "ale":
            from ale_py import ALEState

            base.ale.restoreState(ALEState(from_saveable(state["ale"]).tobytes()))
        return True

    def apply_pending_state(self) -> bool:
        """Restore :attr:`pending_state` (set by ``VectorEnv.set_attr``) and clear it."""
        state, self.pending_state = self.pending_state, None
        if state is None:
            return False
        return self.restore_state(state)
