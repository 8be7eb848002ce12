"""Expert baselines: fixed strategies built from dim roles, not searches.

They need to know what each candidate splits, so they read the Problem's
optional ``candidates`` (set by every cost model) and refuse a bare Problem.

- ``data-parallel``: split only batch dims, ``p`` ways or as far as allowed.
- ``owt``: Krizhevsky's "one weird trick": FC layers split their output
  features (parameter parallelism), every other op is data-parallel.
- ``megatron``: ``m``-way data parallelism times ``n``-way tensor parallelism
  on heads, vocabulary and parameter dims (the feed-forward hidden size), the
  layout of Mesh-TensorFlow and Megatron-LM; the best ``(m, n)`` with
  ``m * n = p`` under the Problem's costs is kept.
"""
from __future__ import annotations

import numpy as np

from pase.errors import OptionError, check_common, check_int
from pase.problem import Candidates, Problem, Solution, Status
from pase.registry import SOLVERS

TENSOR_ROLES = ("heads", "vocabulary", "parameter")


def _candidates(problem: Problem, solver: str) -> list[Candidates]:
    if problem.candidates is None:
        raise OptionError(f"solver {solver!r} builds strategies from dim roles and needs a Problem "
                          f"made by a cost model (problem.candidates is None)")
    return problem.candidates


def pick_config(c: Candidates, groups: list[tuple[tuple[str, ...], int]], by: str = "roles") -> int:
    """The candidate splitting each group as close to its target as allowed.

    ``groups`` is ``[(names, target)]`` in priority order, the names being dim
    roles (``by="roles"``) or dim names (``by="dims"``); dims outside every group
    stay unsplit. Among candidates whose group products stay within their
    targets, the lexicographically largest (first group first) wins; ties go to
    the lowest index. The all-ones config always qualifies.
    """
    labels = np.array(c.roles if by == "roles" else c.dims)
    cfg = c.configs
    covered = np.zeros(len(labels), dtype=bool)
    scores = []
    ok = np.ones(len(cfg), dtype=bool)
    for names, target in groups:
        mask = np.isin(labels, list(names))
        covered |= mask
        product = np.prod(cfg[:, mask], axis=1) if mask.any() else np.ones(len(cfg), dtype=np.int64)
        ok &= product <= target
        scores.append(product)
    ok &= np.all(cfg[:, ~covered] == 1, axis=1)
    best, best_key = 0, None
    for i in np.flatnonzero(ok):
        key = tuple(int(s[i]) for s in scores)
        if best_key is None or key > best_key:
            best, best_key = int(i), key
    return best


def _fixed(problem: Problem, choice: list[int], name: str, **stats) -> Solution:
    choice_t = tuple(choice)
    if not problem.fits(choice_t):
        # A fixed layout cannot adapt: say it does not fit rather than break the cap.
        stats["memory"] = problem.memory_of(choice_t)
        return Solution(None, float("inf"), Status.INFEASIBLE, name, stats=stats)
    return Solution(choice_t, problem.evaluate(choice_t), Status.FEASIBLE, name, stats=stats)


def _devices(problem: Problem, devices: int | None) -> int:
    if devices is None:
        devices = problem.devices
    if devices is None:
        raise OptionError("the Problem does not say its device count; pass devices=N")
    return check_int("devices", devices, 1)


def data_parallel_choice(problem: Problem, devices: int | None = None) -> tuple[int, ...]:
    """The data-parallel choice (batch dims split as far as allowed), cap ignored."""
    p = _devices(problem, devices)
    return tuple(pick_config(c, [(("batch",), p)]) for c in _candidates(problem, "data-parallel"))


@SOLVERS.register("data-parallel", "split only the batch dim p ways everywhere (baseline)",
                  kind="baseline")
def data_parallel(problem: Problem, *, devices: int | None = None, time_limit: float | None = None,
                  seed: int | None = None) -> Solution:
    check_common(time_limit, seed)
    return _fixed(problem, list(data_parallel_choice(problem, devices)), "data-parallel")


@SOLVERS.register("owt", "one weird trick: data-parallel convs, output-parallel FC layers (baseline)",
                  kind="baseline")
def owt(problem: Problem, *, devices: int | None = None, time_limit: float | None = None,
        seed: int | None = None) -> Solution:
    check_common(time_limit, seed)
    cands = _candidates(problem, "owt")
    p = _devices(problem, devices)
    choice = [pick_config(c, [(("parameter",), p)]) if c.kind == "FC" else pick_config(c, [(("batch",), p)])
              for c in cands]
    return _fixed(problem, choice, "owt")


@SOLVERS.register("megatron", "m-way data x n-way tensor parallelism on heads, vocabulary, "
                  "hidden (baseline; best m x n = p)", kind="baseline")
def megatron(problem: Problem, *, devices: int | None = None, time_limit: float | None = None,
             seed: int | None = None) -> Solution:
    check_common(time_limit, seed)
    cands = _candidates(problem, "megatron")
    p = _devices(problem, devices)
    best: tuple[float, int, list[int]] | None = None
    for n in range(1, p + 1):
        if p % n:
            continue
        m = p // n
        choice = [pick_config(c, [(("batch",), m), (TENSOR_ROLES, n)]) for c in cands]
        cost = problem.evaluate(choice)
        if best is None or cost < best[0]:
            best = (cost, n, choice)
    assert best is not None  # n = 1 always divides p
    cost, n, choice = best
    return _fixed(problem, choice, "megatron", data_parallel=p // n, tensor_parallel=n)
