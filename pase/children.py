"""How a child process pase started (a JAX compile, a sweep run) ended, in words.

A child killed by a signal failed because of its environment (memory, an operator's
``kill``), not because of what the user asked: the command says so and exits 1
(:class:`ChildDiedError`), never 2, which means "fix your input".
"""
from __future__ import annotations

import signal

from pase.errors import PaseError

# What a process that ran out of address space writes on its way out (lower case):
# Python, C++ backends, the dynamic loader, OpenBLAS, the C library (a thread's
# stack or thread-local data).
OUT_OF_MEMORY = ("memoryerror", "std::bad_alloc", "cannot allocate memory",
                 "failed to map segment", "memory allocation still failed", "out of memory")

# Signals a process gets, or raises itself, when an allocation fails: SIGKILL from the
# kernel's OOM killer, SIGABRT from a C++ runtime that could not allocate (XLA under
# ``ulimit -v``), SIGSEGV and SIGBUS from a stack or mapping that could not grow.
_MEMORY_SIGNALS = ("SIGKILL", "SIGABRT", "SIGSEGV", "SIGBUS")


class ChildDiedError(PaseError, RuntimeError):
    """A child process died of a signal or ran out of memory: the environment failed,
    not the input. ``pase`` reports it in one line and exits 1."""


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def address_space_limit() -> str:
    """``" The address space is limited to 6.0 GiB (ulimit -v)."`` when it is, else ``""``."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return ""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return ""
    return f" The address space is limited to {soft / 2**30:.1f} GiB (ulimit -v)."


def killed_by(returncode: int) -> str | None:
    """``"killed by SIGABRT; out of memory?"`` for a child a signal ended (a negative
    ``returncode``, as :mod:`subprocess` gives it), else None."""
    if returncode >= 0:
        return None
    name = signal_name(-returncode)
    hint = "; out of memory?" if name in _MEMORY_SIGNALS else ""
    return f"killed by {name}{hint}"


def out_of_memory(stderr: str) -> bool:
    """Whether a child's stderr says an allocation failed."""
    text = stderr.lower()
    return any(sign in text for sign in OUT_OF_MEMORY)


def check_child(what: str, returncode: int, stderr: str) -> None:
    """Raise :class:`ChildDiedError` naming ``what`` ("the JAX compile") when the child was
    killed by a signal or ran out of memory; other failures are the caller's to report."""
    death = killed_by(returncode)
    if death is not None:
        how = f"was {death}"
    elif returncode != 0 and out_of_memory(stderr):
        how = f"ran out of memory (exit {returncode})"
    else:
        return
    last = (stderr.strip().splitlines() or [""])[-1].strip()
    tail = f" Its last line: {last[:200]}" if last else ""
    raise ChildDiedError(f"{what} (child process) {how}{address_space_limit()}{tail}")
