"""The commands of the ``digideep`` script and of ``python -m digideep.main``.

:mod:`digideep.main` is the entry point (it parses, sets up logging, checks ``--device`` and turns
errors into one line and an exit status); the modules here hold what each command does (each hands
``--device`` and ``--deterministic`` to the run as arguments):

* :mod:`digideep.cli.options`: the options shared by train, resume and play, and the exit statuses;
* :mod:`digideep.cli.parsers`: the ``digideep`` and ``python -m digideep.main`` parsers;
* :mod:`digideep.cli.train`: ``train`` and ``resume`` (Prefect flow or ``--no-prefect``);
* :mod:`digideep.cli.play`: ``play``;
* :mod:`digideep.cli.runs`: ``runs`` (list, compare, register, ui), ``runs sync`` and ``envs``;
* :mod:`digideep.cli.slurm`: ``slurm submit`` and ``slurm resume`` (a run as a Slurm job).
"""
