"""SAC on a MuJoCo task (HalfCheetah-v5 by default; any id through ``model_name``).

Hyperparameters: RL Baselines3 Zoo ``hyperparams/sac.yml`` (HalfCheetah: ``learning_starts 10000``;
the rest are SB3's SAC defaults, which match the SAC paper: lr 3e-4, batch 256, tau 0.005,
gamma 0.99, 256x256 networks, automatic temperature with target entropy -dim(A)).
"""

from params._common import env, off_policy_args, replay_memory, tree

cpanel = {
    "model_name": "HalfCheetah-v5",  # any Gymnasium MuJoCo id, e.g. Hopper-v5, Walker2d-v5, Ant-v5
    "seed": 0,  # seed of torch, numpy, the envs and the sampler
    "number_epochs": 100,  # 100 epochs x 10 iterations x 1000 steps x 1 worker = 1,000,000 frames
    "epoch_size": 10,  # iterations per epoch
    "n_steps": 1000,  # steps per worker per iteration (one chunk)
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
