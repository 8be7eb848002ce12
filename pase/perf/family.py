"""The layout family of a search (:func:`family`): its shapes, each (micro-batch, tp, cp, ep,
etp) group and under it each (pp, dp, schedules), counted and checked before anything is
priced (:mod:`pase.perf.search` says what the family holds)."""
from __future__ import annotations

import math

from pase.errors import OptionError
from pase.ir import Graph
from pase.perf.layout import check_graph, make_layout
from pase.perf.pipeline import blocks

SCHEDULE_KINDS = ("1f1b", "interleaved", "zb-h1", "dualpipe")
LONG = 8192  # context parallelism is searched from this sequence length up

# (micro-batch, tp, cp, ep, etp) and, under it, each (pp, dp, schedules): the family's shapes
Group = tuple[int, int, int, int, int, list[tuple[int, int, list[str]]]]


def divisors(n: int, limit: int | None = None) -> list[int]:
    """The divisors of ``n`` (up to ``limit``), ascending, from its prime factors found
    by trial division up to the square root: instant for device counts (at most 2**24),
    never a loop up to ``n``."""
    factors: dict[int, int] = {}
    rest, p = n, 2
    while p * p <= rest:
        while rest % p == 0:
            factors[p] = factors.get(p, 0) + 1
            rest //= p
        p += 1 if p == 2 else 2
    if rest > 1:
        factors[rest] = factors.get(rest, 0) + 1
    out = [1]
    for prime, power in factors.items():
        out = [d * prime ** k for d in out for k in range(power + 1)]
    return sorted(d for d in out if limit is None or d <= limit)


def family(graph1: Graph, devices: int, per_node: int, global_batch: int, max_micro: int,
            virtual: tuple[int, ...] | None, kinds: tuple[str, ...], experts: bool,
            context: bool, options: dict) -> list[Group]:
    """The family's shapes, without pricing anything; an OptionError naming the reason
    when there are none."""
    layers = len({b for b in blocks(graph1) if b is not None})
    seq = next((d.size for op in graph1.ops for d in op.dims if d.role == "sequence"), 1)
    expert_count = next((d.size for op in graph1.ops for d in op.dims if d.role == "expert"), 0)
    combos = []  # (tp, cp, ep, etp) the graph can run (its checks do not depend on the batch)
    for tp in divisors(devices, per_node):
        for cp in (divisors(devices // tp) if context and seq >= LONG else [1]):
            for ep in (divisors(expert_count) if experts and expert_count else [1]):
                for etp in sorted({1, tp}) if experts and expert_count else [tp]:
                    try:
                        check_graph(graph1, probe(dict(tp=tp, cp=cp, ep=ep, etp=etp), 1, **options))
                    except OptionError:
                        continue
                    combos.append((tp, cp, ep, etp))
    groups: list[Group] = []
    for micro in divisors_up_to(global_batch, max_micro):
        for tp, cp, ep, etp in combos:
            shapes = []
            for pp in divisors(devices // (tp * cp), max(layers, 1)):
                dp = devices // (tp * cp * pp)
                if global_batch % (micro * dp) or (tp * dp * cp) % (ep * etp):
                    continue
                m = global_batch // (micro * dp)
                shapes.append((pp, dp, schedule_family(pp, m, layers, kinds, virtual)))
            if shapes:
                groups.append((micro, tp, cp, ep, etp, shapes))
    if not groups:
        raise OptionError(why_none(devices, per_node, global_batch, layers,
                                    [(tp, cp) for tp, cp, *_ in combos]))
    return groups


def nearest_first(groups: list[Group], lay) -> list[Group]:
    """``groups`` reordered: those sharing more of ``lay``'s (micro-batch, tp, cp, ep, etp)
    first, and in each the shapes with its pp first (stable otherwise). Each micro-batch's
    groups stay together, so its graph is built once."""
    mine = (lay.micro_batch, lay.tp, lay.cp, lay.ep, lay.expert_tp)

    def far(group: Group) -> tuple:
        return (group[0] != mine[0], group[0], sum(a != b for a, b in zip(group[1:5], mine[1:])))

    out = []
    for group in sorted(groups, key=far):
        *head, shapes = group
        out.append((*head, sorted(shapes, key=lambda shape: shape[0] != lay.pp)))
    return out


def schedule_family(pp: int, m: int, layers: int, kinds: tuple[str, ...] = SCHEDULE_KINDS,
                    virtual: tuple[int, ...] | None = None) -> list[str]:
    """The schedules of the family for ``pp`` stages, ``m`` micro-batches per step and
    ``layers`` layers (module docstring)."""
    out = ["1f1b"] if "1f1b" in kinds else []
    if pp == 1:
        return out or ["1f1b"]  # one stage: gradient accumulation, whatever the schedule
    if "interleaved" in kinds and m % pp == 0:
        chunks = virtual if virtual is not None else range(2, layers // pp + 1)
        out += [f"interleaved:{v}" for v in sorted(set(chunks)) if pp * v <= layers]
    if "zb-h1" in kinds and m >= pp:
        out.append("zb-h1")
    if "dualpipe" in kinds and pp % 2 == 0 and m >= 2 * pp and m % 2 == 0:
        out.append("dualpipe")
    return out


def divisors_up_to(n: int, limit: int) -> list[int]:
    """The divisors of ``n`` not above ``limit`` (``limit`` steps, however large ``n``)."""
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def why_none(devices: int, per_node: int, global_batch: int, layers: int,
              pairs: list[tuple[int, int]]) -> str:
    """Why the family is empty: tp = cp = 1 always runs and micro-batch 1 always divides,
    so no data-parallel degree divides the global batch."""
    least = min(devices // (tp * cp * pp) for tp, cp in pairs
                for pp in divisors(devices // (tp * cp), max(layers, 1)))
    return (f"no layout of the family exists on {devices} devices for global batch "
            f"{global_batch}: the data-parallel degree, devices / (tp x cp x pp) with tp up to "
            f"{per_node} and pp up to {max(layers, 1)} layers, must divide the global batch; "
            f"the least here is {least}")


def probe(base: dict, micro: int, precision: str, attention: str, dropout: bool):
    """The layout of one (tp, cp, ep, etp) group on the fewest devices that hold it (the
    data-parallel degree the fewest that ep x etp needs), for checks and op prices."""
    tp, cp = base["tp"], base["cp"]
    folded = base.get("ep", 1) * base.get("etp", tp)
    dp = folded // math.gcd(tp * cp, folded)
    return make_layout(dict(base, dp=dp), devices=tp * cp * dp, micro_batch=micro,
                       global_batch=micro * dp, sequence_parallel=tp > 1, precision=precision,
                       attention=attention, dropout=dropout)
