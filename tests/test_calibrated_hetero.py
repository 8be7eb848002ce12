"""The calibrated model on a mixed cluster (cost_models/calibrated_hetero.py)."""
import dataclasses
import json

import numpy as np
import pytest
from test_hetero import same_where_all_16_run  # tests/ is on sys.path

import pase
from pase.api import build_problem, default_cost_model
from pase.builder import GraphBuilder
from pase.cluster import Device, Group, Link, compose, get_cluster
from pase.cost_models.calibrated import CalibratedCostModel

MIXED = "dgx-a100x2+dgx1-v100x2"  # ranks 0-15 A100 40GB, 16-31 V100 32GB
SMALL = {"model_options": {"layers": 1}, "batch": 32, "powers_of_two": True}


def _by_config(built):
    """Per op, {config tuple: candidate index}."""
    return [{tuple(int(x) for x in row): k for k, row in enumerate(c)} for c in built.space.configs]


def test_twin_types_price_as_the_homogeneous_cluster():
    # Two types alike but for the device's name stay two groups, so the mixed-cluster code
    # prices them; every config that spans all 16 devices, every edge between two such, and
    # every memory entry are the homogeneous cluster's, bit for bit. (An op split at most 8
    # ways sits on the first group only, where the homogeneous cluster spreads its replicas
    # over both nodes: its collectives differ.)
    a = get_cluster("dgx-a100")
    twin = dataclasses.replace(a, name="twin", device=dataclasses.replace(a.device, name="A100 twin"))
    mixed = compose([a, twin])
    assert mixed.groups and mixed.prefixes() == (8,)
    base = build_problem("gpt2", 16, "calibrated", cluster="dgx-a100x2", **SMALL)
    het = build_problem("gpt2", 16, "calibrated", cluster=mixed, **SMALL)
    placed = same_where_all_16_run(base, het)
    assert all((on == 16).any() for on in placed)


def test_a_plan_on_the_fast_group_prices_as_on_that_group_alone():
    # Configs of at most 16 devices run on the A100 group: their seconds, and the edges
    # between them, are those of the two A100 nodes alone. Memory is in bytes of the
    # smallest-memory type (V100, 32 GB), so an A100's bytes count 32/40 of themselves.
    alone = build_problem("gpt2", 16, "calibrated", cluster="dgx-a100x2", **SMALL)
    mixed = build_problem("gpt2", 32, "calibrated", cluster=MIXED, **SMALL)
    index = _by_config(mixed)
    for i, configs in enumerate(alone.space.configs):
        k = [index[i][tuple(int(x) for x in row)] for row in configs]
        assert np.array_equal(alone.problem.vertex_costs[i], mixed.problem.vertex_costs[i][k])
        assert np.allclose(alone.problem.memory[i] * 32 / 40, mixed.problem.memory[i][k],
                           rtol=1e-12)
    for (u, v), x, y in zip(alone.problem.edges, alone.problem.edge_costs, mixed.problem.edge_costs):
        ku = [index[u][tuple(int(a) for a in row)] for row in alone.space.configs[u]]
        kv = [index[v][tuple(int(a) for a in row)] for row in alone.space.configs[v]]
        assert np.array_equal(x, y[np.ix_(ku, kv)])
    # the whole solved plan: same price on the fast group as on those nodes alone
    plan = pase.solve("gpt2", 16, cluster="dgx-a100x2", **SMALL)
    choice = [index[i][tuple(plan.configs[op.name].get(d.name, 1) for d in op.dims)]
              for i, op in enumerate(mixed.graph.ops)]
    assert mixed.problem.evaluate(choice) == pytest.approx(plan.total_cost, rel=1e-12)
    # and the plan's price (syncs' exposure, optimizer step) is the A100 nodes' too
    mine = tuple(index[i][tuple(plan.configs[op.name].get(d.name, 1) for d in op.dims)]
                 for i, op in enumerate(alone.graph.ops))
    own = _by_config(alone)
    theirs = tuple(own[i][tuple(plan.configs[op.name].get(d.name, 1) for d in op.dims)]
                   for i, op in enumerate(alone.graph.ops))
    got = mixed.cost_model.price_plan(mixed.graph, mixed.problem, mine)
    want = alone.cost_model.price_plan(alone.graph, alone.problem, theirs)
    assert got["step_seconds"] == pytest.approx(want["step_seconds"], rel=1e-12)
    assert got["breakdown"] == pytest.approx(want["breakdown"], rel=1e-12)


def _fc():
    b = GraphBuilder("fc")
    x = b.input((40960, 4096), names=("b", "k"), roles=("batch", "channel"))
    b.fc(x, 1280, name="fc")
    return b.build()


def test_an_op_over_both_types_is_paced_by_the_slowest():
    # The FC split 32 ways on its batch: 2 x 1280 x 1280 x 4096 FLOP forward on every device,
    # in fp16 (V100 has no bf16). An FC is priced at large-GEMM efficiency. By hand from the
    # presets: the V100 (no calibration row: the generic constants) at 125 TFLOP/s x 0.70
    # plus 8 us a kernel; the A100 at 312 TFLOP/s x 0.80 plus 6 us. Both types hold a tile,
    # so the V100 paces the op.
    graph = _fc()
    op = graph.ops[0]
    config = np.array([[{"b": 32}.get(d.name, 1) for d in op.dims]])
    model = CalibratedCostModel(MIXED).bind(graph, 32)
    assert model.precision == "fp16"
    flop = 2.0 * 1280 * 1280 * 4096
    v100 = flop / (125e12 * 0.70) + 8e-6
    a100 = flop / (312e12 * 0.80) + 6e-6
    assert a100 < v100 / 2
    assert model.work(op, config).forward_seconds[0] == pytest.approx(v100, rel=1e-9)
    # split 16 ways it sits on the A100s alone: twice the rows, at the A100's pace
    half = np.array([[{"b": 16}.get(d.name, 1) for d in op.dims]])
    want = 2 * flop / (312e12 * 0.80) + 6e-6
    assert model.work(op, half).forward_seconds[0] == pytest.approx(want, rel=1e-9)


def test_balanced_shares_scale_each_types_kernels():
    # Balanced: 32 one-device slices of the batch, shares by peak (312 and 125 TFLOP/s), so
    # an A100 does 32 x 312 / (16 x 312 + 16 x 125) of the even tile and a V100
    # 32 x 125 / (16 x 312 + 16 x 125). Each type's even-tile kernel (as above) scales by its
    # share; the slower of the two paces the op (the V100 still: its fitted efficiency is
    # lower than the A100's, which peak speeds do not see).
    graph = _fc()
    op = graph.ops[0]
    config = np.array([[{"b": 32}.get(d.name, 1) for d in op.dims]])
    model = CalibratedCostModel(MIXED, split="balanced").bind(graph, 32)
    flop = 2.0 * 1280 * 1280 * 4096
    total = 16 * 312 + 16 * 125
    a100 = (flop / (312e12 * 0.80) + 6e-6) * 32 * 312 / total
    v100 = (flop / (125e12 * 0.70) + 8e-6) * 32 * 125 / total
    got = model.work(op, config).forward_seconds[0]
    assert got == pytest.approx(max(a100, v100), rel=1e-9)
    even = CalibratedCostModel(MIXED).bind(graph, 32).work(op, config).forward_seconds[0]
    assert got < 0.6 * even


def test_memory_is_checked_against_each_types_hbm():
    # The same bytes on both types: the V100's 32 GB is the binding cap (reference), so the
    # vector holds them as they are; on the A100 group only they count 32/40 of themselves.
    graph = _fc()
    op = graph.ops[0]
    model = CalibratedCostModel(MIXED).bind(graph, 32)
    wide = np.array([[{"b": 32}.get(d.name, 1) for d in op.dims]])
    narrow = np.array([[{"b": 16}.get(d.name, 1) for d in op.dims]])
    w32, w16 = model.work(op, wide), model.work(op, narrow)
    own32 = float(w32.state_bytes[0] + model.kept_activation_bytes(w32)[0])
    own16 = float(w16.state_bytes[0] + model.kept_activation_bytes(w16)[0])
    assert model.work_memory(w32)[0] == pytest.approx(own32, rel=1e-12)
    assert model.work_memory(w16)[0] == pytest.approx(own16 * 32 / 40, rel=1e-12)


def test_the_default_model_of_a_mixed_cluster_is_calibrated(capsys):
    assert default_cost_model(MIXED) == "calibrated"
    from pase.cli import main
    assert main(["solve", "mlp", "-p", "32", "--cluster", MIXED, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost_model"] == "calibrated"


def _small_mixed():
    # two devices of each type, the slow one close enough that the best plan uses both
    def group(name, tflops):
        return Group(name, 1, 2, Device(name, tflops, 16.0, "fp16", hbm_gbps=500.0),
                     Link(100.0, 2.0), Link(20.0, 5.0))
    return compose([group("slow", 30.0), group("fast", 40.0)], "small-mixed")


@pytest.mark.parametrize("split", ["even", "balanced"])
def test_certified_search_matches_exhaustive_on_a_mixed_cluster(split):
    kwargs = dict(cluster=_small_mixed(), model_options={"length": 3, "width": 1024}, batch=8192,
                  cost_options={"split": split})
    dp = pase.solve("chain", 4, "dp", **kwargs)
    brute = pase.solve("chain", 4, "exhaustive", **kwargs)
    assert dp.cost_model == "calibrated"
    assert dp.total_cost == pytest.approx(brute.total_cost, rel=1e-9)
    sizes = [int(np.prod(list(c.values()))) for c in dp.configs.values()]
    assert 4 in sizes  # the plan spreads ops over both types


def test_a_mixed_plan_reports_mfu_against_each_types_peak():
    # 16 A100 at 312 TFLOP/s and 16 V100 at 125 (fp16): the plan's peak is their sum. The
    # model FLOP a step does (mfu x step x peak) is the graph's, whatever cluster prices it:
    # on the A100 nodes alone (peak 16 x 312 TFLOP/s) it comes out the same.
    mixed = build_problem("gpt2", 32, cluster=MIXED, **SMALL)
    alone = build_problem("gpt2", 16, cluster="dgx-a100x2", **SMALL)
    flop = []
    for built, peak in ((mixed, 16 * (312 + 125) * 1e12), (alone, 16 * 312 * 1e12)):
        choice = tuple(0 for _ in built.graph.ops)
        price = built.cost_model.price_plan(built.graph, built.problem, choice)
        flop.append(price["mfu"] * price["step_seconds"] * peak)
    assert flop[0] == pytest.approx(flop[1], rel=1e-9) and flop[0] > 0
    assert price["device_memory_bytes"] == 40 * 2**30  # the A100 nodes alone: their own HBM
    assert mixed.cost_model.price_plan(mixed.graph, mixed.problem, choice)[
        "device_memory_bytes"] == 32 * 2**30  # the mixed cluster's smallest: V100's
