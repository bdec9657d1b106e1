"""The checkpoint of a Stable-Baselines3 reference cell: what continues a cell that did not finish.

Each SB3 cell of a benchmark has one folder under the benchmark's ``session_path``,
``sb3-<benchmark>/<ALGO>_<env>_seed-<seed>_<variant>/`` (:func:`cell_folder`), holding at most one
whole checkpoint, ``checkpoint-<frames>/``:

- ``model.zip``: SB3's ``model.save``: the networks, their optimizers, SAC's entropy coefficient and
  the counters (``num_timesteps``, ``_n_updates``, ``_episode_num``);
- ``replay_buffer.pkl``: SB3's ``save_replay_buffer`` (off-policy algorithms; PPO has none);
- ``rng.pt``: the generators' states: Python's, numpy's and torch's global ones (CUDA's where SB3
  trains on a GPU), the action space's (SAC's and TD3's warm-up actions), the training
  environment's and the evaluation environment's, encoded by :mod:`digideep.storage.codec` and read
  back with ``torch.load(..., weights_only=True)``;
- ``cell.json``, written last: the MLflow run the checkpoint continues, its frames, and the size of
  every other file.

On local disk a checkpoint is written into a hidden sibling folder, fsynced and renamed into place,
so a folder named ``checkpoint-<frames>`` is whole; on an object store, which has no rename, its
files are put first and ``cell.json`` last. A checkpoint is read only when its ``cell.json`` is there
and every file has the size it records, so a save cut short is never read. Once a new checkpoint is
in place every other entry of the folder (the older checkpoint, leftovers of a cut save) is deleted.

What a restored cell does not have is the environment mid-episode: SB3 cannot save it, so the episode
that was running starts over from a reset, drawn from the training environment's saved generator.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from digideep.storage.codec import decode, encode
from digideep.storage.files import fsync_dir
from digideep.storage.location import Location, location_of

__all__ = ["CellCheckpoints", "SavedCell", "cell_folder"]

log = logging.getLogger(__name__)

MODEL = "model.zip"
BUFFER = "replay_buffer.pkl"
RNG = "rng.pt"
RECORD = "cell.json"
"""``{"run_id": ..., "frames": N, "files": {name: size}}``: written last, read first."""
_NAME = re.compile(r"^checkpoint-(\d+)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def cell_folder(session_path: str | Path | Location, benchmark: str, cell_key: str) -> Location:
    """The checkpoint folder of a cell: ``<session_path>/sb3-<benchmark>/<key>`` with the key's
    ``sb3:`` dropped, its ``/`` made ``_`` and any character unsafe in a file name made ``-``."""
    name = _UNSAFE.sub("-", cell_key.removeprefix("sb3:").replace("/", "_"))
    return location_of(session_path) / f"sb3-{_UNSAFE.sub('-', benchmark)}" / name


@dataclass(frozen=True)
class SavedCell:
    """A whole checkpoint: its folder, the MLflow run it continues and the frames it was taken at."""

    location: Location
    run_id: str
    frames: int


class CellCheckpoints:
    """The checkpoints of one SB3 cell in ``folder`` (see the module docstring)."""

    def __init__(self, folder: str | Path | Location) -> None:
        self.folder = location_of(folder)

    def latest(self) -> SavedCell | None:
        """The newest whole checkpoint, or None. A save cut short is passed over, one whose files differ
        from its ``cell.json`` with a warning."""
        for location in self._checkpoints():
            try:
                record = (location / RECORD).read_json()
            except FileNotFoundError:
                continue  # a save cut short: never read
            except json.JSONDecodeError:
                log.warning("%s: %s cannot be read; passing this checkpoint over", location, RECORD)
                continue
            wrong = [
                name
                for name, size in record["files"].items()
                if not (location / name).exists() or (location / name).size() != size
            ]
            if wrong:
                log.warning("%s: %s differ from %s; passing this checkpoint over", location, wrong, RECORD)
                continue
            return SavedCell(location, str(record["run_id"]), int(record["frames"]))
        return None

    def save(self, model: Any, eval_env: Any, run_id: str) -> SavedCell:
        """Write ``model``'s checkpoint at its ``num_timesteps`` for MLflow run ``run_id``, then delete
        every older one.

        Args:
            model: the SB3 algorithm, between two rollouts (its transitions stored, its updates made).
            eval_env: the evaluation ``VecEnv`` (its generator is saved).
            run_id: the MLflow run the checkpoint continues.
        """
        from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

        frames = int(model.num_timesteps)
        target = self.folder / f"checkpoint-{frames}"
        with self._staging() as staged:
            model.save(staged / MODEL)
            if isinstance(model, OffPolicyAlgorithm):
                model.save_replay_buffer(staged / BUFFER)
            torch.save(encode(_generators(model, eval_env)), staged / RNG)
            sizes = {path.name: path.stat().st_size for path in sorted(staged.iterdir())}
            (staged / RECORD).write_text(json.dumps({"run_id": run_id, "frames": frames, "files": sizes}))
            self._place(staged, target)
        for child in self.folder.children():
            if child != target:
                child.delete()
        return SavedCell(target, run_id, frames)

    def load(self, saved: SavedCell, model_class: type, env: Any, eval_env: Any) -> Any:
        """The model of ``saved`` on ``env``, its replay buffer and every generator restored.

        The training environment is reset from its saved generator (the episode that was running at
        the checkpoint starts over); ``eval_env`` takes its saved generator without a reset.

        Args:
            saved: what :meth:`latest` found.
            model_class: the SB3 algorithm (``stable_baselines3.SAC``).
            env: the training environment (a Gymnasium env; SB3 wraps it as when the cell started).
            eval_env: the evaluation ``VecEnv``.
        """
        with self._local_copy(saved) as folder:
            model = model_class.load(folder / MODEL, env=env)
            if (folder / BUFFER).exists():
                model.load_replay_buffer(folder / BUFFER)
            states = decode(torch.load(folder / RNG, weights_only=True))
        train = model.get_env()
        train.reset()  # takes the seed SB3's load gave the environment for its next reset
        _restore(_generator_of(train), states["train_env"])
        # SB3's learn(reset_num_timesteps=False) starts from _last_obs: the new episode's first one
        model._last_obs = train.reset()
        model._last_episode_starts = np.ones((train.num_envs,), dtype=bool)
        _restore(_generator_of(eval_env), states["eval_env"])
        _restore(model.action_space.np_random, states["action_space"])
        random.setstate(states["python"])
        np.random.set_state(states["numpy"])
        torch.set_rng_state(states["torch"].cpu())
        if "torch_cuda" in states and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in states["torch_cuda"][: torch.cuda.device_count()]])
        return model

    def clear(self) -> None:
        """Delete the cell's folder (a finished cell needs no checkpoint)."""
        self.folder.delete()

    def _checkpoints(self) -> list[Location]:
        """The folder's ``checkpoint-<frames>`` entries, newest first."""
        found = [
            (int(m.group(1)), child) for child in self.folder.children() if (m := _NAME.match(child.name))
        ]
        return [child for _, child in sorted(found, key=lambda pair: -pair[0])]

    @contextmanager
    def _staging(self) -> Iterator[Path]:
        """A fresh local folder to write a checkpoint into: a hidden sibling of the checkpoints on
        local disk (renamed into place), a temporary folder for an object store (uploaded)."""
        if self.folder.is_local:
            self.folder.mkdir()
            staged = Path(tempfile.mkdtemp(dir=self.folder.path, prefix=".partial-"))
            staged.chmod(0o755)  # mkdtemp's 0o700 would hide the checkpoint from the others who run cells
        else:
            staged = Path(tempfile.mkdtemp(prefix="digideep-sb3-"))
        try:
            yield staged
        finally:
            shutil.rmtree(staged, ignore_errors=True)  # renamed away on success: nothing left to remove

    def _place(self, staged: Path, target: Location) -> None:
        """Put the staged files at ``target``, ``cell.json`` last (renamed whole on local disk)."""
        if target.is_local:
            for path in staged.iterdir():
                fsync_dir(path)  # (fsyncs a file too) the data is on disk before the rename names it
            target.delete()  # a checkpoint at the same frames, written by an attempt that died after it
            os.rename(staged, target.path)
            fsync_dir(self.folder.path)
            return
        target.delete()
        for path in sorted(staged.iterdir(), key=lambda p: p.name == RECORD):
            (target / path.name).put_file(path)

    @contextmanager
    def _local_copy(self, saved: SavedCell) -> Iterator[Path]:
        """The checkpoint's files in a local folder: its own on local disk, a download otherwise."""
        if saved.location.is_local:
            yield Path(saved.location.path)
            return
        with tempfile.TemporaryDirectory(prefix="digideep-sb3-") as scratch:
            for name in json.loads((saved.location / RECORD).read_bytes())["files"]:
                (Path(scratch) / name).write_bytes((saved.location / name).read_bytes())
            yield Path(scratch)


def _generators(model: Any, eval_env: Any) -> dict[str, Any]:
    """Every generator an SB3 cell draws from (see the module docstring)."""
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "action_space": model.action_space.np_random,
        "train_env": _generator_of(model.get_env()),
        "eval_env": _generator_of(eval_env),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["torch_cuda"] = torch.cuda.get_rng_state_all()
    return states


def _generator_of(vec_env: Any) -> np.random.Generator:
    """The generator of the one environment of an SB3 ``DummyVecEnv`` (resets draw from it)."""
    return vec_env.envs[0].unwrapped.np_random


def _restore(generator: np.random.Generator, saved: np.random.Generator) -> None:
    """Give ``generator`` the state of ``saved``, in place (whoever holds it draws on from there)."""
    generator.bit_generator.state = saved.bit_generator.state
