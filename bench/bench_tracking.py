"""What MLflow tracking costs a training loop, against the same loop without tracking.

Run: ``python bench/bench_tracking.py [--iterations 60] [--metrics 20] [--server-uri URI]``

Each iteration does real work (``--work-steps`` SAC-sized gradient steps: twin Q networks and a
policy, 256x256 MLPs, HalfCheetah dimensions, batch 256, on the CPU with one torch thread) and then,
in the tracked variants, one ``MlflowTracker.log_metrics`` call with ``--metrics`` values. Variants:

* ``baseline``: no tracking;
* ``embedded`` / ``embedded-sync``: the sqlite store, sending from the background thread / inline;
* ``server`` / ``server-sync``: an ``mlflow server`` on 127.0.0.1 (started here unless given).

Printed per variant and iteration (medians of ``--repeats`` interleaved rounds, against the baseline
measured in the same run): wall time, extra wall time, extra CPU time of this process (all threads,
including the sender thread), CPU time of the local server, and the time the ``log_metrics`` call
blocks the loop; then the blocked time and the extra CPU as fractions of one SAC HalfCheetah
iteration (1000 gradient steps at an assumed 1.5 ms; the step measured here is printed too). On a
busy machine the extra wall time is noise-dominated; the blocked and CPU figures are the stable ones.
Also the one-off costs of ``start()`` and ``log_checkpoint``. Goal: tracking <= 2 % of an iteration.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import psutil
import torch
from torch import nn

from digideep.tracking.mlflow_logger import MlflowTracker

ASSUMED_STEP_S = 1.5e-3
STEPS_PER_ITERATION = 1000
OBS, ACT, HIDDEN, BATCH = 17, 6, 256, 256


def mlp(inputs: int, outputs: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(inputs, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, outputs)
    )


class SacSizedUpdate:
    """A gradient step of SAC's size: two Q networks, their targets, a Gaussian policy, Adam."""

    def __init__(self) -> None:
        self.q1, self.q2 = mlp(OBS + ACT, 1), mlp(OBS + ACT, 1)
        self.q1_target, self.q2_target = mlp(OBS + ACT, 1), mlp(OBS + ACT, 1)
        self.policy = mlp(OBS, 2 * ACT)
        self.q_optim = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], lr=3e-4)
        self.pi_optim = torch.optim.Adam(self.policy.parameters(), lr=3e-4)
        self.obs, self.next_obs = torch.randn(BATCH, OBS), torch.randn(BATCH, OBS)
        self.act, self.rew = torch.randn(BATCH, ACT), torch.randn(BATCH, 1)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.policy(obs).chunk(2, dim=-1)
        std = log_std.clamp(-5, 2).exp()
        action = torch.tanh(mean + std * torch.randn_like(mean))
        return action, (-0.5 * ((action - mean) / std) ** 2 - std.log()).sum(-1, keepdim=True)

    def step(self) -> None:
        with torch.no_grad():
            next_action, next_logp = self.sample(self.next_obs)
            x = torch.cat([self.next_obs, next_action], -1)
            target = self.rew + 0.99 * (torch.min(self.q1_target(x), self.q2_target(x)) - 0.2 * next_logp)
        x = torch.cat([self.obs, self.act], -1)
        q_loss = ((self.q1(x) - target) ** 2).mean() + ((self.q2(x) - target) ** 2).mean()
        self.q_optim.zero_grad()
        q_loss.backward()
        self.q_optim.step()
        action, logp = self.sample(self.obs)
        x = torch.cat([self.obs, action], -1)
        pi_loss = (0.2 * logp - torch.min(self.q1(x), self.q2(x))).mean()
        self.pi_optim.zero_grad()
        pi_loss.backward()
        self.pi_optim.step()
        with torch.no_grad():
            for net, target_net in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
                for p, tp in zip(net.parameters(), target_net.parameters(), strict=True):
                    tp.lerp_(p, 0.005)


def start_server(root: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [
        str(Path(sys.executable).parent / "mlflow"),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    command += ["--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'server.db'}"]
    command += ["--artifacts-destination", str(root / "server-artifacts")]
    log = open(root / "server.log", "wb")  # noqa: SIM115 (kept open for the server's lifetime)
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=2).read()
            return process, uri
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"mlflow server did not start, see {root / 'server.log'}")


def run_loop(
    update: SacSizedUpdate, iterations: int, work_steps: int, tracker: MlflowTracker | None, n_metrics: int
) -> tuple[float, float]:
    """Wall seconds of the loop, process CPU seconds (all threads) and seconds inside ``log_metrics``."""
    names = [f"/bench/metric_{i:02d}" for i in range(n_metrics)]
    blocked = 0.0
    cpu = time.process_time()
    start = time.perf_counter()
    for iteration in range(iterations):
        for _ in range(work_steps):
            update.step()
        if tracker is not None:
            t = time.perf_counter()
            tracker.log_metrics(
                {name: iteration * 0.5 + i for i, name in enumerate(names)}, step=1000 * (iteration + 1)
            )
            blocked += time.perf_counter() - t
    if tracker is not None:
        tracker.flush(wait=True)  # what was queued is sent within the measured time
    return time.perf_counter() - start, time.process_time() - cpu, blocked


def server_cpu(process: subprocess.Popen | None) -> float:
    """CPU seconds used so far by the server process and its workers (0 when not started here)."""
    if process is None:
        return 0.0
    parent = psutil.Process(process.pid)
    total = 0.0
    for proc in [parent, *parent.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def measure(args: argparse.Namespace, update: SacSizedUpdate, root: Path, process, server_uri: str) -> dict:
    """Interleaved rounds of every variant; per-iteration medians and one-off costs."""
    uris = {"embedded": f"sqlite:///{root / 'mlflow.db'}", "server": server_uri}
    variants = ["baseline", "embedded", "embedded-sync", "server", "server-sync"]
    params = {"agents": {"sac": {"args": {f"p{i}": i for i in range(60)}}}, "env": {"name": "HalfCheetah-v5"}}
    trackers: dict[str, MlflowTracker] = {}
    once: dict[str, float] = {}
    for variant in variants[1:]:
        store = variant.split("-")[0]
        tracker = MlflowTracker(
            f"bench-{uuid.uuid4().hex[:6]}",
            tracking_uri=uris[store],
            asynchronous=not variant.endswith("sync"),
            min_flush_interval=args.min_flush_interval,
        )
        t = time.perf_counter()
        tracker.start(params, {"seed": 0})
        once[f"start() {variant}"] = time.perf_counter() - t
        trackers[variant] = tracker
    samples: dict[str, list[tuple[float, float, float, float]]] = {v: [] for v in variants}
    run_loop(update, 5, args.work_steps, None, args.metrics)  # warm-up
    for round_ in range(args.repeats):  # rotate the order so that no variant always runs first
        for variant in variants[round_ % len(variants) :] + variants[: round_ % len(variants)]:
            before = server_cpu(process)
            wall, cpu, blocked = run_loop(
                update, args.iterations, args.work_steps, trackers.get(variant), args.metrics
            )
            served = server_cpu(process) - before
            samples[variant].append(tuple(x / args.iterations for x in (wall, cpu, blocked, served)))

    checkpoint = root / "checkpoint-1"
    checkpoint.mkdir()
    nets = [m.state_dict() for m in (update.q1, update.q2, update.policy)]
    torch.save({"nets": nets, "optim": update.q_optim.state_dict()}, checkpoint / "states.pt")
    (checkpoint / "runner.json").write_text("{}")
    size_mb = sum(f.stat().st_size for f in checkpoint.iterdir()) / 1e6
    for store in ("embedded", "server"):
        t = time.perf_counter()
        trackers[store].log_checkpoint(checkpoint)
        once[f"log_checkpoint {store} ({size_mb:.1f} MB)"] = time.perf_counter() - t
    for tracker in trackers.values():
        tracker.finish()
    medians = {
        v: [statistics.median(column) for column in zip(*rows, strict=True)] for v, rows in samples.items()
    }
    return {"medians": medians, "once": once}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=40, help="iterations per measured loop")
    parser.add_argument("--work-steps", type=int, default=10, help="gradient steps of work per iteration")
    parser.add_argument("--metrics", type=int, default=20, help="metrics logged per iteration")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (median taken)")
    parser.add_argument(
        "--min-flush-interval", type=float, default=0.0, help="tracker setting (0: every call)"
    )
    parser.add_argument("--server-uri", help="use this MLflow server instead of starting one")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    root = Path(tempfile.mkdtemp(prefix="bench-tracking-"))
    update = SacSizedUpdate()
    for _ in range(30):
        update.step()
    t = time.perf_counter()
    for _ in range(100):
        update.step()
    step_s = (time.perf_counter() - t) / 100

    process, server_uri = (None, args.server_uri) if args.server_uri else start_server(root)
    try:
        result = measure(args, update, root, process, server_uri)
    finally:
        if process is not None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
        shutil.rmtree(root, ignore_errors=True)

    iteration = STEPS_PER_ITERATION * ASSUMED_STEP_S
    lines = [
        f"SAC-sized gradient step here (CPU, 1 thread): {step_s * 1e3:.2f} ms. Fractions below use the assumed",
        f"{ASSUMED_STEP_S * 1e3:.1f} ms: one SAC HalfCheetah iteration = {STEPS_PER_ITERATION} steps = {iteration:.1f} s.",
        f"Loop: {args.iterations} iterations x {args.work_steps} gradient steps, {args.metrics} metrics per iteration,",
        f"min_flush_interval {args.min_flush_interval} s, median of {args.repeats} rotated rounds; server {server_uri}",
        "",
        "per iteration    wall ms  x base  +wall ms  +CPU ms  server CPU ms  blocked ms | % of iteration:",
        "                                                                               | blocked  +CPU  +CPU+server",
    ]
    base_wall, base_cpu, _, base_served = result["medians"]["baseline"]
    for variant, (wall, cpu, blocked, served) in result["medians"].items():
        extra_cpu, extra_served = max(cpu - base_cpu, 0.0), max(served - base_served, 0.0)
        lines.append(
            f"{variant:<15} {wall * 1e3:8.1f} {wall / base_wall:7.3f} {(wall - base_wall) * 1e3:9.2f} "
            f"{(cpu - base_cpu) * 1e3:8.2f} {served * 1e3:14.2f} {blocked * 1e3:11.3f} | {blocked / iteration:7.3%} "
            f"{extra_cpu / iteration:6.2%} {(extra_cpu + extra_served) / iteration:8.2%}"
        )
    print("\n".join(lines))
    for name, seconds in result["once"].items():
        print(f"{name}: {seconds * 1e3:.0f} ms (once)")


if __name__ == "__main__":
    main()
