"""A lower bound of a layout's step from its compute alone (the layout search's pruning).

:func:`pase.perf.step.evaluate_layout` prices each stage per micro-batch as its ops'
forward and backward seconds (:class:`pase.perf.kernels.OpTime`), plus recomputed forwards,
exposed collectives and pipeline sends, all of them >= 0; the schedule's closed form
(:mod:`pase.perf.schedule.forms`) turns the stage times into the pipeline's seconds, and
the step adds the once-per-step exposure and optimizer (>= 0). Each form used here is
non-decreasing in every stage's time, so the same form over the compute-only stage times
(no recomputation, no communication) is at most the step, whatever the ZeRO stage,
recomputation or overlap:

- one stage: ``m T``;
- 1F1B: ``sum T + (m - 1) max T``; interleaved: ``(m + (p - 1) / V) max T``;
- ZB-H1: its form is ``(m - p) max T + sum T + (p - 1) slot`` with ``m >= p`` and the
  pacing stage's ``slot = max(F + B - 2W, F, B - W)``, which grows with ``F`` and ``B``:
  the least compute-only slot of any stage bounds it, whichever stage paces;
- DualPipe: the step is at least the busiest device's ``m/2 (T_i + T_{p-1-i})``.

A search that skips each layout whose bound exceeds its keep-th best step so far finds the
same best and the same ranking as pricing them all (tests/perf/test_search_prune.py).
"""
from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from pase.ir import Graph
from pase.perf import schedule
from pase.perf.layout import Layout
from pase.perf.memory import mirrored, stage_memory
from pase.perf.ops import PricedOp
from pase.perf.ops_memo import per_graph
from pase.perf.pipeline import blocks, chunk_sizes
from pase.perf.shared import Shared
from pase.perf.stage import OPTIMIZER_BYTES, op_terms, overlapped, stage_states

SLACK = 1e-9  # a bound a little under the form, so sums in another order never exceed a step


@lru_cache(maxsize=4096)
def _sizes(layers: int, chunks: int) -> list[int]:
    """:func:`pase.perf.pipeline.chunk_sizes`, once per (layers, chunks): not to be changed."""
    return chunk_sizes(layers, chunks)


class Bounds:
    """The compute-only stage times of one list of priced ops (one micro-batch, tp, cp,
    ep, etp) under each (pp, V) cut, and the step bound of each shape."""

    def __init__(self, graph: Graph, ops: list[PricedOp], lay: Layout | None = None,
                 coll=None, hw=None):
        """``lay`` (any layout of the group), ``coll`` (its collectives) and ``hw``: add
        each op's exposed tensor- and context-parallel collectives (which no ZeRO stage,
        recomputation or pipeline changes) and each layer's expert all-to-alls at the least
        either way of pricing them shows (on the critical path, or hidden behind the
        layer's compute: ``hw.overlapped`` of them is never more than they are)."""
        names = per_graph(graph, ("blocks",), lambda: blocks(graph))
        hidden = replace(lay, ep_overlap=True) if lay is not None else None
        terms: dict[int, tuple[float, ...]] = {}  # by PricedOp: repeated ones once
        order = list(dict.fromkeys(n for n in names if n is not None))
        where = {n: i + 1 for i, n in enumerate(order)}
        self.layers = len(order)
        # per unit, pre (0), the layers (1..L), post (L + 1): forward, backward, weight s,
        # and the all-to-alls each way and the compute they may hide behind
        units = [[0.0] * 7 for _ in range(self.layers + 2)]
        seen = False
        for p, name in zip(ops, names):
            if name is None:
                unit = self.layers + 1 if seen else 0
            else:
                seen, unit = True, where[name]
            term = terms.get(id(p))
            if term is None:
                t = p.time
                if hidden is None:
                    term = (t.forward_s, t.backward_s, t.weight_s, 0.0, 0.0, 0.0, 0.0)
                else:
                    f, b, w, exposed_f, exposed_b, hid_f, hid_b = op_terms(hidden, p, False,
                                                                            coll, hw)
                    term = (f + exposed_f, b + exposed_b, w, hid_f, hid_b, f, b)
                terms[id(p)] = term
            sums = units[unit]
            for i in range(7):
                sums[i] += term[i]
        ov = float(hw.overlap) if hw is not None else 0.0
        self._units = [[f + (overlapped(ov, hf, cf) if hf else 0.0),
                        b + ov * min(hb, cb), w] for f, b, w, hf, hb, cf, cb in units]
        self._cuts: dict[tuple[int, int], list[list[float]]] = {}
        self._prefix = [[0.0, 0.0, 0.0]]  # each chunk is a run of units: sums by differences
        for unit in self._units:
            self._prefix.append([a + b for a, b in zip(self._prefix[-1], unit)])

    def stages(self, pp: int, virtual: int) -> list[list[float]]:
        """Per stage its forward, backward and weight-gradient seconds, the layers cut as
        :func:`pase.perf.pipeline.placement` cuts them (the first chunk takes the units
        before the layers, the last those after)."""
        key = (pp, virtual)
        if key not in self._cuts:
            out = [[0.0, 0.0, 0.0] for _ in range(pp)]
            chunks = pp * virtual
            start, prefix = 0, self._prefix
            for chunk, size in enumerate(_sizes(self.layers, chunks)):
                end = start + size + (1 if chunk == 0 else 0) + (1 if chunk == chunks - 1 else 0)
                stage = out[chunk % pp]
                for i in range(3):
                    stage[i] += prefix[end][i] - prefix[start][i]
                start = end
            self._cuts[key] = out
        return self._cuts[key]

    def step(self, pp: int, microbatches: int, schedule: str) -> float:
        """A lower bound of the step of every layout of this shape (module docstring);
        ``schedule`` as the family spells it (``interleaved:V``)."""
        kind, _, v = schedule.partition(":")
        virtual = int(v) if v else 1
        return pipeline_bound(self.stages(pp, virtual), microbatches, kind, virtual) * (1 - SLACK)


def pipeline_bound(stages: list, microbatches: int, kind: str, virtual: int) -> float:
    """The schedule's pipeline seconds over per-stage lower bounds (forward, backward,
    weight-gradient seconds), at most the form over the stages' real times (module
    docstring)."""
    pp = len(stages)
    totals = [st[0] + st[1] for st in stages]
    m, slowest = microbatches, max(totals)
    if pp == 1 or kind not in ("zb-h1", "dualpipe"):  # forms that grow with every stage's T
        pipe = schedule.step_seconds(kind, totals, m, virtual=virtual)
    elif kind == "zb-h1" and m < pp:  # outside the family; the form falls as T grows
        pipe = 0.0
    elif kind == "zb-h1":
        slot = min(max(f + b - 2 * w, f, b - w) for f, b, w, *_ in stages)
        pipe = (m - pp) * slowest + sum(totals) + (pp - 1) * slot
    else:  # dualpipe: the busiest device, plus the table's bubble when positive
        busiest = m / 2 * max(totals[i] + totals[pp - 1 - i] for i in range(pp))
        least = min(f + 2 * b - 3 * w for f, b, w, *_ in stages)
        pipe = busiest + max(0.0, (pp / 2 - 1) * least)
    return pipe


def layout_bound(shared: Shared, lay: Layout, coll, pricer, mixed: bool,
                 capacity: float = math.inf, rebuilt: str | None = None) -> float:
    """A lower bound of the step of ``lay`` (its recomputation ``"none"``) under every
    recomputation: :func:`pase.perf.stage.stage_terms`'s terms that recomputation cannot lower
    (compute without it, the forward's exposed collectives, the backward's outside ZeRO-3
    and expert overlap, sends, the optimizer), and for each collective overlapped with a
    backward that recomputation lengthens, its least exposure ``overlap x min(comm,
    compute)`` (``hw.overlapped`` never adds less). ``coll``: the layout's collectives.
    Infinite when a stage's states alone (which recomputation does not change) exceed
    ``capacity`` bytes: no recomputation fits it. ``rebuilt``: the bound of that
    recomputation only, its backward lengthened by the forwards it runs again at least
    (``"selective"``: the ops selective recomputation rebuilds; ``"full"``: the first
    layer of each stage, which full recomputation of one layer or more rebuilds)."""
    if lay.recompute != "none":
        raise ValueError("layout_bound takes the layout without recomputation")
    place = shared.placement(lay, pricer.element_bytes)
    stages, once = [], 0.0
    memo = shared.memo.setdefault("layout_bound", {})
    degrees = (lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.expert_tp, lay.zero, lay.ep_overlap,
               mixed, id(pricer), rebuilt)
    if capacity < math.inf:  # each device group's states (DualPipe's: of both its stages)
        held = mirrored(lay, [stage_memory(lay, stage_states(
            lay, shared.sums(lay, i, set(), coll, pricer.hw), pricer, mixed, lay.dp * lay.cp),
            i, shared.by_name, set(), (0.0, 0.0)) for i in range(lay.pp)])
        if any(h["total"] > capacity for h in held):
            return math.inf
    for i in range(lay.pp):
        sums = shared.sums(lay, i, set(), coll, pricer.hw)
        # a stage's terms read its layers' sums (equal layers share them), its sends and,
        # rebuilding, its first layer (full) or its own layers' selective sums (by place)
        key = (tuple(map(id, sums.values())), tuple(place.received[i]), degrees,
               (lay.pp, lay.virtual, i) if rebuilt else None)
        terms = memo.get(key)
        if terms is None:
            terms = memo[key] = _stage_bound(shared, lay, i, sums, place, coll, pricer, mixed,
                                             rebuilt)
        stages.append(terms[0])
        once = max(once, terms[1])
    kind = lay.schedule
    return (pipeline_bound(stages, lay.microbatches, kind, lay.virtual) + once) * (1 - SLACK)


def _stage_bound(shared: Shared, lay: Layout, i: int, sums: dict, place, coll, pricer,
                 mixed: bool, rebuilt: str | None) -> tuple[tuple[float, float, float], float]:
    """:func:`layout_bound`'s terms of stage ``i``: its (forward, backward, weight-gradient)
    seconds and its once-per-step exposure and optimizer."""
    hw, grad = pricer.hw, 2.0 if mixed else 4.0
    ov = float(hw.overlap)
    order = list(sums.values())
    f = b = w = params = experts = 0.0
    for s in order:
        f, b, w = f + s[0] + s[3], b + s[1] + s[4], w + s[2]
        params, experts = params + s[10], experts + s[8]
    if lay.ep_overlap:
        for s in order:
            f += overlapped(ov, s[5], s[0])
            b += ov * min(s[6], s[1])
    if lay.zero == 3:
        def fsdp(kind: str, s: list[float]) -> float:
            return coll(kind, (s[7] - s[8]) * grad, "dp") + coll(kind, s[8] * grad, "edp")

        gathers = [fsdp("all-gather", s) for s in order]
        f += gathers[0] + sum(overlapped(ov, g, s[0]) for g, s in zip(gathers[1:], order))
        b += sum(ov * min(g + fsdp("reduce-scatter", s), s[1]) for g, s in zip(gathers, order))
    if rebuilt == "selective":
        b += sum(s[11] for s in shared.sums(replace(lay, recompute="selective"), i, set(),
                                             coll, hw).values())
    elif rebuilt == "full":
        first = next((u for u in place.layers[i] if u not in ("pre", "post")), None)
        b += sums[first][0] if first is not None else 0.0
    sends = sum(coll("send", nbytes, "pp") for nbytes in place.received[i])
    exposed = 0.0
    if lay.zero < 3:
        kind = "all-reduce" if lay.zero == 0 else "reduce-scatter"
        share = 1 - 1 / max(1, len(order))
        sync = coll(kind, params * grad, "dp") + coll(kind, experts * grad, "edp")
        exposed += ov * min(sync, sum(s[1] for s in order) * share)
        if lay.zero in (1, 2):
            gather = coll("all-gather", params * grad, "dp") + \
                coll("all-gather", experts * grad, "edp")
            exposed += overlapped(ov, gather, sum(s[0] for s in order) * share)
    shards = (lay.dp * lay.cp, lay.expert_data) if lay.zero else (1, 1)
    updated = params / shards[0] + experts / shards[1]
    optimizer = pricer.memory(updated * OPTIMIZER_BYTES["mixed" if mixed else "fp32"], 10)
    return (f + sends, b + sends, w), exposed + optimizer
