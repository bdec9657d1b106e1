"""SAC on Pendulum-v1.

Hyperparameters: RL Baselines3 Zoo ``hyperparams/sac.yml`` (Pendulum-v1: ``learning_rate 1e-3``; the
rest are SB3's SAC defaults) with ``learning_starts`` 1000 (SB3's default is 100). Expected: a mean
deterministic return of -200 or better by 10,000 frames.
"""

from params._common import env, off_policy_args, replay_memory, tree

cpanel = {
    "model_name": "Pendulum-v1",  # Gymnasium id
    "seed": 0,  # seed of torch, numpy, the envs and the sampler
    "number_epochs": 10,  # 10 epochs x 1000 iterations x 1 step x 1 worker = 10,000 frames
    "epoch_size": 1000,  # iterations per epoch (test, log and checkpoint come at epoch ends)
    "n_steps": 1,  # frames per worker between updates: 1 interleaves acting and learning (SB3, papers); N: chunks
    "num_workers": 1,  # parallel environments
    "lr": 1e-3,  # Adam learning rate of actor, critics and temperature (zoo)
    "batch_size": 256,  # transitions per gradient step (SB3 default)
    "gamma": 0.99,  # discount (SB3 default)
    "tau": 0.005,  # Polyak coefficient of the target critics (SB3 default)
    "learning_starts": 1000,  # random-action frames before learning starts
    "updates_per_step": 1.0,  # gradient steps per collected frame (SB3 train_freq 1, gradient_steps 1)
    "buffer_size": 100_000,  # replay capacity in frames (more than the whole run)
    "hidden_sizes": [256, 256],  # actor and critic widths (SB3 default)
    "autotune": True,  # learn the entropy temperature from 1.0 (SB3 ent_coef "auto")
    "save_interval": 5,  # epochs between checkpoints
    "test_interval": 1,  # epochs between deterministic tests
    "test_win_size": 10,  # test episodes averaged in the logged test return
    "test_episodes": 5,  # episodes per test
    "update_mode": "auto",  # how the update runs: auto (eager on the CPU, compile on CUDA), eager, compile, cudagraphs
    "replay_device": "auto",  # where minibatches are drawn: auto (the agent's device; host on the CPU), host, device
    "acting_device": "auto",  # where actions are computed: auto (host), host (a CPU copy of the policy), device
    "torch_threads": 1,  # torch.set_num_threads
    "device": "auto",  # auto (per agent: off-policy on CUDA, small on-policy MLPs on the CPU), cpu, cuda, cuda:N
}


def gen_params(cpanel: dict) -> dict:
    """The params tree (``docs/architecture.md``); every value comes from the cpanel above."""
    agent_args = {
        **off_policy_args(cpanel),
        "autotune": cpanel["autotune"],
    }
    return tree(
        cpanel,
        env=env(cpanel),
        agent="digideep.agents.sac.SAC",
        agent_args=agent_args,
        memory=replay_memory(cpanel),
        warm_start=True,
    )


def search_space(trial) -> dict:
    """cpanel overrides for one trial of ``flows/tune.py`` (``trial``: an ``optuna.Trial``).

    Ranges: RL Baselines3 Zoo, ``sample_sac_params`` in ``rl_zoo3/hyperparams_opt.py``; gradient
    steps per frame stay 1 (zoo: ``gradient_steps = train_freq``), ``learning_starts`` keeps the
    zoo's values below this file's 10,000-frame run, and ``log_std_init`` (gSDE only) is left out.
    """
    return {
        "gamma": trial.suggest_categorical("gamma", [0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999]),
        "lr": trial.suggest_float("lr", 1e-5, 1.0, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [16, 32, 64, 128, 256, 512, 1024, 2048]),
        "buffer_size": trial.suggest_categorical("buffer_size", [10_000, 100_000, 1_000_000]),
        "learning_starts": trial.suggest_categorical("learning_starts", [0, 1000]),
        "tau": trial.suggest_categorical("tau", [0.001, 0.005, 0.01, 0.02, 0.05, 0.08]),
        "hidden_sizes": {"small": [64, 64], "medium": [256, 256], "big": [400, 300]}[
            trial.suggest_categorical("net_arch", ["small", "medium", "big"])
        ],
    }
