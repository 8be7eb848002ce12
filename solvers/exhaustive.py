"""Exact brute force: evaluate every strategy, in vectorised batches.

The reference every other exact solver is tested against. It refuses, with a
clear error, problems with more strategies than ``max_strategies``, and stops at
``time_limit`` with the best strategy seen so far (status TIME_LIMIT).
"""
from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator

import numpy as np

from pase.errors import TooLargeError, check_common, check_int
from pase.problem import Problem, Solution, Status
from pase.registry import SOLVERS

DEFAULT_MAX_STRATEGIES = 10**7
# Choice entries per numpy batch (rows x vertices): large enough to amortise Python
# overhead, small enough that the int64 index array stays at 32 MiB; the clock is
# read once per batch (well under a second each).
BATCH_ENTRIES = 1 << 22


@SOLVERS.register("exhaustive", "exact brute force over every strategy (small problems only)",
                  exact=True)
def solve(problem: Problem, *, max_strategies: int = DEFAULT_MAX_STRATEGIES,
          time_limit: float | None = None, seed: int | None = None) -> Solution:
    """Evaluate every strategy; ties go to the lexicographically first choice.

    Args:
        max_strategies: refuse (TooLargeError) problems with more strategies
            than this (an integer >= 1; an integral float such as 1e17 is accepted).
        time_limit: stop after this many seconds with the best strategy seen so
            far (status TIME_LIMIT, no lower bound; choice None if none fitted).
        seed: ignored (the search is deterministic).
    """
    check_common(time_limit, seed)
    max_strategies = check_int("max_strategies", max_strategies, 1)
    total = problem.num_strategies()
    if total > max_strategies:
        raise TooLargeError(
            f"exhaustive search over {_count(total)} strategies exceeds max_strategies="
            f"{_count(max_strategies)}; use solver 'dp' or raise max_strategies")
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    cap = problem.memory_cap
    best_cost, best_choice, feasible, seen = math.inf, None, 0, 0
    rows = max(1, BATCH_ENTRIES // max(1, problem.num_vertices))
    for choices in _batches(problem.sizes, rows):
        costs = problem.evaluate_many(choices)
        if cap is not None:
            mem = np.zeros(len(choices))
            for v, m in enumerate(problem.memory):
                mem += m[choices[:, v]]
            fits = mem <= cap
            costs[~fits] = np.inf
            feasible += int(np.count_nonzero(fits))
        else:
            feasible += len(choices)
        i = int(np.argmin(costs))  # the first minimum: lowest index in the batch
        if costs[i] < best_cost:
            best_cost, best_choice = float(costs[i]), tuple(int(c) for c in choices[i])
        seen += len(choices)
        if deadline is not None and seen < total and time.perf_counter() > deadline:
            break
    stats = {"strategies": total, "evaluated": seen, "feasible_strategies": feasible}
    if seen < total:
        return Solution(best_choice, best_cost, Status.TIME_LIMIT, "exhaustive", stats=stats)
    if best_choice is None:
        return Solution(None, math.inf, Status.INFEASIBLE, "exhaustive", stats=stats)
    return Solution(best_choice, best_cost, Status.OPTIMAL, "exhaustive", lower_bound=best_cost,
                    stats=stats)


def _count(n: int) -> str:
    """An integer in three significant digits, by integer arithmetic: ``:.3g`` converts
    to a float, which overflows above 1e308 (the Transformer at p=8 has more strategies),
    and ``str`` refuses ints of over 4300 digits."""
    if n < 10**6:
        return str(n)
    exponent = int((n.bit_length() - 1) * 0.30102999566398120)  # log10(2): at most log10(n)
    while 10 ** (exponent + 1) <= n:
        exponent += 1
    lead = (n // 10 ** (exponent - 3) + 5) // 10  # three digits, rounded half up
    if lead >= 1000:
        lead, exponent = lead // 10, exponent + 1
    mantissa = f"{lead // 100}.{lead % 100:02d}".rstrip("0").rstrip(".")  # as :.3g writes it
    return f"{mantissa}e+{exponent:02d}"


def _batches(sizes: np.ndarray, rows: int) -> Iterator[np.ndarray]:
    """Every choice in lexicographic order (the first vertex varies slowest), as
    ``(batch, vertices)`` arrays of about ``rows`` rows.

    The longest run of trailing vertices whose choices fit in ``rows`` is enumerated
    once by numpy; the leading vertices are counted in Python, a batch of them at a
    time, so no index ever has to hold the (possibly astronomical) total.
    """
    sizes = [int(k) for k in sizes]
    split, block = len(sizes), 1
    while split > 0 and block * sizes[split - 1] <= rows:
        split -= 1
        block *= sizes[split]
    tail = sizes[split:]
    suffix = (np.stack(np.unravel_index(np.arange(block), tail), axis=1) if tail
              else np.zeros((1, 0), dtype=np.int64))
    heads = itertools.product(*(range(k) for k in sizes[:split]))
    per_batch = max(1, rows // block)
    while True:
        prefix = list(itertools.islice(heads, per_batch))
        if not prefix:
            return
        head = np.array(prefix, dtype=np.int64).reshape(len(prefix), split)
        yield np.concatenate([np.repeat(head, block, axis=0),
                              np.tile(suffix, (len(prefix), 1))], axis=1)
