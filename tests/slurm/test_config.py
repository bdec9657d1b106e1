"""The job config, the job script and the checks that need no cluster."""

from __future__ import annotations

import pytest

from digideep.errors import UsageError
from digideep.slurm.cluster import (
    LOCAL_FILESYSTEMS,
    Cluster,
    check_time_limit,
    check_visible,
    filesystem_of,
    seconds,
)
from digideep.slurm.config import SlurmConfig, load_config
from digideep.slurm.job import TrainingJob, job_script


def test_a_config_file_gives_the_job_its_resources(tmp_path):
    path = tmp_path / "slurm.yaml"
    path.write_text(
        "partition: gpu\naccount: lab\ntime: '24:00:00'\ncpus: 8\nmem: 32G\ngres: gpu:1\n"
        "signal_seconds: 120\nsetup: module load cuda\nenv: {MLFLOW_TRACKING_URI: 'http://m:5000'}\n"
        "sbatch: [--constraint=a100]\n"
    )
    config = load_config(path)
    assert config.sbatch_options() == [
        "--partition=gpu", "--account=lab", "--time=24:00:00", "--cpus-per-task=8", "--mem=32G",
        "--gres=gpu:1", "--constraint=a100",
    ]  # fmt: skip
    job = TrainingJob(
        "/shared/sessions", "run", "params.pendulum_sac", '{"seed": 1}', "/home/me", "/l/run-%j.out", "dd"
    )
    script = job_script(job, config.replace(time="60"))
    assert "#SBATCH --time=60\n" in script and "#SBATCH --signal=B:USR1@120\n" in script
    assert "#SBATCH --requeue\n" in script and "module load cuda\n" in script
    assert "export MLFLOW_TRACKING_URI=http://m:5000\n" in script
    assert "dd resume run --session-path=/shared/sessions --no-prefect &" in script
    assert "dd train --params=params.pendulum_sac --session-name=run" in script
    assert 'scontrol requeue "$SLURM_JOB_ID"' in script
    assert "scontrol requeue" not in job_script(job, SlurmConfig(requeue=False))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("partiton: gpu\n", "unknown Slurm config key 'partiton' in '{path}'; did you mean 'partition'?"),
        ("cpus: eight\n", "Slurm config key 'cpus' in '{path}' must be int, not str ('eight')"),
        ("time: 1h\n", "Slurm config key 'time' in '{path}' is '1h', not a Slurm time"),
        ("requeue: 1\n", "Slurm config key 'requeue' in '{path}' must be bool, not int (1)"),
        ("- gpu\n", "--slurm-config '{path}' must hold a mapping"),
        ("partition: [\n", "--slurm-config '{path}' is not valid YAML"),
    ],
)
def test_a_bad_config_is_one_line(tmp_path, text, message):
    path = tmp_path / "slurm.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as error:
        load_config(path)
    assert str(error.value).startswith(message.format(path=path))
    assert "\n" not in str(error.value)


def test_slurm_times_read_as_slurm_reads_them():
    assert [seconds(t) for t in ("1", "1:30", "2:00:00", "1-2", "1-0:30", "infinite")] == [
        60, 90, 7200, 93600, 88200, None,
    ]  # fmt: skip
    cluster = Cluster({"short": 1}, "short", {"short": 60})
    with pytest.raises(UsageError, match=r"time limit 5 is above the limit of partition 'short' \(1 min\)"):
        check_time_limit(cluster, "short", "5", 30)
    with pytest.raises(UsageError, match="leaves no training before the warning"):
        check_time_limit(cluster, "short", "1", 60)


def test_a_folder_on_this_hosts_disk_is_refused_for_a_partition_of_several_nodes(tmp_path):
    kind = filesystem_of(tmp_path)
    one, several = Cluster({"p": 1}, "p", {"p": None}), Cluster({"p": 4}, "p", {"p": None})
    check_visible(tmp_path / "sessions", "the session path", one, "p")  # one node sees its own disk
    if kind not in LOCAL_FILESYSTEMS:
        pytest.skip(f"the test folder is on {kind}, not a local filesystem")
    with pytest.raises(UsageError, match=f"is on a local {kind} filesystem of this host, which the 4 nodes"):
        check_visible(tmp_path / "sessions", "the session path", several, "p")
