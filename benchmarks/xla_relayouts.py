"""How often XLA re-lays a tensor with the least traffic: every pair of placements.

A rank-3 float32 tensor of 8 x 8 x 8 on a 2 x 2 x 2 mesh (8 fake CPU devices): each
placement gives each mesh axis to one tensor dim or to none (replicated), 64 in all.
For each of the 4,032 ordered pairs of different placements, jax compiles the
identity from one to the other (never run) and pase.export.hlo reads the compiled
collectives; the least traffic is counted here by enumeration over devices (the
most elements a device needs and does not hold, independent of pase's closed form).
Writes benchmarks/results/xla_relayouts.md: how many pairs XLA moves with the least
traffic, and the others by the collectives XLA chose.

    python benchmarks/xla_relayouts.py [--out FILE]     # about 15 minutes on 2 cores
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections import Counter
from pathlib import Path

from provenance import stamp

SHAPE, AXES = (8, 8, 8), ("x0", "x1", "x2")
OUT = Path(__file__).parent / "results" / "xla_relayouts.md"


def placements() -> list[tuple]:
    """Each axis to dim 0, 1, 2 or none; a dim's axes in mesh order."""
    out = []
    for owner in itertools.product(range(4), repeat=len(AXES)):
        out.append(tuple(tuple(a for a, o in zip(AXES, owner) if o == d) or None for d in range(3)))
    return out


def blocks(spec: tuple, device: int) -> list[tuple[float, float]]:
    coord = {a: device >> (len(AXES) - 1 - i) & 1 for i, a in enumerate(AXES)}
    out = []
    for size, axes in zip(SHAPE, spec):
        index, count = 0, 1
        for a in axes or ():
            index, count = index * 2 + coord[a], count * 2
        out.append((index * size / count, (index + 1) * size / count))
    return out


def least_bytes(src: tuple, dst: tuple) -> float:
    worst = 0.0
    for device in range(2 ** len(AXES)):
        need, overlap = 1.0, 1.0
        for (lo, hi), (a, b) in zip(blocks(dst, device), blocks(src, device)):
            need *= hi - lo
            overlap *= max(0.0, min(hi, b) - max(lo, a))
        worst = max(worst, need - overlap)
    return 4 * worst


def compiled(pairs) -> list[tuple[float, tuple[str, ...]]]:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from pase.export.hlo import parse_collectives

    mesh = Mesh(np.array(jax.devices()).reshape(2, 2, 2), AXES)
    arg = jax.ShapeDtypeStruct(SHAPE, jnp.float32)
    out = []
    for i, (src, dst) in enumerate(pairs):
        f = jax.jit(lambda x: x * 1.0, in_shardings=NamedSharding(mesh, PartitionSpec(*src)),
                    out_shardings=NamedSharding(mesh, PartitionSpec(*dst)))
        colls = parse_collectives(f.lower(arg).compile().as_text(), 8)
        out.append((sum(c.bytes for c in colls), tuple(sorted({c.kind for c in colls}))))
        if i % 500 == 0:
            print(f"{i}/{len(pairs)} compiled", file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    specs = placements()
    pairs = [(a, b) for a in specs for b in specs if a != b]
    results = compiled(pairs)
    least, more = 0, Counter()
    for (src, dst), (moved, kinds) in zip(pairs, results):
        ideal = least_bytes(src, dst)
        if abs(moved - ideal) <= 0.01 * max(moved, ideal, 1.0):
            least += 1
            continue
        full = 4 * SHAPE[0] * SHAPE[1] * SHAPE[2]
        src_tile = full / 2 ** sum(len(a or ()) for a in src)
        remat = kinds == ("all-gather",) and abs(moved - (full - src_tile)) < 1
        more["all-gather of the whole tensor, then a slice" if remat else " + ".join(kinds)] += 1
    lines = ["# XLA's re-layouts against the least traffic", "", stamp() + ".", "",
             "Written by `benchmarks/xla_relayouts.py`: every ordered pair of the 64 placements of an "
             "8 x 8 x 8 float32 tensor on a 2 x 2 x 2 mesh (each mesh axis to one dim or none), the "
             "identity compiled by XLA from one to the other on 8 fake CPU devices.", "",
             f"XLA moves the least traffic (within 1%) in {least} of {len(pairs)} pairs. The others, "
             "by the collectives XLA chose:", "", "| XLA's plan | pairs |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in more.most_common()]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"least traffic in {least}/{len(pairs)}; wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
