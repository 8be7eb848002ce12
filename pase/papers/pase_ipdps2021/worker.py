"""The child process of :mod:`.isolated`: solve one Problem, print one JSON line.

    python -m pase.papers.pase_ipdps2021.worker '{"model": "alexnet", "devices": 4,
        "solver": "ilp-highs", "time_limit": 5}'

prints status, cost, lower bound, gap, the solver's and the formulation's
seconds, and the peak resident memory of this process and its children.
Kept apart from :mod:`.isolated` so that running it with ``-m`` does not
re-import a module the package already imported.
"""
from __future__ import annotations

import json
import math
import sys
from typing import Any


def _solve(job: dict[str, Any]) -> dict[str, Any]:
    from pase.api import build_problem, run_solver
    from pase.errors import PaseError

    built = build_problem(job["model"], job["devices"], batch=job.get("batch"))
    try:
        sol = run_solver(job["solver"], built.problem, time_limit=job["time_limit"],
                         seed=job.get("seed"))
    except PaseError as exc:
        return {"status": "refused", "note": str(exc)[:300]}
    gap = sol.gap
    return {"status": str(sol.status), "peak_rss_gib": _peak_rss_gib(),
            "cost": None if sol.choice is None else float(sol.cost),
            "lower_bound": sol.lower_bound,
            "gap": None if gap is None or not math.isfinite(gap) else float(gap),
            "solve_seconds": sol.wall_time,
            "formulation_seconds": sol.stats.get("build_seconds")}


def _peak_rss_gib() -> float | None:
    """Largest resident set of this process or of a child it waited for (CBC's binary)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
              resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return kib / 2**20  # Linux reports KiB


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(_solve(json.loads(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
