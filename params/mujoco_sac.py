"""SAC on a MuJoCo task (HalfCheetah-v5 by default; any id through ``model_name``).

Hyperparameters: RL Baselines3 Zoo ``hyperparams/sac.yml`` (HalfCheetah: ``learning_starts 10000``;
the rest are SB3's SAC defaults, which match the SAC paper: lr 3e-4, batch 256, tau 0.005,
gamma 0.99, 256x256 networks, automatic temperature with target entropy -dim(A)).
"""

from params._common import env, off_policy_args, replay_memory, tree

cpanel = {
    "model_name": "HalfCheetah-v5",  # any Gymnasium MuJoCo id, e.g. Hopper-v5, Walker2d-v5, Ant-v5
    "seed": 0,  # seed of torch, numpy, the envs and the sampler
    "number_epochs": 100,  # 100 epochs x 10,000 iterations x 1 step x 1 worker = 1,000,000 frames
    "epoch_size": 10_000,  # iterations per epoch (test, log and checkpoint come at epoch ends)
    "n_steps": 1,  # frames per worker between updates: 1 interleaves acting and learning (SB3, papers); N: chunks
    "num_workers": 1,  # parallel environments
    "lr": 3e-4,  # Adam learning rate of actor, critics and temperature (SB3 default, SAC paper)
    "batch_size": 256,  # transitions per gradient step (SB3 default, SAC paper)
    "gamma": 0.99,  # discount
    "tau": 0.005,  # Polyak coefficient of the target critics
    "learning_starts": 10_000,  # random-action frames before learning starts (zoo)
    "updates_per_step": 1.0,  # gradient steps per collected frame (zoo: train_freq 1, gradient_steps 1)
    "buffer_size": 1_000_000,  # replay capacity in frames (zoo)
    "hidden_sizes": [256, 256],  # actor and critic widths (SB3 default, SAC paper)
    "autotune": True,  # learn the entropy temperature (SB3 ent_coef "auto")
    "save_interval": 10,  # epochs between checkpoints
    "test_interval": 5,  # epochs between deterministic tests
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
    steps per frame stay 1 (zoo: ``gradient_steps = train_freq``) and ``log_std_init`` (gSDE only)
    is left out.
    """
    return {
        "gamma": trial.suggest_categorical("gamma", [0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999]),
        "lr": trial.suggest_float("lr", 1e-5, 1.0, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [16, 32, 64, 128, 256, 512, 1024, 2048]),
        "buffer_size": trial.suggest_categorical("buffer_size", [10_000, 100_000, 1_000_000]),
        "learning_starts": trial.suggest_categorical("learning_starts", [0, 1000, 10_000, 20_000]),
        "tau": trial.suggest_categorical("tau", [0.001, 0.005, 0.01, 0.02, 0.05, 0.08]),
        "hidden_sizes": {"small": [64, 64], "medium": [256, 256], "big": [400, 300]}[
            trial.suggest_categorical("net_arch", ["small", "medium", "big"])
        ],
    }
