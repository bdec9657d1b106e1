"""PPO with the Nature CNN on an Atari game (ALE/Pong-v5 by default; any ale-py id through
``model_name``). Needs ``pip install 'digideep[atari]'``.

Hyperparameters: CleanRL's ``ppo_atari.py`` (docs.cleanrl.dev/rl-algorithms/ppo/#ppo_ataripy, the
defaults of the script): 8 envs, 128 steps per env and iteration, lr 2.5e-4 annealed linearly to 0,
4 epochs of 4 minibatches (batch 1024, minibatch 256), gamma 0.99, GAE lambda 0.95, clip 0.1 (not
annealed), clipped value loss, entropy 0.01, value coefficient 0.5, gradient norm 0.5, advantages
normalized per minibatch, 10M agent steps (40M emulator frames). The network is CleanRL's: the Nature
CNN (512 features, orthogonal init) shared by linear actor (gain 0.01) and critic (gain 1) heads.

Environment: ``ALE/Pong-v5`` with ``repeat_action_probability=0`` is CleanRL's ``PongNoFrameskip-v4``
(no sticky actions, minimal action set) but for the episode cap (108,000 frames instead of v4's
400,000 steps). The preprocessing (:mod:`digideep.environment.atari`) is SB3's ``AtariWrapper`` as
CleanRL uses it; episodic life and reward clipping apply to training only, and every logged return,
train and test, is the real game score. Tests act stochastically, as rl-baselines3-zoo evaluates
Atari (a greedy policy can stall a game that needs FIRE to continue).

A full run (10M steps) needs a GPU and a few CPU cores for the emulators; on 2 shared CPU cores the
emulators alone run about 1,400 agent steps/s and PPO with its updates about 100 (docs/environments.md, "Atari").
The rollout memory holds each frame once (``digideep.memory.frames``: 7.6 KB a transition instead
of 56.5 KB), rebuilding the stacks bit-identically when PPO reads the chunk.
"""

from params._common import ROLLOUT_MEMORY, env, ppo_args, tree

cpanel = {
    "model_name": "ALE/Pong-v5",  # any ale-py id, e.g. ALE/Breakout-v5
    "sticky_actions": 0.0,  # repeat_action_probability (CleanRL's NoFrameskip-v4: 0; v5 default: 0.25)
    "seed": 0,  # seed of torch, numpy and the envs
    "number_epochs": 977,  # 977 epochs x 10 iterations x 128 steps x 8 workers = 10,004,480 agent steps
    "epoch_size": 10,  # iterations per epoch
    "n_steps": 128,  # steps per worker per iteration (CleanRL num_steps)
    "num_workers": 8,  # parallel environments (CleanRL num_envs)
    "lr": 2.5e-4,  # Adam learning rate (CleanRL)
    "anneal_lr": True,  # decay the learning rate linearly to 0 over the run (CleanRL)
    "anneal_clip": False,  # CleanRL keeps the clip range fixed
    "n_epochs": 4,  # passes over each chunk (CleanRL update_epochs)
    "batch_size": 256,  # transitions per minibatch: 1024 / 4 minibatches (CleanRL num_minibatches 4)
    "gamma": 0.99,  # discount (CleanRL)
    "gae_lambda": 0.95,  # GAE lambda (CleanRL)
    "clip_range": 0.1,  # surrogate clip (CleanRL clip_coef)
    "clip_value_loss": True,  # clip the value loss too (CleanRL clip_vloss)
    "ent_coef": 0.01,  # entropy bonus (CleanRL)
    "vf_coef": 0.5,  # value loss weight on 0.5 * MSE (CleanRL)
    "max_grad_norm": 0.5,  # global gradient-norm clip (CleanRL)
    "hidden_sizes": [],  # layers between the CNN's 512 features and the heads (CleanRL: none)
    "recurrent": False,  # GRU on the CNN features
    "vectorization": "auto",  # one process per worker: the emulators are the cost
    "save_interval": 10,  # epochs between checkpoints
    "test_interval": 10,  # epochs between tests
    "test_win_size": 10,  # test episodes averaged in the logged test return
    "test_episodes": 3,  # whole games per test
    "torch_threads": 1,  # torch.set_num_threads
    "update_mode": "auto",  # how the update runs: auto (per device, logged), eager, compile, cudagraphs (CUDA)
    "device": "auto",  # auto: the CNN on CUDA when there is one
}


def gen_params(cpanel: dict) -> dict:
    """The params tree (``docs/architecture.md``); every value comes from the cpanel above."""
    params = tree(
        cpanel,
        env=env(
            cpanel,
            vectorization=cpanel["vectorization"],
            env_kwargs={"repeat_action_probability": cpanel["sticky_actions"]},
        ),
        agent="digideep.agents.ppo.PPO",
        agent_args=ppo_args(cpanel),
        memory=ROLLOUT_MEMORY,
        warm_start=False,
    )
    for mode in ("test", "eval"):  # rl-baselines3-zoo evaluates Atari stochastically
        params["explorer"][mode]["deterministic"] = False
    return params
