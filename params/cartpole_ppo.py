"""PPO on CartPole-v1.

Hyperparameters: RL Baselines3 Zoo ``hyperparams/ppo.yml`` (CartPole-v1: 8 envs, ``n_steps`` 32,
``batch_size`` 256, ``n_epochs`` 20, ``gae_lambda`` 0.8, ``gamma`` 0.98, ``learning_rate lin_1e-3``,
``clip_range lin_0.2``, ``ent_coef`` 0, 100,000 frames; SB3 defaults otherwise). Expected: a mean
deterministic return of 475 or better by 100,000 frames.
"""

from params._common import ROLLOUT_MEMORY, ppo_args, tree

cpanel = {
    "model_name": "CartPole-v1",  # Gymnasium id
    "seed": 0,  # seed of torch, numpy and the envs
    "number_epochs": 39,  # 39 epochs x 10 iterations x 32 steps x 8 workers = 99,840 frames
    "epoch_size": 10,  # iterations per epoch
    "n_steps": 32,  # steps per worker per iteration (zoo)
    "num_workers": 8,  # parallel environments (zoo n_envs)
    "lr": 1e-3,  # Adam learning rate (zoo)
    "anneal_lr": True,  # decay the learning rate linearly to 0 over the run (zoo)
    "anneal_clip": True,  # decay the clip range likewise (zoo lin_0.2)
    "n_epochs": 20,  # passes over each chunk (zoo)
    "batch_size": 256,  # transitions per minibatch (zoo)
    "gamma": 0.98,  # discount (zoo)
    "gae_lambda": 0.8,  # GAE lambda (zoo)
    "clip_range": 0.2,  # surrogate clip (zoo)
    "clip_value_loss": False,  # clip the value loss too (SB3: no value clipping)
    "ent_coef": 0.0,  # entropy bonus (zoo)
    "vf_coef": 1.0,  # value loss weight on 0.5 * MSE (SB3's vf_coef 0.5 on the plain MSE)
    "max_grad_norm": 0.5,  # global gradient-norm clip (zoo)
    "hidden_sizes": [64, 64],  # actor and critic widths, tanh (SB3 and CleanRL default)
    "recurrent": False,  # GRU policy (its state flows through the Explorer and the memory)
    "vectorization": "sync",  # "sync" (one process) or "async" (one process per worker)
    "save_interval": 13,  # epochs between checkpoints
    "test_interval": 3,  # epochs between deterministic tests
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
        "wrappers": [],
        "vector_wrappers": [],
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


def search_space(trial) -> dict:
    """cpanel overrides for one trial of ``flows/tune.py`` (``trial``: an ``optuna.Trial``).

    Ranges: RL Baselines3 Zoo, ``sample_ppo_params`` in ``rl_zoo3/hyperparams_opt.py`` (gamma and
    GAE lambda sampled as ``1 - x`` on a log scale, as there). Not searched: the activation (tanh
    here) and separate actor/critic widths; the zoo's ``tiny`` net maps to one 64-unit layer.
    """
    one_minus_gamma = trial.suggest_float("one_minus_gamma", 0.0001, 0.03, log=True)
    one_minus_gae_lambda = trial.suggest_float("one_minus_gae_lambda", 0.0001, 0.1, log=True)
    return {
        "batch_size": trial.suggest_categorical("batch_size", [32, 64, 128, 256, 512]),
        "n_steps": trial.suggest_categorical("n_steps", [32, 64, 128, 256, 512, 1024, 2048]),
        "gamma": 1.0 - one_minus_gamma,
        "gae_lambda": 1.0 - one_minus_gae_lambda,
        "lr": trial.suggest_float("lr", 1e-5, 0.002, log=True),
        "ent_coef": trial.suggest_float("ent_coef", 1e-8, 0.1, log=True),
        "clip_range": trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3, 0.4]),
        "n_epochs": trial.suggest_categorical("n_epochs", [1, 5, 10, 20]),
        "max_grad_norm": trial.suggest_float("max_grad_norm", 0.3, 2.0),
        "hidden_sizes": {"tiny": [64], "small": [64, 64], "medium": [256, 256]}[
            trial.suggest_categorical("net_arch", ["tiny", "small", "medium"])
        ],
    }
