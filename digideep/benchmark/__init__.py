"""Benchmarks: a matrix of runs, the reference cells beside them, and the benchmark in MLflow.

* :mod:`digideep.benchmark.matrix`: algorithms x environments x seeds x variants, each cell one run,
  checked before anything runs (:func:`~digideep.benchmark.matrix.plan`);
* :mod:`digideep.benchmark.sb3`: a Stable-Baselines3 reference cell, trained and evaluated under the
  evaluation protocol of digideep's runs (:mod:`digideep.pipeline.evaluation`);
* :mod:`digideep.benchmark.records`: the benchmark's parent run in MLflow, its cells' runs and their scores.

This package sits above :mod:`digideep.pipeline` and :mod:`digideep.tracking` and imports them; nothing
below imports it (``tests/test_layers.py``). Nothing is imported here, so that importing one module
does not pay for the others.
"""
