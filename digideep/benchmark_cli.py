"""``digideep benchmark``: start a benchmark matrix (``flows/benchmark.py``) without writing JSON.

By default it runs the ``benchmark/pendulum`` deployment (``--deployment``) on the Prefect server at
``PREFECT_API_URL`` with the matrix as its parameters, and prints the flow run to follow; the
benchmark flow itself then runs on a worker. ``--local`` runs the benchmark flow in this process
instead and prints the cells' table at the end; its cells are runs of the train deployment either
way, so both need a server with the deployments and a worker on their pool (``make prefect-up``).
The matrix is checked here first: bad input is one line and exit 2, before any flow run exists.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from digideep.errors import UsageError
from digideep.storage.location import DEFAULT_ROOT

if TYPE_CHECKING:
    from digideep.benchmark.matrix import Cell
    from digideep.pipeline.evaluation import EvaluationProtocol

__all__ = ["add_benchmark_parser", "add_matrix_options", "command_benchmark", "plan_of"]


def add_benchmark_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``benchmark`` to the ``digideep`` subcommands; its function is :func:`command_benchmark`."""
    parser = subparsers.add_parser(
        "benchmark",
        help="run parameter files (and sb3:SAC|TD3|PPO) x environments x seeds as a Prefect benchmark",
        description="A benchmark matrix: each cell a run of the train deployment, all under one MLflow "
        "parent run, every cell evaluated alike (docs/benchmark.md).",
    )
    add_matrix_options(parser)
    parser.add_argument("--concurrency", type=int, default=2, help="cells running at once (default: 2)")
    parser.add_argument(
        "--train-deployment", default="train/pendulum-sac", help="train deployment whose pool runs the cells"
    )
    parser.add_argument("--deployment", default="benchmark/pendulum", help="the benchmark deployment to run")
    parser.add_argument("--local", action="store_true", help="run the benchmark flow in this process")
    parser.add_argument(
        "--session-path", default=str(DEFAULT_ROOT), metavar="PATH", help="the cells' sessions"
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.set_defaults(func=command_benchmark)
    return parser


def add_matrix_options(parser: argparse.ArgumentParser) -> None:
    """The benchmark's matrix and protocol: ``--params``, ``--env``, ``--seeds``, ``--frames``,
    ``--eval-interval``, ``--eval-episodes``, ``--variant``, ``--cpanel`` and ``--name``."""
    parser.add_argument(
        "--params", nargs="+", required=True, metavar="MODULE", help="parameter files, or sb3:SAC"
    )
    parser.add_argument("--env", nargs="+", required=True, metavar="ID", help="Gymnasium ids")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], metavar="N", help="default: 0 1 2")
    parser.add_argument("--frames", type=int, required=True, help="every cell's frame budget")
    parser.add_argument(
        "--eval-interval", type=int, metavar="FRAMES", help="frames between evaluations (default: --frames)"
    )
    parser.add_argument("--eval-episodes", type=int, default=10, metavar="K", help="episodes per evaluation")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="a named set of cpanel overrides (repeat for several), e.g. small-lr='{\"lr\": 0.0001}'",
    )
    parser.add_argument("--cpanel", metavar="JSON", help="cpanel overrides of every parameter file's cell")
    parser.add_argument(
        "--name", help="the benchmark's name (default: from its flow run; under 'digideep slurm', the time)"
    )


def plan_of(args: argparse.Namespace) -> tuple[list[Cell], EvaluationProtocol, dict[str, Any]]:
    """The checked cells of the matrix options (:func:`add_matrix_options`), their protocol and the
    benchmark's parameters of the same names as the benchmark flow's.

    Raises:
        UsageError: bad input (:func:`~digideep.benchmark.matrix.plan`), in one line.
    """
    from digideep.benchmark.matrix import plan
    from digideep.pipeline.evaluation import EvaluationProtocol
    from digideep.pipeline.params import parse_cpanel

    parameters = {
        "algorithms": args.params,
        "envs": args.env,
        "seeds": args.seeds,
        "variants": _variants(args.variant) or None,
        "frames": args.frames,
        "eval_interval": args.eval_interval,
        "eval_episodes": args.eval_episodes,
        "base_cpanel": parse_cpanel(args.cpanel) or None,
        "name": args.name,
    }
    protocol = EvaluationProtocol(args.eval_interval or args.frames, args.eval_episodes, args.frames)
    cells = plan(
        args.params, args.env, args.seeds, protocol, parameters["variants"], parameters["base_cpanel"]
    )
    return cells, protocol, parameters


def command_benchmark(args: argparse.Namespace) -> int:
    """Check the matrix, then run the benchmark deployment (or, with ``--local``, the flow here)."""
    cells, _, parameters = plan_of(args)
    parameters.update(
        deployment=args.train_deployment, concurrency=args.concurrency, session_path=args.session_path
    )
    if not _prefect_api_url():
        raise UsageError(
            "the benchmark's cells run on a Prefect server's workers: start one with the train deployments "
            "(make prefect-up, which makes its profile active) or set PREFECT_API_URL to one"
        )
    if args.local:
        from flows.benchmark import benchmark

        result = benchmark(**parameters)
        print(json.dumps({k: result[k] for k in ("benchmark", "parent_run_id", "status")}))
        return 0 if result["status"] == "FINISHED" else 1
    from prefect.deployments import run_deployment

    flow_run = run_deployment(args.deployment, parameters=parameters, timeout=0)
    name = args.name or f"{flow_run.name}-{str(flow_run.id)[:8]}"
    print(f"benchmark {name}: {len(cells)} cells, flow run {flow_run.id} of {args.deployment}")
    return 0


def _variants(given: list[str]) -> dict[str, dict[str, Any]]:
    """``NAME=JSON`` options as ``{name: cpanel overrides}``.

    Raises:
        UsageError: an option without ``=``, a name given twice, or JSON that is no object (one line).
    """
    from digideep.pipeline.params import parse_cpanel

    variants: dict[str, dict[str, Any]] = {}
    for option in given:
        name, sep, text = option.partition("=")
        if not sep or not name:
            raise UsageError(f"--variant '{option}' must be NAME=JSON, e.g. small-lr='{{\"lr\": 0.0001}}'")
        if name in variants:
            raise UsageError(f"--variant '{name}' is given twice; give each variant one name")
        try:
            variants[name] = parse_cpanel(text)
        except UsageError as error:
            raise UsageError(f"--variant '{name}': {error}") from None
    return variants


def _prefect_api_url() -> str | None:
    """The server Prefect's client will use: PREFECT_API_URL from the environment or the active profile
    (``make prefect-up`` and ``make stack-up`` make theirs active)."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value()
