"""Pipeline search: the outer DP equals brute force over stage splits, sizes and m."""
from __future__ import annotations

import itertools
import math

import pytest

from pase import api
from pase.cluster import get_cluster
from pase.errors import OptionError
from pase.pipeline import solve_pipeline
from pase.pipeline.cuts import crossing, cut_points
from pase.pipeline.search import LinkPricer, in_flight
from pase.pipeline.stages import StageOracle
from pase.work import op_work


def _compositions(n: int):
    """Every way to cut ``n`` units into contiguous non-empty runs: tuples of run ends."""
    for k in range(n):
        for cuts in itertools.combinations(range(1, n), k):
            yield cuts + (n,)


def brute_force(model, devices, batch, sizes, schedule, cap, model_options, cost_options,
                cuts="blocks", cost_model="alpha-beta"):
    """min over every partition of units, every size assignment and every m of the priced
    step, each stage's plans solved by exhaustive search (not the dp), the formula written
    out (calibrated: the schedule over the stage times, their sends in them, plus the
    largest tail once)."""
    load = lambda size: api.load_graph(model, batch=size, **model_options)  # noqa: E731
    costs = {"cluster": "dgx-a100", **cost_options}
    oracle = StageOracle(load, batch, costs, cap, {"powers_of_two": True},
                         solve=lambda p: api.run_solver("exhaustive", p), cost_model=cost_model)
    cluster = get_cluster("dgx-a100", devices)
    graph = oracle.graph(1)
    units = cut_points(graph, cuts)
    elem = 2.0 if cost_model == "calibrated" else 4.0  # bf16 activations, or alpha-beta's fp32
    best = math.inf
    ms = [m for m in (1, 2, 4, 8, 16, 32) if batch % m == 0]
    for m in ms:
        g = oracle.graph(m)
        for ends in _compositions(len(units) - 1):
            s = len(ends)
            starts = (0,) + ends[:-1]
            for ds in itertools.product(sizes, repeat=s):
                if sum(ds) != devices:
                    continue
                times, xs, ok, offset, plans = [], [], True, 0, []
                for i, (a, b) in enumerate(zip(starts, ends)):
                    k = m if schedule == "gpipe" else min(m, s - i)
                    opts = oracle.options(((units[a], units[b]),), ds[i], m, k)
                    if not opts:
                        ok = False
                        break
                    plans.append(opts)
                    if i and cost_model != "calibrated":  # calibrated: sends in the stage times
                        nbytes = sum(math.prod(g.op(n).outputs[o].shape)
                                     for n, o in crossing(g, units[a])) * elem
                        start = offset - ds[i - 1]
                        same = cluster.node_of(start) == cluster.node_of(offset + ds[i] - 1)
                        link = cluster.link("intra" if same else "inter")
                        xs.append(link.latency_s + nbytes / (min(ds[i - 1], ds[i])
                                                             * link.bandwidth_gbps * 1e9))
                    offset += ds[i]
                if not ok:
                    continue
                x = max(xs, default=0.0)
                for pick in itertools.product(*plans):  # each stage's plans (time, tail)
                    times = [r.seconds for r in pick]
                    pace = max(max(times), x) if schedule == "gpipe" else max(times) + 2 * x
                    step = sum(times) + 2 * sum(xs) + (m - 1) * pace + max(r.tail for r in pick)
                    best = min(best, step)
    return best


@pytest.mark.parametrize("cost_model", ["calibrated", "alpha-beta"])
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_search_equals_brute_force_chain(schedule, cost_model):
    opts = {"length": 4, "width": 64}
    plan = solve_pipeline("chain", 4, batch=8, schedule=schedule, model_options=opts,
                          memory_cap="none", cost_model=cost_model)
    assert plan.cost_model == cost_model
    want = brute_force("chain", 4, 8, (1, 2, 4), schedule, None, opts, {},
                       cost_model=cost_model)
    assert plan.search.get("search_step_seconds", plan.step_time) == pytest.approx(want, rel=1e-9)
    assert plan.step_time == pytest.approx(want, rel=1e-9)


def test_search_equals_brute_force_under_a_binding_memory_cap():
    # The cap makes the held micro-batches matter: 1F1B's first stage holds the most.
    opts = {"length": 4, "width": 512}
    free = solve_pipeline("chain", 4, batch=16, model_options=opts, memory_cap="none",
                          cost_model="alpha-beta")
    cap = 0.8 * max(st.memory_bytes for st in free.stages)
    plan = solve_pipeline("chain", 4, batch=16, model_options=opts, memory_cap=cap,
                          cost_model="alpha-beta")
    want = brute_force("chain", 4, 16, (1, 2, 4), "1f1b", cap, opts, {})
    assert plan.step_time == pytest.approx(want, rel=1e-9)
    assert all(st.memory_bytes <= cap for st in plan.stages)


def test_search_equals_brute_force_mlp_uneven_units():
    # "all" cuts: fc1 | fc2 | fc3 | classifier | loss, units of different sizes
    opts = {"layers": 3, "width": 256}
    plan = solve_pipeline("mlp", 4, batch=8, model_options=opts, memory_cap="none", cuts="all",
                          cost_model="alpha-beta")
    assert plan.search["units"] == [0, 1, 2, 3, 4, 5]
    want = brute_force("mlp", 4, 8, (1, 2, 4), "1f1b", None, opts, {}, cuts="all")
    assert plan.step_time == pytest.approx(want, rel=1e-9)


def test_in_flight_by_schedule():
    assert [in_flight("1f1b", 8, 4, i) for i in range(4)] == [4, 3, 2, 1]
    assert [in_flight("1f1b", 2, 4, i) for i in range(4)] == [2, 2, 2, 1]
    assert [in_flight("gpipe", 8, 4, i) for i in range(4)] == [8, 8, 8, 8]


def test_stage_memory_is_state_plus_in_flight_activations():
    opts = {"length": 4, "width": 256}
    plan = solve_pipeline("chain", 4, batch=8, microbatches=4, model_options=opts,
                          stage_sizes=[1], memory_cap="none", cost_model="alpha-beta")
    graph = api.load_graph("chain", batch=2, **opts)
    assert len(plan.stages) == 4
    for i, st in enumerate(plan.stages):
        assert st.in_flight == min(4, 4 - i)
        state = act = 0.0
        for op in graph.ops[st.op_range[0]:st.op_range[1]]:
            w = op_work(op, [[st.configs[op.name][d.name] for d in op.dims]])
            state += float(w.state_bytes[0])
            act += float(w.activation_bytes[0])
        assert st.memory_bytes == pytest.approx(state + st.in_flight * act, rel=1e-12)


def test_identical_blocks_are_solved_once_per_size():
    load = lambda size: api.load_graph("gpt3", batch=size, **TINY_GPT)  # noqa: E731
    oracle = StageOracle(load, 4, {"cluster": "dgx-a100"}, None, {"powers_of_two": True})
    units = cut_points(oracle.graph(1))
    a = oracle.stage(units[1], units[2], 2, 2, 1)
    solves = oracle.solves
    b = oracle.stage(units[2], units[3], 2, 2, 1)  # another middle block: same structure
    assert oracle.solves == solves and a.seconds == b.seconds
    assert [c for _, c in a.configs] == [c for _, c in b.configs]
    assert [n for n, _ in b.configs] == [op.name for op in oracle.graph(2).ops[units[2]:units[3]]]
    oracle.stage(units[0], units[1], 2, 2, 1)  # the first block carries the embedding
    assert oracle.solves == solves + 1


TINY_GPT = {"layers": 4, "seq": 16, "width": 32, "heads": 4, "ff": 64, "vocab": 64, "positions": 16}


def test_link_pricer_uses_the_smaller_side_and_the_right_link():
    cluster = get_cluster("dgx-a100", 16)
    links = LinkPricer(cluster, lambda cut, m: 1e6)
    intra = links(5, 1, 0, 4, 2)      # ranks 0..5 on node 0
    inter = links(5, 1, 4, 4, 8)      # ranks 4..15 span two nodes
    assert intra == pytest.approx(cluster.intra.latency_s + 1e6 / (2 * cluster.intra.bytes_per_second))
    assert inter == pytest.approx(cluster.inter.latency_s + 1e6 / (4 * cluster.inter.bytes_per_second))


def test_bad_options_are_one_line_errors():
    with pytest.raises(OptionError, match="divisor of the batch"):
        solve_pipeline("chain", 4, batch=8, microbatches=3)
    with pytest.raises(OptionError, match="schedule"):
        solve_pipeline("chain", 4, schedule="zigzag")
    with pytest.raises(OptionError, match="stage_sizes"):
        solve_pipeline("chain", 4, stage_sizes="some")
    with pytest.raises(OptionError, match="memory cap"):
        solve_pipeline("chain", 4, batch=8, memory_cap=1)


def test_cut_points_between_numbered_blocks_and_every():
    graph = api.load_graph("gpt3", **TINY_GPT)
    names = [op.name for op in graph.ops]
    units = cut_points(graph)
    # one cut before each of h1..h3: the embedding joins h0, the head joins h3
    assert [names[v] for v in units[1:-1]] == ["h1.attn_norm", "h2.attn_norm", "h3.attn_norm"]
    assert all(len(crossing(graph, v)) == 1 for v in units[1:-1])
    assert cut_points(graph, every=2) == [0, units[2], len(names)]
    # "all": also the single-tensor cuts inside a block and around the embedding and head
    assert set(units) < set(cut_points(graph, "all"))
    with pytest.raises(OptionError, match="cuts"):
        cut_points(graph, "layers")


def test_stage_cost_charges_a_quarter_of_the_gradient_sync_per_micro_batch():
    from dataclasses import replace

    import numpy as np

    from pase.pipeline.stage_model import stage_cost_model
    from pase.space import ConfigSpace

    graph = api.load_graph("mlp", batch=8, width=256)
    space = ConfigSpace(graph, 8, powers_of_two=True)
    plain = api.make_cost_model("alpha-beta", cluster="dgx-a100").for_devices(8)
    stage = stage_cost_model({"cluster": "dgx-a100"}, 4).for_devices(8)
    op, configs = graph.ops[1], space.configs[1]
    work = plain.work(op, configs)
    zero = np.zeros(len(configs))
    sync = plain.work_costs(replace(work, forward_flop=zero, backward_flop=zero, collectives=tuple(
        c for c in work.collectives if c.phase == "gradient")))
    assert sync.max() > 0  # some configs split the batch, so their weight gradients sync
    want = plain.work_costs(work) - 0.75 * sync
    assert np.allclose(stage.work_costs(stage.work(op, configs)), want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("cost_model", [pytest.param("calibrated", marks=pytest.mark.slow),
                                        "alpha-beta"])
def test_incumbent_skips_stages_without_changing_the_answer(monkeypatch, cost_model):
    # A stage whose least time times m reaches the best plan so far is left unsolved; the
    # plan, its step and its bound are those of the search that solves every stage.
    opts = {"length": 6, "width": 512}
    kw = dict(batch=16, model_options=opts, cost_model=cost_model, cuts="all")
    free = solve_pipeline("chain", 8, memory_cap="none", **kw)
    cap = 0.8 * max(st.memory_bytes for st in free.stages)
    pruned = solve_pipeline("chain", 8, memory_cap=cap, **kw)
    monkeypatch.setattr(StageOracle, "least_step", lambda self, *a: 0.0)  # never past it
    every = solve_pipeline("chain", 8, memory_cap=cap, **kw)
    assert pruned.step_time == every.step_time
    assert pruned.lower_bound == every.lower_bound and pruned.status == every.status
    assert [(s.ops, s.devices) for s in pruned.stages] == [(s.ops, s.devices) for s in every.stages]
    assert pruned.search["stage_solves"] <= every.search["stage_solves"]
    if cost_model == "calibrated":  # here the cap binds, and some capped solves are skipped
        assert pruned.search["stage_solves"] < every.search["stage_solves"]



def test_a_stage_bounds_m_t_plus_tail_of_each_of_its_plans():
    # the incumbent's skip reads StageOracle.least_step: at most m t + tail of every plan the
    # stage offers (here with the cap off, so the plans are the free optima at each weight)
    graph = api.load_graph("gpt2", layers=2, batch=8)
    oracle = StageOracle(lambda mb: api.load_graph("gpt2", layers=2, batch=mb), 8,
                         {"cluster": "h100-sxm", "zero": "auto", "recompute": "auto"}, None,
                         {"powers_of_two": True}, cost_model="calibrated")
    units = cut_points(graph, "blocks", 1)
    for m in (1, 4):
        for a, b in itertools.combinations(range(len(units)), 2):
            ranges = ((units[a], units[b]),)
            quick = oracle.least_step(ranges, 4, m, quick=True)
            least = oracle.least_step(ranges, 4, m)
            plans = oracle.options(ranges, 4, m, 1.0)
            assert plans and quick <= least * (1 + 1e-12)
            assert min(m * p.seconds + p.tail for p in plans) == pytest.approx(least, rel=1e-12)
