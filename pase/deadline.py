"""One wall-clock deadline for a whole command: build, block detection, folding, solve.

``--time-limit`` (``pase.solve(time_limit=...)``) starts a :class:`Deadline` when the
command starts. :func:`active` makes it the ambient deadline of the code below it, and
the loops that can run long (the cost build between ops, a dp step between row blocks,
block detection and folding) call :func:`check` between units of work. Ambient rather
than a parameter on every function, so a plug-in cost model that overrides
``CostModel.problem`` and a plug-in solver reach it unchanged; a solver still gets its
share as a plain ``time_limit`` (:func:`share`), seconds from when it starts.

Examples:
    >>> with active(Deadline(60.0)):
    ...     0.0 < share(None) <= 60.0
    True
    >>> check("doing nothing")  # no deadline: never raises
"""
from __future__ import annotations

import contextlib
import contextvars
import time
from typing import Iterator

from pase.errors import TimeLimitError

__all__ = ["Deadline", "active", "check", "current", "remaining", "share"]


class Deadline:
    """``seconds`` of wall time from ``start`` (default now); ``None``: no limit."""

    __slots__ = ("at", "limit", "start")

    def __init__(self, seconds: float | None, *, start: float | None = None):
        self.start = time.perf_counter() if start is None else start
        self.limit = seconds
        self.at = None if seconds is None else self.start + seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def remaining(self) -> float | None:
        """Seconds left (never negative), or None without a limit."""
        return None if self.at is None else max(0.0, self.at - time.perf_counter())

    def expired(self) -> bool:
        return self.at is not None and time.perf_counter() > self.at

    def check(self, doing: str) -> None:
        """Raise :class:`~pase.errors.TimeLimitError` naming ``doing`` once past the deadline."""
        if self.expired():
            raise TimeLimitError(f"the time limit of {_seconds(self.limit)} passed after "
                                 f"{self.elapsed():.1f} s while {doing}")


_ACTIVE: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("pase_deadline",
                                                                           default=None)


def current() -> Deadline | None:
    """The ambient deadline, or None."""
    return _ACTIVE.get()


@contextlib.contextmanager
def active(deadline: Deadline | None) -> Iterator[Deadline | None]:
    """Make ``deadline`` the ambient one inside the block; an earlier ambient one stays
    in force (a solver's own limit never extends the command's)."""
    outer = _ACTIVE.get()
    if deadline is None or deadline.at is None or (outer is not None and outer.at is not None
                                                   and outer.at <= deadline.at):
        yield outer
        return
    token = _ACTIVE.set(deadline)
    try:
        yield deadline
    finally:
        _ACTIVE.reset(token)


def check(doing: str) -> None:
    """Raise TimeLimitError once past the ambient deadline (cheap: call it in loops)."""
    deadline = _ACTIVE.get()
    if deadline is not None and deadline.at is not None and time.perf_counter() > deadline.at:
        deadline.check(doing)


def remaining() -> float | None:
    """Seconds left on the ambient deadline, or None."""
    deadline = _ACTIVE.get()
    return None if deadline is None else deadline.remaining()


def share(time_limit: float | None) -> float | None:
    """A solver's time limit: ``time_limit``, cut to what the ambient deadline has left."""
    left = remaining()
    if left is None:
        return time_limit
    return left if time_limit is None else min(time_limit, left)


def _seconds(limit: float | None) -> str:
    return f"{limit:g} s"
