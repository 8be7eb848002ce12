"""One function run in a forked child process while the caller goes on: two cores, one answer.

:class:`Forked` forks; the child (a process group of its own, killed with its parent on
Linux) runs the function on the memory it was forked with (no copy of a Problem is sent)
and pickles its result, or the exception it raised, down a pipe. :meth:`Forked.result`
reads it back; :meth:`Forked.cancel` kills the child when its answer is not needed.
:func:`available` says whether forking can help here: a POSIX fork and two usable CPUs;
:func:`spare` marks a block of code during which the second CPU is free.

The child's memory is the parent's pages until either writes them (copy on write), but
each process's resident set counts the shared pages, so two processes report up to
twice what one does.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import pickle
import signal
from typing import Any, Callable, Generic, Iterator, TypeVar

from pase import cleanup
from pase.errors import PaseError

__all__ = ["Forked", "available", "has_spare", "spare"]

T = TypeVar("T")

# Whether the code below may fork to use a CPU that nothing else of this command uses.
_SPARE: contextvars.ContextVar[bool] = contextvars.ContextVar("pase_spare_cpu", default=False)


@contextlib.contextmanager
def spare() -> Iterator[None]:
    """Inside the block a second CPU is free for this command's work (when
    :func:`available`): a dp step may split its rows with a forked child."""
    token = _SPARE.set(available())
    try:
        yield
    finally:
        _SPARE.reset(token)


def has_spare() -> bool:
    """Whether a :func:`spare` block is open here (never in a forked child)."""
    return _SPARE.get()


def available() -> bool:
    """A fork and at least two CPUs this process may run on."""
    if not hasattr(os, "fork"):
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return cpus >= 2


class Forked(Generic[T]):
    """``fn()`` computed in a forked child; :meth:`result` waits for it."""

    def __init__(self, fn: Callable[[], T]):
        preexec = cleanup.die_with_parent()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read)
            _child(fn, write, preexec)
        os.close(write)
        self.pid, self.fd, self.done = pid, read, False
        cleanup.register_group(pid)  # a command's final sweep kills it if need be

    def result(self) -> T:
        """The child's return value; its exception raised here. Once only."""
        if self.done:
            raise PaseError("a forked result was read twice")
        self.done = True
        chunks = []
        with os.fdopen(self.fd, "rb") as pipe:
            while chunk := pipe.read(1 << 20):
                chunks.append(chunk)
        self._reap()
        if not chunks:
            raise PaseError("a forked solve ended without an answer (killed, or out of memory?)")
        kind, value = pickle.loads(b"".join(chunks))
        if kind == "error":
            raise value
        return value

    def cancel(self) -> None:
        """Kill the child (its answer is not needed) and reap it; nothing once its result
        was read or it was cancelled."""
        if self.done:
            return
        self.done = True
        cleanup.kill_group(self.pid, signal.SIGKILL)
        try:  # before its setsid the child leads no group yet
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass
        self._reap()

    def _reap(self) -> None:
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        cleanup.forget_group(self.pid)


def _child(fn: Callable[[], Any], write: int, preexec: Callable[[], None] | None) -> None:
    """Run ``fn`` and send ``("ok", value)`` or ``("error", exception)``; exit at once (no
    atexit handlers, no flushing of the parent's buffered output)."""
    status = 0
    try:
        _SPARE.set(False)  # a child forks no more children
        os.setsid()  # its own group: Ctrl-C reaches the parent, which cancels it
        if preexec is not None:
            preexec()
        try:
            message: tuple[str, Any] = ("ok", fn())
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            message = ("error", exc)
        try:
            data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - an unpicklable answer or exception
            data = pickle.dumps(("error", PaseError(f"a forked solve's answer could not be "
                                                    f"sent back: {exc}")))
        view = memoryview(data)
        while view:
            view = view[os.write(write, view):]
    except BaseException:  # noqa: BLE001 - nothing may escape into the parent's code
        status = 1
    finally:
        os._exit(status)
