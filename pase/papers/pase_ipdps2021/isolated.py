"""Run one solver in a child process with a hard wall-clock cap.

Time-limited ILP backends can overrun their limit by minutes while building a
large model (PuLP writes every column through Python objects before CBC's clock
starts), and a large ILP can exhaust memory. A child process keeps both from
taking the reproduction down: it is killed, with its whole process group (the
CBC binary included), once ``hard_timeout`` seconds have passed.

The child is :mod:`.worker`; it prints one JSON line: status, cost, lower
bound, gap, the solver's wall time and its peak memory.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

WORKER = "pase.papers.pase_ipdps2021.worker"


def run(model: str, devices: int, solver: str, *, time_limit: float, hard_timeout: float,
        seed: int = 0, batch: int | None = None) -> dict[str, Any]:
    """The solver's answer as a dict; ``status`` is ``killed`` or ``error`` when there is none."""
    job = {"model": model, "devices": devices, "solver": solver, "time_limit": time_limit,
           "seed": seed, "batch": batch}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", WORKER, json.dumps(job)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=hard_timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        return {"status": "killed", "wall_seconds": time.perf_counter() - start,
                "note": f"still running after the hard cap of {hard_timeout:g} s "
                        f"(time limit {time_limit:g} s not honoured); process group killed"}
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        last = (err.strip().splitlines() or [""])[-1]
        why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        if proc.returncode == -signal.SIGKILL:
            why += " (killed by the system: out of memory?)"
        return {"status": "error", "wall_seconds": wall, "note": f"{why}: {last}"[:300]}
    result = json.loads(out.strip().splitlines()[-1])
    result["wall_seconds"] = wall
    return result


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group we created with start_new_session
    except ProcessLookupError:
        pass
