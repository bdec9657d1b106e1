"""PPO on a MuJoCo task (HalfCheetah-v5 by default; any id through ``model_name``).

Hyperparameters: CleanRL ``ppo_continuous_action.py`` (1 env, ``num_steps`` 2048, 32 minibatches of
64, 10 epochs, lr 3e-4 annealed, gamma 0.99, GAE 0.95, clip 0.2 with value clipping, ``vf_coef``
0.5, ``max_grad_norm`` 0.5, ClipAction and observation/reward normalisation), which reproduce the
PPO paper's MuJoCo settings.
"""

from params._common import ROLLOUT_MEMORY, ppo_args, tree

cpanel = {
    "model_name": "HalfCheetah-v5",  # any Gymnasium MuJoCo id, e.g. Hopper-v5, Walker2d-v5, Ant-v5
    "seed": 0,  # seed of torch, numpy and the envs
    "number_epochs": 49,  # 49 epochs x 10 iterations x 2048 steps x 1 worker = 1,003,520 frames
    "epoch_size": 10,  # iterations per epoch
    "n_steps": 2048,  # steps per worker per iteration (CleanRL num_steps)
    "num_workers": 1,  # parallel environments (CleanRL num_envs)
    "lr": 3e-4,  # Adam learning rate (CleanRL)
    "anneal_lr": True,  # decay the learning rate linearly to 0 over the run (CleanRL)
    "anneal_clip": False,  # decay the clip range likewise (CleanRL: constant)
    "n_epochs": 10,  # passes over each chunk (CleanRL)
    "batch_size": 64,  # transitions per minibatch (CleanRL)
    "gamma": 0.99,  # discount (CleanRL)
    "gae_lambda": 0.95,  # GAE lambda (CleanRL)
    "clip_range": 0.2,  # surrogate clip (CleanRL)
    "clip_value_loss": True,  # clip the value loss too (CleanRL clip_vloss)
    "ent_coef": 0.0,  # entropy bonus (CleanRL)
    "vf_coef": 0.5,  # value loss weight on 0.5 * MSE (CleanRL)
    "max_grad_norm": 0.5,  # global gradient-norm clip (CleanRL)
    "hidden_sizes": [64, 64],  # actor and critic widths, tanh (SB3 and CleanRL default)
    "recurrent": False,  # GRU policy (its state flows through the Explorer and the memory)
    "vectorization": "sync",  # "sync" (one process) or "async" (one process per worker)
    "save_interval": 10,  # epochs between checkpoints
    "test_interval": 5,  # epochs between deterministic tests
    "test_win_size": 10,  # test episodes averaged in the logged test return
    "test_episodes": 5,  # episodes per test
    "torch_threads": 1,  # torch.set_num_threads
    "update_mode": "auto",  # how the update runs: auto (per device, logged), eager, compile, cudagraphs (CUDA)
    "device": "auto",  # auto (per agent: off-policy on CUDA, small on-policy MLPs on the CPU), cpu, cuda, cuda:N
}


def gen_params(cpanel: dict) -> dict:
    """The params tree (``docs/architecture.md``); every value comes from the cpanel above."""
    env = {
        "model_name": cpanel["model_name"],
        "from_module": None,
        "vectorization": cpanel["vectorization"],
        # CleanRL ppo_continuous_action: ClipAction (the Gaussian is unbounded; the memory keeps the
        # unclipped action its log-probability belongs to), then observation and reward normalisation
        "wrappers": [{"name": "gymnasium.wrappers.ClipAction"}],
        "vector_wrappers": [
            {"name": "digideep.environment.wrappers.NormalizeObservation", "args": {"clip": 10.0}},
            {
                "name": "digideep.environment.wrappers.NormalizeReward",
                "args": {"gamma": cpanel["gamma"], "clip": 10.0},
            },
        ],
        "max_episode_steps": None,
    }
    return tree(
        cpanel,
        env=env,
        agent="digideep.agents.ppo.PPO",
        agent_args=ppo_args(cpanel),
        memory=ROLLOUT_MEMORY,
        warm_start=False,
    )
