"""Time limits and Ctrl-C for the ILP backends: a deadline, a stoppable thread, a child process.

A backend's own time limit is advisory: HiGHS and CP-SAT do not look at the clock
while they load or presolve a large model, and CBC only during branch and bound
(a 10 s limit took minutes on the Transformer at p = 16). So every backend runs
under a watchdog here:

* :func:`run_stoppable` runs a library call (HiGHS, CP-SAT) in a worker thread.
  The calling thread waits in short slices, so Ctrl-C (KeyboardInterrupt) reaches
  it at once; past the deadline, or on Ctrl-C, the backend is asked to stop, and a
  backend that has not stopped :data:`ABANDON_AFTER` seconds later is left to
  finish in its daemon thread (it dies with the process) while the caller goes on.
* :func:`run_process` runs a solver binary (CBC) in its own process group, which
  is killed on Ctrl-C, SIGTERM or SIGHUP (:mod:`pase.cleanup`), on any exception,
  or when it overruns the deadline. On Linux the child also gets SIGKILL if the
  Python process dies first.
"""
from __future__ import annotations

import signal
import subprocess
import threading
import time
from typing import Callable, TypeVar

from pase import cleanup
from pase.deadline import Deadline as CommandDeadline
from pase.errors import TimeLimitError

T = TypeVar("T")
# Seconds between looks at the clock while a backend runs.
POLL = 0.05
# A backend still running this long after the deadline is asked to stop...
STOP_SLACK = 0.25
# ...and abandoned (thread) or killed (process) if it has not stopped this much later.
ABANDON_AFTER = 1.0
# On Ctrl-C a backend thread gets this long to stop before the interrupt propagates
# (the whole process must be gone within 2 s of Ctrl-C).
INTERRUPT_GRACE = 0.5


class OutOfTime(TimeLimitError):
    """Raised inside a solve when the deadline passes while a model is being built."""


class Deadline(CommandDeadline):
    """A wall-clock deadline ``seconds`` from now (``None``: no limit) that a solve's
    watchdog can overrun by some slack; past it a model build raises :class:`OutOfTime`."""

    __slots__ = ()

    def overdue(self, slack: float = 0.0) -> bool:
        return self.at is not None and time.perf_counter() > self.at + slack

    def check(self, doing: str) -> None:
        """Raise :class:`OutOfTime` if the deadline has passed."""
        if self.overdue():
            raise OutOfTime(f"the time limit of {self.limit:g} s passed while {doing}")


def run_stoppable(run: Callable[[], T], stop: Callable[[], None],
                  deadline: Deadline) -> tuple[T | None, bool]:
    """``run()`` in a daemon thread under the watchdog; ``(its result, abandoned)``.

    ``stop`` must be safe to call from another thread (it asks ``run`` to return
    soon). An exception from ``run`` is re-raised here. On KeyboardInterrupt (or
    any exception in the waiting thread) the backend is asked to stop, given up
    to :data:`INTERRUPT_GRACE` seconds, and the exception propagates.
    """
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = run()
        except BaseException as err:  # handed to the waiting thread
            box["error"] = err

    worker = threading.Thread(target=target, name="pase-ilp-backend", daemon=True)
    worker.start()
    stopped_at = None
    try:
        while worker.is_alive():
            worker.join(POLL)
            if stopped_at is None and deadline.overdue(STOP_SLACK):
                stop()
                stopped_at = time.perf_counter()
            elif stopped_at is not None and time.perf_counter() - stopped_at > ABANDON_AFTER:
                return None, True
    except BaseException:
        stop()
        worker.join(INTERRUPT_GRACE)
        raise
    if "error" in box:
        raise box["error"]
    return box.get("value"), False


def run_process(args: list[str], deadline: Deadline, *, log_path: str,
                cwd: str | None = None) -> tuple[int | None, bool]:
    """Run ``args`` in a new process group; ``(return code or None if killed, stopped)``.

    Output goes to ``log_path``. Past the deadline the process gets SIGINT (a solver
    may then write its best answer) and SIGKILL :data:`ABANDON_AFTER` seconds later;
    ``stopped`` says the watchdog intervened. On KeyboardInterrupt or any other
    exception the whole group is killed and reaped before the exception propagates.
    """
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
                                preexec_fn=cleanup.die_with_parent())
    cleanup.register_group(proc.pid)  # killed by the command's final sweep if need be
    stopped_at = None
    try:
        while True:
            try:
                return proc.wait(POLL), stopped_at is not None
            except subprocess.TimeoutExpired:
                pass
            if stopped_at is None and deadline.overdue(STOP_SLACK):
                _signal_group(proc, signal.SIGINT)
                stopped_at = time.perf_counter()
            elif stopped_at is not None and time.perf_counter() - stopped_at > ABANDON_AFTER:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
                return None, True
    except BaseException:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        cleanup.forget_group(proc.pid)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    cleanup.kill_group(proc.pid, sig)


# Kept for callers of the old name.
_die_with_parent = cleanup.die_with_parent
