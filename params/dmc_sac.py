"""SAC on a DeepMind Control Suite task from state (dm_control/cartpole-swingup-v0 by default; any
``dm_control/<domain>-<task>-v0`` id through ``model_name``). Needs ``pip install 'digideep[dmc]'``.

Hyperparameters: jaxrl's state-based SAC for the Control Suite (github.com/ikostrikov/jaxrl,
``examples/configs/sac_default.py`` and ``examples/train.py``: lr 3e-4 for actor, critics and
temperature, batch 256, 256x256 networks, tau 0.005, gamma 0.99, initial temperature 1.0 with target
entropy -dim(A), 10,000 random frames before learning, one gradient step per frame, action repeat 1),
which are also the SAC paper's and SB3's defaults. Episodes are the suite's 1,000 steps; the run is
the suite's usual 1M frames. Expected on cartpole-swingup: the CURL paper's "State SAC" column
(Laskin, Srinivas, Abbeel 2020, arXiv:2004.04136, Table 1) reports 835 +- 22 after 100k steps; the
slow test (``tests/agents/test_learning.py``) asks for 700 after 100k frames.
"""

from digideep.errors import UsageError
from params._common import env, off_policy_args, replay_memory, tree

cpanel = {
    "model_name": "dm_control/cartpole-swingup-v0",  # any dm_control/<domain>-<task>-v0 id
    "observation": "flat",  # "flat" (one state vector) or "dict" (the suite's Dict); MLP agents need state
    "seed": 0,  # seed of torch, numpy, the envs and the sampler
    "number_epochs": 100,  # 100 epochs x 10,000 iterations x 1 step x 1 worker = 1,000,000 frames
    "epoch_size": 10_000,  # iterations per epoch (test, log and checkpoint come at epoch ends)
    "n_steps": 1,  # frames per worker between updates: 1 interleaves acting and learning (SB3, papers); N: chunks
    "num_workers": 1,  # parallel environments
    "lr": 3e-4,  # Adam learning rate of actor, critics and temperature (jaxrl)
    "batch_size": 256,  # transitions per gradient step (jaxrl)
    "gamma": 0.99,  # discount (jaxrl)
    "tau": 0.005,  # Polyak coefficient of the target critics (jaxrl)
    "learning_starts": 10_000,  # random-action frames before learning starts (jaxrl start_training)
    "updates_per_step": 1.0,  # gradient steps per collected frame (jaxrl)
    "buffer_size": 1_000_000,  # replay capacity in frames (jaxrl: the whole run)
    "hidden_sizes": [256, 256],  # actor and critic widths (jaxrl)
    "autotune": True,  # learn the entropy temperature from 1.0 (jaxrl init_temperature 1.0)
    "save_interval": 10,  # epochs between checkpoints
    "test_interval": 5,  # epochs between deterministic tests
    "test_win_size": 10,  # test episodes averaged in the logged test return
    "test_episodes": 5,  # episodes per test
    "update_mode": "auto",  # how the update runs: auto (eager on the CPU, compile on CUDA), eager, compile, cudagraphs
    "replay_device": "auto",  # where minibatches are drawn: auto (the agent's device; host on the CPU), host, device
    "acting_device": "auto",  # where actions are computed: auto (host), host (a CPU copy of the policy), device
    "torch_threads": 1,  # torch.set_num_threads
}


def gen_params(cpanel: dict) -> dict:
    """The params tree (``docs/architecture.md``); every value comes from the cpanel above.

    Raises:
        UsageError: ``observation`` is ``"pixels"`` (SAC here is an MLP on state vectors) or unknown.
    """
    if cpanel["observation"] not in ("flat", "dict"):
        raise UsageError(
            f"params.dmc_sac trains an MLP policy on state observations; observation must be 'flat' or "
            f"'dict', got {cpanel['observation']!r} (pixels need a CNN policy, which digideep does not ship)"
        )
    agent_args = {
        **off_policy_args(cpanel),
        "autotune": cpanel["autotune"],
    }
    return tree(
        cpanel,
        env=env(cpanel, dm_control={"observation": cpanel["observation"]}),
        agent="digideep.agents.sac.SAC",
        agent_args=agent_args,
        memory=replay_memory(cpanel),
        warm_start=True,
    )
