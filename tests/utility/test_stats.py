import time

from digideep.utility.monitoring import Monitor
from digideep.utility.stats import StatsSampler, gpu_handles


def test_sampler_feeds_cpu_and_ram_figures_and_skips_missing_gpus():
    target = Monitor()
    sampler = StatsSampler(interval=0.05, target=target)
    with sampler:
        time.sleep(0.3)
    summary = target.summary()
    assert summary["/system/cpu_percent"]["count"] >= 2
    assert 0.0 < summary["/system/process_rss_gb"]["mean"] < 64
    gpu_names = [name for name in summary if name.startswith("/system/gpu")]
    assert len(gpu_names) == 2 * len(gpu_handles())
