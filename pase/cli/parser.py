"""The ``pase`` command's argument parser: commands, flags, value types, one-line errors."""
from __future__ import annotations

import argparse
import re
import sys
import textwrap
from typing import Any, Callable

from pase.cli.args import (
    MODEL_HELP,
    byte_size,
    cache_flag,
    memory_size,
    options_help,
    positive_int,
    positive_number,
    recompute_mode,
    seconds,
    seed,
)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``pase: error: ...``) and a pointer to --help."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self.given = list(sys.argv[1:] if args is None else args)  # what error() reads
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> Any:  # argparse's prints the full usage first
        message = " ".join(message.split())
        flag = re.fullmatch(r"argument (--[\w-]+)(?:/\S+)?: expected one argument", message)
        given = getattr(self, "given", [])
        if flag and flag.group(1) in given[:-1] and \
                given[given.index(flag.group(1)) + 1].startswith("-"):
            # `--memory-cap -5GiB`: argparse reads the value as another option
            message += f" (a value that starts with '-' is written {flag.group(1)}=VALUE)"
        self.exit(2, f"pase: error: {message}\nsee `{self.prog} --help`\n")


# -- the parser -------------------------------------------------------------------------

# Each command's --help ends with these (tests/test_cli_help.py parses every line). A command
# that reads a file follows the example that writes it, run from one folder.
EXAMPLES = {
    "models": ["pase models", "pase models --options", "pase models --format json"],
    "solvers": ["pase solvers", "pase solvers --options"],
    "cost-models": ["pase cost-models", "pase cost-models --options"],
    "clusters": ["pase clusters", "pase clusters --format json"],
    "inspect": ["pase inspect transformer -p 8",
                "pase inspect gpt2 -p 16 --model-option layers=2 --format json"],
    "solve": ["pase solve mlp -p 8",
              "pase solve transformer -p 8 --cluster dgx-a100 --output plan.json",
              "pase solve gpt2 -p 16 --dry-run"],
    "compare": ["pase compare mlp -p 8 --solvers dp,greedy,mcmc",
                "pase compare transformer -p 8 --cluster dgx-a100 --solvers dp,greedy "
                "--plot compare.png"],
    "evaluate": ["pase solve transformer -p 8 --cluster dgx-a100 --output plan.json",
                 "pase evaluate transformer -p 8 --cluster dgx-a100 --strategy plan.json",
                 "pase evaluate gpt3-175b -p 1024 --cluster dgx-a100-80gb --layout tp=8,pp=16,dp=8 "
                 "--micro-batch 1 --global-batch 1536 --recompute full"],
    "simulate": ["pase simulate transformer -p 8 --cluster dgx-a100",
                 "pase solve transformer -p 8 --cluster dgx-a100 --output plan.json",
                 "pase simulate transformer -p 8 --cluster dgx-a100 --strategy plan.json "
                 "--plot step.png"],
    "reproduce": ["pase reproduce pase-ipdps2021 --quick --out results",
                  "pase reproduce pase-ipdps2021"],
    "export": ["pase solve mlp -p 8 --cluster dgx-a100 --output mlp.json",
               "pase export mlp -p 8 --strategy mlp.json --engine jax -o step.py",
               "pase export llama3-8b -p 64 --layout tp=2,pp=2,dp=16 --micro-batch 1 "
               "--global-batch 512 --engine megatron -o args.txt"],
    "verify": ["pase solve mlp -p 8 --cluster dgx-a100 --output mlp.json",
               "pase verify mlp -p 8 --strategy mlp.json --engine jax",
               "pase verify mlp -p 8 --strategy mlp.json --engine jax --format json"],
    "import": ["pase import tests/torch_models/mlp.py:build -o mlp_torch.json",
               "pase import tests/torch_models/gpt2.py:small --no-fuse"],
    "sweep": ["pase sweep examples/sweep.toml --workers 2",
              "pase sweep examples/sweep.toml --db sweep.sqlite --quiet"],
    "report": ["pase report examples/sweep.sqlite -o report",
               "pase report examples/sweep.sqlite -o report --format csv"],
    "view": ["pase view gpt2 -p 8 --model-option layers=2 --cluster dgx-a100 --solver auto "
             "-o plan.html",
             "pase solve mlp -p 8 --output mlp.json",
             "pase view mlp -p 8 --strategy mlp.json --compare mlp.json -o mlp.html"],
    "replan": ["pase solve gpt2 -p 8 --model-option layers=2 --cluster dgx-a100 --output old.json",
               "pase replan gpt2 --from old.json --model-option layers=2 -p 16 --steps 5000",
               "pase replan gpt2 --from old.json --model-option layers=2 --cluster dgx-a100x2 "
               "--survivors 0"],
}

# The compute precisions of the performance model (pase.perf.kernels).
PRECISIONS = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4", "fp32")

def build(commands: dict[str, Callable[[argparse.Namespace], Any]]) -> Parser:
    """The ``pase`` parser; ``commands`` maps each command name to the function that runs it
    (a name it lacks parses, and runs nothing)."""
    debug = Parser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show the full traceback of an internal error")
    p = Parser(prog="pase", description="Find parallelization strategies for DNN training.")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an internal error")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    def command(name: str, help_: str) -> Parser:
        s = sub.add_parser(name, help=help_, description=textwrap.fill(help_, 79),
                           parents=[debug], formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES[name]))
        s.set_defaults(run=commands.get(name))
        return s

    for name, help_ in (("models", "list the registered models"),
                        ("solvers", "list the solvers: kind, scope, memory caps, availability"),
                        ("cost-models", "list the cost models")):
        s = command(name, help_)
        _format(s)
        s.add_argument("--options", action="store_true",
                       help="list each one's options and their defaults instead")
    _format(command("clusters", "list the cluster presets"))
    _inspect(command("inspect", "show a model's ops and configuration counts (no costs)"))
    _solve(command("solve", "find a strategy"))
    _compare(command("compare", "run several solvers on one problem"))
    _evaluate(command("evaluate", "cost and memory of a given strategy"))
    _simulate(command("simulate", "simulate one training step of a strategy on a cluster"))
    _reproduce(command("reproduce", "regenerate a paper's tables and figures"))
    _export(command("export", "write a strategy as a self-contained training step for an engine"))
    _verify(command("verify", "compile a strategy's training step (never run) and compare its "
                              "collectives with pase's predicted bytes per device"))
    from pase.cli import importing, replanning, sweeping, viewing  # each declares its own flags

    importing.add_arguments(command("import", importing.HELP))
    replanning.add_arguments(command("replan", replanning.HELP))
    sweeping.add_sweep_arguments(command("sweep", sweeping.SWEEP_HELP))
    sweeping.add_report_arguments(command("report", sweeping.REPORT_HELP))
    s = command("view", viewing.HELP)
    _model(s, formats=False)
    _costs(s)
    viewing.add_arguments(s)
    return p


def _format(s: Parser) -> None:
    s.add_argument("--format", choices=("table", "json"), default="table")


def _model(s: Parser, formats: bool = True) -> None:
    s.add_argument("model", help=MODEL_HELP)
    s.add_argument("-p", "--devices", type=positive_int, required=True, help="number of devices")
    s.add_argument("--batch", type=positive_int, help="batch size (registered models)")
    s.add_argument("--model-option", action="append", metavar="KEY=VALUE",
                   help=options_help("model", "An option of a registered model, e.g. size=100 "
                                              "for random."))
    s.add_argument("--cutoff", type=positive_int, help="smallest per-device extent of a split dim")
    s.add_argument("--powers-of-two", action="store_true", help="only power-of-two split factors")
    s.add_argument("--mesh", metavar="AxBxC",
                   help="a mesh-shaped configuration space: each dim is split by a product of "
                        "mesh axes and every device is used (the product must equal -p)")
    cache_flag(s)
    if formats:
        _format(s)


def _costs(s: Parser, default: str = "paper", layout: bool = False) -> None:
    s.add_argument("--cost-model", help=f"cost model name (default: {default}; calibrated "
                                        f"with --cluster; `pase cost-models`)")
    s.add_argument("--cost-option", action="append", metavar="KEY=VALUE",
                   help=options_help("cost model", "An option of the cost model, e.g. "
                                                   "efficiency=0.4 for alpha-beta."))
    s.add_argument("--tflops", type=positive_number,
                   help="peak TFLOP/s per device: --cost-option tflops=X (paper model)")
    s.add_argument("--bandwidth", type=positive_number,
                   help="link bandwidth in GB/s: --cost-option bandwidth=Y (paper model)")
    s.add_argument("--cluster", help="cluster preset or JSON file (`pase clusters`): "
                                     "--cost-option cluster=NAME; selects the calibrated model "
                                     "(mixed clusters too) unless --cost-model names another")
    s.add_argument("--memory-cap", type=memory_size,
                   help="per-device memory cap, e.g. 16GiB, or none (cost models with memory; "
                        "default: the cluster's device memory)")
    s.add_argument("--build-budget", type=byte_size, metavar="SIZE",
                   help="most memory the Problem's cost arrays may take, e.g. 16GiB "
                        "(default 4GiB); a larger build is refused before it starts")
    s.add_argument("--zero", choices=("0", "1", "2", "3", "auto"),
                   help="ZeRO sharding over each op's data-parallel group: a stage for every op, "
                        "or auto (searched per op): --cost-option zero=Z (calibrated, alpha-beta)")
    s.add_argument("--recompute", type=recompute_mode if layout else None,
                   choices=None if layout else ("none", "auto", "all"),
                   metavar="{none,auto,all,selective,full,full:N}" if layout else None,
                   help="activation recomputation: none, every op, or searched per op (auto): "
                        "--cost-option recompute=R (calibrated, alpha-beta)" + (
                            "; with --layout: none, selective (the attention core), full "
                            "(every layer) or full:N (the first N layers of each stage)"
                            if layout else ""))


def _search(s: Parser, each: str = "") -> None:
    # solve: the whole command's wall seconds; compare: each solver's, bounding the build too.
    what = "seconds the command may use, build and solve (> 0)" if each == "the " else \
        f"seconds {each}solver may use, and the build (> 0)"
    s.add_argument("--time-limit", type=seconds, help=what)
    s.add_argument("--seed", type=seed, help="seed (integer >= 0) for randomised solvers")


def _inspect(s: Parser) -> None:
    _model(s)


def _solve(s: Parser) -> None:
    _model(s)
    _costs(s)
    s.add_argument("--solver", help="solver name (default: auto; see `pase solvers`)")
    _search(s, "the ")
    s.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help=options_help("solver", "A solver option, e.g. ordering=min-fill for dp."))
    s.add_argument("--output", metavar="FILE", help="also write the JSON result to this file")
    s.add_argument("--dry-run", action="store_true",
                   help="predict the dp's table sizes, memory and time per ordering; do not "
                        "solve (only --option memory_budget applies)")
    s.add_argument("--pipeline", action="store_true",
                   help="also search pipeline stages (contiguous ranges of ops on sub-meshes), "
                        "micro-batches and the schedule, with the per-layer dp inside each stage")
    s.add_argument("--microbatches", type=positive_int, metavar="M",
                   help="with --pipeline: this many micro-batches (default: searched)")
    s.add_argument("--schedule", metavar="S",
                   help="1f1b, gpipe, interleaved[:V] or auto (the default with --global-batch)")
    s.add_argument("--layouts", action="store_true",
                   help="search Megatron/FSDP layouts (needs --cluster and --global-batch; "
                        "docs/performance-model.md)")
    s.add_argument("--global-batch", type=positive_int, metavar="B", help="sequences per step (--layouts; else --pipeline)")
    s.add_argument("--precision", choices=PRECISIONS, metavar="P",
                   help=f"compute precision, {', '.join(PRECISIONS)} (default: bf16 where the device has it)")
    s.add_argument("--explain", action="store_true",
                   help="where the step goes, vs the best layout (--cluster)")


def _compare(s: Parser) -> None:
    _model(s)
    _costs(s)
    s.add_argument("--solvers", default="dp,ilp-cpsat,ilp-highs,greedy,mcmc,data-parallel,owt",
                   help="comma-separated solver names (default: %(default)s)")
    _search(s, "each ")
    s.add_argument("--option", action="append", metavar="SOLVER:KEY=VALUE",
                   help="an option of one solver, e.g. dp:ordering=min-fill; repeatable")
    s.add_argument("--plot", metavar="FILE.png", help="bar chart of cost and solve time")


def _evaluate(s: Parser) -> None:
    _model(s)
    _costs(s, layout=True)
    what = s.add_mutually_exclusive_group(required=True)
    what.add_argument("--strategy", metavar="FILE",
                      help="JSON file mapping op name to {dim: factor} (or a `pase solve` JSON output)")
    what.add_argument("--layout", metavar="tp=T,pp=P,dp=D[,cp=C][,ep=E]",
                      help="price a Megatron-LM/FSDP layout with the performance model "
                           "(docs/performance-model.md); needs --cluster, --micro-batch, --global-batch")
    what.add_argument("--from", nargs=2, metavar=("ENGINE", "FILE"), dest="from_config",
                      help="price the layout of a megatron flags file or a torchtitan job TOML "
                           "(docs/export-launch.md); needs --cluster")
    s.add_argument("--output", metavar="FILE", help="also write the JSON result to this file")
    lay = s.add_argument_group("with --layout")
    lay.add_argument("--micro-batch", type=positive_int, metavar="M", help="sequences per micro-batch")
    lay.add_argument("--global-batch", type=positive_int, metavar="B", help="sequences per step")
    lay.add_argument("--schedule", default="1f1b", metavar="1f1b|gpipe|interleaved:V|zb-h1|dualpipe",
                     help="pipeline schedule (default 1f1b)")
    lay.add_argument("--sequence-parallel", action="store_true",
                     help="split norms and residuals over the tp group along the sequence")
    lay.add_argument("--precision", default="bf16", choices=PRECISIONS,
                     help="compute precision (default bf16, mixed precision with fp32 master "
                          "weights and Adam moments); fp8, mxfp8 and nvfp4 run the linear "
                          "layers' GEMMs in that format")
    lay.add_argument("--tp-overlap", default="auto", choices=("auto", "on", "off"),
                     help="hide tensor-parallel collectives behind the GEMMs beside them "
                          "(Megatron-LM --tp-comm-overlap, torchtitan async TP); auto: on with "
                          "--sequence-parallel and fused attention, as current recipes run")
    lay.add_argument("--ep-overlap", default="auto", choices=("auto", "on", "off"),
                     help="hide expert all-to-alls behind another micro-batch's compute "
                          "(Megatron-LM's combined 1F1B schedule); auto: on with ep > 1 and "
                          "two or more micro-batches")
    lay.add_argument("--attention", default="fused", choices=("fused", "unfused"),
                     help="fused (flash) attention, or the unfused form that stores the scores")
    lay.add_argument("--dropout", action="store_true", help="dropout masks and kernels (off by default)")


def _simulate(s: Parser) -> None:
    _model(s)
    s.add_argument("--cluster", help="cluster preset or JSON file (`pase clusters`); a pipeline "
                                     "plan's own by default")
    s.add_argument("--strategy", metavar="FILE", help="JSON strategy file (else solve with --solver)")
    s.add_argument("--solver", help="solver when no --strategy is given (default: auto)")
    s.add_argument("--seed", type=seed, help="seed for a randomised --solver")
    s.add_argument("--cost-model", help="cost model for --solver (default: calibrated on "
                                           "--cluster, mixed ones too)")
    s.add_argument("--cost-option", action="append", metavar="KEY=VALUE",
                   help=options_help("cost model", "An option of --solver's cost model; "
                                                   "efficiency, bytes_per_element and optimizer "
                                                   "also set the simulation's."))
    s.add_argument("--memory-cap", type=memory_size,
                   help="memory cap for --solver (default: the device memory)")
    s.add_argument("--timeline", action="store_true", help="include the timeline in the JSON")
    s.add_argument("--plot", metavar="FILE.png", help="draw a Gantt chart of devices and links")


def _reproduce(s: Parser) -> None:
    s.add_argument("paper", help="reproduction name, e.g. pase-ipdps2021")
    s.add_argument("--quick", action="store_true", help="a reduced grid (minutes, for CI)")
    s.add_argument("--out", metavar="DIR", help="output folder (default: ./pase-reproduce-PAPER)")


def _engine_args(s: Parser, engines: str = "jax or torch") -> None:
    s.add_argument("model", help=MODEL_HELP)
    s.add_argument("-p", "--devices", type=positive_int, required=True, help="number of devices")
    s.add_argument("--strategy", required=engines == "jax or torch", metavar="FILE",
                   help="JSON file mapping op name to {dim: factor} (or a `pase solve` JSON output)")
    s.add_argument("--engine", required=True, help=f"the engine: {engines}")
    s.add_argument("--batch", type=positive_int, help="batch size (registered models)")
    s.add_argument("--dtype", default="float32",
                   help="float32 (default), bfloat16, float16 or float64")
    s.add_argument("--relayout", default="pase",
                   help="jax: pase (default) writes each re-layout between ops out as the "
                        "collectives pase prices; xla leaves it to XLA's partitioner")
    s.add_argument("--model-option", action="append", metavar="KEY=VALUE",
                   help=options_help("model", "An option of a registered model, e.g. layers=1."))
    cache_flag(s)


def _export(s: Parser) -> None:
    from pase.cli import exporting

    _engine_args(s, "jax, torch, megatron (its flags) or torchtitan (a job TOML)")
    s.add_argument("-o", "--output", metavar="FILE",
                   help="write the program (torch: the plan's JSON) here; - for stdout "
                        "(default: stdout; torch: a table)")
    exporting.add_launch_arguments(s)


def _verify(s: Parser) -> None:
    _engine_args(s)
    s.add_argument("--cost-option", action="append", metavar="KEY=VALUE",
                   help="an option of the predicted re-distribution: reduce_scatter=true|false")
    s.add_argument("--run", action="store_true", dest="execute",
                   help="also run the step sharded and on one device (fake CPU devices) and "
                        "check loss and gradients agree to 1e-5; pass small --model-option sizes")
    _format(s)
