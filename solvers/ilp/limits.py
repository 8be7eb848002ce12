"""Time limits and Ctrl-C for the ILP backends: a deadline, a stoppable thread, a child process.

A backend's own time limit is advisory: HiGHS and CP-SAT do not look at the clock
while they load or presolve a large model, and CBC only during branch and bound
(a 10 s limit took minutes on the Transformer at p = 16). So every backend runs
under a watchdog here:

* :func:`run_stoppable` runs a library call (CP-SAT) in a worker thread.
  The calling thread waits in short slices, so Ctrl-C (KeyboardInterrupt) reaches
  it at once; past the deadline, or on Ctrl-C, the backend is asked to stop, and a
  backend that has not stopped :data:`ABANDON_AFTER` seconds later is left to
  finish in its daemon thread (it dies with the process) while the caller goes on.
* :func:`run_forked` runs a library call (HiGHS) in a forked child process, which
  runs it under :func:`run_stoppable` and sends back what it found; the child is
  killed on Ctrl-C or when it overruns its own watchdog. A library call abandoned
  in a thread of *this* process must not still be running when Python shuts down:
  should it come back into Python then (HiGHS returning, or calling its interrupt
  callback), Python 3.11 ends its thread with ``pthread_exit``, whose unwinding
  through the library's C++ frames makes the C++ runtime call ``std::terminate``
  ("terminate called without an active exception", SIGABRT, exit 134). In a child,
  an abandoned call ends with the child's ``os._exit``.
* :func:`run_process` runs a solver binary (CBC) in its own process group, which
  is killed on Ctrl-C, SIGTERM or SIGHUP (:mod:`pase.cleanup`), on any exception,
  or when it overruns the deadline. On Linux the child also gets SIGKILL if the
  Python process dies first.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Callable, TypeVar

from pase import cleanup, forked
from pase.children import ChildDiedError
from pase.deadline import Deadline as CommandDeadline
from pase.errors import PaseError, TimeLimitError

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
# A forked child that has not answered this long after its own watchdog gave up
# (pickling and sending a solution takes well under 0.1 s) is killed.
CHILD_GRACE = 0.5


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


def can_fork() -> bool:
    """Whether :func:`run_forked` can run a call in a child process here (POSIX fork)."""
    return hasattr(os, "fork")


def run_forked(run: Callable[[], T], deadline: Deadline) -> tuple[T | None, bool]:
    """``run()`` in a forked child process; ``(its result, abandoned)``.

    ``run`` keeps its own time (it runs under :func:`run_stoppable` with ``deadline``
    in the child, which inherits this process's memory: nothing is copied in) and its
    result is pickled back. Here a thread waits for that answer, so Ctrl-C reaches the
    caller at once. The child is killed (SIGKILL) and reaped on KeyboardInterrupt or
    any other exception here, which then propagates, or when it has not answered
    :data:`CHILD_GRACE` seconds after its own watchdog would have abandoned ``run``:
    then ``(None, True)``. An exception raised by ``run`` is re-raised here; a child
    that dies without an answer raises :class:`~pase.children.ChildDiedError`.
    """
    def child() -> tuple[str, object]:  # in the child: every outcome goes back
        try:
            return "ok", run()
        except BaseException as err:  # noqa: BLE001 - re-raised in the parent
            return "raised", err

    proc = forked.Forked(child)
    lock = threading.Lock()
    state = {"killed": False, "finished": False}

    def kill() -> None:
        with lock:
            if state["killed"] or state["finished"]:
                return
            state["killed"] = True
            cleanup.kill_group(proc.pid, signal.SIGKILL)
            try:  # before its setsid the child leads no group yet
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def answer():  # in a thread of this process: reads the answer and reaps the child
        try:
            kind, value = proc.result()
        except PaseError as err:  # no answer (or none that could be sent back)
            if state["killed"]:
                return "killed", None
            raise ChildDiedError(str(err)) from None  # the machine failed: exit 1
        finally:
            with lock:
                state["finished"] = True
        return kind, value

    # The child's watchdog asks ``run`` to stop at the deadline + STOP_SLACK and gives
    # up on it ABANDON_AFTER later; it is killed if it has not answered soon after.
    waited = Deadline(None if deadline.limit is None
                      else deadline.limit + ABANDON_AFTER + CHILD_GRACE, start=deadline.start)
    try:
        got, gave_up = run_stoppable(answer, kill, waited)
    except BaseException:
        kill()  # (run_stoppable's stop() already did, unless it failed before)
        proc.cancel()  # kills and reaps it if no thread ever started reading its answer
        raise
    if gave_up or got[0] == "killed":
        kill()
        return None, True
    kind, value = got
    if kind == "raised":
        raise value
    return value, False


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
