"""price_ops prices a repeated layer's ops once and copies them (pase.perf.ops_memo): the
copies equal pricing every op afresh, op by op, on dense, MoE, long-sequence (cp),
unfused-attention, dropout and fp8 layouts."""
from __future__ import annotations

import pytest

from pase.api import load_graph
from pase.cluster import get_cluster
from pase.perf import make_layout
from pase.perf.hardware import achieved
from pase.perf.kernels import make_pricer
from pase.perf.ops import price_ops

SMALL_LLAMA = dict(layers=4, width=256, heads=8, kv_heads=2, ff=512, vocab=1024)
SMALL_DEEPSEEK = dict(layers=4, dense_layers=1, width=256, heads=4, q_lora_rank=64,
                      kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
                      ff=512, moe_ff=128, experts=8, shared_experts=1, top_k=2, vocab=1024,
                      seq=512)
CASES = [
    ("llama3.1-8b", dict(SMALL_LLAMA, seq=8192), "tp=4,cp=2,dp=2", {}),
    ("llama3.1-8b", dict(SMALL_LLAMA, seq=1024), "tp=2,dp=2",
     dict(attention="unfused", dropout=True)),
    ("gpt3", dict(layers=3, width=256, heads=8, vocab=1024, seq=512), "tp=2,dp=2",
     dict(dropout=True)),
    ("mixtral-8x7b", dict(layers=3, width=128, heads=4, kv_heads=4, ff=256, experts=4, top_k=2,
                          vocab=512, seq=256), "tp=2,dp=4,ep=4,etp=1", {}),
    ("deepseek-v3", SMALL_DEEPSEEK, "tp=2,dp=4,ep=8,etp=1", dict(precision="fp8")),
]


@pytest.mark.parametrize("model,options,layout,extra", CASES)
def test_memoised_prices_equal_fresh_ones(model, options, layout, extra):
    graph = load_graph(model, batch=2, **options)
    degrees = {k: int(v) for k, v in (part.split("=") for part in layout.split(","))}
    devices = degrees["tp"] * degrees.get("cp", 1) * degrees["dp"]
    lay = make_layout(degrees, devices=devices, micro_batch=2, global_batch=2 * degrees["dp"],
                      sequence_parallel=True, **extra)
    cl = get_cluster("h100-sxm", lay.devices)
    pricer = make_pricer(cl.device, achieved(cl.device), lay.precision)
    fresh = price_ops(graph, lay, pricer, memo=False)
    memo = price_ops(graph, lay, pricer)
    assert [p.op.name for p in memo] == [op.name for op in graph.ops]
    for a, b in zip(fresh, memo):
        assert a == b, a.op.name
    # the memo copied: every op its own object, its tensors named as its own
    assert len({id(p) for p in memo}) == len(memo)
    assert len({id(p.time) for p in memo}) == len(memo)
    # copies=False hands back the first op's price for the repeats (the same times)
    shared = price_ops(graph, lay, pricer, copies=False)
    assert len({id(p) for p in shared}) < len(shared) // 2
    assert [p.time.forward_s for p in shared] == [p.time.forward_s for p in fresh]

