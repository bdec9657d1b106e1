"""``digideep report``: statistics of benchmark runs that hold up (rliable), against cited references.

Modules, one topic each: :mod:`~digideep.report.selection` (which runs, checked against the
evaluation protocol), :mod:`~digideep.report.references` (random and published scores, normalisation),
:mod:`~digideep.report.statistics` (rliable's intervals, aggregates, profiles, P(A > B)),
:mod:`~digideep.report.build` (a report's content), :mod:`~digideep.report.figures`,
:mod:`~digideep.report.table` and :mod:`~digideep.report.html` (its renderings) and
:mod:`~digideep.report.cli` (the command). See docs/report.md.
"""

DEFAULT_REPS = 2000
"""Bootstrap resamples of every interval unless ``--reps`` says otherwise."""
