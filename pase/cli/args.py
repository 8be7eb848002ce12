"""The command line's argument types and help texts, and from parsed flags to keyword
arguments of the Python API.

Every command's flags use these (:mod:`pase.cli.parser` and the commands that
declare their own flags), so a value type reads the same everywhere.
``KEY=VALUE`` flags (``--option``, ``--cost-option``, ``--model-option``) stay
text here: the API coerces each value by the plug-in's annotations
(:mod:`pase.options`), so the command and Python share one set of rules.
"""
from __future__ import annotations

import argparse
import inspect
import math
from typing import Any, Sequence

from pase.errors import OptionError
from pase.options import parse_bytes
from pase.registry import COST_MODELS

# -- value types (an ArgumentTypeError becomes a one-line usage error) --------------

def positive_int(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def seed(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed must be an integer >= 0, got {text!r}")
    return value


def recompute_mode(text: str) -> str:
    """``--recompute`` with ``--layout``: none, auto, all, selective, full or full:N."""
    if text in ("none", "auto", "all", "selective", "full") or \
            (text.startswith("full:") and text[5:].isdigit() and int(text[5:]) >= 1):
        return text
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from none, auto, all, "
                                     f"selective, full, full:N with N >= 1)")


def seconds(text: str) -> float:
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a time limit must be > 0 seconds, got {text!r}")
    return value


def positive_number(text: str) -> float:
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def memory_size(text: str) -> str:
    """A memory cap: ``none`` or a size parse_bytes reads (kept as text for the API)."""
    return text if text.strip().lower() == "none" else byte_size(text)


def byte_size(text: str) -> str:
    """A size parse_bytes reads, such as 16GiB (kept as text for the API)."""
    try:
        parse_bytes(text)
    except OptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


# -- help texts ----------------------------------------------------------------------

# The listing that shows each kind of plug-in's options (``pase models --options``...).
_LISTING = {"model": "models", "solver": "solvers", "cost model": "cost-models"}


def options_help(kind: str, lead: str) -> str:
    """The help of a ``KEY=VALUE`` flag: ``lead``, then where the options are listed (the
    dumps of every plug-in's options live in the listings, not in each command's help)."""
    return f"{lead} Repeatable; `pase {_LISTING[kind]} --options` lists each {kind}'s options."


MODEL_HELP = ("a registered model name (`pase models`), a graph JSON file, or FILE.py:FUNCTION "
              "(a function returning a PyTorch module and its example inputs)")


def cache_flag(s: argparse.ArgumentParser) -> None:
    """``--no-cache``, for commands whose MODEL may be a FILE.py:FUNCTION reference."""
    s.add_argument("--no-cache", action="store_true",
                   help="import a FILE.py:FUNCTION model afresh, neither reading nor writing "
                        "the import cache (also PASE_NO_CACHE=1; docs/pytorch.md)")


# -- from flags to the API ------------------------------------------------------------

# Flags that are shorthands for a cost-model option of the same name.
COST_FLAGS = ("tflops", "bandwidth", "cluster", "zero", "recompute")


def key_values(pairs: Sequence[str] | None, flag: str) -> dict[str, str]:
    """``["a=1", "b-c=x"]`` -> ``{"a": "1", "b_c": "x"}``; each key at most once."""
    options: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise OptionError(f"{flag} expects KEY=VALUE, got {pair!r}")
        if key in options:
            raise OptionError(f"{flag} {key} is given twice ({options[key]!r} and {value!r})")
        options[key] = value
    return options


# Names ``api.run_solver`` takes itself, so no --option may use them.
RESERVED_OPTIONS = {"time_limit": "use --time-limit", "seed": "use --seed", "solver": "use --solver",
                    "problem": "the Problem is built from the model and its flags"}


def solver_options(pairs: Sequence[str] | None) -> dict[str, str]:
    """``--option KEY=VALUE`` pairs for a solver, refusing the names the API sets itself."""
    options = key_values(pairs, "--option")
    for key in options:
        if key in RESERVED_OPTIONS:
            raise OptionError(f"--option {key}: {RESERVED_OPTIONS[key]}")
    return options


def space_kwargs(args: Any) -> dict[str, Any]:
    """Graph and configuration-space arguments: batch, cutoff, powers of two, mesh, model options."""
    return {"batch": args.batch, "cutoff": args.cutoff, "powers_of_two": args.powers_of_two,
            "mesh": getattr(args, "mesh", None),
            "model_options": key_values(getattr(args, "model_option", None), "--model-option")}


def cost_kwargs(args: Any, default: str = "paper") -> dict[str, Any]:
    """Cost-model arguments; a shorthand flag the cost model has no option for is refused.

    ``--cluster`` without ``--cost-model`` selects the calibrated model (the one model
    of the hardware, :mod:`pase.cost_models.calibrated`), so the flag means the same
    on every command, a mixed cluster's too (priced per device type).
    """
    from pase.api import default_cost_model

    options: dict[str, Any] = key_values(args.cost_option, "--cost-option")
    cluster = getattr(args, "cluster", None)
    cluster = options.get("cluster") if cluster is None else cluster  # the same, either way
    name = args.cost_model or (default_cost_model(cluster) if cluster is not None else default)
    params = _parameters(COST_MODELS.get(name))  # an unknown name fails here, listing the known
    for flag in COST_FLAGS:
        value = getattr(args, flag, None)
        if value is None:
            continue
        if flag in options:
            raise OptionError(f"--{flag} and --cost-option {flag}=... are both given; use one")
        if params is not None and flag not in params:
            raise OptionError(f"--{flag} does not apply to cost model {name!r} (its options: "
                              f"{', '.join(params) or 'none'}){_who_takes(flag)}")
        options[flag] = value
    return {"cost_model": name, "cost_options": options, "memory_cap": args.memory_cap,
            "build_budget": getattr(args, "build_budget", None)}


def _parameters(cls: Any) -> list[str] | None:
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.name != "self"]


def _who_takes(option: str) -> str:
    takers = [e.name for e in COST_MODELS.entries() if option in (_parameters(e.obj) or [])]
    return f"; it applies to {', '.join(takers)}" if takers else ""
