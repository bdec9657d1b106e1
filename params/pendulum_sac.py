"""SAC on Pendulum-v1.

Hyperparameters: RL Baselines3 Zoo ``hyperparams/sac.yml`` (Pendulum-v1: ``learning_rate 1e-3``; the
rest are SB3's SAC defaults) with ``learning_starts`` 1000 (SB3's default is 100). Expected: a mean
deterministic return of -200 or better by 10,000 frames.
"""

from params._common import env, off_policy_args, replay_memory, tree

cpanel = {
    "model_name": "Pendulum-v1",  # Gymnasium id
    "seed": 0,  # seed of torch, numpy, the envs and the sampler
    "number_epochs": 10,  # 10 epochs x 10 iterations x 100 steps x 1 worker = 10,000 frames
    "epoch_size": 10,  # iterations per epoch
    "n_steps": 100,  # steps per worker per iteration (one chunk)
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
