"""``auto``: the dp where its plan fits, the decomposition where it does not.

One answer for every graph, with its certificate: ``stats["method"]`` says which
method ran and ``stats["why"]``, why. The dp answers ``optimal``. The decomposition
(:mod:`~pase.solvers.auto.decompose`) answers ``optimal`` with a proof, or
``feasible`` with a proven lower bound (its ``gap``); never a refusal while it holds
a strategy.
"""
from __future__ import annotations

import time

from pase.deadline import Deadline, active
from pase.errors import TooLargeError, check_choice, check_common, check_float, check_int
from pase.problem import Problem, Solution
from pase.solvers.auto.decompose import decompose
from pase.solvers.auto.probe import probe
from pase.solvers.dp.capped.memory import DEFAULT_MAX_STATES
from pase.solvers.dp.core import solve as dp_solve
from pase.solvers.dp.plan import CHOICES, DEFAULT_MEMORY_BUDGET

METHODS = ("auto", "dp", "decompose")
# The relaxed Problem's dp plan: at most this many table entries (about 0.04 s a step).
DEFAULT_RELAXED_ENTRIES = 3e7
DEFAULT_STEPS = 400
DEFAULT_ROUNDS = 4
# The decomposition stops at this relative gap: the tolerance every exact solver's costs
# are compared with (pase.problem.COST_RTOL).
DEFAULT_GAP = 1e-9


def solve(problem: Problem, *, method: str = "auto", ordering: str = "auto",
          memory_budget: float = DEFAULT_MEMORY_BUDGET, max_states: int = DEFAULT_MAX_STATES,
          prune: bool = True, blocks: bool = True,
          relaxed_entries: float = DEFAULT_RELAXED_ENTRIES, steps: int = DEFAULT_STEPS,
          rounds: int = DEFAULT_ROUNDS, gap: float = DEFAULT_GAP, time_limit: float | None = None,
          seed: int | None = None) -> Solution:
    """The optimum with a certificate: the dp when it fits ``memory_budget``, else the
    Lagrangian decomposition.

    Args:
        method: ``"auto"`` (default), or ``"dp"`` / ``"decompose"`` to force one.
        ordering, memory_budget, max_states, prune, blocks: the dp's options
            (docs/dp.md); ``memory_budget`` also bounds the relaxed Problems' plans.
        relaxed_entries: the most dp table entries a relaxed Problem may need.
        steps: dual steps per round; rounds: relaxations tried, each keeping the
            edges the last one found in conflict.
        gap: the decomposition stops once its relative gap is at most this (its status
            is then ``feasible``, with the bound; ``optimal`` needs a proof).
        time_limit: seconds for the whole call; the decomposition returns its best
            strategy and bound when it runs out (status ``time_limit``).
        seed: unused (deterministic); accepted like every solver.
    """
    start = time.perf_counter()
    check_choice("method", method, METHODS)
    check_choice("ordering", ordering, CHOICES)
    memory_budget = check_float("memory_budget", memory_budget, 0.0, strict=True, finite=False)
    relaxed_entries = check_float("relaxed_entries", relaxed_entries, 1.0)
    steps, rounds = check_int("steps", steps, 1), check_int("rounds", rounds, 1)
    gap = check_float("gap", gap, 0.0)
    check_common(time_limit, seed)
    deadline = Deadline(time_limit, start=start)
    with active(deadline):
        why = "forced by method=decompose"
        if method == "auto":
            proven, why = probe(problem, ordering, memory_budget, relaxed_entries, deadline)
            if proven is not None:
                return _as_auto(proven, start, "decompose", why)
        if method != "decompose":
            deadline.check("auto handed the Problem to the dp")  # the probe may have used it up
            try:
                answer = dp_solve(problem, ordering=ordering, memory_budget=memory_budget,
                                  max_states=max_states, prune=prune, blocks=blocks,
                                  time_limit=deadline.remaining())
            except TooLargeError as exc:
                if method == "dp":
                    raise
                why = f"the dp does not fit: {exc}"  # (a refusal repeats it)
            else:
                fits = "the dp's plan fits the memory budget"
                return _as_auto(answer, start, "dp", f"{fits}; {why}" if why else fits)
        try:
            answer = decompose(problem, entries=relaxed_entries, budget=memory_budget,
                               steps=steps, rounds=rounds, gap=gap, deadline=deadline)
        except TooLargeError as exc:
            raise TooLargeError(f"{why}; {exc}" if method == "auto" else str(exc)) from None
        return _as_auto(answer, start, "decompose", why)


def _as_auto(answer: Solution, start: float, method: str, why: str) -> Solution:
    answer.solver = "auto"
    answer.stats = {"method": method, "why": why, **answer.stats}
    answer.wall_time = time.perf_counter() - start
    return answer
