"""One ending for every way a command ends: temporary folders and child process groups.

The places that make a temporary folder (:func:`temp_dir`) or start a child
process (:func:`register_group`, :func:`die_with_parent`) record it here, and
each removes its own on the way out, normally or by an exception. ``pase``'s
``main`` adds what an exception cannot guarantee:

- :func:`install` turns SIGTERM and SIGHUP into :class:`Terminated`, a
  KeyboardInterrupt, so they unwind the stack as Ctrl-C does (every ``finally``
  and ``with`` runs); without it Python dies at once on SIGTERM and leaves
  CBC's model files and a JAX compile child behind. A signal the caller
  ignores (``nohup``) stays ignored;
- :func:`finish` then kills whatever group is still recorded, any descendant
  still alive (``pase`` as a process only), and removes the recorded folders, a
  signal arriving meanwhile being held off so the cleanup itself is not cut short.

Exit statuses follow the shell's 128 + signal: SIGINT 130, SIGTERM 143, SIGHUP 129.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Callable, Iterator

# The signals a command cleans up on, besides SIGINT (Python's KeyboardInterrupt).
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
# Seconds to wait for killed descendants to go before their folders are removed.
REAP_WAIT = 2.0

_lock = threading.Lock()
_dirs: dict[str, None] = {}  # insertion-ordered set of folders to remove
_groups: dict[int, None] = {}  # process groups (their leaders' pids) to kill
_state = {"finishing": False, "pending": None}


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: unwind like Ctrl-C, exit ``128 + signum``."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"terminated by {signal.Signals(signum).name}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def exit_status(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 128 + the signal for :class:`Terminated`."""
    return getattr(exc, "exit_status", 128 + int(signal.SIGINT))


# -- temporary folders ------------------------------------------------------------

@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[str]:
    """A fresh temporary folder (``prefix`` + random), removed on the way out however it
    ends; recorded meanwhile so :func:`finish` removes it if the unwinding was cut short."""
    path = tempfile.mkdtemp(prefix=prefix)
    with _lock:
        _dirs[path] = None
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        with _lock:
            _dirs.pop(path, None)


# -- child process groups -----------------------------------------------------------

def register_group(pid: int) -> None:
    """Record a child that leads its own process group (``start_new_session=True``)."""
    with _lock:
        _groups[pid] = None


def forget_group(pid: int) -> None:
    with _lock:
        _groups.pop(pid, None)


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the group ``pid`` leads; a group already gone is fine."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when its parent dies.

    The libc function is looked up here, before the fork, so the child only makes
    one foreign call. None on other systems (the child is then ended only by the
    handlers of its parent).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    kill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, kill)

    return preexec


# -- signals and the final sweep -------------------------------------------------------

def _raise(signum: int, frame: object) -> None:
    if _state["finishing"]:  # cleaning up already: finish first, the status is decided
        _state["pending"] = signum
        return
    raise Terminated(signum)


def install() -> Callable[[], None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` (in the main thread only; elsewhere
    nothing changes); returns the function that puts the previous handlers back."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, _raise)
    _state.update(finishing=False, pending=None)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def finish(descendants: bool = False) -> None:
    """End every recorded group and remove every recorded folder; with ``descendants``
    (the command is the whole process) also kill any child process still alive."""
    _state["finishing"] = True
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _raise) if main else None
    try:
        with _lock:
            groups, dirs = list(_groups), list(_dirs)
            _groups.clear()
        for pid in groups:
            kill_group(pid)
        left = _descendants(os.getpid()) if descendants else []
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap(groups + left)
        for path in dirs:
            shutil.rmtree(path, ignore_errors=True)
        with _lock:
            for path in dirs:
                _dirs.pop(path, None)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
        _state["finishing"] = False


def _reap(pids: list[int]) -> None:
    """Wait, briefly, for the killed processes to go (a zombie has: its files are closed),
    so nothing writes into a folder after it is removed. Not reaped here: a Popen that
    still owns one reads its status itself."""
    deadline = time.monotonic() + REAP_WAIT
    waiting = set(pids)
    while waiting and time.monotonic() < deadline:
        waiting = {pid for pid in waiting if _exists(pid)}
        if waiting:
            time.sleep(0.02)


def _exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _descendants(root: int) -> list[int]:
    """Every live process below ``root`` (Linux: from /proc; elsewhere none)."""
    if not os.path.isdir("/proc"):
        return []
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, frontier = [], [root]
    while frontier:
        for child in parents.get(frontier.pop(), []):
            if child not in found:
                found.append(child)
                frontier.append(child)
    return found
