"""The recomputation options of one layout that a search prices: none, and when it does not
fit, selective and the fewest fully recomputed layers (:mod:`pase.perf.search`)."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from pase.ir import Graph
from pase.perf.estimate import Estimate
from pase.perf.shared import Shared
from pase.perf.step import evaluate_layout, fewest_full

RECOMPUTE_ORDER = ("none", "selective", "full")


def recompute_tries(graph: Graph, cl, lay, ops, cache: Shared | None,
                    keep: Callable[[str], bool] | None = None) -> list[Estimate]:
    """The recomputation options of one layout worth pricing: none; if it does not fit,
    selective and full recomputation of the fewest layers per stage that fit (either may
    be the faster: full recomputation of one layer can cost less than selective of all).
    ``keep(recompute)``: False skips that option (its bound cannot rank)."""
    none = evaluate_layout(graph, cl, replace(lay, recompute="none"), ops, cache)
    if none.fits_memory:
        return [none]
    out = [none]
    if keep is None or keep("selective"):
        out.append(evaluate_layout(graph, cl, replace(lay, recompute="selective"), ops, cache))
    if keep is None or keep("full"):
        out.append(fewest_full(graph, cl, lay, ops, cache))
    return out


def fitting_tries(graph: Graph, cl, lay, ops, cache: Shared,
                  keep: Callable[[str], bool] | None = None) -> tuple[bool, int, list[Estimate]]:
    """:func:`recompute_tries` with each option's memory checked first
    (:meth:`pase.perf.shared.Shared.memory`), so only those that fit are priced: whether no
    recomputation fits, how many options were tried (those :func:`recompute_tries` prices)
    and the priced ones, which fit."""
    fits = cache.fits(cl, lay)
    if fits(replace(lay, recompute="none")):
        return True, 1, [evaluate_layout(graph, cl, replace(lay, recompute="none"), ops, cache)]
    tried, out = 1, []
    if keep is None or keep("selective"):
        tried += 1
        selective = replace(lay, recompute="selective")
        if fits(selective):
            out.append(evaluate_layout(graph, cl, selective, ops, cache))
    if keep is None or keep("full"):
        tried += 1
        if fits(replace(lay, recompute="full", recompute_layers=0)):
            out.append(fewest_full(graph, cl, lay, ops, cache))
    return False, tried, out
