"""The exception family. Bad input raises a PaseError; infeasibility is a Status.

Each error subclasses the matching builtin, so ``except ValueError`` still works.
"""
from __future__ import annotations

import math
import numbers


class PaseError(Exception):
    """Base class of every error pase raises on purpose."""


class GraphError(PaseError, ValueError):
    """A graph is malformed: a cycle, a dangling reference, a shape mismatch..."""


class OptionError(PaseError, ValueError):
    """An option has a value outside what is allowed (p < 1, a bad cutoff...)."""


class NoPlanFormError(OptionError):
    """A layout that pase prices as a layout but cannot yet write op by op."""


class UnknownNameError(PaseError, ValueError):
    """A model, solver, cost model or cluster name that no registry knows."""


class StrategyError(PaseError, ValueError):
    """A strategy names an unknown op or dim, or splits more ways than allowed."""


class ProblemError(PaseError, ValueError):
    """A Problem's arrays are inconsistent (wrong shapes, NaN costs...)."""


class TooLargeError(PaseError, ValueError):
    """A search would exceed a size or memory limit; the message says which."""


class TimeLimitError(PaseError, TimeoutError):
    """A solver with no partial answer (the dp) ran past its time limit."""


class InternalError(PaseError, RuntimeError):
    """pase broke one of its own invariants (an impossible number it was about to return):
    a bug, not bad input; the message names the invariant."""


class SolverUnavailableError(PaseError, ImportError):
    """A solver's optional backend is not installed; the message names the extra."""


# -- option checks shared by the solvers ---------------------------------------

def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (an integral float such as 1e6 is accepted)."""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral) and \
            float(value).is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise OptionError(f"{name} must be an integer >= {minimum}, got {_shown(value)}")
    return int(value)


def check_float(name: str, value: object, minimum: float = 0.0, *,
                strict: bool = False, finite: bool = True) -> float:
    """``value`` as a float > ``minimum`` (``strict``) or >= it; finite unless told."""
    number = math.nan
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value) if abs(value) < 2**1023 else math.inf if value > 0 else -math.inf
    if not (number > minimum if strict else number >= minimum) or (finite and math.isinf(number)):
        bound = f"{'>' if strict else '>='} {minimum:g}"
        raise OptionError(f"{name} must be a{' finite' if finite else ''} number {bound}, "
                          f"got {_shown(value)}")
    return number


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """``value`` when it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise OptionError(f"unknown {name} {_shown(value)}; choose from {', '.join(choices)}")
    return value


def check_common(time_limit: object, seed: object) -> None:
    """The options every solver takes: ``time_limit`` > 0 seconds, ``seed`` >= 0 (or None)."""
    if time_limit is not None:
        check_float("time_limit", time_limit, 0.0, strict=True, finite=False)
    if seed is not None:
        check_int("seed", seed, 0)


def _shown(value: object, width: int = 40) -> str:
    """``repr(value)`` cut to ``width`` characters, so a message stays one short line."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= width else text[:width - 3] + "..."
