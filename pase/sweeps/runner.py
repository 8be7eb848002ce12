"""Run one grid point in a child process under its time and memory limits.

This is the function a Dask worker executes (:func:`run_point`). The child
(:mod:`pase.sweeps.child`) gets:

- ``RLIMIT_AS`` = the run's ``memory_limit`` (its address space, inherited by a
  backend binary such as CBC), so an allocation past it fails with MemoryError
  and the run is recorded as ``out_of_memory``;
- a session of its own, killed as a group (backend binaries too) once the
  wall-clock limit (``kill_after``) passes: status ``time_limit``;
- on Linux, death with its parent (``PR_SET_PDEATHSIG``), so a sweep whose
  worker is killed leaves no run behind;
- ``threads`` BLAS threads (``OMP_NUM_THREADS`` and the like);
- a ``TMPDIR`` of its own (under the worker's, which a local sweep points at its
  pase-sweep folder), removed once the child and its group are gone: a run killed
  mid-solve leaves no ``pase-cbc-*`` folder behind.
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from pase.children import OUT_OF_MEMORY, killed_by

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS")
# The child's first lines, before numpy or pase is imported: the memory limit, death
# with the parent (Linux prctl PR_SET_PDEATHSIG = 1), then the run. Set here rather
# than in a preexec_fn, which is unsafe in a threaded process such as a Dask worker.
BOOT = """\
import resource, signal, sys
limit = {limit}
if limit is not None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
if sys.platform.startswith("linux"):
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
    except OSError:
        pass
from pase.sweeps.child import main
sys.exit(main())
"""


def run_point(job: dict[str, Any]) -> dict[str, Any]:
    """The store row of one run: the job's axis values and run settings, and its result."""
    start = time.perf_counter()
    result = _run_child(job)
    result["wall_seconds"] = time.perf_counter() - start
    result["finished_at"] = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    result.pop("child_seconds", None)
    return {**job, **result}


def _run_child(job: dict[str, Any]) -> dict[str, Any]:
    memory_limit = job.get("memory_limit")
    wall = job.get("wall_limit")
    env = dict(os.environ)
    for name in THREAD_VARIABLES:
        env[name] = str(job.get("threads") or 1)
    limit = "None" if memory_limit is None else str(int(memory_limit))
    # Read TMPDIR now: tempfile caches its folder before Dask sets the worker's environment.
    env["TMPDIR"] = tempfile.mkdtemp(prefix="pase-run-", dir=os.environ.get("TMPDIR") or None)
    try:
        return _watch(job, env, limit, wall)
    finally:
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)


def _watch(job: dict[str, Any], env: dict[str, str], limit: str,
           wall: float | None) -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-c", BOOT.format(limit=limit)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(json.dumps(job), timeout=wall)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        return {"status": "time_limit",
                "error": f"killed after {wall:g} s of wall time (time limit "
                         f"{job.get('time_limit')} s)"}
    except BaseException:  # Ctrl-C, a worker shutting down: the child goes with us
        _kill_group(proc)
        proc.wait()  # gone before its TMPDIR is removed
        raise
    lines = out.strip().splitlines()
    if proc.returncode == 0 and lines:
        try:
            return json.loads(lines[-1])
        except json.JSONDecodeError:
            pass
    last = (err.strip().splitlines() or [""])[-1]
    if any(sign in err.lower() for sign in OUT_OF_MEMORY):
        return {"status": "out_of_memory", "error": f"over the memory limit: {last}"[:500]}
    if proc.returncode == -signal.SIGKILL:
        return {"status": "out_of_memory",
                "error": "killed by the system (SIGKILL), most likely for memory"}
    why = f"was {killed_by(proc.returncode)}" if proc.returncode < 0 else \
        f"ended with exit {proc.returncode}"
    return {"status": "error", "error": f"the run's process {why}: {last}"[:500]}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the session the child leads
    except (ProcessLookupError, PermissionError):
        pass
