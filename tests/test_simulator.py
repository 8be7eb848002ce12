"""The discrete-event simulator: closed forms, lower bounds, determinism."""
import numpy as np
import pytest

import pase
from pase.api import run_solver
from pase.cluster import LINK_CLASSES, Cluster, Device, Link
from pase.cost_models.alpha_beta import AlphaBetaCostModel
from pase.errors import StrategyError
from pase.registry import MODELS
from pase.sim import simulate, tasks
from pase.sim.engine import FLOW, TaskGraph, run
from pase.space import ConfigSpace
from pase.work import group_members, group_topology, op_work

EFF = 0.5


def compute_seconds(graph, configs, cluster_tflops):
    total = 0.0
    for op in graph.ops:
        cfg = np.array([[configs.get(op.name, {}).get(d, 1) for d in op.dim_names]])
        total += op_work(op, cfg).flop[0]
    return total / (cluster_tflops * 1e12 * EFF)


def strategies(model, devices, cluster, random=3):
    """dp optimum, baselines and seeded random picks, as config mappings."""
    graph = MODELS.get(model)()
    space = ConfigSpace(graph, devices)
    problem = AlphaBetaCostModel(cluster).problem(graph, space)
    choices = [run_solver(s, problem).choice for s in ("dp", "data-parallel", "owt")]
    rng = np.random.default_rng(0)
    choices += [tuple(int(rng.integers(k)) for k in problem.sizes) for _ in range(random)]
    return graph, [{op.name: space.config(i, c[i]) for i, op in enumerate(graph.ops)}
                   for c in choices]


def test_one_device_step_is_the_sum_of_compute_times():
    graph = MODELS.get("alexnet")()
    r = simulate(graph, {}, "gtx1080ti", devices=1)
    assert r.step_time == pytest.approx(compute_seconds(graph, {}, 11.3), rel=1e-12)
    assert r.compute_busy[0] == pytest.approx(r.step_time, rel=1e-12)
    assert r.link_busy == {}


def test_one_device_memory_is_all_state_and_activations():
    graph = MODELS.get("mlp")()
    r = simulate(graph, {}, "dgx-a100", devices=1)
    expected = sum(op_work(op, np.ones((1, len(op.dims)), dtype=np.int64)).memory[0]
                   for op in graph.ops)
    assert r.peak_memory[0] == pytest.approx(expected)


@pytest.mark.parametrize("memory_gib, fits", [(0.04, False), (0.06, True)])
def test_the_result_says_whether_the_peak_fits_each_devices_memory(memory_gib, fits):
    # the unsplit mlp holds 0.0478 GiB a device (its state and activations, as above)
    graph = MODELS.get("mlp")()
    cluster = Cluster("small", 2, 1, Device("toy", 10.0, memory_gib), Link(100, 1), Link(10, 5))
    r = simulate(graph, {}, cluster, devices=2)
    assert 0.04 * 2**30 < r.peak_memory.max() < 0.06 * 2**30
    assert r.fits_memory is fits and r.to_dict()["fits_memory"] is fits
    assert r.to_dict()["memory_cap_bytes"] == memory_gib * 2**30
    assert ("over the 0.04 GiB a device has" in r.summary()) is not fits


def test_one_layer_data_parallel_is_compute_plus_one_all_reduce():
    b = pase.builder.GraphBuilder("one-layer")
    b.softmax_cross_entropy(b.fc(b.input((64, 512), names=("b", "k")), 256, name="fc"), name="loss")
    graph = b.build()
    configs = {"fc": {"b": 8}, "loss": {"b": 8}}
    r = simulate(graph, configs, "dgx-a100", devices=8)
    # 512 KiB over 8 ranks: NCCL's tree beats the ring's 14 hops (pase.perf.comms, IDEAL):
    # 2 n / 300 GB/s plus 2 log2(8) hops of 3 us
    ring = 2 * 512 * 256 * 4 / 300e9 + 6 * 3e-6
    assert r.step_time == pytest.approx(compute_seconds(graph, configs, 312) + ring, rel=1e-9)


def test_two_node_data_parallel_pays_the_all_reduce_across_nodes():
    b = pase.builder.GraphBuilder("one-layer")
    b.softmax_cross_entropy(b.fc(b.input((64, 512), names=("b", "k")), 256, name="fc"), name="loss")
    graph = b.build()
    configs = {"fc": {"b": 16}, "loss": {"b": 16}}
    r = simulate(graph, configs, "dgx-a100x2", devices=16)
    # the tree again, at 8 NICs' 200 GB/s, 2 log2(16) hops of 5 us across nodes
    ring = 2 * 512 * 256 * 4 / 200e9 + 8 * 5e-6
    assert r.step_time == pytest.approx(compute_seconds(graph, configs, 312) + ring, rel=1e-9)
    assert r.link_busy["gpu15.inter"] > 0


@pytest.mark.parametrize("model,devices,cluster", [("alexnet", 8, "gtx1080ti"),
                                                   ("mlp", 16, "dgx-a100"),
                                                   ("diamond", 4, "rtx2080ti")])
def test_step_is_never_shorter_than_the_busiest_resource(model, devices, cluster):
    graph, configs = strategies(model, devices, cluster)
    for cfg in configs:
        r = simulate(graph, cfg, cluster, devices)
        assert r.step_time >= r.compute_busy.max() * (1 - 1e-12)
        assert r.step_time >= max(r.link_traffic.values(), default=0.0) * (1 - 1e-12)
        assert all(busy <= r.step_time * (1 + 1e-12) for busy in r.link_busy.values())


def test_data_parallel_is_at_least_compute_over_p_and_at_most_the_serial_model():
    graph = MODELS.get("mlp")()
    space = ConfigSpace(graph, 8)
    problem = AlphaBetaCostModel("dgx-a100").problem(graph, space)
    sol = run_solver("data-parallel", problem)
    configs = {op.name: space.config(i, sol.choice[i]) for i, op in enumerate(graph.ops)}
    r = simulate(graph, configs, "dgx-a100", 8)
    assert r.step_time >= compute_seconds(graph, {}, 312) / 8
    # The analytic model adds every collective serially; the simulator overlaps them.
    assert r.step_time <= sol.cost * (1 + 1e-9)


def test_deterministic():
    graph, configs = strategies("diamond", 4, "dgx-a100", random=1)
    a = simulate(graph, configs[-1], "dgx-a100", 4)
    b = simulate(graph, configs[-1], "dgx-a100", 4)
    assert a.step_time == b.step_time and a.timeline == b.timeline


def test_accepts_a_strategy():
    s = pase.solve("alexnet", 4)
    r = simulate("alexnet", s, "gtx1080ti")
    assert r.devices == 4 and r.model == "alexnet" and r.step_time > 0
    assert {ev.kind for ev in r.timeline} <= {"forward", "backward", "communication", "gradient-sync"}


def test_bad_strategies_name_the_op_and_dim():
    graph = MODELS.get("mlp")()
    with pytest.raises(StrategyError, match="unknown op 'nope'"):
        simulate(graph, {"nope": {"b": 2}}, "dgx-a100", 8)
    with pytest.raises(StrategyError, match="dim 'x'.*dims: b, n, k"):
        simulate(graph, {"fc1": {"x": 2}}, "dgx-a100", 8)
    with pytest.raises(StrategyError, match="more than the 8 devices"):
        simulate(graph, {"fc1": {"b": 4, "n": 4}}, "dgx-a100", 8)


def test_engine_shares_bandwidth_fairly():
    tg = TaskGraph(capacity=[1.0, 1.0], devices=1)
    a = tg.flow((0,), 1.0, 0.0, "a", "communication", ())
    b = tg.flow((0,), 1.0, 0.5, "b", "communication", ())
    c = tg.flow((1,), 1.0, 0.0, "c", "communication", ())
    tr = run(tg)
    # a alone for 0.5 s (0.5 B left), then a and b share: a ends at 1.5, b at 2.0.
    assert tr.end[a] == pytest.approx(1.5) and tr.end[b] == pytest.approx(2.0)
    assert tr.end[c] == pytest.approx(1.0)


def test_engine_runs_compute_in_priority_order():
    tg = TaskGraph(capacity=[], devices=1)
    late = tg.compute(0, 1.0, (1,), "late", "backward")
    early = tg.compute(0, 1.0, (0,), "early", "forward")
    tr = run(tg)
    assert tr.start[early] == 0.0 and tr.start[late] == 1.0


def test_plot_timeline(tmp_path):
    pytest.importorskip("matplotlib")
    from pase.sim.plot import plot_timeline

    r = simulate("diamond", {"split": {"b": 2}}, "dgx-a100", 2)
    path = plot_timeline(r, tmp_path / "t.png")
    assert path.stat().st_size > 1000


def test_result_to_json():
    import json

    r = simulate("diamond", {"split": {"b": 2}}, "dgx-a100x2", 16)
    data = json.loads(json.dumps(r.to_dict(timeline=True)))
    assert data["devices"] == 16 and data["cluster"] == "dgx-a100x2"
    assert data["step_time"] == r.step_time and len(data["timeline"]) == len(r.timeline)


def test_node_membership_agrees_between_the_simulator_and_the_cost_model():
    # 3 devices per node (not a power of two): rank r is on node r // 3, by hand.
    cl = Cluster("lab", 4, 3, Device("toy", 1.0, 8.0), Link(10, 1), Link(1, 10))
    graph = MODELS.get("mlp")()
    space = ConfigSpace(graph, 12)
    rng = np.random.default_rng(3)
    seen = set()
    for _ in range(4):
        configs = [c[rng.integers(len(c))] for c in space.configs]
        tg, _ = tasks.build(graph, configs, cl, 12, EFF, 4, "adam")
        for t in range(len(tg)):
            if tg.kind[t] != FLOW:
                continue
            # resource id = 4 * device + 2 * link class + receive
            devices = [r // 4 for r in tg.resources[t]]
            link = {LINK_CLASSES[(r // 2) % 2] for r in tg.resources[t]}.pop()
            nodes = {d // 3 for d in devices}
            if len(devices) == 2:  # a point-to-point transfer
                assert link == ("intra" if len(nodes) == 1 else "inter")
                seen.add(link)
            elif link == "inter":  # a collective phase across nodes
                assert len(nodes) > 1
    assert seen == {"intra", "inter"}
    # The cost model's view of each collective group matches the simulator's groups.
    for i, op in enumerate(graph.ops):
        work = op_work(op, space.configs[i])
        for c in work.collectives:
            nodes, local = group_topology(op, space.configs[i], c.dims, cl, 12)
            for k, cfg in enumerate(space.configs[i]):
                groups = [np.bincount(g // 3) for g in group_members(op, cfg, c.dims, 12)]
                assert nodes[k] == max(np.count_nonzero(b) for b in groups)
                assert local[k] == max(b.max() for b in groups)
