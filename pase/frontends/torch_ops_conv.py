"""ATen handlers for images: convolutions (1-D to 3-D; grouped, depthwise, dilated,
transposed), pooling and resizing (``upsample_*``, ``F.interpolate``'s forms).

A convolution becomes one ``Conv`` op (``docs/ops.md``): its spatial dims are locked
and pinned, a grouped one reads its image's channel axis as the dims ``[g c]`` and
writes ``[g n]`` without cutting the producer's channel atom (a depthwise conv after a
pointwise one needs no re-layout). A bias is a separate add, as before.
"""
from __future__ import annotations

from typing import Any

from pase.frontends.torch_handlers import as_list, as_pair, constant, handles, node_shape
from pase.frontends.torch_ir import AxisOf, Conflict, PortSpec
from pase.frontends.torch_layout import materialize, out_tv, reshape
from pase.frontends.torch_values import TV
from pase.frontends.torch_walk import Walk, target_name
from pase.schema import CONV_SPATIAL, conv_output_size


def _per_axis(value: Any, rank: int, default: int, what: str) -> list[int]:
    """An ATen int-or-list geometry argument as one int per spatial axis."""
    v = [default] if value is None else [int(x) for x in as_list(value)]
    if len(v) == 1:
        v = v * rank
    if len(v) != rank:
        raise Conflict(f"a {rank}-D convolution with {what} {v} (one entry per spatial axis)")
    return v


def _laid_out(w: Walk, x: TV, rank: int, what: str) -> TV:
    """``x`` with one atom per axis in its view order (else re-laid out)."""
    atoms = w.atoms
    if len(x.leaves(atoms)) != rank or x.leaves(atoms) != atoms.leaf_list(sum(x.view, [])):
        x = materialize(w, x, f"{what} input in another layout was re-laid out")
    return x


def _same_pad(kernel: list[int], dilation: list[int]) -> list[int]:
    pads = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        if total % 2:
            raise Conflict(f"padding='same' with an effective window of {total + 1} (torch pads "
                           f"it unevenly; pase's Conv pads both sides alike)")
        pads.append(total // 2)
    return pads


@handles("conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d",
         "conv_transpose2d", "conv_transpose3d")
def _conv(w: Walk, node: Any, a: dict) -> Any:
    x, weight, bias = a["input"], a["weight"], a.get("bias")
    transposed = bool(a.get("transposed", False)) or "transpose" in target_name(node)
    rank = weight.rank - 2
    if rank not in CONV_SPATIAL or x.rank != rank + 2:
        raise Conflict(f"a convolution of a rank-{x.rank} input with a rank-{weight.rank} filter "
                       f"(only batched 1-D to 3-D convolutions)")
    kernel = list(weight.shape(w.atoms)[2:])
    stride = _per_axis(a.get("stride"), rank, 1, "stride")
    dilation = _per_axis(a.get("dilation"), rank, 1, "dilation")
    padding = a.get("padding", 0)
    if padding == "valid":
        pad = [0] * rank
    elif padding == "same":
        pad = _same_pad(kernel, dilation)
    else:
        pad = _per_axis(padding, rank, 0, "padding")
    out_pad = _per_axis(a.get("output_padding"), rank, 0, "output_padding") if transposed \
        else [0] * rank
    groups = int(a.get("groups", 1) or 1)
    x = _laid_out(w, x, rank + 2, "a convolution")
    atoms = w.atoms
    b, chan, *spatial = (axis[0] for axis in x.view)
    w0, w1, *taps = (axis[0] for axis in weight.view)
    shape = node_shape(node)
    for i in range(rank):  # the walk's shapes are torch's; the IR's formula must agree
        want = conv_output_size(atoms.size[spatial[i]], kernel[i], stride[i], pad[i],
                                dilation[i], out_pad[i], transposed)
        if want != shape[2 + i]:
            raise Conflict(f"a convolution whose output size {shape[2 + i]} is not the formula's "
                           f"{want} (padding {padding!r})")
    outs = [atoms.new(n, "spatial") for n in shape[2:]]
    if groups == 1:
        c, n = chan, (w1 if transposed else w0)
        atoms.unify([w0 if transposed else w1], [chan])
        out_chan, g = n, None
    else:
        g = atoms.new(groups, "channel")
        c = w0 if transposed else w1  # channels per group: the filter's own axis when it has one
        if transposed:
            c = atoms.new(atoms.size[chan] // groups, "channel")
            n = w1
        else:
            n = atoms.new(atoms.size[w0] // groups, "parameter")
        out_chan = atoms.new(shape[1], "parameter") if transposed else w0
    atoms.lock([b, chan, *spatial, w0, w1, *taps, *outs, out_chan] + ([g, c, n] if g else []))
    for atom, role in ((c, "channel"), (n, "parameter"), *((s, "spatial") for s in spatial),
                       *((t, "window") for t in taps)):
        atoms.set_role(atom, role)
    port, tie = w.weight_port(weight, "Conv")
    image = w.port(x, list(zip(spatial, outs)))
    out_spec = PortSpec([b, out_chan, *outs])
    if g is not None:
        image.multi = [(chan, [g, c])]
        out_spec.multi = [(out_chan, [g, n])]
        if port is not None:
            port.multi = [(w0, [g, c] if transposed else [g, n])]
    attrs: dict[str, Any] = {"stride": stride, "pad": pad}
    if tie:  # a filter bank applied twice: counted once, at its first conv
        attrs["tied"] = tie
    if any(d != 1 for d in dilation):
        attrs["dilation"] = dilation
    if transposed:
        attrs.update(transposed=True, output_padding=out_pad)
    op = w.add("Conv", [image], [out_spec], weights=[port] if port else [], order="conv",
               counted=True, pw=0, **attrs)
    out_letters, kernel_letters = CONV_SPATIAL[rank]
    op.names = {b: "b", c: "c", n: "n", **dict(zip(outs, out_letters)),
                **dict(zip(taps, kernel_letters)), **({g: "g"} if g is not None else {})}
    op.pinned += outs
    w.claim(op)
    out = [b, out_chan, *outs]
    y = out_tv(w, [[q] for q in out], out, op)
    if bias is not None and isinstance(bias, TV) and bias.kind == "param":
        y = _channel_bias(w, y, bias, out_chan)
        if bias.param:
            w.param_site[bias.param] = op
    return y


def _channel_bias(w: Walk, y: TV, bias: TV, channel: int) -> TV:
    """A per-channel bias of a (b, c, spatial...) output: an add of a (c, 1, ...) parameter."""
    port, _ = w.weight_port(bias, "Elementwise")
    w.atoms.unify(bias.view[0], [channel])
    weights = [] if port is None else [
        PortSpec(port.atoms, param=bias.param,
                 raw=[(w.atoms.size[channel], channel)] + [(1, None)] * (y.rank - 2))]
    op = w.add("Elementwise", [w.port(y)], [PortSpec(list(y.data))], weights=weights,
               order="input", suffix=".bias", fn="add")
    w.claim(op)
    return out_tv(w, list(y.view), list(y.data), op)


# -- pooling -------------------------------------------------------------------------------

def _pool(w: Walk, node: Any, x: TV, window, stride, pad, ceil_mode: bool = False) -> TV:
    atoms = w.atoms
    if x.rank != 4:
        raise Conflict("pooling of a tensor that is not (b, c, h, w)")
    x = _laid_out(w, x, 4, "a pooling")
    b, c, hh, ww = (axis[0] for axis in x.view)
    shape = node_shape(node)
    h_out, w_out = atoms.new(shape[2], "spatial"), atoms.new(shape[3], "spatial")
    atoms.lock([b, c, hh, ww, h_out, w_out])
    out = [b, c, h_out, w_out]
    rounding = {"ceil_mode": True} if ceil_mode else {}
    op = w.add("Pooling", [w.port(x, [(hh, h_out), (ww, w_out)])], [PortSpec(out)],
               order="output", window=list(window), stride=list(stride), pad=list(pad),
               **rounding)
    return out_tv(w, [[q] for q in out], out, op)


@handles("max_pool2d", "max_pool2d_with_indices")
def _max_pool(w: Walk, node: Any, a: dict) -> Any:
    if as_pair(a.get("dilation", 1)) != (1, 1):
        raise Conflict("max pooling with dilation")
    k = as_pair(a["kernel_size"])
    s = as_pair(a.get("stride") or k)
    out = _pool(w, node, a["self"], k, s, as_pair(a.get("padding", 0)), bool(a.get("ceil_mode")))
    return (out, None) if "indices" in str(node.target) else out


@handles("avg_pool2d")
def _avg_pool(w: Walk, node: Any, a: dict) -> Any:
    k = as_pair(a["kernel_size"])
    return _pool(w, node, a["self"], k, as_pair(a.get("stride") or k), as_pair(a.get("padding", 0)),
                 bool(a.get("ceil_mode")))


@handles("adaptive_avg_pool2d", "adaptive_max_pool2d", "_adaptive_avg_pool2d")
def _adaptive_pool(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    h, wd = x.shape(w.atoms)[2:]
    oh, ow = node_shape(node)[2:]
    if h % oh or wd % ow:
        raise Conflict(f"adaptive pooling from {h}x{wd} to {oh}x{ow} (sizes that do not divide)")
    k = (h // oh, wd // ow)
    out = _pool(w, node, x, k, k, (0, 0))
    return (out, None) if "max" in str(node.target) else out


@handles("adaptive_avg_pool1d", "adaptive_max_pool1d")
def _adaptive_pool1d(w: Walk, node: Any, a: dict) -> Any:
    """Pooling of the last axis of ``(c, n)`` or ``(b, c, n)`` to ``m`` (``n`` a multiple
    of ``m``): the axis viewed as ``(m, n / m)`` (a cut of its atom, or a re-layout where
    it is locked: a norm's axis), then a ReduceMean over each window, both pinned as a 2-D
    pooling's spatial dims are. The IR's Pooling is 2-D; a window's maximum is priced as
    its mean (one FLOP per element read, no product)."""
    x = a["self"]
    indices = "max" in target_name(node)
    if not isinstance(x, TV) or x.kind == "const":
        return constant(w, node)
    if x.kind != "act" or x.rank not in (2, 3):
        raise Conflict(f"{target_name(node)} of a rank-{x.rank} {x.kind}; allowed: an "
                       f"activation (c, n) or (b, c, n)")
    atoms = w.atoms
    shape = x.shape(atoms)
    val = node.meta.get("val")
    n, m = shape[-1], int((val[0] if indices else val).shape[-1])  # (values, indices) for max
    if n % m:
        raise Conflict(f"adaptive pooling from {n} to {m} (sizes that do not divide)")
    x = reshape(w, x, shape[:-1] + (m, n // m))
    window, kept = atoms.leaf_list(x.view[-1]), atoms.leaf_list(x.view[-2])
    data = [q for q in x.leaves(atoms) if q not in set(window)]
    op = w.add("ReduceMean", [w.port(x)], [PortSpec(data)], order="input",
               axes=[AxisOf(q) for q in window], keepdims=False)
    op.pinned += window + [q for q in kept if q in set(x.leaves(atoms))]
    out = out_tv(w, list(x.view[:-1]), data, op)
    return (out, None) if indices else out


# -- resizing ------------------------------------------------------------------------------

_RESIZE_MODES = {"nearest": "nearest", "_nearest_exact": "nearest", "linear": "linear",
                 "bilinear": "linear", "trilinear": "linear", "bicubic": "cubic"}


@handles("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
         "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
         "upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d",
         "upsample_bicubic2d")  # not the antialiased *_aa: wider filters than these taps
def _resize(w: Walk, node: Any, a: dict) -> Any:
    name = target_name(node)
    mode = _RESIZE_MODES[name.replace("upsample_", "")[:-2]]
    x = a.get("input", a.get("self"))
    rank = x.rank - 2
    if rank < 1:
        raise Conflict(f"{name} of a rank-{x.rank} tensor (a resize reads (b, c, spatial...))")
    x = _laid_out(w, x, x.rank, "a resize")
    atoms = w.atoms
    b, c, *spatial = (axis[0] for axis in x.view)
    outs = [atoms.new(n, "spatial") for n in node_shape(node)[2:]]
    atoms.lock([b, c, *spatial, *outs])
    out = [b, c, *outs]
    attrs = {"mode": mode}
    if a.get("align_corners"):
        attrs["align_corners"] = True
    op = w.add("Resize", [w.port(x, list(zip(spatial, outs)))], [PortSpec(out)],
               order="output", **attrs)
    return out_tv(w, [[q] for q in out], out, op)
