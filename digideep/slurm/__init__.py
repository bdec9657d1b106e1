"""Runs as Slurm jobs that survive their time limit and preemption.

- :mod:`digideep.slurm.config`: the job's resources and behaviour, from a small YAML file;
- :mod:`digideep.slurm.job`: the batch script: train or resume the session, pass Slurm's warning
  signal on to digideep, requeue the job when the run stopped before finishing;
- :mod:`digideep.slurm.cluster`: the checks before submitting, ``sbatch``, and waiting for jobs;
- :mod:`digideep.slurm.benchmark`: a benchmark's cells as such jobs, tracked as a benchmark's cells;
- :mod:`digideep.slurm.tune`: an Optuna study's trials as such jobs, each reporting to its trial.

The command is ``digideep slurm`` (:mod:`digideep.cli.slurm`); docs/slurm.md is the user's guide.
"""
