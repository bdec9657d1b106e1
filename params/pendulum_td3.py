"""TD3 on Pendulum-v1.

Hyperparameters: RL Baselines3 Zoo ``hyperparams/td3.yml`` (Pendulum-v1: ``gamma 0.98``,
``learning_rate 1e-3``, ``net_arch [400, 300]``, Gaussian action noise 0.1, ``buffer_size 200000``;
the rest are SB3 defaults: batch 256, tau 0.005). TD3 additions are SB3's TD3 defaults: ``policy_delay`` 2, target smoothing 0.2 clipped at 0.5. The zoo waits 10,000 frames before
learning; here ``learning_starts`` is 1000 so that the 20,000-frame budget is mostly learning.
Expected: a mean deterministic return of -250 or better by 20,000 frames.
"""

from params._common import env, off_policy_args, replay_memory, tree

cpanel = {
    "model_name": "Pendulum-v1",  # Gymnasium id
    "seed": 0,  # seed of torch, numpy, the envs and the sampler
    "number_epochs": 20,  # 20 epochs x 1000 iterations x 1 step x 1 worker = 20,000 frames
    "epoch_size": 1000,  # iterations per epoch (test, log and checkpoint come at epoch ends)
    "n_steps": 1,  # frames per worker between updates: 1 interleaves acting and learning (SB3, papers); N: chunks
    "num_workers": 1,  # parallel environments
    "lr": 1e-3,  # Adam learning rate of actor and critic (zoo)
    "batch_size": 256,  # transitions per gradient step (SB3 default)
    "gamma": 0.98,  # discount (zoo)
    "tau": 0.005,  # Polyak coefficient of the targets (SB3 default)
    "learning_starts": 1000,  # random-action frames before learning starts (zoo: 10000)
    "updates_per_step": 1.0,  # gradient steps per collected frame (zoo: train_freq 1, gradient_steps 1)
    "buffer_size": 200_000,  # replay capacity in frames (zoo)
    "hidden_sizes": [400, 300],  # actor and critic widths (zoo)
    "noise_type": "normal",  # exploration noise: "normal", "ou" or "none" (zoo: normal)
    "noise_std": 0.1,  # exploration noise std in normalized action units (zoo)
    "policy_frequency": 2,  # gradient steps per actor step (SB3 policy_delay 2)
    "target_policy_noise": 0.2,  # target smoothing std (SB3 default, TD3 paper)
    "target_noise_clip": 0.5,  # target smoothing clip (SB3 default, TD3 paper)
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
