"""Heterogeneous clusters (docs/heterogeneous.md): groups, placement, balanced shares."""
import dataclasses
import json

import numpy as np
import pytest

import pase
from pase.api import build_problem, load_graph
from pase.builder import GraphBuilder
from pase.cli import main
from pase.cluster import PRESETS, Cluster, Device, Group, Link, compose, get_cluster
from pase.cost_models.alpha_beta import AlphaBetaCostModel
from pase.errors import OptionError
from pase.sim import simulate
from pase.work import op_work
from pase.work.hetero import placement, shares

FAST_LINK = Link(1e6, 0.0)  # so that compute alone sets the times below


def _group(name, tflops, memory=16.0, nodes=1, per_node=1, intra=FAST_LINK, inter=FAST_LINK):
    return Group(name, nodes, per_node, Device(name, tflops, memory), intra, inter)


def _matmul():
    b = GraphBuilder("matmul")
    x = b.input((1024, 1024), names=("b", "k"), roles=("batch", "channel"))
    b.fc(x, 1024, name="fc")
    return b.build()


# -- clusters ----------------------------------------------------------------------

def test_composition_groups_fastest_first_and_json_round_trip(tmp_path):
    c = get_cluster("dgx1-v100x2+dgx-a100x2")
    assert [g.name for g in c.groups] == ["dgx-a100x2", "dgx1-v100x2"]
    assert c.devices == 32 and c.prefixes() == (16,)
    assert c.speeds()[[0, 15, 16, 31]].tolist() == [312.0, 312.0, 125.0, 125.0]
    # conservative whole-cluster fields: the slowest device, the least memory, slowest links
    assert (c.device.peak_tflops, c.device.memory_gib) == (125.0, 32.0)
    assert (c.intra.bandwidth_gbps, c.inter.bandwidth_gbps) == (150.0, 6.25)
    assert c.view(16) == Cluster("dgx-a100x2", 2, 8, PRESETS["dgx-a100"].device,
                                 PRESETS["dgx-a100"].intra, PRESETS["dgx-a100"].inter, c.source)
    path = tmp_path / "mixed.json"
    c.to_json(path)
    assert get_cluster(str(path)) == c
    assert json.loads(path.read_text())["groups"][1]["device"]["name"] == "V100 SXM2 32GB"
    assert get_cluster("mixed-a100-v100").groups == c.groups


def test_one_type_is_the_homogeneous_cluster(tmp_path):
    plain = get_cluster("dgx-a100x3")
    for spec in ("dgx-a100x1+dgx-a100x2", "dgx-a100+dgx-a100+dgx-a100"):
        got = get_cluster(spec)
        assert not got.groups and got.devices == 24
        assert (got.device, got.intra, got.inter, got.nodes) == (plain.device, plain.intra, plain.inter, 3)
    one = {"schema": "pase.cluster", "version": 1, "name": "one",
           "groups": [{k: v for k, v in plain.to_dict().items() if k not in ("schema", "version", "source")}]}
    (tmp_path / "one.json").write_text(json.dumps(one))
    assert get_cluster(str(tmp_path / "one.json")) == Cluster("one", 3, 8, plain.device, plain.intra,
                                                              plain.inter)


@pytest.mark.parametrize("spec, message", [
    ("dgx-a100x2+tpu-v9", "unknown cluster 'tpu-v9'"),
    ("dgx-a100x2++dgx1-v100", "malformed cluster composition"),
    ("+dgx-a100", "malformed cluster composition"),
    ("dgx-a100x2+dgx1-v100x0", "node count must be >= 1"),
])
def test_bad_compositions_are_one_line_and_exit_2(capsys, spec, message):
    code = main(["solve", "chain", "-p", "4", "--cost-model", "alpha-beta", "--cluster", spec])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_bad_groups():
    with pytest.raises(OptionError, match="same devices per node"):
        compose([_group("a", 2.0, per_node=2), _group("b", 1.0)])
    with pytest.raises(OptionError, match="groups.*non-empty list"):
        Cluster.from_dict({"schema": "pase.cluster", "version": 1, "name": "x", "groups": []})
    with pytest.raises(OptionError, match="group 0"):
        Cluster.from_dict({"schema": "pase.cluster", "version": 1, "name": "x", "groups": [{"nodes": 1}]})
    with pytest.raises(OptionError, match="split"):
        AlphaBetaCostModel("mixed-a100-v100", split="fair")
    with pytest.raises(OptionError, match="device 'slow': peak_tflops must be a finite number from 1e-06"):
        compose([_group("fast", 2.0), _group("slow", 0.0)])
    with pytest.raises(OptionError, match="split"):
        simulate("chain", {}, "mixed-a100-v100", 32, split="uneven")


# -- homogeneous written as heterogeneous: bit for bit -------------------------------

@pytest.mark.parametrize("spec", ["dgx-a100x1+dgx-a100x1", "one-group-json"])
def test_homogeneous_as_heterogeneous_is_identical(spec, tmp_path):
    if spec == "one-group-json":
        g = {k: v for k, v in get_cluster("dgx-a100x2").to_dict().items()
             if k not in ("schema", "version", "source")}
        spec = str(tmp_path / "one.json")
        (tmp_path / "one.json").write_text(json.dumps({"schema": "pase.cluster", "version": 1,
                                                       "name": "g", "groups": [g]}))
    runs = []
    for cluster in ("dgx-a100x2", spec):
        for split in ("even", "balanced"):
            built = build_problem("transformer", 16, "alpha-beta", cluster=cluster,
                                  cost_options={"split": split}, model_options={"layers": 1})
            strategy = pase.solve("transformer", 16, cost_model="alpha-beta", cluster=cluster,
                                  cost_options={"split": split}, model_options={"layers": 1})
            sim = simulate(built.graph, strategy, cluster, split=split)
            runs.append((built.problem, strategy, sim))
    base = runs[0]
    for problem, strategy, sim in runs[1:]:
        for a, b in zip(base[0].vertex_costs, problem.vertex_costs):
            assert np.array_equal(a, b)
        for a, b in zip(base[0].edge_costs, problem.edge_costs):
            assert np.array_equal(a, b)
        for a, b in zip(base[0].memory, problem.memory):
            assert np.array_equal(a, b)
        assert strategy.configs == base[1].configs and strategy.total_cost == base[1].total_cost
        assert sim.step_time == base[2].step_time
        assert np.array_equal(sim.compute_busy, base[2].compute_busy)
        assert np.array_equal(sim.peak_memory, base[2].peak_memory)



@pytest.mark.parametrize("split", ["even", "balanced"])
def test_twin_types_price_ops_as_the_homogeneous_cluster(split):
    # Two types alike but for the device's name do not merge, so the heterogeneous code prices
    # them. Every memory entry is the homogeneous one, bit for bit; so is every op cost and
    # every edge whose ends span all 16 devices. (An op split at most 8 ways sits on the first
    # group only, where the homogeneous cluster replicates it on all 16, its batch split
    # across the two nodes: its collectives and edges differ.)
    a = get_cluster("dgx-a100")
    twin = dataclasses.replace(a, name="twin", device=dataclasses.replace(a.device, name="A100 twin"))
    mixed = compose([a, twin])
    assert mixed.heterogeneous and mixed.prefixes() == (8,)
    opts = {"model_options": {"layers": 1}, "cost_options": {"split": split}}
    base = build_problem("transformer", 16, "alpha-beta", cluster="dgx-a100x2", **opts)
    het = build_problem("transformer", 16, "alpha-beta", cluster=mixed, **opts)
    same_where_all_16_run(base, het)


def same_where_all_16_run(base, het) -> list[np.ndarray]:
    """``het``'s Problem equals ``base``'s, bit for bit, in every memory entry and in every
    op cost and edge whose configs run on all 16 devices (some edge among them); returns
    each op's devices per config (8: the first group only, 16: all)."""
    placed = [np.where(np.prod(c, axis=1) <= 8, 8, 16) for c in base.space.configs]
    for x, y, on in zip(base.problem.vertex_costs, het.problem.vertex_costs, placed):
        assert np.array_equal(x[on == 16], y[on == 16])
    for x, y in zip(base.problem.memory, het.problem.memory):
        assert np.array_equal(x, y)
    same = 0
    for (u, v), x, y in zip(base.problem.edges, base.problem.edge_costs, het.problem.edge_costs):
        mask = (placed[u][:, None] == 16) & (placed[v][None, :] == 16)
        assert np.array_equal(x[mask], y[mask])
        same += int(mask.sum())
    assert same > 0
    return placed


# -- balanced splitting: hand-computed compute times ---------------------------------

def _two_to_one():
    return compose([_group("fast", 2.0), _group("slow", 1.0)], "two-to-one")


def test_balanced_matmul_on_a_two_to_one_cluster():
    graph, cluster = _matmul(), _two_to_one()
    op = graph.ops[0]
    flop = 3 * 2 * 1024 ** 3  # forward b k n multiply-adds at 2 FLOP each, backward twice that
    eff = 0.5
    even = (flop / 2) / (1.0e12 * eff)  # half the batch each; the slow device sets the pace
    balanced = flop / (3.0e12 * eff)    # shares 2:1, both devices finish together
    fast_alone = flop / (2.0e12 * eff)  # unsplit: placed on the fast group only
    for split, want in (("even", even), ("balanced", balanced)):
        model = AlphaBetaCostModel(cluster, split=split).for_devices(2)
        got = model.work_costs(op_work(op, np.array([[2, 1, 1], [1, 1, 1]])))
        assert got[0] == pytest.approx(want, rel=1e-5)
        assert got[1] == pytest.approx(fast_alone, rel=1e-5)
        sim = simulate(graph, {"fc": {"b": 2}}, cluster, 2, split=split)
        assert sim.step_time == pytest.approx(want, rel=1e-5)
        busy = [flop / 2 / 2.0e12 / eff, want] if split == "even" else [want, want]
        assert sim.compute_busy.tolist() == pytest.approx(busy, rel=1e-9)
    alone = simulate(graph, {}, cluster, 2)
    assert alone.compute_busy.tolist() == pytest.approx([fast_alone, 0.0], rel=1e-9)
    # activations follow the shares: the fast device keeps 2/3 of the output, the slow 1/3
    sim = simulate(graph, {"fc": {"b": 2}}, cluster, 2, split="balanced", timeline=False)
    state = 1024 * 1024 * 4 * 4  # the weight with Adam's state
    assert sim.peak_memory.tolist() == pytest.approx([state + 1024 * 1024 * 4 * 2 / 3,
                                                      state + 1024 * 1024 * 4 / 3])


def test_placement_prefers_the_fastest_group():
    c = get_cluster("dgx-a100x2+dgx1-v100x2")
    configs = np.array([[1], [8], [16], [32]])
    assert placement(configs, c.prefixes(32), 32).tolist() == [16, 16, 16, 32]
    op = _matmul().ops[0]
    assert shares(op, [16, 1, 1], c, 32).active.tolist() == list(range(16))
    assert shares(op, [32, 1, 1], c, 32).active.tolist() == list(range(32))
    got = shares(op, [32, 1, 1], c, 32, "balanced")
    assert got.share[0] == pytest.approx(32 * 312 / (16 * 312 + 16 * 125))
    assert got.speed == pytest.approx((16 * 312 + 16 * 125) / 32)


def test_memory_vector_in_bytes_of_the_smallest_type():
    # 40 GiB A100s and 32 GiB V100s: an op on the A100s only counts 32/40 of its bytes
    graph, c = _matmul(), get_cluster("dgx-a100x1+dgx1-v100x1")
    model = AlphaBetaCostModel(c).for_devices(16)
    op = graph.ops[0]
    cfgs = np.array([[8, 1, 1], [16, 1, 1]])
    work = op_work(op, cfgs)
    got = model.memory(op, cfgs)
    assert got[0] == pytest.approx(work.memory[0] * 32 / 40)
    assert got[1] == pytest.approx(work.memory[1])  # on both types: the V100's bytes bind



@pytest.mark.parametrize("fast_gib, slow_gib, want_even, want_balanced", [
    (8.0, 16.0, 18.0, 16 + 2 * 4 / 3),      # the fast type binds: its share is 4/3 of the even tile
    (16.0, 8.0, 18.0, 16 + 2 * 2 / 3),      # the slow type binds: its share is 2/3
])
def test_memory_vector_follows_balanced_shares_per_type(fast_gib, slow_gib, want_even, want_balanced):
    # The matmul split b=2 on one 2 TFLOP/s and one 1 TFLOP/s device. By hand, in MiB: weight
    # 1024 x 1024 fp32 = 4, with gradient and Adam's two moments 16 of state; the output tile
    # 2 (even) or 2 x (2 x 2/3) and 2 x (2 x 1/3) (balanced). Each type's bytes count at
    # M_min / M_type; the vector takes the larger. Unsplit: on the fast device alone, 16 + 4.
    # Split on n: state 8 and output 2 on both types.
    c = compose([_group("fast", 2.0, memory=fast_gib), _group("slow", 1.0, memory=slow_gib)], "x")
    op = _matmul().ops[0]
    cfgs = np.array([[2, 1, 1], [1, 1, 1], [1, 2, 1]])
    alone = 20.0 * min(1.0, min(fast_gib, slow_gib) / fast_gib)
    for split, want in (("even", want_even), ("balanced", want_balanced)):
        got = AlphaBetaCostModel(c, split=split).for_devices(2).memory(op, cfgs) / 2**20
        assert got.tolist() == pytest.approx([want, alone, 10.0], rel=1e-12)



def test_gradient_all_reduce_across_types_runs_on_the_slowest_nic():
    # One device per node: the data-parallel matmul's gradient all-reduce is a 2-node ring on
    # the NICs, 10 GB/s / 1 us on the fast node and 5 GB/s / 3 us on the slow one. By hand:
    # 2 (N - 1) = 2 steps of (3 us + 4 MiB / 2 / 5 GB/s), after the even compute at the slow pace.
    c = compose([_group("fast", 2.0, inter=Link(10.0, 1.0)), _group("slow", 1.0, inter=Link(5.0, 3.0))])
    graph = _matmul()
    want = 3 * 2 * 1024 ** 3 / 2 / (1.0e12 * 0.5) + 2 * (3e-6 + 4 * 2**20 / 2 / 5e9)
    got = AlphaBetaCostModel(c).for_devices(2).work_costs(op_work(graph.ops[0], np.array([[2, 1, 1]])))
    assert got[0] == pytest.approx(want, rel=1e-12)
    assert simulate(graph, {"fc": {"b": 2}}, c, 2).step_time == pytest.approx(want, rel=1e-12)


# -- mixed clusters solve, simulate, and dp is exact ---------------------------------

def test_mixed_cluster_solves_and_simulates():
    for split in ("even", "balanced"):
        s = pase.solve("gpt2", 16, cost_model="alpha-beta", cluster="dgx-a100x1+dgx1-v100x1",
                       cost_options={"split": split}, model_options={"layers": 1}, batch=64,
                       powers_of_two=True)
        graph = load_graph("gpt2", batch=64, layers=1)
        sim = simulate(graph, s, "dgx-a100x1+dgx1-v100x1", split=split, timeline=False)
        assert s.total_cost > 0 and sim.step_time > 0
        assert sim.peak_memory[:8].max() <= 40 * 2**30 and sim.peak_memory[8:].max() <= 32 * 2**30


def _small_mixed():
    link_fast, link_slow = Link(100.0, 2.0), Link(10.0, 5.0)
    return compose([_group("slow", 10.0, nodes=1, per_node=2, intra=link_slow, inter=Link(5.0, 5.0)),
                    _group("fast", 40.0, nodes=1, per_node=2, intra=link_fast, inter=Link(20.0, 5.0))],
                   "small-mixed")


@pytest.mark.parametrize("split", ["even", "balanced"])
def test_dp_equals_exhaustive_on_a_mixed_cluster(split):
    cluster = _small_mixed()
    kwargs = dict(cost_model="alpha-beta", cluster=cluster, cost_options={"split": split},
                  model_options={"length": 3, "width": 256}, batch=4096)
    dp = pase.solve("chain", 4, "dp", **kwargs)
    brute = pase.solve("chain", 4, "exhaustive", **kwargs)
    assert dp.total_cost == pytest.approx(brute.total_cost, rel=1e-12)
    ilp = pase.solve("chain", 4, "ilp-highs", **kwargs)
    assert dp.total_cost == pytest.approx(ilp.total_cost, rel=1e-6)


def test_prefix_relayout_matches_the_simulator_transfer_plan():
    # bytes the worst device receives between configs on different prefixes, against the
    # simulator's device-by-device plan (which counts every receiver separately)
    from pase.costing import connection_ports
    from pase.sim.tasks import connection_plans
    from pase.work.prefix import prefix_relayout

    cluster = _small_mixed()
    graph = load_graph("chain", length=2, width=64, batch=64)
    conn = next(iter(graph.connections))
    u, v = graph.index(conn.src), graph.index(conn.dst)
    pu, out, pv, inp = connection_ports(graph, (u, conn.src_output, v, conn.dst_input))
    cases = [([1, 1, 1], [4, 1, 1]), ([4, 1, 1], [2, 1, 1]), ([1, 2, 1], [1, 4, 1]), ([1, 1, 4], [1, 1, 1])]
    checked = 0
    for cu, cv in cases:
        cu, cv = np.array([cu[:len(pu.dims)]]), np.array([cv[:len(pv.dims)]])
        nu, nv = placement(cu, cluster.prefixes(4), 4), placement(cv, cluster.prefixes(4), 4)
        fwd, bwd = prefix_relayout(pu, out, cu, nu, pv, inp, cv, nv, 4)
        configs = [np.ones(len(op.dims), dtype=np.int64) for op in graph.ops]
        configs[u], configs[v] = cu[0], cv[0]
        for (a, _, b, _), forward, backward in connection_plans(graph, configs, cluster, 4):
            if (a, b) != (u, v):
                continue
            for got, (sends, _) in ((fwd, forward), (bwd, backward)):
                per_receiver = {}
                for (_, d), elems in sends.items():
                    per_receiver[d] = per_receiver.get(d, 0.0) + elems
                assert got[0, 0] == pytest.approx(max(per_receiver.values(), default=0.0))
            checked += 1
    assert checked == len(cases)


def test_clusters_listing_shows_the_groups(capsys):
    assert main(["clusters"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(i for i, line in enumerate(out) if line.startswith("mixed-a100-v100"))
    assert "2x8" in out[row] and "A100" in out[row]
    assert out[row + 1].split()[:2] == ["2x8", "V100"]
    assert main(["clusters", "--format", "json"]) == 0
    mixed = next(c for c in json.loads(capsys.readouterr().out) if c["name"] == "mixed-a100-v100")
    assert [g["name"] for g in mixed["groups"]] == ["dgx-a100x2", "dgx1-v100x2"]


def test_devices_in_the_first_group_are_its_homogeneous_problem():
    # -p 16 on A100s + V100s is the A100 problem; memory in V100 bytes (the default cap, 32 GiB)
    mixed = build_problem("alexnet", 16, "alpha-beta", cluster="dgx-a100x2+dgx1-v100x2")
    plain = build_problem("alexnet", 16, "alpha-beta", cluster="dgx-a100x2")
    assert mixed.problem.memory_cap == 32 * 2**30 and plain.problem.memory_cap == 40 * 2**30
    for a, b in zip(mixed.problem.vertex_costs, plain.problem.vertex_costs):
        assert np.array_equal(a, b)
    for a, b in zip(mixed.problem.memory, plain.problem.memory):
        assert a == pytest.approx(b * 32 / 40, rel=1e-12)


def test_reduce_scatter_is_charged_on_ops_on_a_mixed_cluster():
    # same costs with and without the option: every GEMM all-reduce stays on its op
    kwargs = dict(cluster=_small_mixed(), model_options={"length": 3, "width": 256}, batch=4096)
    a = pase.solve("chain", 4, cost_model="alpha-beta", cost_options={"reduce_scatter": True}, **kwargs)
    b = pase.solve("chain", 4, cost_model="alpha-beta", **kwargs)
    assert a.total_cost == b.total_cost and a.configs == b.configs


def test_simulated_compute_follows_placement_and_speed():
    # chain of two FCs on 2 fast (40 TFLOP/s) + 2 slow (10) devices: fc1 unsplit sits on the
    # fast pair (replicated there), fc2 split 4 ways on the batch uses all four
    cluster, eff = _small_mixed(), 0.5
    graph = load_graph("chain", length=2, width=256, batch=4096)
    f1, f2 = graph.ops[0], graph.ops[1]
    # b k n multiply-adds at 2 FLOP each, fwd + 2x bwd
    flop = [3 * 2 * np.prod([d.size for d in op.dims]) for op in (f1, f2)]
    configs = {f1.name: {}, f2.name: {"b": 4}}
    for split in ("even", "balanced"):
        sim = simulate(graph, configs, cluster, 4, split=split, timeline=False)
        fast, slow = 40e12 * eff, 10e12 * eff
        if split == "even":
            want = [flop[0] / fast + flop[1] / 4 / fast] * 2 + [flop[1] / 4 / slow] * 2
        else:  # shares 4 * 40/100 and 4 * 10/100 of the even quarter
            want = [flop[0] / fast + flop[1] * 0.4 / fast] * 2 + [flop[1] * 0.1 / slow] * 2
        assert sim.compute_busy.tolist() == pytest.approx(want, rel=1e-9)


def test_three_types_dp_equals_exhaustive():
    groups = [_group(n, t, nodes=1, per_node=2, intra=Link(b, 2.0), inter=Link(b / 4, 5.0))
              for n, t, b in (("v", 10.0, 20.0), ("h", 90.0, 200.0), ("a", 30.0, 100.0))]
    cluster = compose(groups, "three")
    assert [g.name for g in cluster.groups] == ["h", "a", "v"] and cluster.prefixes() == (2, 4)
    kwargs = dict(cost_model="alpha-beta", cluster=cluster, cost_options={"split": "balanced"},
                  model_options={"length": 3, "width": 128}, batch=1024)
    dp = pase.solve("chain", 6, "dp", **kwargs)
    brute = pase.solve("chain", 6, "exhaustive", **kwargs)
    assert dp.total_cost == pytest.approx(brute.total_cost, rel=1e-12)


def test_prefix_relayout_against_device_by_device_counts():
    # every config pair of two FCs at p = 6 over prefixes (2, 4): the closed shortcuts of
    # prefix_relayout (a whole tile past the narrower prefix) against received_elements
    from pase.costing import connection_ports
    from pase.space import ConfigSpace
    from pase.work.layout import active_devices, port_blocks
    from pase.work.prefix import prefix_relayout
    from pase.work.relayout import received_elements

    graph = load_graph("chain", length=2, width=12, batch=12)
    space = ConfigSpace(graph, 6)
    conn = next(iter(graph.connections))
    u, v = graph.index(conn.src), graph.index(conn.dst)
    pu, out, pv, inp = connection_ports(graph, (u, conn.src_output, v, conn.dst_input))
    cu, cv = np.asarray(space.configs[u]), np.asarray(space.configs[v])
    prefixes = (2, 4)
    nu, nv = placement(cu, prefixes, 6), placement(cv, prefixes, 6)
    fwd, bwd = prefix_relayout(pu, out, cu, nu, pv, inp, cv, nv, 6)

    def layout(op, port, cfg, n):
        blocks = np.full((6, len(port.shape)), -1, dtype=np.int64)
        blocks[:n] = port_blocks(op, port, cfg, n)
        held = np.zeros(6, dtype=bool)
        held[active_devices(op, cfg, n)] = True
        factors = [int(np.prod(cfg[list(d)])) if d else 1 for d in op.port_axes(port)]
        return blocks, held, factors

    assert len(set(nu.tolist())) == 3 and len(set(nv.tolist())) == 3
    for i in range(len(cu)):
        bu, hu, fu = layout(pu, out, cu[i], int(nu[i]))
        for j in range(len(cv)):
            bv, hv, fv = layout(pv, inp, cv[j], int(nv[j]))
            want_f = received_elements(out.shape, np.maximum(bu, 0), fu, np.maximum(bv, 0), fv, hu, hv).max()
            want_b = received_elements(out.shape, np.maximum(bv, 0), fv, np.maximum(bu, 0), fu, hv, hu).max()
            assert (fwd[i, j], bwd[i, j]) == pytest.approx((want_f, want_b)), (cu[i], cv[j])


def test_variants_on_a_mixed_cluster_dp_equals_exhaustive():
    # ZeRO / recompute candidates priced on a mixed cluster, under a cap that makes them matter
    kwargs = dict(cost_model="alpha-beta", cluster=_small_mixed(), model_options={"length": 3, "width": 512},
                  batch=512, cost_options={"split": "balanced", "zero": "auto", "recompute": "auto"})
    free = pase.solve("chain", 4, "dp", **kwargs)
    for fraction in (0.8, 0.5):
        cap = fraction * free.meta["memory_bytes"]
        dp = pase.solve("chain", 4, "dp", memory_cap=cap, **kwargs)
        brute = pase.solve("chain", 4, "exhaustive", memory_cap=cap, **kwargs)
        assert dp.variants and dp.total_cost > free.total_cost
        assert dp.total_cost == pytest.approx(brute.total_cost, rel=1e-12)
