"""A stage's kept activations counted from its layers (pase.perf.kept) are exactly those of
walking its ops (pase.perf.memory.activation_bytes), under every recomputation and cut."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pase.api import load_graph
from pase.cluster import get_cluster
from pase.perf import make_layout
from pase.perf.hardware import achieved
from pase.perf.kept import KeptIndex
from pase.perf.kernels import make_pricer
from pase.perf.memory import activation_bytes
from pase.perf.ops import price_ops
from pase.perf.pipeline import placement, recomputed_units

CASES = [
    # a dense GPT with dropout (its masks are kept tensors of the add that follows)
    ("gpt3", dict(layers=6, width=256, heads=8, vocab=1024, seq=512), dict(tp=2), "bf16", True),
    # a MoE under fp8 with expert and tensor parallelism
    ("mixtral-8x7b", dict(layers=4, width=128, heads=4, kv_heads=4, ff=256, experts=4, top_k=2,
                          vocab=512, seq=256), dict(tp=2, ep=2), "fp8", False),
    # DeepSeek-V3's dense first layers then experts, fp32
    ("deepseek-v3", dict(layers=5, seq=512), dict(tp=1, ep=4), "fp32", False),
]


@pytest.mark.parametrize("model,options,degrees,precision,dropout", CASES)
def test_kept_by_layers_is_kept_by_ops(model, options, degrees, precision, dropout):
    graph = load_graph(model, batch=2, **options)
    devices = degrees["tp"] * degrees.get("ep", 1)
    base = make_layout(dict(degrees, dp=devices // degrees["tp"]), devices=devices,
                       micro_batch=2, global_batch=2 * devices, sequence_parallel=degrees["tp"] > 1,
                       precision=precision, dropout=dropout)
    device = get_cluster("h100-sxm", devices).device
    ops = price_ops(graph, base, make_pricer(device, achieved(device), precision))
    by_name = {p.op.name: p for p in ops}
    index = None
    checked = 0
    for pp, virtual in ((1, 1), (2, 1), (2, 2), (4, 1)):
        if pp * virtual > options["layers"]:
            continue
        # placement reads pp and V; activation_bytes the recomputation and precision
        lay = replace(base, pp=pp, virtual=virtual)
        stages, units, _ = placement(graph, lay)
        index = index or KeptIndex(ops, units, lay)
        for recompute, layers in (("none", 0), ("selective", 0), ("full", 0), ("full", 1),
                                  ("full", 2)):
            lay_r = replace(lay, recompute=recompute, recompute_layers=layers)
            again = recomputed_units(lay_r, units, stages)
            for s in range(pp):
                st = {"ops": [p for p, x in zip(ops, stages) if x == s],
                      "units": [u for u, x in zip(units, stages) if x == s]}
                want = activation_bytes(lay_r, st, by_name, again)
                got = index.stage(list(dict.fromkeys(st["units"])), again, recompute)
                assert got == want, (pp, virtual, recompute, layers, s)
                checked += 1
    assert checked >= 30
