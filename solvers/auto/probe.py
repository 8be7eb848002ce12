"""A short try of the decomposition before a long dp: its proof can come in one step.

On the paper's Transformer at p = 1024 the dp's plan has 9e10 table entries (158 s),
while the decomposition's first relaxed optimum already pays its own true cost: a
proof of optimality in 1.5 s. So where the dp's plan predicts at least
``MIN_DP_SECONDS`` and the relaxed Problem's plan costs at most ``MAX_SHARE`` of that,
``auto`` first runs ``STEPS`` dual steps (one round) and keeps the answer only when it
is proven optimal; otherwise the dp runs, having lost at most that share.

Under a memory cap the probe runs on the Problem without it: every capped plan is a plan
of the uncapped Problem, so an uncapped optimum that fits the cap is the capped optimum.
A cap that binds leaves it unproven, and the dp runs. (The calibrated model caps every
solve at the device's memory: the Transformer at p = 1,024 on H100s took 219 s in the
dp, its probe proves the optimum in seconds.) It runs only where the dp's plan is wide
(a dependent set of ``MIN_WIDTH`` or more): a narrow one, a chain of layers such as
GPT-3's, is folded by the dp's repeated blocks, which the plan's time does not count,
and a probe there cost more than the folded dp (gpt3-175b at p = 1,024: 57 CPU s over
its three bounding solves under the cap, no proof; a 12-layer pipeline stage of it on
128 devices without the cap: 2.5 CPU s with the probe, 1.4 without, no proof).
"""
from __future__ import annotations

from pase.deadline import Deadline
from pase.problem import Problem, Solution, Status
from pase.solvers.auto.decompose import decompose
from pase.solvers.auto.split import edge_weights, kept_edges
from pase.solvers.dp.core import plan_seconds
from pase.solvers.dp.plan import choose

MIN_DP_SECONDS = 10.0
# The least dependent set of the dp's plan worth a probe (docstring).
MIN_WIDTH = 3
MAX_SHARE = 0.05
STEPS = 2


def probe(problem: Problem, ordering: str, budget: float, entries: float,
          deadline: Deadline) -> tuple[Solution | None, str]:
    """A proven optimum from a short decomposition, or None; and what was decided."""
    capped, problem = problem, problem.with_memory_cap(None)
    plan = choose(problem, ordering, budget, limit_bytes=budget)[0]
    dp_seconds = plan_seconds(plan)
    if not plan.complete or not plan.fits(budget) or dp_seconds < MIN_DP_SECONDS:
        return None, ""
    if plan.max_dependent_set < MIN_WIDTH:
        return None, ""  # a narrow dp folds its repeated blocks (docstring)
    kept, relaxed = kept_edges(problem, edge_weights(problem), entries, budget)
    if not (relaxed.complete and relaxed.fits(budget)) or \
            plan_seconds(relaxed) > MAX_SHARE * dp_seconds:
        return None, ""
    answer = decompose(problem, entries=entries, budget=budget, steps=STEPS, rounds=1, gap=0.0,
                       deadline=deadline, split=(kept, relaxed))
    if answer.status is Status.OPTIMAL and not capped.fits(answer.choice):
        return None, (f"a {STEPS}-step probe of the decomposition proved an optimum without "
                      f"the memory cap that does not fit it")
    if answer.status is Status.OPTIMAL:
        return answer, (f"the dp's plan predicts {dp_seconds:.3g} s; a {STEPS}-step probe of "
                        f"the decomposition proved the optimum first"
                        + (" (within the memory cap)" if capped.memory_cap is not None else ""))
    return None, (f"a {STEPS}-step probe of the decomposition found no proof "
                  f"(gap {answer.gap if answer.gap is not None else 'unknown'})")
