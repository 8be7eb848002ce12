"""Where the calibrated per-op model and the layout path (``pase evaluate --layout``) priced
a layout's own plan apart, each cause on its own: the per-op side now prices it as the
layout path does (docs/cost-model.md, "The calibrated model")."""
from __future__ import annotations

import numpy as np
import pytest

from pase import api
from pase.cluster import get_cluster
from pase.cost_models.calibrated import CalibratedCostModel
from pase.perf import evaluate_layout, make_layout
from pase.perf.hardware import achieved
from pase.perf.plan import layout_configs, layout_variants, plan_cost_options

A100 = "dgx-a100-80gb"
GPT = {"layers": 1, "width": 128, "heads": 2, "ff": 256, "vocab": 512, "seq": 32, "positions": 64}
LLAMA = {"layers": 1, "width": 256, "heads": 4, "kv_heads": 4, "ff": 512, "vocab": 1024, "seq": 64}


def _config(op, splits: dict) -> np.ndarray:
    return np.array([[splits.get(d.name, 1) for d in op.dims]])


def _role_split(op, **roles) -> np.ndarray:
    return np.array([[roles.get(d.role, 1) for d in op.dims]])


def test_the_loss_mean_is_reported_not_charged():
    # a batch-split loss needs no collective: the gradient's mean is the sync's
    graph = api.load_graph("gpt2", batch=8, **GPT)
    loss = graph.ops[-1]
    model = CalibratedCostModel(A100).bind(graph, 8)
    config = _role_split(loss, batch=8)
    work = model.work(loss, config)
    assert sum(float(model.collective(loss, config, c)[0]) for c in work.collectives) == 0.0


def test_a_split_vocabulary_loss_takes_one_all_reduce_of_its_row_statistics():
    graph = api.load_graph("gpt2", batch=8, **GPT)
    loss = graph.ops[-1]
    model = CalibratedCostModel(A100).bind(graph, 8)
    work = model.work(loss, _role_split(loss, vocabulary=4, batch=2))
    colls = [c for c in work.collectives if c.weight is None]
    rows = 8 * GPT["seq"] / 2  # each rank's rows: its half of the batch, every position
    assert [(c.kind, c.phase) for c in colls] == [("all-reduce", "forward")]
    assert float(colls[0].nbytes[0] * colls[0].rounds[0]) == pytest.approx(rows * 2 * 4.0)


def test_the_optimizer_steps_fixed_kernels_are_charged_once_on_the_first_op():
    graph = api.load_graph("gpt2", batch=8, **GPT)
    plan = api.solve(graph, 1, "dp", "calibrated", cluster=A100)
    device = get_cluster(A100, 1).device
    params = sum(float(np.prod(w.shape)) for op in graph.ops for w in op.weights
                 if op.is_parameter(w) and not (op.attrs.get("tied") and w is op.weights[0]))
    hw = achieved(device)
    hbm = device.hbm_gbps * 1e9 * hw.hbm
    want = params * 30.0 / hbm + 10 * hw.launch_s  # Adam + clipping, 10 kernels a step
    assert plan.meta["breakdown"]["optimizer"] == pytest.approx(want, rel=1e-9)
    carried = [name for name, p in plan.op_prices.items() if p["optimizer"] >= 10 * hw.launch_s]
    assert carried == [graph.ops[0].name]


def test_a_variant_that_recomputes_nothing_costs_nothing_more():
    # an embedding's lookup has no FLOP to run again: the Problem charges nothing for its
    # recompute variant, and the plan's price (and the op's carried price) must not either
    graph = api.load_graph("gpt2", batch=8, **GPT)
    first = graph.ops[0].name
    strategy = {op.name: {d.name: 2 for d in op.dims if d.role == "batch"} for op in graph.ops}

    def price(variants):
        return api.evaluate(graph, {"strategy": strategy, "variants": variants}, 2,
                            "calibrated", cluster=A100, cost_options={"recompute": "auto"})

    plain, again = price({}), price({first: {"zero": 0, "recompute": True}})
    assert again.op_prices[first]["backward"] == plain.op_prices[first]["backward"]
    plain, again = plain.meta, again.meta
    assert again["step_seconds"] == plain["step_seconds"] == again["search_seconds"]
    # the terms a pipeline stage is priced by (calibrated_plan.tally) as well
    assert again["breakdown"]["compute"] == plain["breakdown"]["compute"]
    assert again["recompute_seconds"] == 0.0


def test_a_gated_mlps_up_projection_gathers_nothing_forward():
    # sequence parallelism: the norm's output is split by sequence, the gate and up read it
    # whole; Megatron-LM gathers it once for its one fused GEMM, so the up edge moves only
    # what the gate's does not (nothing: its input gradient is summed into the gate's)
    graph = api.load_graph("llama2-7b", batch=4, **LLAMA)
    lay = make_layout("tp=2,dp=2", devices=4, micro_batch=2, global_batch=4,
                      sequence_parallel=True, tp_overlap="off")
    configs = layout_configs(graph, lay)
    model = CalibratedCostModel(A100).bind(graph, 4)
    norm, gate, up = (graph.op(f"layers0.{n}") for n in ("mlp_norm", "mlp.gate", "mlp.up"))
    src = _config(norm, configs[norm.name])

    def edge(op):
        return float(model.edge_costs(norm, norm.outputs[0], src, op, op.inputs[0],
                                      _config(op, configs[op.name]))[0, 0])

    assert edge(gate) > 0 and edge(up) == 0.0


@pytest.mark.parametrize("degrees, options", [
    ("tp=1,dp=4", {"zero": 1}),  # the sync's hops once, the optimizer's kernels once
    ("tp=2,dp=2", {"zero": 3}),  # ZeRO-3's exposed gathers less only what the Problem charged
    ("tp=1,cp=2,dp=2", {"zero": 1}),  # the ring carries the keys' and values' gradients
])
def test_a_small_layout_is_one_price(degrees, options):
    lay = make_layout(degrees, devices=4, micro_batch=2, global_batch=8, **options)
    est = evaluate_layout(api.load_graph("llama2-7b", batch=2, **LLAMA), A100, lay)
    graph = api.load_graph("llama2-7b", batch=2 * lay.dp, **LLAMA)
    plan = api.evaluate(graph, {"strategy": layout_configs(graph, lay),
                                "variants": layout_variants(graph, lay)}, 4, "calibrated",
                        cluster=A100, cost_options=plan_cost_options(lay)).meta
    assert plan["step_seconds"] == pytest.approx(est.step_seconds, rel=1e-9)
    assert plan["breakdown"]["optimizer"] == pytest.approx(est.breakdown["optimizer"], rel=1e-9)
