"""The ``pase`` command. Mirrors the Python API; ``--format json`` output is stable.

Exit statuses, each failure one line on stderr:

- 0: done (an infeasible answer is an answer: its status says so);
- 2: bad input (``pase: error: ...`` saying what is wrong and what is allowed),
  including usage errors, which add a line pointing at ``--help``;
- 1: an internal error, i.e. a bug in pase or in a plug-in (``pase: error:
  internal error: TYPE: message; rerun with --debug for the traceback``).
  It differs from 2 so scripts and bug reports can tell "fix your input"
  from "pase failed". A child process killed by a signal or out of memory (a JAX
  compile under ``ulimit -v``) also exits 1, its line naming the signal and any limit.
- 130: interrupted (Ctrl-C), 143: terminated (SIGTERM: ``kill``, ``timeout``, a batch
  scheduler), 129: hung up (SIGHUP). Each ends the command's child processes and removes
  its temporary folders first (:mod:`pase.cleanup`), as a normal exit and an error do.

Warnings from dependencies (Dask's ports, numpy) and torch's log records (a failed
export's traceback) are not shown unless ``--debug``.

Output the reader no longer wants (``pase solve ... | head``) is not an error; a reader that
leaves stderr (its progress) does not stop the work or its ``--output`` file.
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import traceback
import warnings
from pathlib import Path
from typing import Iterator, Sequence

from pase import cleanup
from pase.children import ChildDiedError
from pase.claims import ClaimError
from pase.errors import InternalError, PaseError

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pase`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    restore = cleanup.install()
    stderr, sys.stderr = sys.stderr, _Report(sys.stderr)
    try:
        with _quiet(not debug):
            return _main(argv, debug)
    except KeyboardInterrupt as exc:  # a signal while an error was being reported
        return cleanup.exit_status(exc)
    finally:
        try:  # a signal here is held off once the final sweep starts; it still runs
            cleanup.finish(descendants=argv is None)
        except KeyboardInterrupt:
            cleanup.finish(descendants=argv is None)
        restore()
        sys.stderr = stderr
        if argv is None and "torch" in sys.modules:  # `pase ...`: the process ends now
            # Python's shutdown collects cycles over every object torch made, about 1.9 CPU
            # s on a 2-core machine; frozen, it only frees them (atexit handlers still run).
            gc.freeze()


def _main(argv: Sequence[str] | None, debug: bool) -> int:
    try:
        return _run(argv)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (cleanup.Terminated)
        _say(str(exc) if isinstance(exc, cleanup.Terminated) else "interrupted")
        return cleanup.exit_status(exc)
    except BrokenPipeError:  # the reader left, not an error; silence the final flush
        sys.stdout = open(os.devnull, "w")
        return EXIT_OK
    except (ClaimError, InternalError) as exc:  # a solver contradicted its Problem, or pase
        # broke an invariant of its own: a bug, not bad input
        return _fail(str(exc), EXIT_INTERNAL, debug)
    except ChildDiedError as exc:  # the machine failed (memory, a kill), not the input
        return _fail(str(exc), EXIT_INTERNAL, debug)
    except PaseError as exc:
        return _fail(str(exc), EXIT_BAD_INPUT, debug)
    except OSError as exc:  # the file system refused (a full disk, a vanished folder...)
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(f"{where}{exc.strerror or exc}", EXIT_BAD_INPUT, debug)
    except Exception as exc:  # a bug: one line, the traceback only on request
        hint = "" if debug else "; rerun with --debug for the traceback"
        return _fail(f"internal error: {type(exc).__name__}: {_one_line(str(exc))}{hint}",
                     EXIT_INTERNAL, debug)


def _fail(message: str, code: int, debug: bool) -> int:
    """One line on stderr (after the traceback, with --debug); returns the exit status."""
    if debug:
        traceback.print_exc()
    _say(f"error: {_one_line(message)}")
    return code


def _run(argv: Sequence[str] | None) -> int:
    from pase.cli import (
        comparing,
        exporting,
        importing,
        listings,
        replanning,
        simulating,
        solving,
        sweeping,
        viewing,
    )
    from pase.cli.parser import build

    parser = build({"models": listings.cmd_models, "solvers": listings.cmd_solvers,
                    "cost-models": listings.cmd_cost_models, "clusters": listings.cmd_clusters,
                    "inspect": solving.cmd_inspect, "solve": solving.cmd_solve,
                    "compare": comparing.cmd_compare, "evaluate": solving.cmd_evaluate,
                    "simulate": simulating.cmd_simulate, "reproduce": simulating.cmd_reproduce,
                    "export": exporting.cmd_export, "verify": exporting.cmd_verify,
                    "import": importing.cmd_import, "sweep": sweeping.cmd_sweep,
                    "report": sweeping.cmd_report, "replan": replanning.cmd_replan,
                    "view": viewing.cmd_view})
    try:
        args = parser.parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # `pase view` shows it
        if not getattr(args, "command", None):
            parser.error("a command is required: models, solvers, cost-models, clusters, inspect, "
                         "solve, compare, evaluate, simulate, reproduce, export, verify, import, "
                         "sweep, report, replan, view")
    except SystemExit as exc:  # --help (0) or a usage error, already printed on one line
        return EXIT_OK if exc.code is None else exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    from pase.cli.checks import outputs_spare_inputs

    outputs_spare_inputs(args)
    from pase.frontends import cache  # FILE.py:FUNCTION models: graphs kept on disk
    from pase.frontends.torch_logs import quiet_logs

    # torch logs a failed export's traceback before pase says it in one line: every
    # command that can import a FILE.py:FUNCTION model keeps it for --debug
    with cache.enabled(not getattr(args, "no_cache", False)), \
            quiet_logs(not getattr(args, "debug", False)):
        return args.run(args) or EXIT_OK


# pase's own source folders: a warning raised from code under them is pase's and shown.
_OURS = tuple(str(Path(__file__).resolve().parents[2] / name) + os.sep
              for name in ("pase", "solvers", "cost_models", "graphs"))


@contextlib.contextmanager
def _quiet(on: bool) -> Iterator[None]:
    """Hide the warnings of dependencies (Dask's "Port 8787 is already in use", numpy's)
    here and, through PYTHONWARNINGS, in every child (Dask workers, runs, JAX compiles);
    pase's own warnings still show."""
    if not on:
        yield
        return
    shown = warnings.showwarning
    had = os.environ.get("PYTHONWARNINGS")

    def show(message, category, filename, lineno, file=None, line=None):
        # numpy's floating-point warnings name the pase line that called numpy
        if os.path.abspath(filename).startswith(_OURS) and " encountered in " not in str(message):
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    if had is None:
        os.environ["PYTHONWARNINGS"] = "ignore"
    try:
        yield
    finally:
        warnings.showwarning = shown
        if had is None:
            os.environ.pop("PYTHONWARNINGS", None)


class _Report:
    """stderr that stops reporting once its reader has left (`pase solve ... 2>&1 | head
    -1`): progress is not the answer, so the work goes on and writes its --output (a
    pipeline search stopped at its first progress line, exit 0, its file never written)."""

    def __init__(self, stream):
        self._stream, self._gone = stream, False

    def write(self, text: str) -> int:
        self._try(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._try(self._stream.flush)

    def _try(self, call, *args) -> None:
        if not self._gone:
            try:
                call(*args)
            except BrokenPipeError:
                self._gone = True

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "(no message)"


def _say(message: str) -> None:
    print(f"pase: {message}", file=sys.stderr, flush=True)


__all__ = ["main"]
