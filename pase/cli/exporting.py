"""``pase export`` (a strategy as a JAX training step, or as a PyTorch DTensor plan; a
layout as Megatron-LM flags or a torchtitan job), ``pase evaluate --from`` (the reverse:
a framework's config priced) and ``pase verify`` (pase's predicted communication against
XLA's compiled collectives)."""
from __future__ import annotations

import argparse
import shlex
from typing import Callable

from pase.cli import checks
from pase.cli.args import key_values, positive_int
from pase.cli.output import print_json, wrote
from pase.errors import OptionError, PaseError
from pase.files import STDOUT, write_text_atomic
from pase.strategy import read_strategy_file, read_strategy_json

ENGINES = ("jax", "torch")
LAUNCH = ("megatron", "torchtitan")  # engines that run a layout, written as their own config
# the layout flags of export (with their defaults), which only the launch engines take
_LAYOUT_FLAGS = {"layout": None, "cluster": None, "micro_batch": None, "global_batch": None,
                 "schedule": "1f1b", "zero": "0", "recompute": "none", "sequence_parallel": False,
                 "precision": "bf16", "tp_overlap": "auto", "ep_overlap": "auto",
                 "attention": "fused", "dropout": False}


def _engine(args: argparse.Namespace, allowed: tuple[str, ...] = ENGINES) -> None:
    if args.engine not in allowed:
        raise OptionError(f"unknown engine {args.engine!r}; allowed: {', '.join(allowed)}")


def _options(args: argparse.Namespace) -> dict:
    return key_values(getattr(args, "model_option", None), "--model-option")


def cmd_export(args: argparse.Namespace) -> None:
    from pase.export import to_jax

    _engine(args, ENGINES + LAUNCH)
    checks.output_file(args.output, "-o/--output", stdout=True)
    if args.engine in LAUNCH:
        _export_launch(args)
        return
    given = _given(args, _LAYOUT_FLAGS)
    if given:
        raise OptionError(f"{given[0]} applies only with --engine megatron or torchtitan")
    if args.strategy is None:
        raise OptionError(f"--engine {args.engine} needs --strategy FILE")
    if args.engine == "torch":
        _export_torch(args)
        return
    strategy = read_strategy_json(args.strategy)  # the whole file: its variants (ZeRO) too
    options, batch = _recorded(args, strategy, _options(args))
    text = to_jax(args.model, strategy, args.devices, batch=batch, dtype=args.dtype,
                  model_options=options, relayout=args.relayout)
    if write_text_atomic(args.output or STDOUT, text, what="-o/--output", stdout=True):
        wrote(args.output, data_on_stdout=False)


def _export_torch(args: argparse.Namespace) -> None:
    """The DTensor plan of a strategy for a FILE.py:FUNCTION model: a table on stdout, or
    its JSON in ``-o``."""
    from pase.export.dtensor import to_dtensor
    from pase.frontends.reference import load_module, split_reference
    from pase.frontends.torch import import_torch

    if args.batch is not None:
        raise OptionError("--batch does not apply to --engine torch; set the batch through "
                          "FUNCTION's options (--model-option batch=N)")
    if args.dtype != "float32":
        raise OptionError("--dtype does not apply to --engine torch; the module keeps its own")
    if args.relayout != "pase":
        raise OptionError("--relayout does not apply to --engine torch; DTensor re-lays tensors itself")
    if not _is_reference(args.model, split_reference):
        raise OptionError(f"--engine torch places a PyTorch module's tensors, so MODEL must be "
                          f"FILE.py:FUNCTION (a function returning the module and its example "
                          f"inputs), got {args.model!r}")
    strategy = read_strategy_file(args.strategy)
    module, example, importer, function = load_module(args.model, **_options(args))
    imported = import_torch(module, example, name=f"{split_reference(args.model)[0].stem}.{function}",
                            **importer)
    plan = to_dtensor(module, imported, strategy, devices=args.devices)
    if args.output is None:
        print(plan.table())
        return
    if write_text_atomic(args.output, plan.to_json() + "\n", what="-o/--output", stdout=True):
        wrote(args.output, data_on_stdout=False)


def _recorded(args: argparse.Namespace, data: object, options: dict) -> tuple[dict, int | None]:
    """The model options and batch to build the plan's model with: the ones the plan file
    records where the command gives none, as ``evaluate --strategy`` takes them
    (:func:`pase.cli.recorded.apply_recorded`), since on another graph (other layers) the
    plan is written or priced wrong without a word; a --model-option that differs from the
    file's is refused."""
    from pase.cli import recorded
    from pase.cli.layouts import pipeline_of

    pipeline = pipeline_of(data)
    if pipeline is not None:  # its batch is the step's, not a graph's: only its options
        data = {"strategy": {}, "model_options": pipeline.get("model_options") or {}}
    space = {"batch": getattr(args, "batch", None), "model_options": options}
    recorded.apply_recorded(args.strategy, data, args.model, space, args.devices)
    return dict(space["model_options"]), space["batch"]


def _is_reference(text: str, split: Callable[[str], object]) -> bool:
    try:
        split(text)
    except PaseError:
        return False
    return True


def cmd_verify(args: argparse.Namespace) -> None:
    from pase.export.verify import format_table, verify

    _engine(args, ("jax",))
    strategy = read_strategy_json(args.strategy)  # the whole file: its variants (ZeRO) too
    options, batch = _recorded(args, strategy, _options(args))
    report = verify(args.model, strategy, args.devices, batch=batch, dtype=args.dtype,
                    model_options=options,
                    cost_options=key_values(args.cost_option, "--cost-option"), run=args.execute,
                    relayout=args.relayout)
    if args.format == "json":
        print_json(report)
    else:
        print(format_table(report))


# -- megatron / torchtitan: a layout as the framework's own config, and back ------------

def add_launch_arguments(s: argparse.ArgumentParser) -> None:
    """export's flags for the launch engines (megatron, torchtitan)."""
    s.add_argument("--layout", metavar="tp=T,pp=P,dp=D[,cp=C][,ep=E]",
                   help="megatron, torchtitan: the layout to write (or a --strategy plan that "
                        "is one)")
    s.add_argument("--cluster", help="megatron, torchtitan: note the layout's predicted step and "
                                     "memory on this cluster in the file's header")
    g = s.add_argument_group("megatron and torchtitan: the layout's options, as `pase evaluate "
                             "--layout` takes them")
    g.add_argument("--micro-batch", type=positive_int, metavar="M")
    g.add_argument("--global-batch", type=positive_int, metavar="B")
    g.add_argument("--schedule", default="1f1b", metavar="1f1b|gpipe|interleaved:V")
    g.add_argument("--zero", default="0", choices=("0", "1", "2", "3"))
    g.add_argument("--recompute", default="none", choices=("none", "selective", "full"))
    g.add_argument("--sequence-parallel", action="store_true")
    g.add_argument("--precision", default="bf16",
                   choices=("bf16", "fp16", "fp8", "mxfp8", "nvfp4", "fp32"))
    g.add_argument("--tp-overlap", default="auto", choices=("auto", "on", "off"))
    g.add_argument("--ep-overlap", default="auto", choices=("auto", "on", "off"))
    g.add_argument("--attention", default="fused", choices=("fused", "unfused"))
    g.add_argument("--dropout", action="store_true")


def _given(args: argparse.Namespace, flags: dict) -> list[str]:
    """The flags of ``flags`` given a value other than their default, as --names."""
    return [f"--{k.replace('_', '-')}" for k, default in flags.items()
            if getattr(args, k, default) not in (default, None)]


def _layout_options(args: argparse.Namespace) -> dict:
    return {"schedule": args.schedule, "zero": args.zero, "recompute": args.recompute,
            "sequence_parallel": args.sequence_parallel, "precision": args.precision,
            "attention": args.attention, "dropout": args.dropout,
            "tp_overlap": args.tp_overlap, "ep_overlap": args.ep_overlap}


def _export_launch(args: argparse.Namespace) -> None:
    """``--engine megatron|torchtitan``: the layout (given, or the plan's) as the
    framework's config; a plan that is no layout exits 2 naming the ops that differ."""
    from pase.export.launch import describe
    from pase.export.megatron import to_megatron
    from pase.export.torchtitan import to_torchtitan
    from pase.perf import make_layout

    for flag, bad in (("batch", args.batch is not None), ("dtype", args.dtype != "float32"),
                      ("relayout", args.relayout != "pase")):
        if bad:
            raise OptionError(f"--{flag} does not apply to --engine {args.engine}; the layout's "
                              f"options set the like (--micro-batch, --precision)")
    if (args.layout is None) == (args.strategy is None):
        raise OptionError(f"--engine {args.engine} writes one layout: give --layout or --strategy "
                          f"(a plan that is a layout), not {'both' if args.layout else 'neither'}")
    options = _options(args)
    if args.layout is not None:
        for flag in ("micro_batch", "global_batch"):
            if getattr(args, flag) is None:
                raise OptionError(f"--layout needs --{flag.replace('_', '-')}")
        lay = make_layout(args.layout, devices=args.devices, micro_batch=args.micro_batch,
                          global_batch=args.global_batch, **_layout_options(args))
    else:
        # the plan's model options, written into the config as if given (torchtitan's
        # flavors refuse sizes they fix, as they refuse a --model-option)
        data = read_strategy_json(args.strategy)
        options, batch = _recorded(args, data, options)
        lay = _plan_layout(args, data, options, batch)
    _check_graph(args.model, lay, options)
    # the command as given (where it was written aside), so the file says how to make it
    # again, its model options too
    header = [shlex.join(["pase", *_without_output(args.argv)]), describe(lay)]
    if args.cluster is not None:
        header.append(_priced(args, lay, options))
    write = to_megatron if args.engine == "megatron" else to_torchtitan
    text = write(args.model, lay, options, header=header)
    if write_text_atomic(args.output or STDOUT, text, what="-o/--output", stdout=True):
        wrote(args.output, data_on_stdout=False)


def _without_output(argv: list[str]) -> list[str]:
    """``argv`` less its output flag and the file named: ``-o F``, ``-oF``, ``--output F``,
    ``--output=F`` and the prefixes of ``--output`` argparse takes for it (``--out F``)."""
    out, skip = [], False
    for arg in argv:
        name, eq, _ = arg.partition("=")
        long = len(name) > 2 and "--output".startswith(name)
        if skip:
            skip = False
        elif arg == "-o" or long and not eq:
            skip = True  # the file is the next word
        elif not (long or arg.startswith("-o")):
            out.append(arg)
    return out


def _plan_layout(args: argparse.Namespace, data: object, options: dict, batch: int | None):
    """The layout of the plan file's JSON ``data`` (:func:`pase.export.plan_layout.plan_layout`),
    its model built with ``options`` at ``batch`` (None: the options' or the model's own)."""
    from pase import api
    from pase.export.plan_layout import NotALayout, plan_layout

    given = _given(args, {"micro_batch": None, "global_batch": None})
    if given:
        raise OptionError(f"{given[0]} does not apply with --strategy: the plan's batch is the "
                          f"model's (--model-option batch=N) times its micro-batches")

    def graph_of(at: int | None):
        at = batch if at is None else at
        opts = dict(options)
        if at is not None:
            opts["batch"] = at
        return api.load_graph(args.model, **opts)

    if isinstance(data, dict) and isinstance(data.get("layout"), dict):
        given = _given(args, {k: v for k, v in _LAYOUT_FLAGS.items() if k not in ("cluster",)})
        if given:
            raise OptionError(f"{given[0]} does not apply: the plan records its layout's options")
    try:
        return plan_layout(data, args.devices, graph_of, _layout_options(args))
    except NotALayout as exc:
        raise NotALayout(f"--engine {args.engine}: {exc}; a framework runs one layout on every "
                         f"op: run the plan op by op: --engine torch (PyTorch DTensor placements "
                         f"of a FILE.py:FUNCTION module) or --engine jax") from None


def _check_graph(model: str, lay, options: dict) -> None:
    """The layout's degrees against the model's sizes, as ``evaluate --layout`` checks them."""
    from pase import api
    from pase.perf.layout import check_graph

    check_graph(api.load_graph(model, **dict(options, batch=lay.micro_batch)), lay)


def _priced(args: argparse.Namespace, lay, options: dict) -> str:
    from pase import api
    from pase.perf import evaluate_layout

    graph = api.load_graph(args.model, **dict(options, batch=lay.micro_batch))
    est = evaluate_layout(graph, args.cluster, lay)
    fits = "fits" if est.memory_bytes <= est.device_memory_bytes else "DOES NOT FIT"
    return (f"pase predicts on {args.cluster}: step {est.step_seconds:.4g} s, MFU {est.mfu:.1%}, "
            f"peak memory {est.memory_bytes / 2**30:.1f} GiB per device ({fits})")


def cmd_evaluate_from(args: argparse.Namespace) -> None:
    """``pase evaluate --from megatron|torchtitan FILE``: the file's layout, priced by
    the same path as ``--layout``."""
    from pase.cli import layouts
    from pase.export.launch import degrees_text, layout_options
    from pase.export.read_megatron import read_megatron
    from pase.export.read_torchtitan import read_torchtitan
    from pase.files import regular_file

    engine, path = args.from_config
    if engine not in LAUNCH:
        raise OptionError(f"--from: unknown engine {engine!r}; allowed: {', '.join(LAUNCH)}")
    evaluate_flags = {k: v for k, v in _LAYOUT_FLAGS.items()
                      if k not in ("layout", "cluster", "zero", "recompute")}
    given = _given(args, evaluate_flags)
    given += [f"--{k}" for k in ("zero", "recompute") if getattr(args, k, None) is not None]
    if given:
        raise OptionError(f"{given[0]} does not apply with --from: the {engine} file sets it")
    if args.cluster is None:
        raise OptionError("--from needs --cluster")
    regular_file(path, f"--from {engine} file", OptionError)
    try:
        text = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as exc:
        raise OptionError(f"--from {engine}: cannot read {path}: {exc}") from None
    read = read_megatron if engine == "megatron" else read_torchtitan
    launch = read(text, args.model, args.devices)
    options = key_values(args.model_option, "--model-option")
    for key, value in launch.model_options.items():
        if key in options and options[key] != str(value):
            raise OptionError(f"--model-option {key}={options[key]} but the {engine} file sets "
                              f"{key} {value}")
        options[key] = str(value)
    lay = launch.layout
    for key, value in layout_options(lay).items():
        setattr(args, key, str(value) if key == "zero" else value)
    args.layout = degrees_text(lay)
    args.model_option = [f"{k}={v}" for k, v in options.items()]
    layouts.cmd_evaluate_layout(args)
