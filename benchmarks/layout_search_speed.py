"""How much faster the layout search prices a family with its shared sums and its branch and
bound than layout by layout.

    python benchmarks/layout_search_speed.py            # GPT-3 175B on 1,024 A100s (minutes)
    python benchmarks/layout_search_speed.py --small    # a 4-layer GPT on 16 GPUs (seconds)
    python benchmarks/layout_search_speed.py --large    # Llama 3.1 405B on 16,384 H100s and
                                                        # DeepSeek-V3 on 1,024 (bf16 and
                                                        # fp8), pruned only
    python benchmarks/layout_search_speed.py --large --exhaustive   # and unpruned (an hour+)

The same family (the one ``pase solve --layouts`` searched before ZB-H1, DualPipe and
the larger interleavings joined it: 1F1B and interleaved with V of 2 to 4) is searched
three times in one process: with every layout priced on its own by ``evaluate_layout``
(the old path, ``shared=False``), through :class:`pase.perf.shared.Shared` pricing every
layout (``prune=False``), and through Shared with the branch and bound
(:mod:`pase.perf.bound`, what the search does). All three must rank alike; the script
checks it and prints the CPU seconds of each and the ratios. Then the whole family of
today (every schedule and V) is searched with and without pruning.

``--large`` searches the runs of ``pase solve --layouts`` that the branch and bound
was made for (Llama 3.1 405B on 16,384 H100s, global batch 2,048 at 8,192 tokens;
DeepSeek-V3 on 1,024 H100s, global batch 8,192 at 4,096 tokens, in bf16 as the CLI prices
it by default and in fp8, ``--precision fp8``); their unpruned searches take the better
part of an hour each, so they run only with ``--exhaustive`` (otherwise compare with the
measurement in the results file).
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
LARGE = [("llama3.1-405b", {"seq": 8192}, 16384, "h100-sxm", 2048, "bf16"),
         ("deepseek-v3", {"seq": 4096}, 1024, "h100-sxm", 8192, "bf16"),
         ("deepseek-v3", {"seq": 4096}, 1024, "h100-sxm", 8192, "fp8")]
CLASSIC = dict(virtual=(2, 3, 4), schedules=("1f1b", "interleaved"))


def timed(model: str, options: dict, devices: int, cluster: str, batch: int, **kw):
    def build(m: int):
        return load_graph(model, batch=m, **options)

    start = time.process_time()
    found = search_layouts(build, devices, cluster, batch, **kw)
    return found, time.process_time() - start


def agree(a, b) -> bool:
    """The same ranked layouts at the same steps (up to the order of float sums)."""
    return [e.layout for e in a.ranked] == [e.layout for e in b.ranked] and all(
        math.isclose(x.step_seconds, y.step_seconds, rel_tol=1e-9)
        for x, y in zip(a.ranked, b.ranked))


def row(name: str, found, seconds: float) -> str:
    b = found.best.layout
    text = (f"tp{b.tp} pp{b.pp} dp{b.dp} cp{b.cp} ep{b.ep} mb{b.micro_batch} {b.schedule}"
            f"{':' + str(b.virtual) if b.virtual > 1 else ''} z{b.zero} {b.recompute}")
    return (f"| {name} | {found.family:,} | {found.priced:,} | {found.pruned:,} | {seconds:.1f} | "
            f"{found.best.step_seconds:.4f} | {text} |")


HEAD = ("| search | family | priced | pruned | CPU s | best step s | best layout |\n"
        "|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="a small case (seconds)")
    ap.add_argument("--large", action="store_true",
                    help="Llama 3.1 405B on 16,384 GPUs and DeepSeek-V3 on 1,024, pruned")
    ap.add_argument("--exhaustive", action="store_true",
                    help="with --large: also search them unpruned (an hour or more each)")
    args = ap.parse_args(argv)
    print(stamp())
    if args.large:
        return large(args.exhaustive)
    case = CASES["small" if args.small else "full"]
    slow, slow_s = timed(*case, shared=False, **CLASSIC)
    whole, whole_s = timed(*case, prune=False, **CLASSIC)
    fast, fast_s = timed(*case, **CLASSIC)
    family, family_s = timed(*case, prune=False)
    pruned, pruned_s = timed(*case)
    same = agree(slow, whole) and agree(whole, fast) and agree(family, pruned)
    model, _, devices, cluster, batch = case
    print(f"{model} on {devices} GPUs ({cluster}), global batch {batch}\n")
    print(HEAD)
    print(row("1F1B + interleaved 2-4, layout by layout (old path)", slow, slow_s))
    print(row("1F1B + interleaved 2-4, shared sums, every layout", whole, whole_s))
    print(row("1F1B + interleaved 2-4, shared sums, branch and bound", fast, fast_s))
    print(row("whole family, shared sums, every layout", family, family_s))
    print(row("whole family, shared sums, branch and bound", pruned, pruned_s))
    print(f"\nsame family, same process: shared sums {slow_s / whole_s:.1f}x layout by layout, "
          f"branch and bound {whole_s / fast_s:.1f}x more; whole family: branch and bound "
          f"{family_s / pruned_s:.1f}x (rankings {'agree' if same else 'DIFFER'})")
    return 0 if same else 1


def large(exhaustive: bool) -> int:
    same = True
    print(HEAD)
    for model, options, devices, cluster, batch, precision in LARGE:
        where = (f"{model} on {devices:,} ({cluster}), global batch {batch:,}, seq "
                 f"{options['seq']}, {precision}")
        found, seconds = timed(model, options, devices, cluster, batch, precision=precision)
        print(row(f"{where}, branch and bound", found, seconds), flush=True)
        if exhaustive:
            whole, whole_s = timed(model, options, devices, cluster, batch, prune=False,
                                   precision=precision)
            print(row(f"{where}, every layout", whole, whole_s), flush=True)
            print(f"\n{whole_s / seconds:.0f}x, rankings {'agree' if agree(whole, found) else 'DIFFER'}"
                  "\n")
            same = same and agree(whole, found)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
