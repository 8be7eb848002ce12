"""The op library every exported JAX program carries, as source text.

:func:`pase.export.to_jax` copies :data:`HEADER` and :data:`OPS` verbatim into
the program it writes, then the graph's parameters, data and ``forward``, then
:data:`FOOTER`. It is text, not an importable module, so ``import pase`` never
imports jax; the tests execute the programs it ends up in.
"""

HEADER = '''\
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
'''

OPS = '''\
# -- ops (NCHW activations, OIHW filters) -------------------------------------------


ACTS = {"relu": jax.nn.relu, "gelu": jax.nn.gelu, "silu": jax.nn.silu, "tanh": jnp.tanh,
        "relu2": lambda y: jnp.square(jax.nn.relu(y)), "none": lambda y: y}


def act(y, pw, fn="relu"):
    """The point-wise tail of a layer: ``fn`` (ReLU by default) when the layer has point-wise ops."""
    return ACTS[fn](y) if pw else y


def _bias(y, bias, letters, out):
    """Add a bias whose axes are the output letters ``letters`` (in output order)."""
    if bias is None:
        return y
    shape = [bias.shape[letters.index(ch)] if ch in letters else 1 for ch in out]
    return y + bias.reshape(shape)


def add_weight(x, w):
    """Add a parameter aligned with the trailing axes of ``x``: the leading entries of a
    longer axis, the first of a shorter one (the rows a table's reader takes)."""
    lead = x.ndim - w.ndim
    w = w[tuple(slice(0, min(ws, xs) if ws >= xs else 1)
                for ws, xs in zip(w.shape, x.shape[lead:]))]
    return x + w


def rotary(x, base=10000.0):
    """Rotary position embedding: positions on axis -2, features (paired i, i + d/2) last."""
    n, d = x.shape[-2], x.shape[-1]
    inv = base ** (-jnp.arange(0, d // 2, dtype=jnp.float32) * 2.0 / d)
    angles = jnp.arange(n, dtype=jnp.float32)[:, None] * inv[None, :]
    cos = jnp.concatenate([jnp.cos(angles)] * 2, axis=-1).astype(x.dtype)
    sin = jnp.concatenate([jnp.sin(angles)] * 2, axis=-1).astype(x.dtype)
    half = jnp.concatenate([-x[..., d // 2:], x[..., :d // 2]], axis=-1)
    return x * cos + half * sin


def _along(w, axis, ndim):
    shape = [1] * ndim
    shape[axis] = w.shape[0]
    return w.reshape(shape)


def scale_shift(y, axis, weights):
    """A norm's affine parameters (scale, then shift) along ``axis``."""
    if len(weights) > 0:
        y = y * _along(weights[0], axis, y.ndim)
    if len(weights) > 1:
        y = y + _along(weights[1], axis, y.ndim)
    return y


def top_k(x, k, axis, normalize, spec=None, pin=None):
    """The ``k`` largest entries along ``axis`` kept (renormalised if asked), the rest 0.
    On a mesh (``pin.mesh``) with ``axis`` whole in the layout ``spec``, each device ranks
    its own rows (XLA's partitioner would gather them first)."""
    axis = axis % x.ndim
    moved = jnp.moveaxis(jax.lax.stop_gradient(x), axis, -1)
    rank = lambda v: jax.lax.top_k(v, k)[0][..., -1:]
    mesh = getattr(pin, "mesh", None)
    if mesh is not None and spec[axis] is None and _even(x.shape, spec, dict(mesh.shape)):
        local = P(*(list(spec[:axis]) + list(spec[axis + 1:]) + [None]))
        rank = jax.shard_map(rank, mesh=mesh, in_specs=local, out_specs=local)
    threshold = jnp.moveaxis(rank(moved), -1, axis)
    kept = jnp.where(x >= threshold, x, jnp.zeros_like(x))
    if normalize:
        kept = kept / jnp.sum(kept, axis=axis, keepdims=True)
    return kept


def _slots(gates, capacity, groups=1):
    """``(b, l, x, c)``: 1 where token l of sequence b takes slot c of expert x (in order,
    first come first served; tokens over capacity are dropped). With ``groups`` > 1 each
    run of ``l / groups`` tokens fills its own ``capacity / groups`` slots."""
    b, n, x = gates.shape
    chosen = jax.lax.stop_gradient(gates) > 0
    per = capacity // groups
    runs = chosen.astype(jnp.int32).reshape(b, groups, n // groups, x)
    position = (jnp.cumsum(runs, axis=2) - 1).reshape(b, n, x)
    first = (jnp.arange(n) // (n // groups) * per)[None, :, None]
    keep = chosen & (position < per)
    return jax.nn.one_hot(jnp.where(keep, position + first, capacity), capacity, dtype=gates.dtype)


def moe_dispatch(tokens, gates, capacity, groups=1):
    return jnp.einsum("blxc,ble->xbce", _slots(gates, capacity, groups), tokens)


def moe_combine(y, gates, groups=1):
    """Each token's expert outputs (its slot's row of each expert), weighted by its gates.
    Routed first, so that backward the gates' gradient is a (b, l, x) sum over the width;
    GShard's single einsum with the (b, l, x, c) combine weights makes XLA all-reduce that
    whole tensor's gradient when the width is split."""
    routed = jnp.einsum("blxc,xbce->blxe", _slots(gates, y.shape[2], groups), y)
    return jnp.einsum("blx,blxe->ble", gates, routed)


def causal(x, window=0):
    """Mask keys after the query (last axis) for the queries on the second-last, and with a
    ``window`` > 0 the keys ``window`` or more before it."""
    n, m = x.shape[-2], x.shape[-1]
    keep = jnp.arange(m)[None, :] <= jnp.arange(n)[:, None]
    if window:
        keep = keep & (jnp.arange(m)[None, :] > jnp.arange(n)[:, None] - window)
    return jnp.where(keep, x, jnp.asarray(-1e9, x.dtype))


def fit(x, shape):
    """Crop or zero-pad ``x`` to ``shape`` (local programs only: stands in for a re-layout)."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    x = x[tuple(slice(0, min(a, b)) for a, b in zip(x.shape, shape))]
    return jnp.pad(x, [(0, b - a) for a, b in zip(x.shape, shape)])


def _window_pads(x, window, stride, pad, out):
    """Per spatial axis the (low, high) padding giving ``out`` outputs; crops when negative."""
    pads = []
    for axis, (k, s, p, o) in enumerate(zip(window, stride, pad, out)):
        size = x.shape[2 + axis]
        total = (o - 1) * s + k - size
        if total < 0:
            x = jax.lax.slice_in_dim(x, 0, size + total, axis=2 + axis)
            total = 0
        low = min(p, total)
        pads.append((low, total - low))
    return x, pads


def fc(x, w, pw=0, fn="relu", bias=None):
    y = jnp.einsum("...k,kn->...n", x, w)
    return act(y if bias is None else y + bias, pw, fn)


def einsum(eq, a, b, pw=0, fn="relu", bias=None, letters=""):
    return act(_bias(jnp.einsum(eq, a, b), bias, letters, eq.split("->")[1]), pw, fn)


def embedding(eq, ids, w, vocab, spec, pin):
    """An embedding as pase models it: the one-hot of ``ids`` (pinned) times the table."""
    onehot = pin(jax.nn.one_hot(ids, vocab, dtype=w.dtype), spec)
    return jnp.einsum(eq, onehot, w)


def conv(x, w, stride, pad, out, pw=0):
    x, pads = _window_pads(x, w.shape[2:], stride, pad, out)
    y = jax.lax.conv_general_dilated(x, w, tuple(stride), pads,
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return act(y, pw)


def pool(x, window, stride, pad, out, mode):
    x, pads = _window_pads(x, window, stride, pad, out)
    dims, strides = (1, 1) + tuple(window), (1, 1) + tuple(stride)
    padding = ((0, 0), (0, 0)) + tuple(pads)
    if mode == "max":
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, dims, strides, padding)
    total = jax.lax.reduce_window(x, 0.0, jax.lax.add, dims, strides, padding)
    return total / (window[0] * window[1])  # padding counts, as torch's default


def resize(x, out, mode):
    """Interpolate the spatial axes to ``out`` (half-pixel centres, as torch's
    ``align_corners=False``); ``mode`` is pase's: nearest, linear or cubic."""
    return jax.image.resize(x, x.shape[:2] + tuple(out), {"nearest": "nearest", "linear": "linear",
                                                          "cubic": "cubic"}[mode])


def elementwise(x, y, pw=0):
    return act(x + y, pw)


def norm(x, axis, eps=1e-5, rms=False, weights=()):
    """Layer normalisation (or RMSNorm) over ``axis``, with the op's scale and shift if any."""
    if rms:
        y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=axis, keepdims=True) + eps)
        return scale_shift(y, axis, weights)
    mean = jnp.mean(x, axis=axis, keepdims=True)
    var = _variance(x, mean, axis)
    return scale_shift((x - mean) * jax.lax.rsqrt(var + eps), axis, weights)


def _variance(x, mean, axes):
    """``mean((x - mean)^2)`` without differentiating through ``mean``: that path's
    gradient, ``-2 mean(x - mean)``, is exactly zero, but autodiff would still compute
    it with a third reduction (one more all-reduce when the axis is split). So the
    backward pass takes the textbook two reductions (sum of dy and of dy * x_hat)."""
    return jnp.mean(jnp.square(x - jax.lax.stop_gradient(mean)), axis=axes, keepdims=True)


def batch_norm(x, eps=1e-5, weights=()):
    """Training-mode batch normalisation: statistics over every axis but channels (1)."""
    axes = tuple(i for i in range(x.ndim) if i != 1) if x.ndim > 1 else (0,)
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = _variance(x, mean, axes)
    return scale_shift((x - mean) * jax.lax.rsqrt(var + eps), 1, weights)


def softmax(x, axis, masked=False, window=0):
    return jax.nn.softmax(causal(x, window) if masked else x, axis=axis)


def softmax_xent(x, labels):
    """Log-probabilities (the op's output) and the mean cross-entropy against ``labels``."""
    logp = jax.nn.log_softmax(x.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)
    return logp.astype(x.dtype), jnp.mean(nll)


def reduce_mean(x, axes, keepdims):
    return jnp.mean(x, axis=tuple(axes), keepdims=keepdims)


def concat(xs, axis, weights=()):
    """Concatenate; parameters (a class token) first, broadcast over the other axes."""
    shape = list(xs[0].shape)
    lead = []
    for w in weights:
        shape[axis] = w.shape[axis]
        lead.append(jnp.broadcast_to(w, tuple(shape)))
    return jnp.concatenate(lead + list(xs), axis=axis)


def slice_axis(x, axis, start, stop):
    return jax.lax.slice_in_dim(x, start, min(stop, x.shape[axis]), axis=axis)


def stack(xs, axis):
    return jnp.stack(xs, axis=axis)


def unstack(x, axis):
    return [jnp.take(x, i, axis=axis) for i in range(x.shape[axis])]


def reshape(x, shape):
    return jnp.reshape(x, tuple(shape))


def lstm(x, w, hspec, pin):
    """A stack of LSTM layers over ``x (b, s, e)`` with ``w (layers, 2e, 4u)``.

    Row ``2i + j`` of a layer's weight is input feature ``i`` of the step's input
    (``j = 0``) or of the previous hidden state (``j = 1``); column ``4i + g`` is gate
    ``g`` (input, forget, cell, output) of unit ``i``. So a split of the rows or
    columns into blocks splits features or units, as pase's k and n dims do.
    """
    layers, rows, cols = w.shape
    w = w.reshape(layers, rows // 2, 2, cols // 4, 4)
    seq = jnp.swapaxes(x, 0, 1)  # (s, b, e)
    for layer in range(layers):
        wx, wh = w[layer, :, 0], w[layer, :, 1]
        xg = jnp.einsum("sbe,eug->sbug", fit(seq, seq.shape[:2] + wx.shape[:1]), wx)

        def cell(carry, xg_t, wh=wh):
            h, c = carry
            g = xg_t + jnp.einsum("be,eug->bug", fit(h, (h.shape[0], wh.shape[0])), wh)
            i, f, z, o = (g[..., k] for k in range(4))
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(z)
            h = pin(jax.nn.sigmoid(o) * jnp.tanh(c), hspec)
            return (h, c), h

        zeros = jnp.zeros(xg.shape[1:3], x.dtype)
        _, seq = jax.lax.scan(cell, (zeros, zeros), xg)
    return jnp.swapaxes(seq, 0, 1)
'''

FOOTER = '''\
# -- running it -----------------------------------------------------------------------


def make_mesh(devices=None):
    """The device mesh: axes MESH_AXES over the first DEVICES devices."""
    devices = jax.devices() if devices is None else devices
    n = int(np.prod([size for _, size in MESH_AXES]))
    if len(devices) < n:
        raise RuntimeError(f"this program needs {n} devices, JAX sees {len(devices)}")
    grid = np.array(devices[:n], dtype=object).reshape([size for _, size in MESH_AXES])
    return Mesh(grid, tuple(name for name, _ in MESH_AXES))


def _pinner(mesh):
    """``pin(x, spec, scope=None, src=None)``: fix ``x``'s layout on ``mesh`` (under
    ``jax.named_scope(scope)`` when given, so that its collectives carry that name in the
    compiled HLO). With ``src``, ``x``'s layout, the re-layout is written out
    (``_relayouter``) instead of left to XLA."""
    if mesh is None:
        return lambda x, spec, scope=None, src=None: x

    def constrain(x, spec):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*spec)))

    relayout = _relayouter(mesh, constrain)

    def pin(x, spec, scope=None, src=None):
        if src is not None:
            return relayout(x, src, spec, scope)
        if scope is None:
            return constrain(x, spec)
        with jax.named_scope(scope):
            return constrain(x, spec)

    pin.mesh = mesh
    return pin


def init_params(seed=0):
    """Seeded parameters: normal with standard deviation 1/sqrt(fan-in)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, _, fan_in) in sorted(PARAMS.items()):
        values = rng.standard_normal(shape, dtype=np.float32) / np.sqrt(fan_in)
        out[name] = jnp.asarray(values, dtype=DTYPE)
    return out


def make_batch(seed=1):
    """Seeded data: normal inputs, integer ids below ``high`` and labels below ``high``."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, _, kind, high) in sorted(DATA.items()):
        if kind == "normal":
            out[name] = jnp.asarray(rng.standard_normal(shape, dtype=np.float32), dtype=DTYPE)
        else:
            out[name] = jnp.asarray(rng.integers(0, high, shape), dtype=jnp.int32)
    return out


def _sharding(mesh, shape, spec):
    """The argument sharding: the spec where it divides the shape evenly, else replicated."""
    for size, entry in zip(shape, spec):
        axes = () if entry is None else entry
        if size % int(np.prod([mesh.shape[a] for a in axes])):
            return NamedSharding(mesh, P())
    return NamedSharding(mesh, P(*spec))


def make_step(mesh=None):
    """The jitted step ``(params, batch) -> (loss, grads)``; pinned layouts on ``mesh``."""
    pin = _pinner(mesh)

    def loss_fn(params, batch):
        return forward(params, batch, pin)

    grad_fn = jax.value_and_grad(loss_fn)
    if mesh is None:
        return jax.jit(grad_fn)
    params = {k: _sharding(mesh, shape, spec) for k, (shape, spec, _) in PARAMS.items()}
    data = {k: _sharding(mesh, shape, spec) for k, (shape, spec, _, _) in DATA.items()}
    return jax.jit(grad_fn, in_shardings=(params, data),
                   out_shardings=(NamedSharding(mesh, P()), params))


def place(tree, mesh, specs):
    """``tree`` put on ``mesh`` with the argument shardings of ``specs`` (PARAMS or DATA)."""
    return {k: jax.device_put(v, _sharding(mesh, v.shape, specs[k][1])) for k, v in tree.items()}


_STEP = None


def step(params, batch):
    """One training step on the default mesh (or unsharded when LOCAL): ``(loss, grads)``."""
    global _STEP
    if _STEP is None:
        _STEP = make_step(None if LOCAL else make_mesh())
    return _STEP(params, batch)


def main():
    params, batch = init_params(), make_batch()
    mesh = None if LOCAL or len(jax.devices()) < DEVICES else make_mesh()
    run = make_step(mesh)
    if mesh is not None:
        params, batch = place(params, mesh, PARAMS), place(batch, mesh, DATA)
    loss, grads = run(params, batch)
    jax.block_until_ready(grads)
    start = time.perf_counter()
    loss, grads = run(params, batch)
    jax.block_until_ready(grads)
    where = "unsharded" if mesh is None else f"on a mesh of {DEVICES} devices"
    print(f"{MODEL}: loss {float(loss):.6g}, step {1e3 * (time.perf_counter() - start):.3f} ms "
          f"{where}", file=sys.stderr)


if __name__ == "__main__":
    main()
'''
