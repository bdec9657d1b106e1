"""The generators a checkpoint restores are the run's own: background draws from Python's global
``random`` (Prefect's, urllib3's retry jitter) cannot make a resumed run differ."""

from __future__ import annotations

import random

import numpy as np
import torch

from digideep.pipeline.rng import rng_state, run_random, seed_everything, set_rng_state


def draws() -> tuple:
    return run_random.random(), float(np.random.rand()), float(torch.rand(()))


def test_a_restored_state_draws_the_same_whatever_the_global_random_did_meanwhile():
    seed_everything(7)
    saved = rng_state()
    expected = draws()
    seed_everything(7)
    random.random()  # a library in the background draws from the global generator...
    set_rng_state(saved)
    random.random()  # ...before and after the restore
    assert draws() == expected
    assert "python" not in saved  # the global generator is not promised back


def test_seeding_seeds_the_global_random_too_and_the_run_generator_apart_from_it():
    seed_everything(3)
    first = random.random(), run_random.random()
    seed_everything(3)
    assert (random.random(), run_random.random()) == first
    assert first[0] == random.Random(3).random()
