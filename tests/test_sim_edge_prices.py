"""A calibrated plan's re-layouts in the simulation: at their carried prices, one bar a port.

The tied embedding of a language model (issue: `pase view gpt2 -p 8` drew 4.25 ms of
communication on ``lm_head`` where the plan charges 0.29 ms): the embedding keeps its
matrix split over its width ``d`` 8 ways, the head (batch split 8 ways) reads it whole.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import pase
from pase.sim import simulate
from pase.sim.simulate import config_arrays
from pase.sim.tasks import connection_plans
from pase.strategy import Strategy
from pase.viewer.comms import from_timeline

GPT = {"layers": 1, "width": 128, "heads": 2, "ff": 256, "vocab": 512, "seq": 32, "positions": 64}
TIED = {"wte": {"d": 8}, "lm_head": {"b": 8}}


@pytest.fixture(scope="module")
def tied():
    graph = pase.api.load_graph("gpt2", **GPT)
    plan = pase.evaluate(graph, TIED, 8, "calibrated", cluster="dgx-a100")
    return graph, plan


def _tied_price(plan):
    return next(e[3] for e in plan.op_prices["lm_head"]["edges"] if e[0] == "wte")


def test_each_device_receives_seven_eighths_of_the_tied_matrix(tied):
    # by hand: the 512 x 128 matrix, each device holding 16 of its 128 columns, must
    # receive the other 7 x 16 columns of all 512 rows: 512 * 112 = 57,344 elements, 7 *
    # 8,192 from each other device; it sends its own 8,192 to each of the 7 others
    graph, plan = tied
    cfgs = config_arrays(graph, plan.configs, 8)
    cluster = pase.cluster.get_cluster("dgx-a100", 8)
    wte, head = graph.index("wte"), graph.index("lm_head")
    (sends, _), (back, _) = next((f, b) for c, f, b in connection_plans(graph, cfgs, cluster, 8)
                                 if (c[0], c[2]) == (wte, head))
    received = np.zeros(8)
    sent = np.zeros(8)
    for (s, d), elems in sends.items():
        received[d] += elems
        sent[s] += elems
    assert received.tolist() == [512 * 112] * 8 and sent.tolist() == [512 * 112] * 8
    assert all(elems == 512 * 16 for elems in sends.values()) and len(sends) == 8 * 7
    assert not back  # the head's weight gradient already lies where the embedding keeps it
    # the plan's price of that edge: those bytes (bf16) at the achieved NVLink bandwidth,
    # plus one hop's latency (3 us on the dgx-a100); and once a step, at the overlap tax
    # (0.15 on A100), the head's 8 partial weight gradients reduce-scattered onto the
    # embedding's width split: 7/8 of the whole 512 x 128 bf16 matrix, in a bucket
    nbytes = 512 * 112 * 2
    assert plan.meta["bytes_per_element"] == 2
    gbps = plan.meta["link_gbps"]["intra"]
    sync = 7 / 8 * 512 * 128 * 2 / (gbps * 1e9)
    assert _tied_price(plan) == pytest.approx(nbytes / (gbps * 1e9) + 3e-6 + 0.15 * sync,
                                              rel=1e-9)


def test_the_timeline_charges_the_head_the_tied_relayout_once(tied):
    # the 7 blocks a device receives and the 7 it sends at once share its port: one bar,
    # not 14 (the page summed them into 14 times the re-layout's time)
    graph, plan = tied
    r = simulate(graph, plan, "dgx-a100")
    bars = [ev for ev in r.timeline if ev.resource == "gpu0.intra"
            and ev.label == "wte->lm_head activation"]
    assert len(bars) == 1
    price = _tied_price(plan)
    assert price <= bars[0].end - bars[0].start < 2 * price  # shared ports may slow it
    names = [op.name for op in graph.ops]
    head = from_timeline(names, r.timeline)[names.index("lm_head")]
    own = sum(c[5] for c in plan.op_prices["lm_head"]["collectives"])
    incoming = sum(e[3] for e in plan.op_prices["lm_head"]["edges"])
    assert head["cm"] < 2 * (own + incoming)


def test_a_carried_plan_moves_its_own_element_size(tied):
    # without carried edge prices the re-layout moves at the link's bandwidth: the bytes are
    # the plan's bf16 ones, not the simulator's fp32 default (twice the time)
    graph, plan = tied
    data = json.loads(plan.to_json())
    for p in data["op_prices"].values():
        del p["edges"]
    old = Strategy.from_dict(data)
    r = simulate(graph, old, "dgx-a100")
    bar = next(ev for ev in r.timeline if ev.resource == "gpu0.intra"
               and ev.label == "wte->lm_head activation")
    assert bar.end - bar.start < 1.5 * _tied_price(plan)


def test_carried_edges_add_up_to_the_plans_edge_costs(tied):
    _, plan = tied
    total: dict[tuple, float] = {}
    for v, p in plan.op_prices.items():
        for u, _, _, seconds in p["edges"]:
            key = tuple(sorted((u, v)))
            total[key] = total.get(key, 0.0) + seconds
    for u, v, cost in plan.edge_costs:
        assert total.get(tuple(sorted((u, v))), 0.0) == pytest.approx(cost, rel=1e-12, abs=1e-18)
    back = Strategy.from_dict(json.loads(plan.to_json()))
    assert back.op_prices["lm_head"]["edges"] == plan.op_prices["lm_head"]["edges"]


def test_a_serial_plan_simulates_to_the_sum_of_its_prices():
    # one node, 4 devices: fc1 split over its outputs, the rest replicated, no data
    # parallelism: no gradient sync, the forward all-gathers fc1's output and nothing moves
    # back, so the step runs one task after another: every kernel, the re-layout at its
    # price (which the simulator's own rule would not give: fc1's 2 tiles on 4 devices), each
    # optimizer step
    plan = pase.evaluate("mlp", {"fc1": {"n": 2}}, 4, "calibrated", cluster="dgx-a100")
    prices = plan.op_prices
    priced = sum(p["forward"] + p["backward"] + p["optimizer"]
                 + sum(c[5] for c in p["collectives"]) + sum(e[3] for e in p["edges"])
                 for p in prices.values())
    assert prices["fc2"]["edges"][0][3] > 0
    r = simulate(pase.api.load_graph("mlp"), plan, "dgx-a100")
    assert r.step_time == pytest.approx(priced, rel=1e-6)
    assert r.step_time == pytest.approx(plan.meta["step_seconds"], rel=1e-6)
