"""The Explorer: runs agents in a vector env and returns trajectory chunks (docs/architecture.md).

One :meth:`Explorer.update` makes ``n_steps`` steps (or runs until ``n_episodes`` episodes end) in
``num_workers`` environments and returns a flat dict of arrays shaped ``(num_workers, T + 1, ...)``:

========================================  ========================================================
``/observations[/<k>...]``                observation of row t (float32 for floating Boxes)
``/masks`` (W, T+1, 1) float32            0 where the row's observation starts a new episode
``/rewards`` (W, T+1, 1) float32          reward of the transition of row t
``/terminals``, ``/truncations``          1.0 where that transition ended the episode that way
``/next_observations[/<k>...]``           true next observation (``final_obs`` at episode ends)
``/infos/<k>``                            numeric per-step infos, dtype as produced
``/agents/<name>/actions``                float32 (Box) or int64 (Discrete, Multi*)
``/agents/<name>/hidden_state`` (W,T+1,h) the agent's state *before* acting at row t
``/agents/<name>/artifacts/<k>``          what ``action_generator`` returned under "artifacts"
========================================  ========================================================

Row ``T`` is the final prestep: observation, mask, hidden state and (with ``final_action``) the
agents' outputs for the next step, which is not executed; its transition entries (rewards, flags,
next observations, infos) are ``nonify`` placeholders (NaN for floats). The vector env runs in
``AutoresetMode.SAME_STEP`` (see :mod:`digideep.environment.make_environment` for why).

Chunk arrays are preallocated time-major ``(T+1, W, ...)`` (:mod:`digideep.environment.chunk`),
written one row per step, and handed out as batch-major copies; an ``n_steps`` explorer writes every
chunk into the same buffers.

Beside the arrays, the returned :class:`~digideep.environment.chunk.Chunk` carries the statistics of
the episodes that ended in it (:class:`~digideep.environment.chunk.EpisodeStats`): the Explorer hands
them to its caller instead of writing them into a process-wide Monitor, so what the Runner logs comes
to it as data.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from digideep.environment.chunk import NO_EPISODES, Chunk, ChunkBuffers, EpisodeStats
from digideep.environment.explorer_state import ExplorerStateMixin
from digideep.environment.make_environment import MODES, MakeEnvironment
from digideep.environment.spaces import buffer_dtype, flat_leaves
from digideep.utility.flat_keys import flatten_dict

__all__ = ["Explorer"]

log = logging.getLogger(__name__)


class Explorer(ExplorerStateMixin):
    """Runs agents in ``num_workers`` environments and returns trajectory chunks (module doc).

    Args:
        session: the run's Session (videos go to ``session.videos_path``); may be None without render.
        agents: ``{name: agent}``; names must equal the keys of the env's Dict action space.
        mode: ``"train"``, ``"test"`` or ``"eval"``; normalisers update in train mode only.
        env: keyword arguments of :class:`~digideep.environment.make_environment.MakeEnvironment`.
        num_workers: number of parallel environments ``W``.
        n_steps: steps per :meth:`update`; or None with ``n_episodes``.
        n_episodes: run each :meth:`update` until this many episodes (over all workers) ended.
        do_reset: reset the envs at the start of every :meth:`update` (unless just reset).
        final_action: ask the agents for their action at the final prestep row.
        warm_start: the first ``warm_start`` steps use ``random_action_generator``.
        deterministic: passed to ``action_generator``.
        render: write an MP4 per episode under ``session.videos_path`` (MuJoCo: ``MUJOCO_GL=egl``).
        render_delay: seconds to sleep after each step while rendering.
        seed: worker ``i`` is seeded with ``seed + i`` at the first reset.
        win_size: when given, the Runner's Monitor averages this explorer's last ``win_size``
            episodes across log intervals (else the episodes since the last log).

    Attributes:
        steps: vector steps taken; ``timesteps``: environment frames (``steps * W``);
        n_episode: episodes ended; was_reset: True right after :meth:`reset`.
    """

    def __init__(
        self,
        session: Any,
        agents: dict[str, Any],
        mode: str,
        env: dict,
        num_workers: int,
        n_steps: int | None,
        n_episodes: int | None = None,
        do_reset: bool = False,
        final_action: bool = True,
        warm_start: int = 0,
        deterministic: bool = False,
        render: bool = False,
        render_delay: float = 0.0,
        seed: int = 0,
        win_size: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"Explorer mode must be one of {MODES}, got {mode!r}")
        if n_steps is None and n_episodes is None:
            raise ValueError("Explorer needs n_steps (steps per update) or n_episodes (episodes per update)")
        if n_steps is not None and n_steps < 1:
            raise ValueError(f"Explorer n_steps must be >= 1, got {n_steps}")
        if n_episodes is not None and n_episodes < 1:
            raise ValueError(f"Explorer n_episodes must be >= 1, got {n_episodes}")
        if render and session is None:
            raise ValueError("Explorer with render=True needs a session: videos go to session.videos_path")
        self.session, self.agents, self.mode = session, dict(agents), mode
        self.num_workers, self.n_steps, self.n_episodes = num_workers, n_steps, n_episodes
        self.do_reset, self.final_action, self.warm_start = do_reset, final_action, warm_start
        self.deterministic, self.render, self.render_delay = deterministic, render, render_delay
        self.seed = seed

        self.make_environment = MakeEnvironment(**env)
        video_folder = session.videos_path if render else None
        self.envs = self.make_environment.create_envs(num_workers, mode, seed, render, video_folder)
        self.observation_space = self.envs.single_observation_space
        self.action_space = self.envs.single_action_space
        if set(self.agents) != set(self.action_space.spaces):
            self.envs.close()
            raise ValueError(
                f"agents {sorted(self.agents)} do not match the env's agents {sorted(self.action_space.spaces)}; "
                "name the agents after the keys of the env's Dict action space (default 'agent')"
            )
        leaves = flat_leaves(self.observation_space)
        self._obs_is_dict = next(iter(leaves)) != ""
        self._obs_specs = {k: (s.shape, buffer_dtype(s)) for k, s in leaves.items()}
        self._act_specs = {
            n: (self.action_space[n].shape, buffer_dtype(self.action_space[n])) for n in self.agents
        }
        self._ones = np.ones((num_workers, 1), dtype=np.float32)
        # x . 0 is NaN when x holds a NaN or an inf, and 0 otherwise: the cheapest finiteness test of
        # a row (W, *shape) of a float Box observation
        self._finite_probe: np.ndarray | None = None
        if not self._obs_is_dict:
            shape, dtype = self._obs_specs[""]
            if np.dtype(dtype).kind == "f":
                self._finite_probe = np.zeros(num_workers * math.prod(shape), dtype)
        self._buffers: ChunkBuffers | None = None  # those of the last n_steps chunk, reused by the next
        self._max_episode_steps = self.make_environment.time_limit
        self.win_size = win_size
        self.metric_names = (f"/explore/{mode}/episode_return", f"/explore/{mode}/episode_length")
        """The Monitor names of its episodes' returns and lengths."""
        self._ended: tuple[list[float], list[float]] = ([], [])

        self.steps = 0
        self.n_episode = 0
        self.timesteps = 0
        self.was_reset = False
        self._seeded = False
        self.reset()
        log.info(
            "explorer '%s': %d x %s (%s), agents %s",
            mode,
            num_workers,
            self.make_environment.model_name,
            type(self.envs.unwrapped).__name__,
            sorted(self.agents),
        )

    # -- public --------------------------------------------------------------------------------
    def reset(self) -> None:
        """Start new episodes in every worker (seeded with ``seed + i`` the first time)."""
        obs, _ = self.envs.reset(seed=None if self._seeded else self.seed)
        self._seeded = True
        self._obs = flatten_dict(obs) if self._obs_is_dict else obs
        self._masks = np.zeros((self.num_workers, 1), dtype=np.float32)
        self._hidden = {n: self._initial_hidden(n) for n in self.agents}
        self.was_reset = True

    def update(self) -> Chunk:
        """Explore one chunk; returns ``{key: (W, T + 1, ...)}`` (module doc) and its episodes."""
        if self.do_reset and not self.was_reset:
            self.reset()
        self._ended = returns, lengths = [], []
        if self.n_episodes is None:
            chunk = self._fixed_chunk()
            t, _ = self._collect(chunk, 0, self.n_steps, None)
        else:
            if self.n_steps is not None:
                rows = self.n_steps + 1
            else:
                rows = (self._max_episode_steps or 1000) * -(-self.n_episodes // self.num_workers) + 1
            chunk = self._new_chunk(min(rows, 1 << 16))
            t, left = 0, self.n_episodes
            while True:
                end = chunk.capacity - 1 if self.n_steps is None else self.n_steps
                t, left = self._collect(chunk, t, end, left)
                if left <= 0 or t == self.n_steps:
                    break
                chunk.grow(2 * chunk.capacity)
        self._final_prestep(chunk, t)
        self.was_reset = False
        episodes = NO_EPISODES
        if returns:
            episodes = EpisodeStats(np.array(returns, dtype=np.float64), np.array(lengths, dtype=np.float64))
        return Chunk(chunk.finish(t), episodes)

    def close(self) -> None:
        """Close every environment (unfinished episode videos are discarded)."""
        self.envs.close()

    # -- one chunk -----------------------------------------------------------------------------
    def _initial_hidden(self, name: str) -> np.ndarray:
        hidden = np.asarray(self.agents[name].initial_hidden_state(self.num_workers), dtype=np.float32)
        if hidden.ndim != 2 or hidden.shape[0] != self.num_workers:
            raise ValueError(
                f"agent '{name}': initial_hidden_state({self.num_workers}) must be shaped (W, h), got {hidden.shape}"
            )
        return hidden

    def _new_chunk(self, capacity: int) -> ChunkBuffers:
        return ChunkBuffers(
            capacity,
            self.num_workers,
            self._obs_specs,
            self._act_specs,
            {n: h.shape for n, h in self._hidden.items()},
        )

    def _fixed_chunk(self) -> ChunkBuffers:
        """The buffers of an ``n_steps`` chunk: the last chunk's, started anew (the chunk handed out
        is a copy of them), so a short chunk allocates nothing but its copy."""
        if self._buffers is None:
            self._buffers = self._new_chunk(self.n_steps + 1)
        self._buffers.start()
        return self._buffers

    def _write_obs(self, chunk: ChunkBuffers, t: int) -> Any:
        """Copy the current observation into row ``t`` and return what the agents see (row views)."""
        if not self._obs_is_dict:
            buf = chunk.obs[""]
            buf[t] = self._obs
            row = buf[t]
            probe = self._finite_probe
            if probe is not None and not math.isfinite(row.reshape(-1).dot(probe)):
                self._raise_not_finite("", row)
            return row
        rows = {}
        for key, buf in chunk.obs.items():
            buf[t] = self._obs[key]
            row = rows[key] = buf[t]
            if row.dtype.kind == "f" and not np.isfinite(row).all():
                self._raise_not_finite(key, row)
        return rows

    def _final_prestep(self, chunk: ChunkBuffers, t: int) -> None:
        """Row ``t = T``: observation, mask, hidden state and (with ``final_action``) the agents' outputs."""
        agent_obs = self._write_obs(chunk, t)
        chunk.masks[t] = self._masks
        masks = chunk.masks[t]
        for name, agent in self.agents.items():
            hidden = self._hidden[name]
            chunk.hidden[name][t] = hidden
            actions = chunk.actions[name]
            if not self.final_action:
                actions[t] = chunk.action_fills[name]
                continue
            if self.steps < self.warm_start:
                out = agent.random_action_generator(agent_obs, hidden, masks)
            else:
                out = agent.action_generator(agent_obs, hidden, masks, self.deterministic)
            actions[t] = out["actions"]
            for key, value in out["artifacts"].items():
                chunk.artifact(name, key, value)[t] = value

    def _raise_not_finite(self, key: str, values: np.ndarray, worker: int | None = None) -> None:
        if worker is None:
            bad = ~np.isfinite(values.reshape(values.shape[0], -1)).all(axis=1)
            worker = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"explorer '{self.mode}': observation '/observations{key}' of worker {worker} contains NaN or inf "
            f"(after {self.steps} steps, env '{self.make_environment.model_name}'); check the environment and "
            "its wrappers (an observation normaliser fed non-finite values stays broken)"
        )

    def _collect(
        self, chunk: ChunkBuffers, t: int, t_end: int, episodes_left: int | None
    ) -> tuple[int, int | None]:
        """Step rows ``t .. t_end - 1`` (or until ``episodes_left`` episodes end); return the next row.

        The hot loop: what it touches is bound to locals and each row is written in place.
        """
        envs_step, hidden, ones = self.envs.step, self._hidden, self._ones
        obs_is_dict, probe = self._obs_is_dict, self._finite_probe
        obs_buf = None if obs_is_dict else chunk.obs[""]
        masks_buf, rewards, terminals, truncations = (
            chunk.masks,
            chunk.rewards,
            chunk.terminals,
            chunk.truncations,
        )
        per_agent = [(n, a, chunk.actions[n], chunk.hidden[n]) for n, a in self.agents.items()]
        deterministic, warm_start, render_delay = self.deterministic, self.warm_start, self.render_delay
        env_actions: dict[str, Any] = {}
        steps, cur_obs, cur_masks = self.steps, self._obs, self._masks
        try:
            while t < t_end:
                # prestep: observation, mask, agents
                if obs_is_dict:
                    self._obs = cur_obs
                    agent_obs = self._write_obs(chunk, t)
                else:
                    obs_buf[t] = cur_obs
                    agent_obs = obs_buf[t]
                    if probe is not None and not math.isfinite(agent_obs.reshape(-1).dot(probe)):
                        self._raise_not_finite("", agent_obs)
                masks_buf[t] = cur_masks
                masks = masks_buf[t]
                warm = steps < warm_start
                for name, agent, actions_buf, hidden_buf in per_agent:
                    h = hidden[name]
                    hidden_buf[t] = h
                    if warm:
                        out = agent.random_action_generator(agent_obs, h, masks)
                    else:
                        out = agent.action_generator(agent_obs, h, masks, deterministic)
                    actions = out["actions"]
                    actions_buf[t] = actions
                    hidden[name] = out["hidden_state"]
                    if out["artifacts"]:
                        for key, value in out["artifacts"].items():
                            chunk.artifact(name, key, value)[t] = value
                    env_actions[name] = actions
                # the transition
                obs, reward, terminated, truncated, infos = envs_step(env_actions)
                rewards[t] = reward
                terminals[t] = terminated
                truncations[t] = truncated
                steps += 1
                cur_obs = flatten_dict(obs) if obs_is_dict else obs
                chunk.write_infos(t, infos)
                if "final_obs" in infos:
                    self.steps = steps
                    cur_masks, ended = self._episode_ends(chunk, t, terminated, truncated, infos)
                    if episodes_left is not None:
                        episodes_left -= ended
                else:
                    cur_masks = ones
                t += 1
                if render_delay:
                    time.sleep(render_delay)
                if episodes_left is not None and episodes_left <= 0:
                    break
        finally:
            self.steps, self._obs, self._masks = steps, cur_obs, cur_masks
            self.timesteps = steps * self.num_workers
        return t, episodes_left

    def _episode_ends(
        self, chunk: ChunkBuffers, t: int, terminated: np.ndarray, truncated: np.ndarray, infos: dict
    ) -> tuple[np.ndarray, int]:
        """Bookkeeping of a step where episodes ended: final observations, episode statistics, counters.

        Returns the next masks ``(W, 1)`` float32 and the number of episodes that ended.
        """
        done = np.logical_or(terminated, truncated)
        final_obs, has_final = infos["final_obs"], infos["_final_obs"]
        for w in np.flatnonzero(done & has_final):
            final = flatten_dict(final_obs[w]) if self._obs_is_dict else {"": final_obs[w]}
            for key, value in final.items():
                value = np.asarray(value)
                if value.dtype.kind == "f" and not np.isfinite(value).all():
                    self._raise_not_finite(key, value, int(w))
            chunk.finals.append((t, int(w), final))
        final_info = infos.get("final_info", {})
        episode = final_info.get("episode")
        if episode is not None:
            returns, lengths = self._ended
            for w in np.flatnonzero(final_info["_episode"]):
                returns.append(float(episode["r"][w]))
                lengths.append(float(episode["l"][w]))
        ended = int(done.sum())
        self.n_episode += ended
        return (~done).astype(np.float32)[:, None], ended
