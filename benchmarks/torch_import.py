"""The PyTorch importer on the test-folder models, and GPT-2 against the zoo's.

Per model (tests/torch_models, small default sizes): IR ops, parameters (pase's
count and the sum of ``numel()`` over the module's unique parameters), the
matrix-product FLOP torch's ``FlopCounterMode`` counts next to pase's
``matmul_flops`` of the same ops (both 2 FLOP per multiply-add), the FLOP pase
counts that torch does not (element-wise ops, norms, softmaxes, biases; an
embedding is a gather, no FLOP in either), the import seconds (``torch.export`` included), and the dp's cost and
seconds at p = 8 under ``paper`` and ``alpha-beta``. Then a full-width two-layer
GPT-2 (made on torch's meta device) against ``pase.load_graph("gpt2", layers=2)``:
parameters, forward FLOP and the dp optimum under alpha-beta on h100-sxm.

    python benchmarks/torch_import.py [--devices 8,64]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="8", help="comma-separated p for the GPT-2 check")
    args = parser.parse_args()
    print(f"# {stamp()}")
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    from torch_models import bert, gpt2, llama, mlp, moe, resnet, vit

    import pase
    from pase.counts import counts
    from pase.frontends.torch import from_torch, import_torch

    models = {"mlp": mlp.build, "cnn": mlp.cnn, "resnet18": resnet.build,
              "gpt2-block": gpt2.block, "gpt2-2-layers": gpt2.build, "bert-layer": bert.build,
              "llama-block": llama.build, "moe-layer": moe.build,
              "gqa-by-hand": llama.hand_attention, "vit-conv1d": vit.build}
    print("| model | ops | parameters (pase / torch) | product FLOP (pase / torch) | other FLOP "
          "| import s | dp p=8 paper s | dp p=8 alpha-beta s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, build in models.items():
        model, example = build()
        start = time.perf_counter()
        imp = import_torch(model, example, name=name)
        seconds = time.perf_counter() - start
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(*example)
        torch_products = counter.get_total_flops()
        c = counts(imp.graph)
        by_op = c.by_op()
        products = sum(by_op[op.name].matmul_flops for op in imp.graph.ops
                       if imp.ops[op.name].counted)
        total = c.forward_flops
        unique = sum({id(p): p.numel() for p in model.parameters()}.values())
        solve = []
        for cost_model in ("paper", "alpha-beta"):
            t = time.perf_counter()
            pase.solve(imp.graph, devices=8, cost_model=cost_model)
            solve.append(time.perf_counter() - t)
        print(f"| {name} | {len(imp.graph.ops)} | {pase.counts.parameters(imp.graph):,} / "
              f"{unique:,} | {products:,.0f} / {torch_products:,.0f} | {total - products:,.0f} "
              f"| {seconds:.2f} | {solve[0]:.2f} | {solve[1]:.2f} |")

    sizes = dict(batch=16, seq=1024, layers=2, width=768, heads=12, ff=3072, vocab=50257,
                 positions=1024)
    start = time.perf_counter()
    with torch.device("meta"):
        model = gpt2.GPT2(sizes["layers"], sizes["width"], sizes["heads"], sizes["ff"],
                          sizes["vocab"], sizes["positions"])
        ids = torch.zeros(sizes["batch"], sizes["seq"], dtype=torch.long)
    mine = from_torch(model, (ids, ids), name="gpt2-torch")
    seconds = time.perf_counter() - start
    zoo = pase.load_graph("gpt2", **sizes)
    print()
    print(f"GPT-2, 2 layers, full width (import {seconds:.1f} s on the meta device): parameters "
          f"{pase.counts.parameters(mine):,} / zoo {pase.counts.parameters(zoo):,}; forward FLOP "
          f"{counts(mine).forward_flops:.4g} / zoo {counts(zoo).forward_flops:.4g}")
    print()
    print("| p | dp cost, imported (s) | dp cost, zoo (s) | ratio | imported strategy of h.0.attn.c_attn |")
    print("|---|---|---|---|---|")
    for p in (int(x) for x in args.devices.split(",")):
        a = pase.solve(mine, devices=p, cost_model="alpha-beta", cluster="h100-sxm")
        b = pase.solve(zoo, devices=p, cost_model="alpha-beta", cluster="h100-sxm")
        op = mine.op("h.0.attn.c_attn")
        split = {f"{d.role}": f for d in op.dims for n, f in a.configs[op.name].items()
                 if n == d.name and f > 1}
        print(f"| {p} | {a.total_cost:.6g} | {b.total_cost:.6g} | {a.total_cost / b.total_cost:.6f} "
              f"| {split or 'unsplit'} |")


if __name__ == "__main__":
    main()
