"""How today's runs are priced: low precisions, tensor-parallel overlap, automatic
recomputation, expert tensor parallelism, all-to-alls across nodes.

Expected values are hand counts from the model's sizes and the data sheets, or
properties any correct price has (a GEMM that stays in bf16 does not change when
the linear layers go to fp8; the least recomputation that fits is minimal).
"""
from __future__ import annotations

import json

import pytest

from pase.api import load_graph
from pase.cli import main
from pase.cluster import get_cluster
from pase.errors import OptionError
from pase.perf import evaluate_layout, make_layout
from pase.perf.comms import collective_seconds
from pase.perf.hardware import achieved
from pase.perf.kernels import make_pricer
from pase.perf.ops import price_ops

W, HEADS, KV, FF, SEQ = 4096, 32, 8, 14336, 4096  # Llama 3 8B's layer sizes
LLAMA = dict(layers=2, width=W, heads=HEADS, kv_heads=KV, ff=FF, vocab=32000, seq=SEQ)


def ops_at(precision: str, degrees: str = "tp=1,dp=1", devices: int = 1, cluster="dgx-b200",
           **layout):
    lay = make_layout(degrees, devices=devices, micro_batch=1, global_batch=devices,
                      precision=precision, **layout)
    cl = get_cluster(cluster, devices)
    return {p.op.name: p for p in price_ops(load_graph("llama3-8b", batch=1, **LLAMA), lay,
                                            make_pricer(cl.device, achieved(cl.device), precision))}


def test_low_precision_runs_only_the_linear_layers_faster():
    bf16, mx = ops_at("bf16"), ops_at("mxfp8")
    for name in ("layers0.attn.qkv", "layers0.mlp.gate", "layers0.mlp.down"):
        assert mx[name].time.forward_s < bf16[name].time.forward_s
        assert mx[name].linear and not bf16[name].linear
    # attention's kernel, the LM head and the norms stay in bf16: the same seconds
    for name in ("layers0.attn.scores", "lm_head", "layers0.attn_norm"):
        assert mx[name].time.forward_s == bf16[name].time.forward_s
        assert mx[name].time.backward_s == bf16[name].time.backward_s
        assert not mx[name].linear


def test_a_linear_layer_keeps_its_input_quantised():
    # the MLP's gate keeps the normed input: SEQ x W elements, 2 bytes in bf16, one byte
    # plus an 8-bit scale per 32 elements in MXFP8
    key = ("layers0.mlp_norm", 0)
    assert ops_at("bf16")["layers0.mlp.gate"].kept[key] == SEQ * W * 2
    assert ops_at("mxfp8")["layers0.mlp.gate"].kept[key] == pytest.approx(SEQ * W * (1 + 1 / 32))
    assert ops_at("nvfp4")["layers0.mlp.gate"].kept[key] == pytest.approx(SEQ * W * (0.5 + 1 / 16))


def test_a_gated_activation_keeps_its_input_once():
    # SwiGLU keeps gate's pre-activation and up's output (SEQ x FF each), and down keeps
    # the product: silu(gate) is rebuilt inside the fused kernel, never kept
    ops = ops_at("bf16")
    kept = {}
    for name in ("layers0.mlp.gate", "layers0.mlp.up", "layers0.mlp.mul", "layers0.mlp.down"):
        kept.update(ops[name].kept)
    ff_tensors = [k for k, v in kept.items() if v == SEQ * FF * 2]
    assert sorted(ff_tensors) == [("layers0.mlp.gate", "pre-activation"),
                                  ("layers0.mlp.mul", 0), ("layers0.mlp.up", 0)]


def test_mfu_counts_against_the_formats_peak():
    g = load_graph("llama3-8b", batch=1, **LLAMA)
    out = {}
    for precision in ("bf16", "mxfp8"):
        lay = make_layout("tp=1,dp=8", devices=8, micro_batch=1, global_batch=8,
                          precision=precision)
        e = evaluate_layout(g, "dgx-b200", lay)
        peak = get_cluster("dgx-b200").device.peak(precision) * 1e12
        out[precision] = e.mfu * e.step_seconds * 8 * peak  # the model FLOP
        assert 0 < e.mfu <= e.hfu <= 1
    assert out["mxfp8"] == pytest.approx(out["bf16"], rel=1e-12)  # the same model FLOP


def test_hopper_refuses_block_scaled_formats():
    with pytest.raises(OptionError, match="no mxfp8 peak"):
        evaluate_layout(load_graph("llama3-8b", batch=1, **LLAMA), "h100-sxm",
                        make_layout("dp=8", devices=8, micro_batch=1, global_batch=8,
                                    precision="mxfp8"))


def test_tp_overlap_defaults_follow_the_recipes():
    common = dict(devices=8, micro_batch=1, global_batch=8)
    assert make_layout("tp=8", sequence_parallel=True, **common).tp_overlap
    assert not make_layout("tp=8", **common).tp_overlap
    assert not make_layout("tp=8", sequence_parallel=True, attention="unfused", **common).tp_overlap
    assert make_layout("tp=8", tp_overlap="on", **common).tp_overlap
    with pytest.raises(OptionError, match="tp_overlap"):
        make_layout("tp=8", tp_overlap="sometimes", **common)


def test_tp_overlap_hides_communication_but_not_compute():
    g = load_graph("llama3-8b", batch=1, **LLAMA)
    on, off = (evaluate_layout(g, "h100-sxm", make_layout(
        "tp=8", devices=8, micro_batch=1, global_batch=4, sequence_parallel=True, tp_overlap=o))
        for o in ("on", "off"))
    assert on.breakdown["compute"] == off.breakdown["compute"]
    assert on.breakdown["communication"] < 0.5 * off.breakdown["communication"]
    assert on.step_seconds < off.step_seconds


def _auto(glob: int, micro: int, cluster: str, degrees: str, devices: int, **model):
    g = load_graph("llama3-8b", batch=micro, **model)
    lay = make_layout(degrees, devices=devices, micro_batch=micro, global_batch=glob,
                      recompute="auto")
    return g, lay, evaluate_layout(g, cluster, lay)


def test_recompute_auto_is_the_least_that_fits():
    model = dict(layers=8, width=4096, heads=32, kv_heads=8, ff=14336, seq=8192)
    g, lay, e = _auto(32, 4, "h100-sxm", "dp=8", 8, **model)
    chosen = e.layout
    assert e.fits_memory and chosen.recompute == "full" and 0 < chosen.recompute_layers < 8
    for weaker in (dict(recompute="none"), dict(recompute="selective"),
                   dict(recompute="full", recompute_layers=chosen.recompute_layers - 1)):
        from dataclasses import replace
        assert not evaluate_layout(g, "h100-sxm", replace(lay, **weaker)).fits_memory


def test_recompute_auto_from_the_command_line(capsys):
    args = ["evaluate", "llama3-8b", "-p", "8", "--cluster", "h100-sxm", "--layout", "dp=8",
            "--micro-batch", "1", "--global-batch", "8", "--recompute", "auto",
            "--model-option", "layers=2", "--format", "json"]
    assert main(args) == 0
    lay = json.loads(capsys.readouterr().out)["layout"]
    assert lay["recompute"] == "none" and lay["recompute_layers"] == 0


MOE = dict(layers=1, width=512, heads=8, kv_heads=8, ff=1024, vocab=1024, experts=16, top_k=2,
           seq=256)


def test_experts_fold_over_tensor_parallel_ranks_when_ep_exceeds_dp():
    # tp=2, dp=4, ep=8: ep does not divide dp, so experts are not tensor-split (etp=1) and the
    # 8 ep ranks span the tp pairs: a rank holds 16/8 = 2 whole experts of 3 x 512 x 1024
    lay = make_layout("tp=2,dp=4,ep=8", devices=8, micro_batch=1, global_batch=4,
                      sequence_parallel=True)
    assert lay.expert_tp == 1 and lay.expert_data == 1
    cl = get_cluster("h100-sxm", 8)
    ops = price_ops(load_graph("mixtral-8x7b", batch=1, **MOE), lay,
                    make_pricer(cl.device, achieved(cl.device), "bf16"))
    experts = sum(p.parameter_elements for p in ops if p.expert)
    assert experts == 2 * 3 * 512 * 1024
    with pytest.raises(OptionError, match="etp"):
        make_layout("tp=2,dp=4,ep=16", devices=8, micro_batch=1, global_batch=4)


def test_all_to_all_across_nodes_leaves_through_each_ranks_nic():
    # 16 ranks on 2 DGX H100 nodes: each rank sends 8/16 of its buffer to the other node
    # through its own 50 GB/s NIC at the achieved fraction, beside 7/16 on NVLink
    cl = get_cluster("h100-sxm", 16)
    hw = achieved(cl.device)
    nbytes = 1e9
    t = collective_seconds("all-to-all", nbytes, 16, 2, cl, hw, latency=False)
    assert t == pytest.approx(8 / 16 * nbytes / (50e9 * hw.network))


def test_sliding_window_attention_computes_only_the_window():
    # causal attention over S keys computes S(S+1)/2 scores; a window of w keys per query
    # computes w(w+1)/2 + (S-w) w of them (gpt-oss: every other layer, w = 128)
    from pase.perf.kernels import attention_share
    s, w = 4096, 128
    assert attention_share(True, w, s, s) == pytest.approx((w * (w + 1) / 2 + (s - w) * w) / s**2)
    assert attention_share(True, 0, s, s) == 0.5 and attention_share(False, 0, s, s) == 1.0
    model = dict(layers=2, seq=s)
    g, full = (load_graph("gpt-oss-20b", batch=1, **model, **extra) for extra in ({}, {"window": 0}))
    lay = make_layout("dp=8,ep=2", devices=8, micro_batch=1, global_batch=8)
    cl = get_cluster("dgx-b200", 8)
    pr = make_pricer(cl.device, achieved(cl.device), "bf16")
    windowed = {p.op.name: p.time for p in price_ops(g, lay, pr)}
    dense = {p.op.name: p.time for p in price_ops(full, lay, pr)}
    # layer 0 slides (the causal kernel counts half the S x S scores), layer 1 attends to all
    share = (w * (w + 1) / 2 + (s - w) * w) / s**2
    assert windowed["layers0.attn.scores"].forward_flop == pytest.approx(
        dense["layers0.attn.scores"].forward_flop * share / 0.5)
    assert windowed["layers1.attn.scores"].forward_flop == dense["layers1.attn.scores"].forward_flop


def test_expert_all_to_alls_hide_behind_another_micro_batch():
    g = load_graph("mixtral-8x7b", batch=1, **MOE)
    common = dict(devices=16, micro_batch=1, global_batch=32)  # two nodes: the a2a crosses
    assert make_layout("dp=16,ep=16", **common).ep_overlap  # auto: ep > 1 and 2 micro-batches
    assert not make_layout("dp=16,ep=16", devices=16, micro_batch=2, global_batch=32).ep_overlap
    on, off = (evaluate_layout(g, "h100-sxm", make_layout("dp=16,ep=16", ep_overlap=o, **common))
               for o in ("on", "off"))
    assert on.breakdown["compute"] == off.breakdown["compute"]
    assert on.breakdown["communication"] < off.breakdown["communication"]


def test_routing_costs_a_fixed_time_per_token_copy():
    # a rank routes its SEQ' tokens to top_k experts each: 256 x 2 copies, each costing the
    # device type's moe_copy_s forward and twice that backward, beside the bytes it moves
    import dataclasses

    from pase.perf.kernels import Pricer
    cl = get_cluster("gb300-nvl72", 8)
    hw = achieved(cl.device)
    lay = make_layout("dp=8,ep=8", devices=8, micro_batch=1, global_batch=8)
    g = load_graph("mixtral-8x7b", batch=1, **MOE)
    times = {}
    for copy_s in (0.0, 1e-6):
        pr = Pricer(cl.device, dataclasses.replace(hw, moe_copy_s=copy_s), 1e15, 2.0)
        times[copy_s] = next(p.time for p in price_ops(g, lay, pr) if p.op.kind == "MoEDispatch")
    copies = MOE["seq"] * MOE["top_k"]
    assert times[1e-6].forward_s - times[0.0].forward_s == pytest.approx(copies * 1e-6)
    assert times[1e-6].backward_s - times[0.0].backward_s == pytest.approx(2 * copies * 1e-6)
