"""ZeRO stages 1-3 as per-op variants: traffic, memory and time by hand, the search."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import pase
from pase.api import build_problem, load_graph
from pase.cluster import get_cluster
from pase.errors import OptionError, StrategyError
from pase.registry import COST_MODELS
from pase.strategy import Strategy, strategy_variants
from pase.work import op_work
from pase.work.relayout import collective_bytes
from pase.work.variants import Variant, apply_variant, variant_from_json

MiB = 2.0**20
WIDTH = 1024  # the mlp's hidden width: fc2's weight is WIDTH x WIDTH fp32 = 4 MiB


def fc2_work(q: int = 8):
    """fc2 of the mlp, data-parallel: its batch dim split ``q`` ways."""
    op = load_graph("mlp").op("fc2")
    cfg = np.array([[q if d.role == "batch" else 1 for d in op.dims]])
    return op_work(op, cfg)


def traffic(work) -> float:
    """Bytes per device the op's collectives move (ring formulas of pase.work.relayout)."""
    return sum(collective_bytes(c.kind, float(c.nbytes[0]), int(work.group_size(c)[0]))
               for c in work.collectives)


def test_zero3_traffic_is_one_and_a_half_all_reduces_on_a_data_parallel_mlp():
    q, weight = 8, WIDTH * WIDTH * 4.0
    all_reduce = 2 * (q - 1) / q * weight  # textbook ring all-reduce, per device
    base, z3 = fc2_work(q), apply_variant(fc2_work(q), 3)
    # fc2's input is made by fc1, so its input gradient is all-reduced too: zero-size
    # here (the input dims are not split), only the weight's sync moves bytes.
    assert traffic(base) == pytest.approx(all_reduce, rel=1e-12)
    assert traffic(z3) == pytest.approx(1.5 * all_reduce, rel=0.01)
    kinds = sorted((c.kind, c.phase) for c in z3.collectives if c.weight is not None)
    assert kinds == [("all-gather", "backward"), ("all-gather", "forward"),
                     ("reduce-scatter", "gradient")]


@pytest.mark.parametrize("stage", [1, 2])
def test_zero1_and_2_move_what_the_all_reduce_moved(stage):
    q, weight = 8, WIDTH * WIDTH * 4.0
    assert traffic(apply_variant(fc2_work(q), stage)) == pytest.approx(2 * (q - 1) / q * weight)


def test_zero_memory_per_stage_by_hand():
    q, P = 8, WIDTH * WIDTH * 4.0
    acts = 64 / q * WIDTH * 4.0  # fc2's output tile (batch 64 split q ways)
    want = {0: 4 * P, 1: 2 * P + 2 * P / q, 2: P + 3 * P / q, 3: 4 * P / q}  # Adam: S = 4
    for stage, state in want.items():
        w = apply_variant(fc2_work(q), stage)
        assert float(w.memory[0]) == pytest.approx(state + acts, rel=1e-12), stage
        assert float(w.activation_bytes[0]) == acts


def test_zero3_time_trades_the_all_reduce_for_three_ring_steps_on_one_node():
    """One node: an all-gather or reduce-scatter is a ring step (q-1)/q n/B + (q-1) a;
    the all-reduce is two of them, or NCCL's tree 2 n/B + 2 log2(q) a when faster; zero 3
    pays two all-gathers and a reduce-scatter instead."""
    model = COST_MODELS.get("alpha-beta")("dgx-a100").for_devices(8)
    link = get_cluster("dgx-a100", 8).intra
    a, bw = link.latency_s, link.bytes_per_second
    q, n = 8, WIDTH * WIDTH * 4.0
    step = (q - 1) / q * n / bw + (q - 1) * a
    all_reduce = min(2 * step, 2 * n / bw + 6 * a)
    base = float(model.work_costs(fc2_work(q))[0])
    z3 = float(model.work_costs(apply_variant(fc2_work(q), 3))[0])
    assert z3 - base == pytest.approx(3 * step - all_reduce, rel=1e-9)


def test_zero_changes_nothing_without_a_data_parallel_group():
    op = load_graph("mlp").op("fc2")
    cfg = np.array([[1 if d.role == "batch" else (8 if d.role == "parameter" else 1) for d in op.dims]])
    w = op_work(op, cfg)
    for stage in (1, 2, 3):
        z = apply_variant(w, stage)
        assert float(z.memory[0]) == float(w.memory[0])
        assert traffic(z) == traffic(w)


def solve(cap, zero="auto", recompute="none", model="gpt2", **kw):
    return pase.solve(model, 8, cost_model="alpha-beta", powers_of_two=True, memory_cap=cap,
                      cost_options={"zero": zero, "recompute": recompute}, model_options={"layers": 2},
                      **kw)


def test_a_fixed_stage_is_forced_and_auto_never_loses():
    cap = 3 * 2**30
    base, auto, z3 = solve(cap, "0"), solve(cap, "auto"), solve(cap, "3")
    assert auto.total_cost <= base.total_cost * (1 + 1e-12)
    assert auto.total_cost <= z3.total_cost * (1 + 1e-12)
    assert all(v.zero == 3 for v in z3.variants.values()) and z3.variants
    assert not base.variants


def test_zero3_only_where_the_cap_needs_it():
    free = solve("none")
    assert not any(v.zero == 3 for v in free.variants.values())  # stage 3 is strictly slower
    least0 = build_problem("gpt2", 8, "alpha-beta", powers_of_two=True, memory_cap="none",
                           model_options={"layers": 2}).problem
    # between the least memory of stage 0 and the free optimum's: the search shards
    cap = 0.5 * (least0.min_memory() + free.meta["memory_bytes"])
    tight, base = solve(cap), solve(cap, "0")
    assert tight.meta["fits_memory_cap"] and tight.total_cost <= base.total_cost
    assert tight.meta["memory_bytes"] <= cap


def test_strategy_json_round_trip_and_old_files():
    s = solve(3 * 2**30, "3")
    data = json.loads(s.to_json())
    assert data["variants"] and all(v == {"zero": 3, "recompute": False} for v in data["variants"].values())
    assert strategy_variants(data) == s.variants
    del data["variants"]  # an older output: every op at stage 0
    assert strategy_variants(data) == {}
    assert strategy_variants({"fc1": {"b": 2}}) == {}
    table = s.table()
    assert "variant" in table.splitlines()[0] and "zero 3" in table


def test_with_variants_prices_the_recorded_variant():
    """What `pase evaluate` does: each op at its recorded variant, one candidate per config."""
    built = build_problem("mlp", 8, "alpha-beta", cost_options={"zero": "auto"}, memory_cap="none")
    fixed = built.cost_model.with_variants({"fc2": {"zero": 3}})
    problem = fixed.problem(built.graph, built.space)
    assert (problem.sizes == built.space.sizes).all()
    data_parallel = built.space.index_of("fc2", {"b": 8})
    v = built.graph.index("fc2")
    model = fixed.for_devices(8)
    want = float(model.work_costs(apply_variant(model.work(built.graph.op("fc2"),
                                                           built.space.configs[v]), 3))[data_parallel])
    assert float(problem.vertex_costs[v][data_parallel]) == want
    choice = [0] * len(built.graph.ops)
    choice[v] = data_parallel
    s = Strategy.from_choice(built.graph, built.space, problem, choice)
    assert s.variant("fc2") == Variant(3, False) and s.variant("fc1") == Variant()


def test_bad_variants_are_one_line_errors():
    with pytest.raises(OptionError, match="zero must be one of 0, 1, 2, 3"):
        variant_from_json({"zero": 4})
    with pytest.raises(OptionError, match="unknown key 'stage'"):
        variant_from_json({"stage": 1})
    with pytest.raises(OptionError, match="recompute must be true or false"):
        variant_from_json({"recompute": "yes"})
    with pytest.raises(StrategyError, match="variant of op 'fc1'"):
        strategy_variants({"strategy": {"fc1": {"b": 2}}, "variants": {"fc1": {"zero": "x"}}})
    model = COST_MODELS.get("alpha-beta")()
    built = build_problem("mlp", 8, "alpha-beta")
    with pytest.raises(OptionError, match="unknown op 'nope'"):
        model.with_variants({"nope": {"zero": 1}}).problem(built.graph, built.space)
    with pytest.raises(OptionError, match="has no ZeRO"):
        COST_MODELS.get("paper")().with_variants({"fc1": {"zero": 1}})
    with pytest.raises(OptionError, match="unknown zero '5'"):
        COST_MODELS.get("alpha-beta")(zero="5")


def test_cli_zero_flag():
    run = subprocess.run([sys.executable, "-m", "pase", "solve", "mlp", "-p", "8", "--cost-model",
                          "alpha-beta", "--zero", "3", "--solver", "data-parallel", "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["variants"] and all(v["zero"] == 3 for v in data["variants"].values())
    bad = subprocess.run([sys.executable, "-m", "pase", "solve", "mlp", "-p", "8", "--cost-model",
                          "alpha-beta", "--zero", "5"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--zero" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert math.isfinite(data["total_cost"])


def test_evaluate_and_simulate_honour_a_strategy_files_variants():
    from pase.sim.simulate import simulate

    kw = dict(cost_model="alpha-beta", solver="data-parallel")
    plain = pase.solve("mlp", 8, **kw)
    both = pase.solve("mlp", 8, cost_options={"zero": "3", "recompute": "all"}, **kw)
    data = json.loads(both.to_json())
    again = pase.evaluate("mlp", data, 8, cost_model="alpha-beta")
    assert again.total_cost == both.total_cost and again.variants == both.variants
    del data["variants"]  # an older file: stage 0, no recomputation
    assert pase.evaluate("mlp", data, 8, cost_model="alpha-beta").total_cost == plain.total_cost
    # simulated: every weight's state sharded 8 ways (Adam, 4 copies), no activations kept
    peak = float(simulate("mlp", both).peak_memory.max())
    assert peak == 4 * (3 * WIDTH * WIDTH + WIDTH * 10) * 4.0 / 8
    assert float(simulate("mlp", plain).peak_memory.max()) > 8 * peak


def test_the_group_spans_every_split_batch_dim():
    """gpt2's fc1 (``ble,ef->blf`` + bias f) with b split 2 and l split 4: both parameters'
    data-parallel group is all 8 devices. By hand, per device: stage 0 all-reduces each
    gradient once per split dim (2(1/2) + 2(3/4) = 2.5 tiles), stages 1-2 move 2 x 7/8,
    stage 3 3 x 7/8; stage 3 keeps 4/8 of the Adam state, stage 2 1 + 3/8."""
    op = load_graph("gpt2", layers=1).op("h0.mlp.fc1")
    split = {"b": 2, "l": 4, "f": 1, "e": 1}
    work = op_work(op, np.array([[split[d.name] for d in op.dims]]))
    P = (768 * 3072 + 3072) * 4.0  # weight and bias, fp32, whole on every device
    assert traffic(work) == pytest.approx(2.5 * P, rel=1e-12)
    for stage, tiles, state in ((1, 1.75, 2 + 2 / 8), (2, 1.75, 1 + 3 / 8), (3, 2.625, 4 / 8)):
        z = apply_variant(work, stage)
        assert traffic(z) == pytest.approx(tiles * P, rel=1e-12), stage
        assert float(z.state_bytes[0]) == pytest.approx(state * P, rel=1e-12), stage
