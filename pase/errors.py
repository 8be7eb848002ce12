"""The exception family. Bad input raises a PaseError; infeasibility is a Status.

Each error subclasses the matching builtin, so ``except ValueError`` still works.
"""
from __future__ import annotations


class PaseError(Exception):
    """Base class of every error pase raises on purpose."""


class GraphError(PaseError, ValueError):
    """A graph is malformed: a cycle, a dangling reference, a shape mismatch..."""


class OptionError(PaseError, ValueError):
    """An option has a value outside what is allowed (p < 1, a bad cutoff...)."""


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


class SolverUnavailableError(PaseError, ImportError):
    """A solver's optional backend is not installed; the message names the extra."""
