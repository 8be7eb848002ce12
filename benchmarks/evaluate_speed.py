"""How fast does `pase evaluate --layout` price a layout, and does it grow with the ops only?

    python benchmarks/evaluate_speed.py

Prices Llama-style decoders (width 16,384, 128 heads, 8 key/value heads, MLP 53,248,
as Llama 3 405B) of 16, 32, 64 and 126 layers, tensor 8 x pipeline 16 x data D, on
2,048 to 16,384 H100s, and prints the CPU seconds of building the graph and of
pricing it, and the pricing seconds per op as a ratio to the smallest case (run
first, in the same process): a ratio near 1 means time proportional to the ops,
whatever the device count. No configuration space is built.
"""
from __future__ import annotations

import time

from provenance import stamp

from pase.api import load_graph
from pase.perf import evaluate_layout, make_layout

SIZES = dict(width=16384, heads=128, kv_heads=8, ff=53248)
CASES = [(16, 2048), (32, 4096), (64, 8192), (126, 16384)]


def main() -> None:
    print(stamp())
    print("| layers | devices | ops | graph CPU s | price CPU s | price s per op, ratio to the first |")
    print("|---|---|---|---|---|---|")
    base = None
    for layers, devices in CASES:
        start = time.process_time()
        graph = load_graph("llama3-8b", batch=1, layers=layers, **SIZES)
        built = time.process_time() - start
        lay = make_layout(f"tp=8,pp=16,dp={devices // 128}", devices=devices, micro_batch=1,
                          global_batch=devices // 8, sequence_parallel=True, zero=1)
        start = time.process_time()
        evaluate_layout(graph, "h100-sxm", lay)
        priced = time.process_time() - start
        per_op = priced / len(graph.ops)
        base = per_op if base is None else base
        print(f"| {layers} | {devices} | {len(graph.ops)} | {built:.2f} | {priced:.2f} | "
              f"{per_op / base:.2f} |", flush=True)


if __name__ == "__main__":
    main()
