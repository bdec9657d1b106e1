"""Where ``digideep resume`` crosses between the pipeline and storage layers.

    .venv/bin/python bench/resume_crossings.py                 # cartpole_ppo, 50 epochs
    .venv/bin/python bench/resume_crossings.py --epochs 30 --keep /tmp/resume-bench

It makes a session that was killed mid-run, as a crash leaves one: ``digideep train --params
params.cartpole_ppo --no-prefect`` runs as a subprocess in a temporary folder (its sessions and its
MLflow store there) and is killed with SIGKILL once two checkpoints are committed. It then runs
``digideep resume --no-prefect`` on that session in this process under :func:`sys.setprofile` and
records every call from a function of ``digideep/pipeline/`` to one of ``digideep/storage/`` (and
back, storage calling pipeline), as ``caller function -> callee function`` pairs with their counts.

A **crossing** is one pipeline function that calls into storage, however many storage calls it
makes (or one storage function that calls into pipeline): it is one place a reader follows from one
layer into the other. The calls are split at the first call of ``Runner.train``:

- **opening the resumed run (up to the first iteration)**: the session reopened, its params and
  state read, the Runner rebuilt from the newest checkpoint, the tracker opened;
- **the run and its close**: the iterations, the checkpoints, the end of training, the session closed.

For each part it prints the crossings with the distinct callees under each, then the counts: the
crossings and the distinct caller-callee pairs. The resumed run trains to the end (``--epochs``),
so a bench takes about a minute of training before the kill and as long again after it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = str(ROOT / "digideep") + os.sep
LAYERS = ("pipeline", "storage")
Pair = tuple[str, str]


def layer_of(filename: str) -> str | None:
    """``pipeline`` or ``storage`` for a file of those packages of this tree, else None."""
    if not filename.startswith(PACKAGE):
        return None
    part = filename[len(PACKAGE) :].split(os.sep, 1)[0]
    return part if part in LAYERS else None


def function_name(filename: str, name: str) -> str:
    """``pipeline/training.py:open_run`` for a function of the tree."""
    return f"{filename[len(PACKAGE) :]}:{name}"


class CrossingTrace:
    """A profile hook recording calls between pipeline and storage, split at the first iteration.

    ``parts`` maps the part's title to ``{(caller, callee): calls}`` in the order first seen.
    """

    OPENING = "opening the resumed run (up to the first iteration)"
    RUN = "the run and its close"

    def __init__(self) -> None:
        self.parts: dict[str, OrderedDict[Pair, int]] = {self.OPENING: OrderedDict(), self.RUN: OrderedDict()}
        self.part = self.OPENING

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = frame.f_code.co_filename
        if (
            self.part == self.OPENING
            and frame.f_code.co_name == "train"
            and callee.endswith(os.path.join("pipeline", "runner.py"))
        ):
            self.part = self.RUN
        caller_frame = frame.f_back
        if caller_frame is None:
            return
        caller = caller_frame.f_code.co_filename
        a, b = layer_of(caller), layer_of(callee)
        if a is None or b is None or a == b:
            return
        pair = (
            function_name(caller, caller_frame.f_code.co_name),
            function_name(callee, frame.f_code.co_name),
        )
        pairs = self.parts[self.part]
        pairs[pair] = pairs.get(pair, 0) + 1


def report(trace: CrossingTrace) -> str:
    """The crossings of each part, their distinct callees, and the counts."""
    lines = []
    for title, pairs in trace.parts.items():
        callers: OrderedDict[str, list[tuple[str, int]]] = OrderedDict()
        for (caller, callee), calls in pairs.items():
            callers.setdefault(caller, []).append((callee, calls))
        down = sum(1 for caller in callers if caller.startswith("pipeline"))
        lines.append(f"== {title}")
        for caller, callees in callers.items():
            lines.append(f"  {caller}")
            lines.extend(f"      -> {callee}  x{calls}" for callee, calls in callees)
        lines.append(
            f"  {len(callers)} crossings ({down} pipeline functions calling storage, "
            f"{len(callers) - down} storage functions calling pipeline); {len(pairs)} distinct caller-callee pairs"
        )
    return "\n".join(lines)


def committed(sessions: Path) -> int:
    """How many committed checkpoints the sessions under ``sessions`` hold."""
    return len(list(sessions.glob("*/checkpoints/checkpoint-*/commit.json")))


def killed_session(folder: Path, epochs: int, timeout: float) -> tuple[Path, str]:
    """Train cartpole_ppo in a subprocess under ``folder`` and SIGKILL it after two checkpoints.

    Returns the sessions folder and the session's name.
    """
    sessions = folder / "sessions"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [
        sys.executable,
        "-c",
        "from digideep.main import cli; cli()",
        "train",
        "--params",
        "params.cartpole_ppo",
        "--cpanel",
        f'{{"number_epochs": {epochs}}}',
        "--no-prefect",
        "--session-path",
        str(sessions),
    ]
    with open(folder / "train.log", "wb") as output:
        process = subprocess.Popen(command, cwd=folder, env=env, stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        try:
            while committed(sessions) < 2:
                if process.poll() is not None:
                    sys.exit(
                        f"the training run ended (exit {process.returncode}) before two checkpoints; see {folder}/train.log"
                    )
                if time.monotonic() > deadline:
                    sys.exit(f"no two checkpoints after {timeout:.0f} s; see {folder}/train.log")
                time.sleep(0.2)
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
    (name,) = [child.name for child in sessions.iterdir() if child.is_dir()]
    return sessions, name


def traced_resume(sessions: Path, name: str) -> tuple[CrossingTrace, int]:
    """Run ``digideep resume --no-prefect`` on the session in this process under the trace."""
    sys.path.insert(0, str(ROOT))
    from digideep import main

    trace = CrossingTrace()
    sys.argv = ["digideep", "resume", "--no-prefect", "--session-path", str(sessions), name]
    code: Any = 0
    sys.setprofile(trace)
    try:
        main.cli()
    except SystemExit as exit:
        code = exit.code
    finally:
        sys.setprofile(None)
    return trace, 0 if code is None else code if isinstance(code, int) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--epochs", type=int, default=50, help="number_epochs of the run (it resumes to the end)"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for two checkpoints")
    parser.add_argument("--keep", type=Path, help="work in this folder (kept) instead of a temporary one")
    args = parser.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        folder, cleanup = args.keep, None
    else:
        cleanup = tempfile.TemporaryDirectory(prefix="resume-crossings-")
        folder = Path(cleanup.name)
    try:
        sessions, name = killed_session(folder, args.epochs, args.timeout)
        here = os.getcwd()
        os.chdir(folder)  # the resumed run's files (MLflow store, data/) stay in the folder
        try:
            trace, code = traced_resume(sessions, name)
        finally:
            os.chdir(here)
        print(f"digideep resume --no-prefect {name}: exit {code}")
        print(report(trace))
        if code != 0:
            sys.exit(code)
    finally:
        if cleanup is not None:
            cleanup.cleanup()


if __name__ == "__main__":
    main()
