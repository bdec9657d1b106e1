"""PPO with the Nature CNN learns an Atari game (``-m slow``): the first 400,000 frames of
``params/atari_ppo.py`` on Breakout.

Why Breakout and not Pong: a full Pong run (CleanRL's ``ppo_atari``, 10M agent steps) stays at -21
to -20 for its first million or so agent steps (docs.cleanrl.dev/rl-algorithms/ppo/#ppo_ataripy,
the PongNoFrameskip-v4 curve), and this machine's two shared cores make about 100 agent steps/s with
the updates (``bench/bench_atari.py``), so a Pong test that shows a rise would take hours. Breakout
rewards the first skill PPO picks up (keep the paddle under the ball) from the first games on, and is
the game of the same CleanRL page that climbs earliest.

Threshold: the mean full-game score (5 lives, unclipped) of the last 20 games of the run must be at
least twice the random-play score of Breakout, 1.7 (Mnih et al. 2015, Nature 518, Extended Data
Table 2), and above the mean of the run's first 20 games (played by the untrained policy). The run
uses CleanRL's hyperparameters with the learning-rate schedule of the full 10M-step run, so these are
the first 100 iterations of that run, not a shortened schedule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.agents.runner_setup import close, iterate, make_runner, shipped_params

pytest.importorskip("ale_py", reason="needs pip install 'digideep[atari]'")

ITERATIONS = 100  # x 8 envs x 128 steps = 102,400 agent steps = 409,600 emulator frames
RANDOM_SCORE = 1.7  # Breakout, random play (Mnih et al. 2015)
GAMES = 20  # games averaged at each end of the run


@pytest.mark.slow
def test_ppo_breakout_scores_rise_above_random_play(tmp_path: Path) -> None:
    params = shipped_params("atari_ppo", model_name="ALE/Breakout-v5", torch_threads=2)
    runner = make_runner(tmp_path, params)
    try:
        name = runner.explorers["train"].metric_names[0]
        runner.monitor.set_window(name, 100_000)  # keep every game's score, in order
        for done in range(10, ITERATIONS + 1, 10):
            iterate(runner, 10)
            so_far = runner.monitor.window_values(name)
            print(
                f"iteration {done}: {len(so_far)} games, last 20 mean {np.mean(so_far[-GAMES:]):.2f}",
                flush=True,
            )
        scores = np.array(runner.monitor.window_values(name))
    finally:
        close(runner)
    assert len(scores) >= 2 * GAMES, f"only {len(scores)} games ended in {ITERATIONS} iterations"
    first, last = scores[:GAMES].mean(), scores[-GAMES:].mean()
    blocks = [f"{block.mean():.1f}" for block in np.array_split(scores, 10)]
    print(
        f"Breakout: {len(scores)} games, mean score by tenths of the run {blocks}; first {first:.1f}, last {last:.1f}"
    )
    assert last >= 2 * RANDOM_SCORE, f"the last {GAMES} games scored {last:.1f} < {2 * RANDOM_SCORE}"
    assert last > first, f"no rise: the last {GAMES} games scored {last:.1f}, the first {first:.1f}"
