"""``pase replan MODEL --from old.json (-p NEW | --cluster NEW)``: the best move when the cluster
or the workload changes mid-training (docs/replan.md)."""
from __future__ import annotations

import argparse
import math

from pase.cli import checks
from pase.cli.args import (
    MODEL_HELP,
    byte_size,
    cache_flag,
    key_values,
    memory_size,
    options_help,
    positive_int,
    positive_number,
    seconds,
    seed,
    solver_options,
)
from pase.cli.output import emit

HELP = "re-plan when devices or the workload change: migration cost plus N steps, minimised"


def _steps(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of steps, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("model", help=MODEL_HELP)
    s.add_argument("--from", dest="from_", required=True, metavar="OLD.json",
                   help="the strategy training runs now: a `pase solve --format json` output "
                        "(or a {op: {dim: factor}} file with --from-devices)")
    s.add_argument("-p", "--devices", type=positive_int,
                   help="the new device count (default: the --cluster's)")
    s.add_argument("--cluster", help="the new cluster: a preset or JSON file (`pase clusters`; "
                                     "default dgx-a100, grown to -p); selects the calibrated model "
                                     "(mixed clusters too) unless --cost-model names another")
    s.add_argument("--steps", type=_steps, default=1000.0, metavar="N",
                   help="training steps left to run on the new setting (default %(default)g): "
                        "the re-plan minimises N x step time + migration time")
    s.add_argument("--from-devices", type=positive_int, metavar="P",
                   help="the old device count, when --from does not record it")
    s.add_argument("--from-cluster", metavar="CLUSTER",
                   help="the old cluster, when it was heterogeneous (it decides which group prefix "
                        "held each op; default: the old devices were identical)")
    s.add_argument("--from-model-option", action="append", metavar="KEY=VALUE",
                   help="an option of the OLD model where it differs from the new one "
                        "(default: the old model is the new one)")
    s.add_argument("--survivors", type=int, metavar="K",
                   help="old ranks 0..K-1 that remain and keep their state (default: "
                        "min(old, new) devices; 0: everything is read from the checkpoint)")
    s.add_argument("--restore-bandwidth", type=positive_number, metavar="GBPS",
                   help="GB/s per device at which state held by no survivor is read from the "
                        "checkpoint (default: the inter-node link's)")
    s.add_argument("--batch", type=positive_int, help="batch size of the new model")
    s.add_argument("--model-option", action="append", metavar="KEY=VALUE",
                   help=options_help("model", "An option of the new model, e.g. seq=1024."))
    cache_flag(s)
    s.add_argument("--cutoff", type=positive_int, help="smallest per-device extent of a split dim")
    s.add_argument("--powers-of-two", action="store_true", help="only power-of-two split factors")
    s.add_argument("--cost-model", choices=("calibrated", "alpha-beta"),
                   help="the model pricing the step (default: calibrated with --cluster, "
                        "alpha-beta without --cluster)")
    s.add_argument("--cost-option", action="append", metavar="KEY=VALUE",
                   help=options_help("cost model", "An option of the cost model, e.g. "
                                                   "precision=fp8, microbatches=4 or "
                                                   "recompute=full for calibrated (zero stays 0)."))
    s.add_argument("--memory-cap", type=memory_size,
                   help="per-device memory cap, e.g. 16GiB, or none (default: the device memory)")
    s.add_argument("--build-budget", type=byte_size, metavar="SIZE",
                   help="most memory the Problem's cost arrays may take (default 4GiB)")
    s.add_argument("--solver", default="auto", help="solver name (default: auto; `pase solvers`)")
    s.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help=options_help("solver", "A solver option, e.g. ordering=min-fill for dp."))
    s.add_argument("--time-limit", type=seconds, help="seconds each solve may use (> 0)")
    s.add_argument("--seed", type=seed, help="seed (integer >= 0) for randomised solvers")
    s.add_argument("--format", choices=("table", "json"), default="table")
    s.add_argument("--output", metavar="FILE", help="also write the JSON result to this file")


def cmd_replan(args: argparse.Namespace) -> None:
    from pase.replan import replan

    checks.output_file(args.output, "--output")
    options = solver_options(args.option)
    result = replan(args.model, args.from_, devices=args.devices, cluster=args.cluster,
                    steps=args.steps, old_devices=args.from_devices, survivors=args.survivors,
                    restore_bandwidth=args.restore_bandwidth, old_cluster=args.from_cluster,
                    cost_model=args.cost_model, solver=args.solver, batch=args.batch,
                    cutoff=args.cutoff, powers_of_two=args.powers_of_two,
                    memory_cap=args.memory_cap,
                    model_options=key_values(args.model_option, "--model-option"),
                    old_model_options=key_values(args.from_model_option, "--from-model-option"),
                    cost_options=key_values(args.cost_option, "--cost-option"),
                    build_budget=args.build_budget, time_limit=args.time_limit, seed=args.seed,
                    **options)
    emit(result.to_dict(), result.table(), args.output, args.format)
