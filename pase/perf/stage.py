"""One pipeline stage's price per micro-batch (:func:`stage_terms`), from each layer's sums of
its ops' terms (:func:`op_terms`, :func:`unit_sums`): compute, exposed tensor- and
context-parallel collectives and expert all-to-alls, ZeRO-3's gathers and scatters, the
pipeline sends, the once-per-step gradient sync and optimizer; and what its memory reads
of its states (:func:`stage_states`). :mod:`pase.perf.step` puts the stages together."""
from __future__ import annotations

from typing import Any

from pase.perf.kernels import Pricer
from pase.perf.layout import Layout
from pase.perf.ops import PricedOp

OPTIMIZER_BYTES = {"mixed": 30.0, "fp32": 32.0}  # Adam + clipping traffic per parameter updated
OPTIMIZER_KERNELS = 10  # the step's fixed kernels (multi-tensor Adam, clipping), once a stage


def overlapped(overlap: float, comm: float, compute: float) -> float:
    """:meth:`pase.perf.hardware.Achieved.overlapped` of two numbers, the same to the bit
    (its numpy functions cost microseconds a call on plain numbers)."""
    return max(0.0, comm - compute) + overlap * min(comm, compute)


def op_read(p: PricedOp) -> tuple:
    """What :func:`op_terms` and :func:`unit_sums` read of a priced op: two ops equal in it
    add the same terms under every layout of their group."""
    t = p.time
    return (t.forward_s, t.backward_s, t.weight_s, tuple(t.tp_forward), tuple(t.tp_backward),
            tuple(t.ep_forward), tuple(t.ep_backward), t.ring_bytes, p.parameter_elements,
            p.expert, p.linear, p.attention_core)


def op_terms(lay: Layout, p: PricedOp, again: bool, coll, hw) -> tuple[float, ...]:
    """One op's seconds per micro-batch: forward, backward, its weight-gradient part,
    exposed collectives each way, and the expert all-to-alls each way that another
    micro-batch's compute hides (``ep_overlap``; else they are in the exposed ones)."""
    t = p.time
    tp_f = sum(coll(k, b, "tp") for k, b in t.tp_forward)
    tp_b = sum(coll(k, b, "tp") for k, b in t.tp_backward)
    if lay.tp_overlap:  # chunked GEMMs: a reduce-scatter behind this GEMM, the all-gather
        # behind the next one's (about as long), the backward's behind its two GEMMs
        tp_f = overlapped(hw.overlap, tp_f, 2 * t.forward_s)
        tp_b = overlapped(hw.overlap, tp_b, t.backward_s)
    ep_f = sum(coll(k, b, "ep") for k, b in t.ep_forward)
    ep_b = sum(coll(k, b, "ep") for k, b in t.ep_backward)
    ring_f = ring_b = 0.0
    if t.ring_bytes:  # cp - 1 ring steps, each hidden behind one attention block
        step_send = coll("send", t.ring_bytes, "cp")
        ring_f = (lay.cp - 1) * overlapped(hw.overlap, step_send, t.forward_s / lay.cp)
        ring_b = (lay.cp - 1) * overlapped(hw.overlap, 2 * step_send, t.backward_s / lay.cp)
    f, b = t.forward_s, t.backward_s + (t.forward_s if again else 0.0)
    hidden_f = hidden_b = 0.0
    if lay.ep_overlap:  # hidden behind the layer's compute, by the stage
        hidden_f, hidden_b = ep_f, ep_b + (ep_f if again else 0.0)
        ep_f = ep_b = 0.0
    return (f, b, t.weight_s, tp_f + ep_f + ring_f,
            tp_b + ep_b + ring_b + ((tp_f + ep_f) if again else 0.0), hidden_f, hidden_b)


def unit_sums(lay: Layout, ops: list[PricedOp], units: list[str], again_units: set[str],
              coll, hw) -> dict[str, list[float]]:
    """Per unit, in order: the sums of :func:`op_terms` over its ops, then its parameter
    elements (all, expert, low-precision linear, not expert), then its recomputed forward
    seconds."""
    out: dict[str, list[float]] = {}
    for p, unit in zip(ops, units):
        again = unit in again_units or (lay.recompute == "selective" and p.attention_core)
        sums = out.setdefault(unit, [0.0] * 12)
        for i, v in enumerate(op_terms(lay, p, again, coll, hw)):
            sums[i] += v
        sums[7] += p.parameter_elements
        sums[8] += p.parameter_elements if p.expert else 0.0
        sums[9] += p.parameter_elements if p.linear else 0.0
        sums[10] += 0.0 if p.expert else p.parameter_elements
        sums[11] += p.time.forward_s if again else 0.0  # recomputed forwards
    return out


def stage_terms(lay: Layout, ops: list[PricedOp], units: list[str], coll, pricer: Pricer,
           mixed: bool, replicas: int, again_units: set[str], received: list[float],
           sums: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """One stage's per-micro-batch time, its once-per-step exposure and its memory terms
    (``sums``: its :func:`unit_sums`, when a search has them already)."""
    hw = pricer.hw
    if sums is None:
        sums = unit_sums(lay, ops, units, again_units, coll, hw)
    fwd = bwd = weight = exposed_f = exposed_b = rebuilt = 0.0
    for s in sums.values():
        fwd, bwd, weight, rebuilt = fwd + s[0], bwd + s[1], weight + s[2], rebuilt + s[11]
        exposed_f, exposed_b = exposed_f + s[3], exposed_b + s[4]
    states = stage_states(lay, sums, pricer, mixed, replicas)
    params, expert_params = states["params"], states["expert_params"]
    unit_params, unit_expert = states["unit_params"], states["unit_expert"]
    if lay.ep_overlap:  # another micro-batch's compute hides each layer's all-to-alls
        for s in sums.values():
            exposed_f += overlapped(hw.overlap, s[5], s[0])
            exposed_b += overlapped(hw.overlap, s[6], s[1])
    grad_bytes = 2.0 if mixed else 4.0
    order = list(sums)
    if lay.zero == 3:  # an expert's parameters are sharded over its own replicas (edp)
        def fsdp(kind: str, u: str) -> float:
            expert = unit_expert.get(u, 0.0)
            return coll(kind, (unit_params[u] - expert) * grad_bytes, "dp") + \
                coll(kind, expert * grad_bytes, "edp")

        gathers = [fsdp("all-gather", u) for u in order]
        scatters = [fsdp("reduce-scatter", u) for u in order]
        exposed_f += gathers[0] + sum(overlapped(hw.overlap, g, sums[u][0])
                                      for g, u in zip(gathers[1:], order))
        exposed_b += sum(overlapped(hw.overlap, g + r, sums[u][1]) for g, r, u in zip(gathers, scatters, order))
    # pipeline sends: each chunk's input forward, its gradient back
    sends = [coll("send", nbytes, "pp") for nbytes in received]
    once = 0.0
    if lay.zero < 3:
        kind = "all-reduce" if lay.zero == 0 else "reduce-scatter"
        window = bwd * (1 - 1 / max(1, len(order)))
        sync = coll(kind, params * grad_bytes, "dp") + coll(kind, expert_params * grad_bytes, "edp")
        once += overlapped(hw.overlap, sync, window)
        if lay.zero in (1, 2):
            gather = coll("all-gather", params * grad_bytes, "dp") + \
                coll("all-gather", expert_params * grad_bytes, "edp")
            once += overlapped(hw.overlap, gather, fwd * (1 - 1 / max(1, len(order))))
    shards = states["shards"]
    updated = params / (shards[0] if lay.zero else 1) + expert_params / (shards[1] if lay.zero else 1)
    optimizer = pricer.memory(updated * OPTIMIZER_BYTES["mixed" if mixed else "fp32"],
                              OPTIMIZER_KERNELS)
    exposed = exposed_f + exposed_b + 2 * sum(sends)
    return {"time": fwd + bwd + exposed, "compute": fwd + bwd, "exposed": exposed,
            "recompute": rebuilt,
            "forward": fwd + exposed_f, "backward": bwd + exposed_b, "weight": weight,
            "sends": sends, "once_exposed": once, "optimizer": optimizer, "ops": ops,
            "units": units, **states}


def stage_states(lay: Layout, sums: dict[str, list[float]], pricer: Pricer, mixed: bool,
                 replicas: int) -> dict[str, Any]:
    """What :func:`pase.perf.memory.stage_memory` reads of a stage's states, from its
    :func:`unit_sums`: its parameters (not experts', experts', per unit, low-precision
    linear ones), their shards and precision."""
    params = linear = expert_params = 0.0
    for s in sums.values():
        params, expert_params, linear = params + s[10], expert_params + s[8], linear + s[9]
    return {"params": params, "expert_params": expert_params,
            "shards": (replicas, lay.expert_data),
            "unit_params": {u: s[7] for u, s in sums.items()},
            "unit_expert": {u: s[8] for u, s in sums.items() if s[8]},  # of which the experts'
            "mixed": mixed, "linear_params": linear,
            # low-precision weights (row- and column-wise copies) kept across micro-batches
            "weight_copies": 2 * pricer.quantised_bytes * linear}
