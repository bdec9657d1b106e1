"""REDQ (``docs/examples/redq.py``) on Pendulum-v1: the parameter file of the guide's off-policy example.

The cpanel is ``params/pendulum_sac.py``'s with REDQ's own knobs; the tree is laid out by the shipped
files' helpers (``params/_common.py``). Train it from the repository root::

    .venv/bin/python -m digideep.main --params docs/examples/pendulum_redq.py --no-prefect \
        --cpanel '{"number_epochs": 2, "epoch_size": 3, "learning_starts": 200}'
"""

from params._common import env, off_policy_args, replay_memory, tree

# --8<-- [start:cpanel]
cpanel = {
    "model_name": "Pendulum-v1",  # Gymnasium id
    "seed": 0,  # seed of torch, numpy, the envs and the sampler
    "number_epochs": 10,  # 10 epochs x 10 iterations x 100 steps x 1 worker = 10,000 frames
    "epoch_size": 10,  # iterations per epoch
    "n_steps": 100,  # steps per worker per iteration (one chunk)
    "num_workers": 1,  # parallel environments
    "lr": 1e-3,  # Adam learning rate of actor, critics and temperature
    "batch_size": 256,  # transitions per gradient step
    "gamma": 0.99,  # discount
    "tau": 0.005,  # Polyak coefficient of the target critics
    "learning_starts": 1000,  # random-action frames before learning starts
    "updates_per_step": 1.0,  # gradient steps per frame (the paper's G is 20: slow on a CPU)
    "buffer_size": 100_000,  # replay capacity in frames
    "hidden_sizes": [256, 256],  # actor and critic widths
    "autotune": True,  # learn the entropy temperature
    "num_critics": 10,  # REDQ's N
    "target_subset": 2,  # REDQ's M: critics in each target's minimum
    "save_interval": 5,  # epochs between checkpoints
    "test_interval": 1,  # epochs between deterministic tests
    "test_win_size": 10,  # test episodes averaged in the logged test return
    "test_episodes": 5,  # episodes per test
    "update_mode": "auto",  # eager, compile, cudagraphs (CUDA) or auto: the same gradient_step in each
    "replay_device": "auto",  # where minibatches are drawn: auto (the agent's device; host on the CPU)
    "acting_device": "auto",  # where actions are computed: auto (host), host, device
    "torch_threads": 1,  # torch.set_num_threads
}
# --8<-- [end:cpanel]


# --8<-- [start:gen_params]
def gen_params(cpanel: dict) -> dict:
    """The params tree, as ``params/pendulum_sac.py`` lays it out, with the REDQ agent."""
    agent_args = {
        **off_policy_args(cpanel),
        "autotune": cpanel["autotune"],
        "num_critics": cpanel["num_critics"],
        "target_subset": cpanel["target_subset"],
    }
    return tree(
        cpanel,
        env=env(cpanel),
        agent="docs.examples.redq.REDQ",
        agent_args=agent_args,
        memory=replay_memory(cpanel),
        warm_start=True,
    )


# --8<-- [end:gen_params]
