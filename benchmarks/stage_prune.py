"""How long does the first stage of GPT-3 175B's pipeline search take to solve, by the
dominance pruning's row tables?

    python benchmarks/stage_prune.py

The pipeline search's first stage is the whole model on all 1,024 H100s at one
micro-batch (global batch 1,536). Its free solve (no memory cap, tail weight 1) folds
the 96 layers and prunes dominated configs of the reduced Problem, whose tables compare
up to 2,855 classes of rows pair by pair (`solvers/dp/prune.py`, `_row_le`). This script
builds the stage once, solves it once to warm the caches both runs share (the layers'
config classes, digests and transposes), then twice more, the tables emptied before each:
first with the previous row table (two screens, then every pair left compared on all its
columns in floats, with no limit on the work: kept below as the baseline), then with the
current one (one screen, then the pairs compared 32 columns at a time on dense ranks,
abandoned past the pruning's work limit). It prints CPU seconds, their ratio, the
configs the pruning dropped and both optima (which must be equal).
"""
from __future__ import annotations

import time
from unittest import mock

import numpy as np
from provenance import stamp

from pase.cluster import get_cluster
from pase.pipeline.solve import _loader, memory_cap_of, with_defaults
from pase.pipeline.stages import StageOracle
from pase.solvers.dp import prune

SCREEN = 32
CHUNK = 2**22


def previous_row_le(rows: np.ndarray, work_limit: float = np.inf) -> np.ndarray:
    """The row table as it was (two screens, the pairs left compared in full)."""
    s, cols = rows.shape
    g = min(cols, SCREEN)
    parts = np.pad(rows, ((0, 0), (0, -cols % g))).reshape(s, -1, g).sum(axis=1)
    low = np.argpartition(rows, g - 1, axis=1)[:, :g] if g < cols else np.tile(np.arange(cols), (s, 1))
    at = np.take_along_axis(rows, low, axis=1)
    maybe = np.empty((s, s), dtype=bool)
    step = max(1, CHUNK // max(1, s * g))
    for b in range(0, s, step):
        maybe[:, b:b + step] = (parts[:, None, :] <= parts[None, b:b + step, :]).all(axis=2)
    i, j = np.nonzero(maybe)
    maybe[i, j] = (rows[i[:, None], low[j]] <= at[j]).all(axis=1)
    i, j = np.nonzero(maybe)
    pairs = max(1, CHUNK // cols)
    for c in range(0, i.size, pairs):
        ii, jj = i[c:c + pairs], j[c:c + pairs]
        maybe[ii, jj] = (rows[ii] <= rows[jj]).all(axis=1)
    return maybe


def main() -> None:
    print(stamp())
    full, load = _loader("gpt3-175b", 1536, {})
    cluster = get_cluster("h100-sxm", 1024)
    costs = with_defaults({"cluster": "h100-sxm", "zero": "auto", "recompute": "auto"},
                          "calibrated", cluster)
    oracle = StageOracle(load, full, costs, memory_cap_of("80GiB", cluster),
                         {"cutoff": None, "powers_of_two": True}, cost_model="calibrated",
                         devices=1024)
    n = len(oracle.graph(1).ops)
    lay = oracle.layered(1024, 1)
    print(f"gpt3-175b, one stage of {n} ops on 1024 h100-sxm, m = 1: up to "
          f"{max(len(c) for c in lay.problem.vertex_costs)} candidates an op\n")
    oracle._free(((0, n),), 1024, 1, 1.0)  # warms every cache but the tables, for both runs
    runs = {}
    pruned = prune.prune_dominated
    for name, table in (("previous", previous_row_le), ("current", prune._row_le)):
        prune._TABLES.clear()
        oracle._stages.clear()
        dropped = []

        def counted(problem, dropped=dropped, **kw):
            out = pruned(problem, **kw)
            dropped.append(out.dropped)
            return out

        with mock.patch.object(prune, "_row_le", table), \
                mock.patch.object(prune, "prune_dominated", counted):
            start = time.process_time()
            result = oracle._free(((0, n),), 1024, 1, 1.0)
            runs[name] = (time.process_time() - start, result.seconds, sum(dropped))
    print("| row table | CPU s | ratio | configs dropped | stage seconds |")
    print("|---|---|---|---|---|")
    base = runs["previous"][0]
    for name, (cpu, seconds, dropped) in runs.items():
        print(f"| {name} | {cpu:.1f} | {cpu / base:.3f} | {dropped} | {seconds!r} |")
    print(f"\nsame optimum: {runs['previous'][1] == runs['current'][1]}")


if __name__ == "__main__":
    main()
