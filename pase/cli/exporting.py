"""``pase export`` (a strategy as a JAX training step, or as a PyTorch DTensor plan) and
``pase verify`` (pase's predicted communication against XLA's compiled collectives)."""
from __future__ import annotations

import argparse
from typing import Callable

from pase.cli import checks
from pase.cli.args import key_values
from pase.cli.output import print_json, wrote
from pase.errors import OptionError, PaseError
from pase.files import STDOUT, write_text_atomic
from pase.strategy import read_strategy_file, read_strategy_json

ENGINES = ("jax", "torch")


def _engine(args: argparse.Namespace, allowed: tuple[str, ...] = ENGINES) -> None:
    if args.engine not in allowed:
        raise OptionError(f"unknown engine {args.engine!r}; allowed: {', '.join(allowed)}")


def _options(args: argparse.Namespace) -> dict:
    return key_values(getattr(args, "model_option", None), "--model-option")


def cmd_export(args: argparse.Namespace) -> None:
    from pase.export import to_jax

    _engine(args)
    checks.output_file(args.output, "-o/--output", stdout=True)
    if args.engine == "torch":
        _export_torch(args)
        return
    strategy = read_strategy_json(args.strategy)  # the whole file: its variants (ZeRO) too
    text = to_jax(args.model, strategy, args.devices, batch=args.batch, dtype=args.dtype,
                  model_options=_options(args), relayout=args.relayout)
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
    report = verify(args.model, strategy, args.devices, batch=args.batch, dtype=args.dtype,
                    model_options=_options(args),
                    cost_options=key_values(args.cost_option, "--cost-option"), run=args.execute,
                    relayout=args.relayout)
    if args.format == "json":
        print_json(report)
    else:
        print(format_table(report))
