"""``python -m digideep_stack.slurm up`` stops its jobs and all three daemons on Ctrl-C, even when
Ctrl-C comes again while it stops."""

from __future__ import annotations

import contextlib
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from digideep_stack.slurm import missing
from tests.conftest import REPO


def processes_of(folder: Path) -> list[psutil.Process]:
    """The processes whose command line names ``folder`` (the cluster's daemons)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(str(folder) in part for part in process.info["cmdline"] or ()):
            found.append(process)
    return found


def test_a_second_ctrl_c_while_the_cluster_stops_leaves_no_daemon_running(tmp_path):
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    folder = tmp_path / "slurm"
    up = subprocess.Popen(
        [sys.executable, "-m", "digideep_stack.slurm", "up", "--folder", str(folder), "--cpus", "2"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        ready, _, _ = select.select([up.stdout], [], [], 90)
        line = up.stdout.readline() if ready else ""
        if "Slurm is up" not in line:
            pytest.skip(f"the local Slurm cluster did not start: {line or up.stderr.read()[-2000:]}")
        env = {"SLURM_CONF": str(folder / "slurm.conf"), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
        # a job that takes seconds to end once cancelled, so that the second Ctrl-C comes while the
        # cluster waits for it
        wrap = "trap 'sleep 6; exit 0' TERM; sleep 300 & wait"
        job = subprocess.run(
            ["sbatch", "--parsable", f"--output={tmp_path / 'job.out'}", "--wrap", wrap],
            env=env, capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
        deadline = time.monotonic() + 60
        while (
            "RUNNING"
            not in subprocess.run(
                ["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True, timeout=30
            ).stdout
        ):
            assert time.monotonic() < deadline, f"job {job} did not start"
            time.sleep(0.2)
        up.send_signal(signal.SIGINT)  # Ctrl-C: the cluster cancels its job and waits for it
        time.sleep(2)
        up.send_signal(signal.SIGINT)  # and again, impatient
        up.send_signal(signal.SIGTERM)
        _, errors = up.communicate(timeout=120)
        assert up.returncode == 0, errors[-3000:]
        assert "Traceback" not in errors, errors[-3000:]
        assert processes_of(folder) == [], [p.info["cmdline"] for p in processes_of(folder)]
    finally:
        if up.poll() is None:
            up.kill()
        for process in processes_of(folder):  # what a failed stop left behind
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
