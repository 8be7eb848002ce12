"""The roofline the alpha-beta model and the simulator share with `pase evaluate --layout`."""
from __future__ import annotations

import math

import numpy as np
import pytest

import pase
from pase.api import load_graph
from pase.cluster import get_cluster
from pase.cost_models.alpha_beta import AlphaBetaCostModel
from pase.errors import OptionError
from pase.perf.hardware import A100
from pase.perf.layout import make_layout, op_splits
from pase.perf.ops import price_ops
from pase.perf.roofline import config_seconds, pricer
from pase.sim import simulate

DEVICE = get_cluster("dgx-a100").device
OPTS = dict(layers=1, width=256, heads=8, ff=1024, vocab=1024, seq=512, positions=512)


def test_a_gemm_is_the_documented_roofline():
    """fc1 of a GPT layer, split 2 ways over its hidden size: x (b l, e) @ W (e, f/2)."""
    graph = load_graph("gpt3", batch=4, **OPTS)
    fc1 = graph.op("h0.mlp.fc1")
    cfg = np.array([[1 if d.name != "f" else 2 for d in fc1.dims]])
    M, N, K = 4 * 512, 1024 // 2, 256

    def gemm(m, n, k):  # docs/performance-model.md: gemm x waves x K / (K + gemm_half)
        tiles = math.ceil(m / 128) * math.ceil(n / 128)
        waves = tiles / (math.ceil(tiles / A100.sms) * A100.sms)
        eff = A100.gemm * waves * k / (k + A100.gemm_half)
        moved = (m * k + k * n + m * n) * 2
        return max(2 * m * n * k / (312e12 * eff), moved / (1555e9 * A100.hbm)) + A100.launch_s

    epilogue = (2 + 3) * M * N * 2 / (1555e9 * A100.hbm) + 2 * A100.launch_s  # bias + GELU
    expected = gemm(M, N, K) + gemm(M, K, N) + gemm(K, N, M) + epilogue
    assert config_seconds(fc1, cfg, pricer(DEVICE))[0] == pytest.approx(expected, rel=1e-12)


def test_same_kernels_as_the_layout_evaluator():
    graph = load_graph("gpt3", batch=2, **OPTS)
    lay = make_layout("tp=2", devices=2, micro_batch=2, global_batch=2, attention="unfused")
    pr = pricer(DEVICE)
    for p in price_ops(graph, lay, pr):
        cfg = np.array([op_splits(p.op, lay)])
        assert config_seconds(p.op, cfg, pr)[0] == pytest.approx(p.time.forward_s + p.time.backward_s,
                                                                rel=1e-12), p.op.name


def test_alpha_beta_and_the_simulator_agree_on_compute_one_device():
    graph = load_graph("gpt3", batch=2, **OPTS)
    model = AlphaBetaCostModel("dgx-a100", bytes_per_element=2, compute="roofline")
    strategy = pase.solve(graph, devices=1, cost_model=model)
    sim = simulate(graph, strategy, "dgx-a100", bytes_per_element=2, compute="roofline")
    assert sim.step_time == pytest.approx(strategy.total_cost, rel=1e-9)  # one device: compute only
    flat = pase.solve(graph, devices=1, cost_model=AlphaBetaCostModel("dgx-a100", bytes_per_element=2))
    assert strategy.total_cost != pytest.approx(flat.total_cost)


@pytest.mark.parametrize("kw,message", [
    (dict(compute="fast"), "unknown compute 'fast'; allowed: flat, roofline"),
    (dict(compute="roofline", precision="fp4"), "unknown precision 'fp4'"),
    (dict(cluster="dgx1-v100", compute="roofline", precision="fp8"), "has no fp8 peak"),
    (dict(cluster="mixed-a100-v100", compute="roofline"), "mixes device types"),
])
def test_bad_compute_options(kw, message):
    args = dict(cluster="dgx-a100")
    args.update(kw)
    with pytest.raises(OptionError, match=message):
        AlphaBetaCostModel(**args)
