"""How much faster the layout search prices a family with its shared sums than layout by layout.

    python benchmarks/layout_search_speed.py            # GPT-3 175B on 1,024 A100s (minutes)
    python benchmarks/layout_search_speed.py --small    # a 4-layer GPT on 16 GPUs (seconds)

The same family (the one ``pase solve --layouts`` searched before ZB-H1, DualPipe and
the larger interleavings joined it: 1F1B and interleaved with V of 2 to 4) is searched
twice in one process: through :class:`pase.perf.step.Shared` (``shared=True``, what the
search does) and with every layout priced on its own by ``evaluate_layout`` (the old
path, ``shared=False``). Both price the same layouts; the script checks that their
rankings agree and prints the CPU seconds of each and the ratio. Then it searches the
whole family of today (every schedule and V) once and prints its size and time.
Results: benchmarks/results/layout_search_speed.md.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

from provenance import stamp

from pase.api import load_graph
from pase.perf.search import search_layouts

CASES = {"full": ("gpt3-175b", {"vocab": 51200}, 1024, "dgx-a100", 1536),
         "small": ("gpt3", {"layers": 4, "width": 512, "heads": 8, "vocab": 1024, "seq": 512},
                   16, "dgx-a100", 64)}
CLASSIC = dict(virtual=(2, 3, 4), schedules=("1f1b", "interleaved"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="a small case (seconds)")
    args = ap.parse_args(argv)
    model, options, devices, cluster, batch = CASES["small" if args.small else "full"]

    def build(m: int):
        return load_graph(model, batch=m, **options)

    def timed(**kw):
        start = time.process_time()
        found = search_layouts(build, devices, cluster, batch, **kw)
        return found, time.process_time() - start

    fast, fast_s = timed(shared=True, **CLASSIC)
    slow, slow_s = timed(shared=False, **CLASSIC)
    same = [e.layout for e in fast.ranked] == [e.layout for e in slow.ranked] and all(
        math.isclose(a.step_seconds, b.step_seconds, rel_tol=1e-9)
        for a, b in zip(fast.ranked, slow.ranked))
    whole, whole_s = timed(shared=True)
    print(stamp())
    print(f"{model} on {devices} GPUs ({cluster}), global batch {batch}\n")
    print("| search | family | priced | CPU s | best step s | best layout |")
    print("|---|---|---|---|---|---|")
    for name, found, seconds in (("1F1B + interleaved 2-4, layout by layout (old path)", slow,
                                  slow_s),
                                 ("1F1B + interleaved 2-4, shared sums", fast, fast_s),
                                 ("whole family (all V, ZB-H1, DualPipe), shared sums", whole,
                                  whole_s)):
        b = found.best.layout
        text = (f"tp{b.tp} pp{b.pp} dp{b.dp} mb{b.micro_batch} {b.schedule}"
                f"{':' + str(b.virtual) if b.virtual > 1 else ''} z{b.zero} {b.recompute}")
        print(f"| {name} | {found.family:,} | {found.priced:,} | {seconds:.1f} | "
              f"{found.best.step_seconds:.4f} | {text} |")
    print(f"\nspeed-up, same family, same process: {slow_s / fast_s:.1f}x "
          f"(rankings {'agree' if same else 'DIFFER'})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
