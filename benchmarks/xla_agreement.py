"""pase's predicted bytes per device against XLA's compiled collectives (pase verify).

Writes benchmarks/results/xla_agreement.md: per case and p, predicted and compiled
bytes per device (forward + backward), their ratio, the fraction of rows (ops,
edges, gradient groups) within 1%, and for each row outside 1% the HLO line of
the compiler's collective. Cases: a matmul split on data, output, reduction and
2-D; a two-layer MLP under Megatron and each mismatched pair; a transformer
layer and one layer of each built-in transformer model of the zoo under the dp
optimum (compute-bound costs, so the optimum splits). Programs are compiled on
fake CPU devices, one subprocess per p.

    python benchmarks/xla_agreement.py [--ps 8,16,64] [--out FILE]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pase
from pase.export.verify import verify_many

COMPUTE_BOUND = {"tflops": 0.01, "bandwidth": 1000.0}
ZOO = ("bert-base", "gpt2", "llama2-7b", "llama3-8b", "vit-b16", "mixtral-8x7b", "switch-base-8")
OUT = Path(__file__).parent / "results" / "xla_agreement.md"


def mlp_cases(p: int) -> dict[str, dict]:
    half = p // 2
    return {"matmul b": {"fc2": {"b": p}}, "matmul n": {"fc2": {"n": p}},
            "matmul k": {"fc2": {"k": p}}, "matmul 2-D": {"fc2": {"b": 2, "n": half}},
            "mlp megatron n|k": {"fc1": {"n": p}, "fc2": {"k": p}},
            "mlp n|n": {"fc1": {"n": p}, "fc2": {"n": p}}, "mlp n|b": {"fc1": {"n": p}, "fc2": {"b": p}},
            "mlp k|b": {"fc1": {"k": p}, "fc2": {"b": p}}, "mlp b|k": {"fc1": {"b": p}, "fc2": {"k": p}}}


def layer_options(name: str, p: int) -> dict:
    from pase.registry import MODELS

    if name == "transformer":
        opts = {"batch": 8, "seq": 8, "vocab": 64, "width": 32, "heads": 4, "d_k": 8, "ff": 64}
    else:
        opts = dict(MODELS.entry(name).info["tiny"])
    opts["layers"] = 1
    if p >= 16:
        for key, value in (("batch", 16), ("width", 64), ("ff", 128), ("seq", 16)):
            if key in opts:
                opts[key] = max(opts[key], value)
    return opts


def cases(p: int) -> list[tuple[str, dict]]:
    out = [(label, {"model": "mlp", "strategy": s, "devices": p,
                    "model_options": {"batch": 2 * p, "width": 4 * p, "classes": 10}})
           for label, s in mlp_cases(p).items()]
    for name in ("transformer",) + ZOO:
        opts = layer_options(name, p)
        s = pase.solve(name, p, cost_options=COMPUTE_BOUND, model_options=opts)
        out.append((f"{name} layer (dp)", {"model": name, "strategy": s, "devices": p,
                                           "model_options": opts}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ps", default="8,16,64")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    rows, details = [], []
    for p in (int(x) for x in args.ps.split(",")):
        start = time.perf_counter()
        batch = cases(p)
        print(f"p={p}: compiling {len(batch)} programs...", file=sys.stderr, flush=True)
        reports = verify_many([c for _, c in batch], timeout=3000)
        print(f"p={p}: done in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        for (label, _), r in zip(batch, reports):
            t = r["total"]
            rows.append((label, p, t["predicted"], t["compiled"], t["ratio"], r["rows_within"],
                         r["rows_total"]))
            for row in r["rows"]:
                if not row["within"]:
                    line = next((c["line"] for c in row["compiled_collectives"]), "(no collective)")
                    details.append((label, p, row["row"], row["predicted"], row["compiled"], line))
    within = sum(w for *_, w, _ in rows)
    total = sum(n for *_, n in rows)
    text = ["# pase's predicted bytes per device vs XLA's compiled collectives", "",
            "Written by `benchmarks/xla_agreement.py` (jax on fake CPU devices; compiled, never run).",
            "Bytes per device, forward + backward, summed over the step; a row is an op, an edge "
            "or a gradient group (see `pase.export.verify`).",
            f"Edges priced by pase.work.layout.edge_bytes; p = {args.ps}.", "",
            f"Rows within 1%: {within}/{total} ({100 * within / max(total, 1):.1f}%); cases whose "
            f"total is within 1%: {sum(1 for r in rows if r[4] is not None and abs(r[4] - 1) <= 0.01)}"
            f"/{len(rows)}.", "",
            "| case | p | predicted KiB | compiled KiB | ratio | rows within 1% |",
            "|---|---|---|---|---|---|"]
    for label, p, pred, comp, ratio, w, n in rows:
        r = "-" if ratio is None else f"{ratio:.4f}"
        text.append(f"| {label} | {p} | {pred / 1024:.2f} | {comp / 1024:.2f} | {r} | {w}/{n} |")
    text += ["", "## Rows outside 1%", "",
             "| case | p | row | predicted B | compiled B | an HLO line of the compiler's choice |",
             "|---|---|---|---|---|---|"]
    for label, p, row, pred, comp, line in details:
        text.append(f"| {label} | {p} | {row} | {pred:.0f} | {comp:.0f} | `{line[:300]}` |")
    Path(args.out).write_text("\n".join(text) + "\n")
    print(f"rows within 1%: {within}/{total}; wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
