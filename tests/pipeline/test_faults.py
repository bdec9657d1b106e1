"""Fault injection (``bench/bench_faults.py``): every killed run resumes to the uninterrupted run."""

from __future__ import annotations

import io

import pytest

from bench.bench_faults import KINDS, main


@pytest.mark.slow
def test_every_killed_run_resumes_identical_and_loses_no_metric() -> None:
    out = io.StringIO()
    identical, n = main(n=len(KINDS), seed=1, out=out)  # each kind of fault once, one MLflow outage
    assert identical == n, out.getvalue()
