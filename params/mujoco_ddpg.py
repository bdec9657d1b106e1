"""DDPG on a MuJoCo task (HalfCheetah-v5 by default; any id through ``model_name``).

Hyperparameters: CleanRL ``ddpg_continuous_action.py`` (lr 3e-4, batch 256, tau 0.005, gamma 0.99,
``learning_starts`` 25,000, Gaussian exploration noise 0.1, actor every 2 gradient steps, 256x256
networks), the "OurDDPG" variant of the TD3 paper.
"""

cpanel = {
    "model_name": "HalfCheetah-v5",  # any Gymnasium MuJoCo id, e.g. Hopper-v5, Walker2d-v5, Ant-v5
    "seed": 0,  # seed of torch, numpy, the envs and the sampler
    "number_epochs": 100,  # 100 epochs x 10 iterations x 1000 steps x 1 worker = 1,000,000 frames
    "epoch_size": 10,  # iterations per epoch
    "n_steps": 1000,  # steps per worker per iteration (one chunk)
    "num_workers": 1,  # parallel environments
    "lr": 3e-4,  # Adam learning rate of actor and critic (CleanRL)
    "batch_size": 256,  # transitions per gradient step (CleanRL)
    "gamma": 0.99,  # discount (CleanRL)
    "tau": 0.005,  # Polyak coefficient of the targets (CleanRL)
    "learning_starts": 25_000,  # random-action frames before learning starts (CleanRL)
    "updates_per_step": 1.0,  # gradient steps per collected frame (CleanRL)
    "buffer_size": 1_000_000,  # replay capacity in frames (CleanRL)
    "hidden_sizes": [256, 256],  # actor and critic widths (CleanRL)
    "noise_type": "normal",  # exploration noise: "normal", "ou" (DDPG paper) or "none" (CleanRL: normal)
    "noise_std": 0.1,  # exploration noise std in normalized action units (CleanRL exploration_noise)
    "policy_frequency": 2,  # gradient steps per actor step and target update (CleanRL)
    "save_interval": 10,  # epochs between checkpoints
    "test_interval": 5,  # epochs between deterministic tests
    "test_win_size": 10,  # test episodes averaged in the logged test return
    "test_episodes": 5,  # episodes per test
    "torch_threads": 1,  # torch.set_num_threads
}


def gen_params(cpanel: dict) -> dict:
    """The params tree (``docs/architecture.md``); every value comes from the cpanel above."""
    seed, num_workers, n_steps = cpanel["seed"], cpanel["num_workers"], cpanel["n_steps"]
    env = {
        "model_name": cpanel["model_name"],
        "from_module": None,
        "vectorization": "sync",
        "wrappers": [],
        "vector_wrappers": [],
        "max_episode_steps": None,
    }
    agent_args = {
        "lr": cpanel["lr"],
        "gamma": cpanel["gamma"],
        "tau": cpanel["tau"],
        "batch_size": cpanel["batch_size"],
        # gradient steps per iteration: updates_per_step per collected frame
        "updates_per_iteration": max(1, round(cpanel["updates_per_step"] * n_steps * num_workers)),
        "learning_starts": cpanel["learning_starts"],
        "hidden_sizes": list(cpanel["hidden_sizes"]),
        "seed": seed,
        "noise_type": cpanel["noise_type"],
        "noise_std": cpanel["noise_std"],
        "policy_frequency": cpanel["policy_frequency"],
    }
    return {
        "session": {"torch_threads": cpanel["torch_threads"]},
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
        "env": env,
        "explorer": {
            # random actions until the memory holds learning_starts frames (SB3's learning_starts)
            "train": {
                "num_workers": num_workers,
                "n_steps": n_steps,
                "warm_start": -(-cpanel["learning_starts"] // num_workers),
                "seed": seed,
            },
            "test": {
                "num_workers": 1,
                "n_steps": None,
                "n_episodes": cpanel["test_episodes"],
                "do_reset": True,
                "deterministic": True,
                "seed": seed + 10_000,
                "win_size": cpanel["test_win_size"],
            },
            "eval": {
                "num_workers": 1,
                "n_steps": None,
                "n_episodes": 1,
                "do_reset": True,
                "deterministic": True,
                "render": True,
                "seed": seed + 20_000,
            },
        },
        "memory": {
            "train": {
                "type": "digideep.memory.Memory",
                "args": {"capacity": cpanel["buffer_size"] // num_workers + 1},  # rows per worker
            }
        },
        "agents": {"agent": {"type": "digideep.agents.ddpg.DDPG", "memory": "train", "args": agent_args}},
    }
