"""One run of a sweep, in its own process: build the Problem, solve, print one JSON line.

    echo '{"model": "alexnet", "devices": 4, "solver": "dp", ...}' | python -m pase.sweeps.child

The parent (:mod:`pase.sweeps.runner`) has already bounded this process's
address space (``RLIMIT_AS``) and kills it past its wall-clock limit; here a
MemoryError becomes status ``out_of_memory``, a solver's own time limit status
``time_limit``, a refusal (a PaseError such as a build over budget) ``refused``,
a missing backend ``unavailable`` and anything else ``error``.
"""
from __future__ import annotations

import errno
import json
import socket
import sys
import time
from typing import Any


def solve(job: dict[str, Any]) -> dict[str, Any]:
    """The run's result columns (see :data:`pase.sweeps.store.COLUMNS`)."""
    from pase.api import build_problem, run_solver, to_strategy
    from pase.claims import ClaimError
    from pase.errors import PaseError, SolverUnavailableError, TimeLimitError

    out: dict[str, Any] = {"host": socket.gethostname()}
    try:
        built = build_problem(job["model"], job["devices"], job["cost_model"],
                              batch=job.get("batch"), cluster=job.get("cluster"),
                              memory_cap=job.get("memory_cap"),
                              model_options=job.get("model_options") or None,
                              cost_options=job.get("cost_options") or None,
                              build_budget=job.get("build_budget"))
        out["build_seconds"] = built.seconds
        out["unit"] = built.problem.unit
        best = None
        for _ in range(max(1, int(job.get("repeats") or 1))):
            sol = run_solver(job["solver"], built.problem, time_limit=job.get("time_limit"),
                             seed=job.get("seed"), **(job.get("solver_options") or {}))
            if best is None or sol.wall_time < best.wall_time:
                best = sol
        assert best is not None
        strategy = to_strategy(built, best).to_dict()
    except MemoryError:
        return {**out, "status": "out_of_memory", "error": "MemoryError: over the run's memory limit"}
    except TimeLimitError as exc:
        return {**out, "status": "time_limit", "error": _line(exc)}
    except SolverUnavailableError as exc:
        return {**out, "status": "unavailable", "error": _line(exc)}
    except ClaimError as exc:
        return {**out, "status": "error", "error": _line(exc)}
    except PaseError as exc:
        return {**out, "status": "refused", "error": _line(exc)}
    except OSError as exc:  # after TimeLimitError, a TimeoutError
        if exc.errno != errno.ENOMEM:
            return {**out, "status": "error", "error": f"{type(exc).__name__}: {_line(exc)}"}
        return {**out, "status": "out_of_memory", "error": f"over the run's memory limit: {_line(exc)}"}
    except Exception as exc:  # a crashing solver is a row saying so; the sweep goes on
        return {**out, "status": "error", "error": f"{type(exc).__name__}: {_line(exc)}"}
    out.update(status=strategy["status"], cost=strategy["total_cost"],
               compute_cost=strategy["compute_cost"],
               communication_cost=strategy["communication_cost"],
               lower_bound=strategy["lower_bound"], gap=strategy["gap"],
               solve_seconds=strategy["solve_seconds"], strategy=strategy["strategy"],
               stats=strategy["stats"], memory_bytes=strategy.get("memory_bytes"))
    return out


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


def peak_memory_bytes() -> float | None:
    """Largest resident set of this process or of a child it waited for (CBC's binary)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
              resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return float(kib) * 1024  # Linux reports KiB


def main() -> int:
    job = json.loads(sys.stdin.read())
    start = time.perf_counter()
    try:
        result = solve(job)
    except MemoryError:  # while importing or reporting
        result = {"status": "out_of_memory", "error": "MemoryError: over the run's memory limit"}
    result["peak_memory_bytes"] = peak_memory_bytes()
    result["child_seconds"] = time.perf_counter() - start
    sys.stdout.write(json.dumps(result, allow_nan=False) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
