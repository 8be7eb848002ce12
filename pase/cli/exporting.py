"""``pase export`` (a strategy as a JAX training step) and ``pase verify`` (pase's predicted
communication against XLA's compiled collectives)."""
from __future__ import annotations

import argparse
from pathlib import Path

from pase.cli import checks
from pase.cli.args import key_values
from pase.cli.output import print_json
from pase.errors import OptionError
from pase.strategy import read_strategy_file

ENGINES = ("jax",)


def _engine(args: argparse.Namespace) -> None:
    if args.engine not in ENGINES:
        raise OptionError(f"unknown engine {args.engine!r}; allowed: {', '.join(ENGINES)}")


def _options(args: argparse.Namespace) -> dict:
    return key_values(getattr(args, "model_option", None), "--model-option")


def cmd_export(args: argparse.Namespace) -> None:
    from pase.export import to_jax

    _engine(args)
    checks.output_file(args.output, "-o/--output")
    strategy = read_strategy_file(args.strategy)
    text = to_jax(args.model, strategy, args.devices, batch=args.batch, dtype=args.dtype,
                  model_options=_options(args))
    if args.output is None:
        print(text, end="")
        return
    try:
        Path(args.output).write_text(text)
    except OSError as exc:
        raise OptionError(f"cannot write -o {args.output}: {exc.strerror or exc}") from exc


def cmd_verify(args: argparse.Namespace) -> None:
    from pase.export.verify import format_table, verify

    _engine(args)
    strategy = read_strategy_file(args.strategy)
    report = verify(args.model, strategy, args.devices, batch=args.batch, dtype=args.dtype,
                    model_options=_options(args),
                    cost_options=key_values(args.cost_option, "--cost-option"), run=args.execute)
    if args.format == "json":
        print_json(report)
    else:
        print(format_table(report))
