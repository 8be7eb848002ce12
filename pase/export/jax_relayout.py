"""Re-layouts as pase prices them, as source text every exported mesh program carries.

Left to itself, XLA's partitioner turns many re-layouts into an all-gather of the
whole tensor and a slice (its log calls it an "involuntary full
rematerialization"), moving up to ``p`` times the bytes a device needs. The
exported program instead writes each re-layout out (``relayout``), moving what
:func:`pase.work.relayout.edge_bytes` prices, forward and backward:

- when on every tensor axis one layout's mesh axes are a prefix of the other's
  (nested): a local slice by the axes only the destination splits, one
  all-to-all over the axes that move from one tensor axis to another, and one
  all-gather over the axes only the source splits. A device receives its
  destination tile less the part it holds, as priced.
- otherwise: the destination tile in blocks of the two layouts' common
  refinement, each fetched from a device holding it (itself when it can) in
  rounds of collective-permutes, one block per device per round (a bipartite
  edge colouring, so the rounds are the most blocks any device fetches or
  sends). A device receives at most its destination tile, as priced.

The gradient goes back the same way from the destination layout to the source
(a ``jax.custom_vjp``: the re-layout is the identity, so its derivative is the
reverse re-layout). A tensor whose tiles are uneven (a dim the split does not divide,
as a padded vocabulary split: each device holds ``ceil(n / f)`` rows, the last some
pad) is padded to ``f ceil(n / f)`` on that dim, moved as above and cropped again,
so a device receives its padded tile, as pase prices it; where the two layouts pad
a dim to different extents, or a device would hold pad alone, it is left to XLA.
The exchange is planned when the step is traced, with one
collective-permute per round: 0.07 s at p = 64, but its edge colouring grows faster
than p times the blocks a device fetches (minutes at p = 1024). The re-layout is a
``custom_vjp``, so forward-mode autodiff (``jax.jvp``) needs ``relayout="xla"``. :data:`RELAYOUT` is text, like :mod:`pase.export.jax_runtime`;
:func:`namespace` executes it for tests.
"""
from __future__ import annotations

RELAYOUT = '''\
# -- re-layouts written out, as pase prices them ----------------------------------------


def _axes(entry):
    return () if entry is None else ((entry,) if isinstance(entry, str) else tuple(entry))


def _even(shape, spec, sizes):
    """Whether every axis of ``shape`` splits evenly in layout ``spec`` (``shard_map`` needs it)."""
    return all(n % int(np.prod([sizes[a] for a in _axes(e)])) == 0 for n, e in zip(shape, spec))


def _nested(src, dst):
    return all(d[:len(s)] == s or s[:len(d)] == d for s, d in zip(src, dst))


def _move_nested(x, src, dst, sizes):
    """One device's tile of ``src`` -> its tile of ``dst`` (nested layouts)."""
    into = {e for s, d in zip(src, dst) for e in d[len(s):]}
    out = {f for s, d in zip(src, dst) for f in s[len(d):]}
    names = list(sizes)
    moved = [n for n in names if n in into and n in out]
    gathered = [n for n in names if n in out and n not in into]
    shape, labels = [], []
    for a, (s, d) in enumerate(zip(src, dst)):
        extra = d[len(s):]
        shape += [sizes[e] for e in extra] + [x.shape[a] // int(np.prod([sizes[e] for e in extra]))]
        labels += [e for e in extra] + [a]
    x = x.reshape(shape)
    for e in [n for n in names if n in into and n not in out]:  # sliced only: keep my chunk
        i = labels.index(e)
        x = jax.lax.dynamic_index_in_dim(x, jax.lax.axis_index(e), axis=i, keepdims=False)
        del labels[i]
    if moved:  # chunk i of the moved axes to the device at i; what arrives is the sender's
        order = [labels.index(n) for n in moved] + [i for i, l in enumerate(labels) if l not in moved]
        x, labels = x.transpose(order), [labels[i] for i in order]
        x = jax.lax.all_to_all(x.reshape((-1,) + x.shape[len(moved):]), tuple(moved), 0, 0, tiled=True)
        x = x.reshape(tuple(sizes[n] for n in moved) + x.shape[1:])
    if gathered:
        x = jax.lax.all_gather(x, tuple(gathered), axis=0, tiled=False)
        x = x.reshape(tuple(sizes[n] for n in gathered) + x.shape[1:])
        labels = gathered + labels
    order = [labels.index(k) for a, (s, d) in enumerate(zip(src, dst)) for k in list(s[len(d):]) + [a]]
    tile = [x.shape[labels.index(a)] * int(np.prod([sizes[f] for f in s[len(d):]]))
            for a, (s, d) in enumerate(zip(src, dst))]
    return x.transpose(order).reshape(tile)


def _blocks(spec, sizes, coords):
    """Per device (rows of ``coords``) its block index along each tensor axis, and the factors."""
    names = list(sizes)
    index = np.zeros((len(coords), len(spec)), dtype=np.int64)
    factors = []
    for a, axes in enumerate(spec):
        for n in axes:
            index[:, a] = index[:, a] * sizes[n] + coords[:, names.index(n)]
        factors.append(int(np.prod([sizes[n] for n in axes])))
    return index, factors


def _colour(edges, p):
    """Rounds of ``(receiver, sender, payload)`` edges, each device receiving and sending
    at most once per round, in as many rounds as the busiest device has edges (Konig)."""
    free = lambda used: next(c for c in range(len(edges) + 1) if c not in used)
    at_r, at_s = [dict() for _ in range(p)], [dict() for _ in range(p)]
    colour = {}
    for e, (r, s, _) in enumerate(edges):
        a, b = free(at_r[r]), free(at_s[s])
        if a not in at_s[s]:
            b = a
        else:  # flip the a/b path from s so that a is free at s
            path, node, side, c = [], s, "s", a
            while c in (at_s[node] if side == "s" else at_r[node]):
                f = (at_s[node] if side == "s" else at_r[node])[c]
                path.append(f)
                node, side = (edges[f][0], "r") if side == "s" else (edges[f][1], "s")
                c = b if c == a else a
            for f in path:
                del at_r[edges[f][0]][colour[f]], at_s[edges[f][1]][colour[f]]
            for f in path:
                colour[f] = b if colour[f] == a else a
                at_r[edges[f][0]][colour[f]] = at_s[edges[f][1]][colour[f]] = f
            b = a
        colour[e] = b
        at_r[r][b] = at_s[s][b] = e
    rounds = [[] for _ in range(max(colour.values(), default=-1) + 1)]
    for e, c in colour.items():
        rounds[c].append(edges[e])
    return rounds


def _exchange_plan(shape, src, dst, sizes):
    """The block exchange of a re-layout that is not nested: block shape, the blocks a
    device copies from itself, and rounds of ``(receiver, sender, (src at, dst at))``."""
    coords = np.array(list(np.ndindex(*sizes.values())), dtype=np.int64).reshape(-1, len(sizes))
    p = len(coords)
    held, sf = _blocks(src, sizes, coords)
    need, df = _blocks(dst, sizes, coords)
    fine = [int(np.lcm(s, d)) for s, d in zip(sf, df)]
    block = [n // f for n, f in zip(shape, fine)]
    per_dst = [f // d for f, d in zip(fine, df)]
    per_src = [f // s for f, s in zip(fine, sf)]
    # a block's holders, by its index in the source tiling
    holders: dict[tuple, list[int]] = {}
    for d in range(p):
        holders.setdefault(tuple(held[d]), []).append(d)
    local, edges, load = [[] for _ in range(p)], [], np.zeros(p, dtype=np.int64)
    for r in range(p):
        for k in np.ndindex(*per_dst):
            b = need[r] * per_dst + np.array(k, dtype=np.int64)  # the fine block wanted
            at = (tuple(int(v) for v in (b % per_src) * block), tuple(int(v) for v in np.array(k) * block))
            choice = holders[tuple(b // per_src)]
            if r in choice:
                local[r].append(at)
                continue
            s = min(choice, key=lambda d: (load[d], d))  # the least busy holder
            load[s] += 1
            edges.append((r, s, at))
    return block, local, _colour(edges, p)


def _place(out, piece, at, mask, me):
    """``piece`` written into ``out`` at this device's offset ``at[me]`` where ``mask[me]``."""
    to = jnp.asarray(at)[me]
    keep = jax.lax.dynamic_slice(out, to, piece.shape)
    return jax.lax.dynamic_update_slice(out, jnp.where(jnp.asarray(mask)[me], piece, keep), to)


def _move_exchange(x, src, dst, sizes, shape):
    block, local, rounds = _exchange_plan(shape, src, dst, sizes)
    names, zero = tuple(sizes), (0,) * len(shape)
    me = jax.lax.axis_index(names)
    out = jnp.zeros([n // int(np.prod([sizes[a] for a in d])) for n, d in zip(shape, dst)], x.dtype)
    for i in range(max(len(v) for v in local)):  # the blocks a device holds itself
        frm = jnp.asarray([v[i][0] if i < len(v) else zero for v in local])[me]
        out = _place(out, jax.lax.dynamic_slice(x, frm, block), [v[i][1] if i < len(v) else zero
                                                                 for v in local],
                     [i < len(v) for v in local], me)
    for edges in rounds:
        send, recv, gets = [zero] * len(local), [zero] * len(local), [False] * len(local)
        for r, s, (a, b) in edges:
            send[s], recv[r], gets[r] = a, b, True
        piece = jax.lax.dynamic_slice(x, jnp.asarray(send)[me], block)
        out = _place(out, jax.lax.ppermute(piece, names, [(s, r) for r, s, _ in edges]), recv, gets, me)
    return out


def _mover(mesh, shape, src, dst):
    """``x`` in layout ``src`` -> the same values in layout ``dst``, moving pase's bytes."""
    sizes = dict(mesh.shape)
    src, dst = tuple(_axes(e) for e in src), tuple(_axes(e) for e in dst)
    if _nested(src, dst):
        body = lambda x: _move_nested(x, src, dst, sizes)
    else:
        body = lambda x: _move_exchange(x, src, dst, sizes, shape)
    return jax.shard_map(body, mesh=mesh, in_specs=P(*(a or None for a in src)),
                         out_specs=P(*(a or None for a in dst)), check_vma=False)


def _padded_shape(shape, src, dst, sizes):
    """Per axis the extent ``f ceil(n / f)`` of the layouts' tiles (the pad a device holds)
    where they split it, when those that split it agree on it and leave no device a tile
    of pad alone; None otherwise (an axis split 2 and 3 ways: 68 and 69 rows for n = 67;
    6 rows split 4 ways: tiles of 2, 2, 2 and none, where XLA's pad is no longer local)."""
    out = []
    for n, s, d in zip(shape, src, dst):
        factors = [int(np.prod([sizes[a] for a in _axes(e)])) for e in (s, d)]
        extents = {f * -(-n // f) for f in factors if f > 1}
        if len(extents) > 1 or any((f - 1) * -(-n // f) >= n for f in factors if f > 1):
            return None
        out.append(extents.pop() if extents else n)
    return tuple(out)


def _move(mesh, x, src, dst):
    """``x`` (even tiles in both layouts) moved from ``src`` to ``dst`` as pase prices it;
    its gradient moved back the same way."""
    forward, backward = _mover(mesh, x.shape, src, dst), _mover(mesh, x.shape, dst, src)

    @jax.custom_vjp
    def move(x):
        return forward(x)

    move.defvjp(lambda x: (forward(x), None), lambda _, g: (backward(g),))
    return move(x)


def _relayouter(mesh, constrain):
    """``relayout(x, src, dst, scope)``: ``x`` (laid out as ``src``) laid out as ``dst``."""
    def relayout(x, src, dst, scope):
        src, dst = tuple(src), tuple(dst)
        with jax.named_scope(scope):
            if tuple(map(_axes, src)) == tuple(map(_axes, dst)):
                return constrain(x, dst)
            sizes = dict(mesh.shape)
            x = constrain(x, src)
            if _even(x.shape, src, sizes) and _even(x.shape, dst, sizes):
                return _move(mesh, x, src, dst)
            padded = _padded_shape(x.shape, src, dst, sizes)
            if padded is None:
                return constrain(x, dst)  # no common padded extent: left to XLA, which pads
            # Each device's tile already holds a pad (Megatron's ceil(n / f) rows): make it
            # explicit, move the even tiles as priced, and drop the pad again.
            shape = x.shape
            x = constrain(jnp.pad(x, [(0, m - n) for n, m in zip(shape, padded)]), src)
            y = _move(mesh, x, src, dst)
            return constrain(y[tuple(slice(0, n) for n in shape)], dst)

    return relayout
'''


def namespace() -> dict:
    """:data:`RELAYOUT` executed with jax, numpy and the sharding names (for tests)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec

    ns = {"jax": jax, "jnp": jnp, "np": np, "P": PartitionSpec}
    exec(RELAYOUT, ns)  # noqa: S102 - our own source text, the same the programs carry
    return ns
