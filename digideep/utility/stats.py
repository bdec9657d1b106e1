"""CPU and GPU figures sampled from a background thread into the Monitor.

CPU and RAM come from psutil; GPU utilisation and memory from NVML (package ``nvidia-ml-py``). On a
machine without an NVIDIA driver the GPU figures are skipped with one debug log line; nothing fails.

Names recorded (per sample): ``/system/cpu_percent``, ``/system/ram_used_gb``,
``/system/process_rss_gb``, and for each GPU ``i``: ``/system/gpu<i>/util_percent``,
``/system/gpu<i>/mem_used_gb``.
"""

from __future__ import annotations

import logging
import os
import threading

import psutil

from digideep.utility.monitoring import Monitor, monitor

__all__ = ["StatsSampler", "gpu_handles"]

log = logging.getLogger(__name__)
_GB = 1024**3


def gpu_handles() -> list:
    """NVML handles of the visible GPUs, or an empty list where NVML or a driver is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception as error:  # no library, no driver, no device: all mean "no GPU figures"
        log.debug("no GPU statistics: %s", error)
        return []


class StatsSampler:
    """Samples system figures every ``interval`` seconds into ``target`` until :meth:`stop`.

    Args:
        interval: seconds between samples.
        target: the Monitor to feed (the process-wide one by default).
    """

    def __init__(self, interval: float = 1.0, target: Monitor = monitor) -> None:
        self.interval = interval
        self.target = target
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process = psutil.Process(os.getpid())
        self._gpus: list = []

    def sample(self) -> dict[str, float]:
        """Take one sample, record it in the Monitor and return it."""
        figures = {
            "/system/cpu_percent": psutil.cpu_percent(interval=None),
            "/system/ram_used_gb": psutil.virtual_memory().used / _GB,
            "/system/process_rss_gb": self._process.memory_info().rss / _GB,
        }
        if self._gpus:
            import pynvml

            for index, handle in enumerate(self._gpus):
                figures[f"/system/gpu{index}/util_percent"] = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
                figures[f"/system/gpu{index}/mem_used_gb"] = pynvml.nvmlDeviceGetMemoryInfo(handle).used / _GB
        for name, value in figures.items():
            self.target(name, float(value))
        return figures

    def start(self) -> StatsSampler:
        if self._thread is None:
            self._gpus = gpu_handles()
            psutil.cpu_percent(interval=None)  # the first call only sets the reference point
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="digideep-stats", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> StatsSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
