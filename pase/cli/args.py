"""From parsed command-line flags to keyword arguments of the Python API.

``KEY=VALUE`` flags (``--option``, ``--cost-option``, ``--model-option``) stay
text here: the API coerces each value by the plug-in's annotations
(:mod:`pase.options`), so the command and Python share one set of rules.
"""
from __future__ import annotations

import inspect
from typing import Any, Sequence

from pase.errors import OptionError
from pase.registry import COST_MODELS

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
    """Cost-model arguments; a shorthand flag the cost model has no option for is refused."""
    name = args.cost_model or default
    options: dict[str, Any] = key_values(args.cost_option, "--cost-option")
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
