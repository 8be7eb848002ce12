"""What ``auto`` would do, from the graph's shape alone (``pase solve --dry-run``).

The dp's own dry run decides it: ``auto`` takes the dp when the dp's chosen plan (or,
with repeated blocks, the folded one) fits the memory budget. Otherwise it predicts
the decomposition's relaxed Problem, picked as the solver picks it but with every
edge weighing the same (the weights need costs): its kept and dropped edges, the
seconds of one dual step, and the range from one step (a relaxed optimum that proves
itself at once, as on most dense graphs measured) to every step allowed. Where
``auto`` would first probe the decomposition (:mod:`~pase.solvers.auto.probe`), the
dp entry says so and predicts the probe's seconds: whether the probe proves the
optimum cannot be known without its costs; a narrow plan (a chain of layers, which the dp
folds) gets no probe. Under a memory cap (``capped``) the probe's optimum counts only when
it fits, and the dp's estimate counts one folded solve: the uncapped optimum,
which is the answer when it fits; a cap that binds takes one folded solve per
Lagrange multiplier (typically 5-12), which only the costs can tell.
"""
from __future__ import annotations

from typing import Any

from pase.solvers.auto import probe
from pase.solvers.auto.split import kept_edges
from pase.solvers.dp.core import dry_run as dp_dry_run
from pase.solvers.dp.core import plan_seconds
from pase.solvers.dp.plan import DEFAULT_MEMORY_BUDGET, finite

# Entries of the dropped edges' matrices reduced per second in a dual step (a
# subtraction, an argmin and a gather each), and seconds of planning per edge;
# fitted on densenet121 at p = 64 (benchmarks/results/scale.md, dense graphs).
DROPPED_ENTRIES_PER_SECOND = 1.5e8
SPLIT_SECONDS_PER_EDGE = 4e-4


def dry_run(shape: Any, *, memory_budget: float = DEFAULT_MEMORY_BUDGET, capped: bool = False,
            relaxed_entries: float, steps: int, rounds: int) -> dict[str, Any]:
    """The dp's dry run with an ``auto`` entry: the method, why, and its predicted work."""
    report = dp_dry_run(shape, memory_budget=memory_budget)
    best = next(r for r in report["orderings"] if r["ordering"] == report["auto_ordering"])
    reduced = report.get("blocks", {}).get("reduced")
    if best["within_memory_budget"] or (reduced and reduced["within_memory_budget"]):
        why = "the dp's plan fits the memory budget" if best["within_memory_budget"] else \
            "the dp's plan with repeated blocks folded fits the memory budget"
        report["auto"] = {"method": "dp", "why": why,
                          "estimated_seconds": report["estimated_seconds"]}
        plain = best["estimated_seconds"]
        if capped:
            report["auto"]["note"] = ("under the memory cap the probe's optimum is kept only "
                                      "when it fits the cap; a cap that binds takes one folded "
                                      "solve per Lagrange multiplier")
        wide = best["max_dependent_set"] >= probe.MIN_WIDTH
        if best["within_memory_budget"] and plain >= probe.MIN_DP_SECONDS and wide:
            relaxed = _relaxed(shape, relaxed_entries, memory_budget)
            if relaxed["plan_seconds"] <= probe.MAX_SHARE * plain:
                split, step = relaxed["split_seconds"], relaxed["seconds_per_step"]
                report["auto"]["probe"] = {
                    "steps": probe.STEPS, "estimated_seconds": finite(split + step),
                    "estimated_seconds_at_most": finite(split + probe.STEPS * step),
                    "note": "a short decomposition runs first; when it proves the optimum "
                            "(often at its first step) it is the answer and the dp does not "
                            "run; otherwise the dp runs after all its steps"}
        return report
    relaxed = _relaxed(shape, relaxed_entries, memory_budget)
    step, split = relaxed["seconds_per_step"], relaxed["split_seconds"]
    report["auto"] = {
        "method": "decompose",
        "why": f"the dp's plan needs {best['peak_table_bytes'] / 2**30:.3g} GiB of tables, over "
               f"the {memory_budget / 2**30:.3g} GiB budget",
        "kept_edges": relaxed["kept_edges"], "dropped_edges": relaxed["dropped_edges"],
        "relaxed_table_entries": relaxed["table_entries"],
        "dropped_entries": relaxed["dropped_entries"],
        "seconds_per_step": step, "steps_at_most": steps * rounds,
        "estimated_seconds": finite(split + step),
        "estimated_seconds_at_most": finite(rounds * split + steps * rounds * step)}
    return report


def _relaxed(shape: Any, entries: float, budget: float) -> dict[str, Any]:
    """The relaxed Problem's size and the predicted seconds of one dual step."""
    kept, plan = kept_edges(shape, [1.0] * len(shape.edges), entries, budget)
    held = set(kept)
    dropped = [e for e in range(len(shape.edges)) if e not in held]
    dropped_entries = sum(int(shape.sizes[u]) * int(shape.sizes[v])
                          for u, v in (shape.edges[e] for e in dropped))
    seconds = plan_seconds(plan)
    return {"kept_edges": len(kept), "dropped_edges": len(dropped),
            "table_entries": plan.table_entries, "dropped_entries": dropped_entries,
            "plan_seconds": seconds,
            "seconds_per_step": finite(seconds + dropped_entries / DROPPED_ENTRIES_PER_SECOND),
            "split_seconds": SPLIT_SECONDS_PER_EDGE * len(shape.edges)}
