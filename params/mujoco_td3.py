"""TD3 on a MuJoCo task (HalfCheetah-v5 by default; any id through ``model_name``).

Hyperparameters: CleanRL ``td3_continuous_action.py`` (lr 3e-4, batch 256, tau 0.005, gamma 0.99,
``learning_starts`` 25,000, exploration noise 0.1, policy delay 2, target smoothing 0.2 clipped at
0.5, 256x256 networks), which follow the TD3 paper's settings.
"""

from params._common import env, off_policy_args, replay_memory, tree

cpanel = {
    "model_name": "HalfCheetah-v5",  # any Gymnasium MuJoCo id, e.g. Hopper-v5, Walker2d-v5, Ant-v5
    "seed": 0,  # seed of torch, numpy, the envs and the sampler
    "number_epochs": 100,  # 100 epochs x 10,000 iterations x 1 step x 1 worker = 1,000,000 frames
    "epoch_size": 10_000,  # iterations per epoch (test, log and checkpoint come at epoch ends)
    "n_steps": 1,  # frames per worker between updates: 1 interleaves acting and learning (SB3, papers); N: chunks
    "num_workers": 1,  # parallel environments
    "lr": 3e-4,  # Adam learning rate of actor and critics (CleanRL)
    "batch_size": 256,  # transitions per gradient step (CleanRL)
    "gamma": 0.99,  # discount (CleanRL)
    "tau": 0.005,  # Polyak coefficient of the targets (CleanRL)
    "learning_starts": 25_000,  # random-action frames before learning starts (CleanRL)
    "updates_per_step": 1.0,  # gradient steps per collected frame (CleanRL)
    "buffer_size": 1_000_000,  # replay capacity in frames (CleanRL)
    "hidden_sizes": [256, 256],  # actor and critic widths (CleanRL)
    "noise_type": "normal",  # exploration noise (CleanRL: Gaussian)
    "noise_std": 0.1,  # exploration noise std in normalized action units (CleanRL exploration_noise)
    "policy_frequency": 2,  # gradient steps per actor step and target update (CleanRL)
    "target_policy_noise": 0.2,  # target smoothing std (CleanRL policy_noise)
    "target_noise_clip": 0.5,  # target smoothing clip (CleanRL noise_clip)
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
        "noise_type": cpanel["noise_type"],
        "noise_std": cpanel["noise_std"],
        "policy_frequency": cpanel["policy_frequency"],
        "target_policy_noise": cpanel["target_policy_noise"],
        "target_noise_clip": cpanel["target_noise_clip"],
    }
    return tree(
        cpanel,
        env=env(cpanel),
        agent="digideep.agents.td3.TD3",
        agent_args=agent_args,
        memory=replay_memory(cpanel),
        warm_start=True,
    )
