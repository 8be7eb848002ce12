"""Where each op's time goes: its kernels, and the communication that is its own.

An op's communication is its collectives (a tensor-parallel all-reduce, its
parameter-gradient sync) and the re-layouts of its inputs. Each row gets:

- ``t``: kernel seconds (forward, backward, optimizer step);
- ``cm``: communication seconds (its collectives and its incoming re-layouts);
- ``cs``: of ``cm``, its gradient syncs.

With a simulated step they are read off the timeline itself, per op on its busiest
device: a collective's events are labelled ``OP label kind``; a re-layout's
``U->V activation`` (V's input) and ``V->U gradient`` (V's input gradient, sent back),
both V's. So a block's communication is what the timeline shows for its ops,
queueing and port sharing included. Without a simulation, a plan that carries its
seconds (:mod:`pase.prices`) is attributed at them (each collective alone on its
group) plus the model's cost of each incoming edge that moves bytes; other plans
keep only the cost model's layer and edge costs (``c``, ``x``).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

from pase.prices import is_timed
from pase.viewer.plan import short

COMPUTE_KINDS = ("forward", "backward", "optimizer")
COMM_KINDS = ("communication", "gradient-sync")


def from_timeline(names: Sequence[str], events: Iterable[Any]) -> list[dict[str, float]]:
    """Per op ``{t, cm, cs}``: its seconds on the timeline's busiest device."""
    index = {n: i for i, n in enumerate(names)}
    per: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for ev in events:
        v = _owner(ev.label, index)
        if v is None:
            continue
        device = ev.resource.split(".")[0]
        acc = per[(v, device)]
        span = ev.end - ev.start
        if ev.kind in COMPUTE_KINDS:
            acc[0] += span
        elif ev.kind in COMM_KINDS:
            acc[1] += span
            if ev.kind == "gradient-sync":
                acc[2] += span
    out = [{"t": 0.0, "cm": 0.0, "cs": 0.0} for _ in names]
    for (v, _), (t, cm, cs) in per.items():
        row = out[v]
        row["t"] = max(row["t"], t)
        if cm > row["cm"]:
            row["cm"], row["cs"] = cm, cs
    return [{k: short(x) for k, x in r.items()} for r in out]


def _owner(label: str, index: dict[str, int]) -> int | None:
    """The op an event belongs to: a collective's or a kernel's op, a re-layout's consumer."""
    head, _, rest = label.partition(" ")
    if "->" in head and rest in ("activation", "gradient"):
        a, _, b = head.partition("->")
        return index.get(b if rest == "activation" else a)
    return index.get(head)


def from_prices(names: Sequence[str], prices: dict[str, dict],
                edges: Sequence[Sequence[Sequence[Any]]]) -> list[dict[str, float]] | None:
    """Per op ``{t, cm, cs}`` at a plan's carried seconds (None: it carries none).
    ``edges``: per op its incoming tensors ``[producer, cost, fwd bytes, bwd bytes]``."""
    if not is_timed({n: prices.get(n, {}) for n in names}):
        return None
    out = []
    for name, incoming in zip(names, edges):
        p = prices[name]
        sync = sum(c[5] for c in p["collectives"] if c[0] == "gradient")
        own = sum(c[5] for c in p["collectives"])
        # an edge that moves no bytes is a collective the model charged on it: counted above
        moved = sum(e[1] or 0.0 for e in incoming if (e[2] or 0.0) + (e[3] or 0.0) > 0)
        out.append({"t": short(p["forward"] + p["backward"] + p["optimizer"]),
                    "cm": short(own + moved), "cs": short(sync)})
    return out
