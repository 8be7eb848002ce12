"""Activation recomputation as a per-op variant, and the capped search over variants
against brute force over every config x variant of every op."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import pase
from pase.api import build_problem, load_graph, run_solver
from pase.costing import connection_ports
from pase.perf.comms import collective_seconds
from pase.perf.hardware import IDEAL
from pase.registry import COST_MODELS
from pase.space import ConfigSpace
from pase.work import group_topology
from pase.work.variants import Variant, apply_variant

ALL = [Variant(z, r) for z in range(4) for r in (False, True)]


@pytest.mark.parametrize("name", ["gpt2", "alexnet", "rnnlm"])
def test_recompute_never_raises_memory_and_adds_exactly_the_forward(name):
    """Over every config of every op: memory never rises; time rises by the forward FLOP
    and memory-traffic time (an embedding's gather) plus the forward collectives' time,
    priced here collective by collective."""
    options = {"layers": 1} if name == "gpt2" else {}
    graph = load_graph(name, **options)
    space = ConfigSpace(graph, 8, powers_of_two=True)
    model = COST_MODELS.get("alpha-beta")("dgx-a100").for_devices(8)
    for i, op in enumerate(graph.ops):
        configs = space.configs[i]
        work = model.work(op, configs)
        for zero in (0, 3):
            before = apply_variant(work, zero)
            after = apply_variant(work, zero, True)
            assert (after.memory <= before.memory).all(), op.name
            assert (after.activation_bytes == 0).all()
            forward = before.forward_flop / model.flops \
                + before.forward_traffic / model.memory_rate(before)
            for c in work.collectives:  # the op's own forward collectives (not zero's gather)
                if c.phase == "forward":
                    nodes, _ = group_topology(op, configs, c.dims, model.cluster, 8)
                    forward = forward + c.rounds * collective_seconds(
                        c.kind, c.nbytes, work.group_size(c), nodes, model.cluster, IDEAL)
            extra = model.work_costs(after) - model.work_costs(before)
            np.testing.assert_allclose(extra, forward, rtol=1e-9, atol=1e-18, err_msg=op.name)


def brute_force(graph, space, model, cap: float | None) -> float:
    """The least cost over every config x variant of every op (memory <= cap)."""
    model = model.for_devices(space.devices)
    costs, mems = [], []
    for i, op in enumerate(graph.ops):
        work = model.work(op, space.configs[i])
        per = [apply_variant(work, v.zero, v.recompute) for v in ALL]
        costs.append(np.stack([model.work_costs(w) for w in per], axis=1).ravel())  # (K*8,)
        mems.append(np.stack([w.memory for w in per], axis=1).ravel())
    n = len(graph.ops)
    total = np.zeros([len(c) for c in costs])
    memory = np.zeros_like(total)
    for i in range(n):
        shape = [1] * n
        shape[i] = -1
        total = total + costs[i].reshape(shape)
        memory = memory + mems[i].reshape(shape)
    for conn in model.edges(graph):
        u, _, v, _ = conn
        pu, port_u, pv, port_v = connection_ports(graph, conn)
        m = model.edge_costs(pu, port_u, space.configs[u], pv, port_v, space.configs[v])
        m = np.repeat(np.repeat(m, len(ALL), axis=0), len(ALL), axis=1)  # same for every variant
        if u > v:
            u, v, m = v, u, m.T
        shape = [1] * n
        shape[u], shape[v] = m.shape
        total = total + m.reshape(shape)
    ok = np.ones(total.shape, dtype=bool) if cap is None else memory <= cap
    return float(total[ok].min()) if ok.any() else math.inf


@pytest.mark.parametrize("zero,recompute", [("auto", "auto"), ("auto", "none"), ("0", "auto"),
                                             ("3", "auto"), ("auto", "all")])
def test_capped_search_over_variants_equals_brute_force(zero, recompute):
    options = {"length": 3, "batch": 64, "width": 128}
    built = build_problem("chain", 4, "alpha-beta", memory_cap="none", model_options=options,
                          cost_options={"zero": zero, "recompute": recompute})
    free = run_solver("dp", built.problem)
    least, most = built.problem.min_memory(), built.problem.memory_of(free.choice)
    assert least < most
    model = COST_MODELS.get("alpha-beta")("dgx-a100", zero=zero, recompute=recompute)
    allowed = [v for v in ALL if (zero == "auto" or v.zero == int(zero))
               and (recompute == "auto" or v.recompute == (recompute == "all"))]
    for where in (0.0, 0.1, 0.4, 0.8):
        cap = least + where * (most - least)
        capped = built.problem.with_memory_cap(cap)
        dp_sol = run_solver("dp", capped)
        ex = run_solver("exhaustive", capped)
        assert dp_sol.status.value == "optimal" and capped.fits(dp_sol.choice)
        assert dp_sol.cost == pytest.approx(ex.cost, rel=1e-9)
        want = _brute(built, model, cap, allowed)
        assert dp_sol.cost == pytest.approx(want, rel=1e-9), (where, zero, recompute)


def _brute(built, model, cap, allowed):
    global ALL
    saved, ALL = ALL, allowed
    try:
        return brute_force(built.graph, built.space, model, cap)
    finally:
        ALL = saved


def test_ilp_agrees_on_a_capped_variant_problem():
    pytest.importorskip("highspy")
    built = build_problem("chain", 4, "alpha-beta", model_options={"length": 3, "batch": 64, "width": 128},
                          cost_options={"zero": "auto", "recompute": "auto"}, memory_cap="none")
    cap = built.problem.min_memory() * 1.5
    capped = built.problem.with_memory_cap(cap)
    a, b = run_solver("dp", capped), run_solver("ilp-highs", capped)
    assert a.cost == pytest.approx(b.cost, rel=1e-6)


def test_recompute_only_under_a_cap_that_needs_it():
    kw = dict(cost_model="alpha-beta", powers_of_two=True, model_options={"layers": 2})
    free = pase.solve("gpt2", 8, memory_cap="none", cost_options={"recompute": "auto"}, **kw)
    plain = pase.solve("gpt2", 8, memory_cap="none", **kw)
    assert not any(v.recompute for v in free.variants.values())  # recomputing only costs time
    assert free.total_cost == plain.total_cost
    least = build_problem("gpt2", 8, "alpha-beta", powers_of_two=True, memory_cap="none",
                          model_options={"layers": 2}).problem.min_memory()
    tight = pase.solve("gpt2", 8, memory_cap=least * 0.9, cost_options={"recompute": "auto"}, **kw)
    assert tight.meta["fits_memory_cap"]  # below stage 0's least memory: only recompute fits
    assert any(v.recompute for v in tight.variants.values())
    every = pase.solve("gpt2", 8, memory_cap="none", cost_options={"recompute": "all"}, **kw)
    assert every.variants and all(v.recompute for v in every.variants.values())


def test_all_pairs_of_options_build():
    for zero, rec in itertools.product(("0", "1", "2", "3", "auto"), ("none", "auto", "all")):
        b = build_problem("mlp", 4, "alpha-beta", cost_options={"zero": zero, "recompute": rec})
        assert (b.problem.sizes >= b.space.sizes).all()


def test_the_build_budget_counts_the_variants():
    """Variants multiply edge matrices: a budget the configs fit but the variants do not
    is refused (TooLargeError) after the vertex costs, before any edge matrix."""
    from pase.costing import problem_shape
    from pase.errors import TooLargeError

    kw = dict(model_options={"layers": 1}, powers_of_two=True, memory_cap="none")
    graph, space = pase.api.build_space("gpt2", 8, powers_of_two=True, model_options={"layers": 1})
    model = COST_MODELS.get("alpha-beta")(zero="auto", recompute="auto")
    configs_only = problem_shape(graph, space, cost_model=model).array_bytes
    full = build_problem("gpt2", 8, "alpha-beta", cost_options={"zero": "auto", "recompute": "auto"}, **kw)
    need = sum(m.nbytes for m in {id(m): m for m in full.problem.edge_costs}.values())
    assert need > configs_only
    with pytest.raises(TooLargeError, match="build budget"):
        build_problem("gpt2", 8, "alpha-beta", cost_options={"zero": "auto", "recompute": "auto"},
                      build_budget=configs_only + 1, **kw)
    build_problem("gpt2", 8, "alpha-beta", build_budget=configs_only + 1, **kw)  # no variants: fits
