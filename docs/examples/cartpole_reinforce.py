"""REINFORCE on CartPole-v1: the parameter file of the guide's worked example.

Train it from the repository root (``python -m`` puts the current folder on the import path, so
``docs.examples.reinforce.Reinforce`` imports)::

    .venv/bin/python -m digideep.main --params docs/examples/cartpole_reinforce.py --no-prefect \
        --cpanel '{"number_epochs": 2, "tracking": false}'
"""

# --8<-- [start:cpanel]
cpanel = {
    "model_name": "CartPole-v1",  # Gymnasium id (Discrete actions)
    "seed": 0,  # seed of torch, numpy, the envs and the sampler
    "number_epochs": 20,  # 20 epochs x 5 iterations x 128 steps x 4 workers = 51,200 frames
    "epoch_size": 5,  # iterations per epoch
    "n_steps": 128,  # steps per worker per iteration (one chunk, one gradient step)
    "num_workers": 4,  # parallel environments
    "lr": 0.01,  # Adam learning rate
    "gamma": 0.99,  # discount of the returns
    "ent_coef": 0.0,  # entropy bonus
    "hidden_sizes": [32],  # policy widths (tanh)
    "save_interval": 5,  # epochs between checkpoints
    "test_interval": 2,  # epochs between deterministic tests
    "test_episodes": 3,  # episodes per test
    "tracking": True,  # log the run to MLflow
    "torch_threads": 1,  # torch.set_num_threads
}
# --8<-- [end:cpanel]


# --8<-- [start:gen_params]
def gen_params(cpanel: dict) -> dict:
    """The params tree: one slice per component, every value from the cpanel above."""
    seed = cpanel["seed"]
    return {
        "session": {"torch_threads": cpanel["torch_threads"]},
        "tracking": {"enabled": cpanel["tracking"]},
        "runner": {
            "number_epochs": cpanel["number_epochs"],
            "epoch_size": cpanel["epoch_size"],
            "test_interval": cpanel["test_interval"],
            "save_interval": cpanel["save_interval"],
            "keep_checkpoints": 3,
            "max_wall_time": None,
            "max_iterations": None,
            "seed": seed,
        },
        "env": {"model_name": cpanel["model_name"], "vectorization": "sync"},
        "explorer": {
            "train": {"num_workers": cpanel["num_workers"], "n_steps": cpanel["n_steps"], "seed": seed},
            "test": {
                "num_workers": 1,
                "n_steps": None,
                "n_episodes": cpanel["test_episodes"],
                "do_reset": True,
                "deterministic": True,
                "seed": seed + 10_000,
            },
            "eval": {
                "num_workers": 1,
                "n_steps": None,
                "n_episodes": 1,
                "do_reset": True,
                "deterministic": True,
                "seed": seed + 20_000,
            },
        },
        # on-policy: the memory holds the latest chunk only
        "memory": {"train": {"type": "digideep.memory.RolloutMemory", "args": {"keep": 1}}},
        "agents": {
            "agent": {
                "type": "docs.examples.reinforce.Reinforce",
                "memory": "train",
                "args": {
                    "lr": cpanel["lr"],
                    "gamma": cpanel["gamma"],
                    "ent_coef": cpanel["ent_coef"],
                    "hidden_sizes": list(cpanel["hidden_sizes"]),
                    "seed": seed,
                },
            }
        },
    }


# --8<-- [end:gen_params]
