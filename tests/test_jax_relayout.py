"""The exported programs' written-out re-layouts (pase.export.jax_relayout): the same
values, the reverse re-layout as gradient, and in the compiled HLO the bytes pase prices.

Each batch of layout pairs runs in one subprocess with fake CPU devices. Expected bytes
come from a device-by-device count written here (each device's destination tile less
what its source tile already holds, the worst device's) and from hand-worked cases.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys

import pytest

pytest.importorskip("jax")

SCRIPT = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from pase.export.hlo import parse_collectives
from pase.export.jax_relayout import namespace
from pase.export.mesh import mesh_axes

p, shape, pairs = json.loads(sys.argv[1])
ns = namespace()
axes = mesh_axes(p)
mesh = Mesh(np.array(jax.devices()[:p]).reshape([s for _, s in axes]), tuple(n for n, _ in axes))
constrain = lambda x, spec: jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*spec)))
relayout = ns["_relayouter"](mesh, constrain)
rng = np.random.default_rng(0)
x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
w = jnp.asarray(rng.standard_normal(shape), jnp.float32)
out = []
for src, dst in pairs:
    src = tuple(tuple(a) or None for a in src)
    dst = tuple(tuple(a) or None for a in dst)
    f = jax.jit(jax.value_and_grad(lambda x: jnp.sum(relayout(x, src, dst, "edge/a->b") * w)))
    loss, grad = f(x)
    y = jax.jit(lambda x: relayout(x, src, dst, "edge/a->b"))(x)
    cs = [c for c in parse_collectives(f.lower(x).compile().as_text(), p) if c.scope == "edge"]
    out.append({"same": bool(np.array_equal(np.asarray(y), np.asarray(x))),
                "grad": bool(np.allclose(np.asarray(grad), np.asarray(w))),
                "forward": sum(c.bytes for c in cs if c.direction == "forward"),
                "backward": sum(c.bytes for c in cs if c.direction == "backward"),
                "kinds": sorted({c.kind for c in cs})})
print(json.dumps(out))
"""


def run(p: int, shape: tuple, pairs: list) -> list[dict]:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={p}",
               JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([p, shape, pairs])],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def mesh(p: int) -> list[tuple[str, int]]:
    from pase.export.mesh import mesh_axes

    return mesh_axes(p)


def worst_received(p: int, shape, src, dst) -> float:
    """Bytes (float32) the worst device receives: its destination tile less the part of
    it in its own source tile, counted device by device."""
    axes = mesh(p)
    names, sizes = [n for n, _ in axes], [s for _, s in axes]
    def block(axes_of, coords, n):
        index, factor = 0, 1
        for a in axes_of:
            index = index * sizes[names.index(a)] + coords[names.index(a)]
            factor *= sizes[names.index(a)]
        return index * n / factor, n / factor

    worst = 0.0
    for coords in itertools.product(*map(range, sizes)):
        held = needed = 1.0
        for n, s_axes, d_axes in zip(shape, src, dst):
            (s_lo, s_len), (d_lo, d_len) = block(s_axes, coords, n), block(d_axes, coords, n)
            held *= max(0.0, min(s_lo + s_len, d_lo + d_len) - max(s_lo, d_lo))
            needed *= d_len
        worst = max(worst, needed - held)
    return 4 * worst


def random_specs(p: int, rank: int, count: int, seed: int) -> list:
    names = [n for n, _ in mesh(p)]
    rng = random.Random(seed)

    def one():
        used = rng.sample(names, rng.randint(0, len(names)))
        spec = [[] for _ in range(rank)]
        for n in used:
            spec[rng.randrange(rank)].append(n)
        return spec

    return [(one(), one()) for _ in range(count)]


def check(p: int, shape: tuple, pairs: list) -> list[dict]:
    results = run(p, shape, pairs)
    for (src, dst), r in zip(pairs, results):
        assert r["same"] and r["grad"], (src, dst, r)
        assert r["forward"] == pytest.approx(worst_received(p, shape, src, dst)), (src, dst, r)
        assert r["backward"] == pytest.approx(worst_received(p, shape, dst, src)), (src, dst, r)
    return results


def test_hand_worked_re_layouts_at_8():
    """(16, 8, 32) float32, 16 KiB. An 8-way split of the last axis gathered whole: 7/8 of
    the tensor forward (all-gather), nothing backward (a slice). Moving the 8-way split to
    the first axis: 7/8 of the 2 KiB tile each way (all-to-all). Last axis 8-way to a 2x2x2
    split of all three: no device's new tile is nested in its old one; the worst device
    holds none of its 2 KiB tile and fetches all of it (collective-permutes), both ways."""
    full = 16 * 8 * 32 * 4
    pairs = [([[], [], ["x0", "x1", "x2"]], [[], [], []]),
             ([[], [], ["x0", "x1", "x2"]], [["x0", "x1", "x2"], [], []]),
             ([[], [], ["x0", "x1", "x2"]], [["x0"], ["x1"], ["x2"]])]
    r = check(8, (16, 8, 32), pairs)
    assert (r[0]["forward"], r[0]["backward"], r[0]["kinds"]) == (full * 7 / 8, 0, ["all-gather"])
    assert (r[1]["forward"], r[1]["backward"], r[1]["kinds"]) == (full / 8 * 7 / 8,) * 2 + (["all-to-all"],)
    assert (r[2]["forward"], r[2]["backward"], r[2]["kinds"]) == (full / 8, full / 8, ["collective-permute"])


@pytest.mark.slow  # XLA compiles: minutes of the fast suite on 2 cores
def test_random_re_layouts_at_8_move_the_priced_bytes():
    check(8, (16, 8, 32), random_specs(8, 3, 40, seed=1))


@pytest.mark.slow  # XLA compiles: minutes of the fast suite on 2 cores
def test_random_re_layouts_at_16_and_12_move_the_priced_bytes():
    check(16, (16, 16, 32), random_specs(16, 3, 25, seed=2))
    check(12, (12, 24, 36), random_specs(12, 3, 25, seed=3))


def test_uneven_tiles_are_padded_and_move_the_priced_bytes():
    """A 7 x 7 tensor: 7 columns do not split 2 ways, nor 7 rows 4 ways. Each device's
    tile holds a pad there (ceil(n / f), as XLA and Megatron-LM pad it), so the re-layout
    pads the tensor to 8 x 8, moves the even tiles as priced, and drops the pad: the bytes
    of the padded tensor, not XLA's gather of the whole."""
    pairs = [([["x0"], []], [[], ["x0"]]), ([["x0", "x1"], []], [[], ["x2"]])]
    for (src, dst), r in zip(pairs, run(8, (7, 7), pairs)):
        assert r["same"] and r["grad"], r
        assert r["forward"] == pytest.approx(worst_received(8, (8, 8), src, dst)), (src, dst, r)
        assert r["backward"] == pytest.approx(worst_received(8, (8, 8), dst, src)), (src, dst, r)


def test_uneven_tiles_without_one_pad_are_left_to_xla_and_keep_their_values():
    """7 columns split 2 ways (tiles of 4: 8 with the pad) and 3 ways (tiles of 3: 9); 6
    rows split 4 ways (tiles of 2, 2, 2 and a device of pad alone): XLA re-lays them out."""
    for r in run(12, (6, 7), [([[], ["x0"]], [[], ["x2"]]), ([["x0", "x1"], []], [[], ["x0"]])]):
        assert r["same"] and r["grad"], r
