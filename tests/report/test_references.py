"""The shipped reference scores: every number cited, and the normalisation they define."""

from __future__ import annotations

import numpy as np
import pytest

from digideep.report.references import algorithm_family, load_references


def test_the_shipped_file_cites_every_published_number() -> None:
    references = load_references()
    assert {"Pendulum-v1", "Hopper-v5", "HalfCheetah-v5", "Walker2d-v5"} <= set(references)
    for env, entry in references.items():
        assert entry.reference is not None, env
        assert entry.published, env
        for published in entry.published:
            assert "https://" in published.source, (env, published.name)
            assert published.frames > 0


def test_normalised_scores_put_random_at_0_and_the_reference_at_1() -> None:
    hopper = load_references()["Hopper-v5"]
    assert hopper.reference is not None and hopper.reference.name == "rl-zoo SAC"
    assert hopper.reference.value == pytest.approx(2325.547)  # rl-zoo's benchmark.md, Hopper-v3
    scores = np.array([hopper.random, hopper.reference.value, (hopper.random + hopper.reference.value) / 2])
    np.testing.assert_allclose(hopper.normalise(scores), [0.0, 1.0, 0.5])


def test_published_values_at_a_budget_are_of_the_same_method() -> None:
    pendulum = load_references()["Pendulum-v1"]
    assert [p.name for p in pendulum.at_budget(20000, "TD3")] == ["rl-zoo TD3"]
    assert pendulum.at_budget(50000, "TD3") == []
    assert algorithm_family("params.pendulum_ddpg") == "DDPG"


def test_a_published_budget_within_1_percent_counts_as_the_runs() -> None:
    hopper = load_references()["Hopper-v5"]
    at_49_epochs = [p.name for p in hopper.at_budget(1_003_520, "PPO")]  # PPO's 49 epochs of 20,480
    assert at_49_epochs == [p.name for p in hopper.at_budget(1_000_000, "PPO")]
    assert "CleanRL PPO" in at_49_epochs
    assert hopper.at_budget(1_011_000, "PPO") == []  # 11,000 frames away: past 1 %

    assert algorithm_family("sb3:SAC") == "SAC"
    assert algorithm_family("my/own_params.py") is None
