"""Convolutions and resizing as real models use them: grouped, depthwise, dilated,
'same'-padded, 1-D, 3-D and transposed convs, and upsampling.

Expected values come from torch: ``numel()`` of the module's parameters and
``torch.utils.flop_counter.FlopCounterMode`` (2 FLOP per multiply-add, as pase;
it counts convolutions, transposed ones over the input's pixels, and no resize).
"""
import copy
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import pase  # noqa: E402
from pase.builder import GraphBuilder  # noqa: E402
from pase.counts import counts  # noqa: E402
from pase.errors import GraphError  # noqa: E402
from pase.frontends.torch import import_torch  # noqa: E402
from pase.ir import Graph  # noqa: E402
from pase.work.ops import op_work  # noqa: E402


def _seq(*layers):
    return nn.Sequential(*layers)


CASES = {
    "grouped": lambda: (_seq(nn.Conv2d(4, 8, 1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.Conv2d(8, 16, 3, padding=1, groups=4)), (torch.randn(2, 4, 16, 16),)),
    "depthwise": lambda: (_seq(nn.Conv2d(4, 8, 1), nn.Conv2d(8, 8, 7, padding=3, groups=8),
                               nn.Conv2d(8, 4, 1)), (torch.randn(2, 4, 16, 16),)),
    "depthwise-multiplier": lambda: (nn.Conv2d(4, 8, 3, stride=2, groups=4, bias=False),
                                     (torch.randn(2, 4, 15, 15),)),
    "dilated": lambda: (nn.Conv2d(4, 8, 3, padding=2, dilation=2), (torch.randn(2, 4, 16, 16),)),
    "same": lambda: (nn.Conv2d(4, 8, 5, padding="same"), (torch.randn(2, 4, 16, 16),)),
    "conv1d": lambda: (_seq(nn.Conv1d(4, 8, 3, padding=1), nn.GELU(),
                            nn.Conv1d(8, 8, 3, stride=2, padding=1)), (torch.randn(2, 4, 32),)),
    "conv3d": lambda: (nn.Conv3d(4, 8, 3, padding=1), (torch.randn(2, 4, 6, 6, 6),)),
    "transposed2d": lambda: (nn.ConvTranspose2d(8, 4, 2, stride=2), (torch.randn(2, 8, 8, 8),)),
    "transposed2d-grouped": lambda: (
        nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2),
        (torch.randn(2, 8, 8, 8),)),
    "transposed1d": lambda: (nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1),
                             (torch.randn(2, 8, 16),)),
    "upsample-bilinear": lambda: (_seq(nn.Conv2d(3, 4, 1), nn.Upsample(scale_factor=2,
                                                                       mode="bilinear")),
                                  (torch.randn(2, 3, 8, 8),)),
    "upsample-nearest": lambda: (_seq(nn.Conv2d(3, 4, 1), nn.Upsample(scale_factor=2)),
                                 (torch.randn(2, 3, 8, 8),)),
    "upsample-linear1d": lambda: (_seq(nn.Conv1d(3, 4, 1), nn.Upsample(scale_factor=2,
                                                                       mode="linear")),
                                  (torch.randn(2, 3, 8),)),
}


@pytest.fixture(scope="module")
def imported():
    cache = {}

    def get(name):
        if name not in cache:
            model, args = CASES[name]()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                imp = import_torch(model, args, name=name)
            assert [str(w.message) for w in caught] == [], name  # no re-layout, no warning
            cache[name] = (model, args, imp)
        return cache[name]
    return get


def torch_flops(model, args):
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        model(*args)
    return counter.get_total_flops()


@pytest.mark.parametrize("name", list(CASES))
def test_parameters_are_the_modules_numel(imported, name):
    model, _, imp = imported(name)
    assert pase.counts.parameters(imp.graph) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(CASES))
def test_counted_matmul_flops_are_torchs(imported, name):
    model, args, imp = imported(name)
    by_op = counts(imp.graph).by_op()
    counted = sum(by_op[op.name].matmul_flops for op in imp.graph.ops if imp.ops[op.name].counted)
    assert counted == pytest.approx(torch_flops(model, args), rel=1e-12)
    assert counts(imp.graph).matmul_flops == pytest.approx(counted, rel=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_alpha_beta_solves_at_p8(imported, name):
    _, _, imp = imported(name)
    strategy = pase.solve(imp.graph, devices=8, cost_model="alpha-beta")
    assert strategy.solution.status.value == "optimal"
    assert math.isfinite(strategy.total_cost) and strategy.total_cost > 0


@pytest.mark.parametrize("name", ["grouped", "transposed2d"])
def test_paper_model_solves_at_p8(imported, name):
    strategy = pase.solve(imported(name)[2].graph, devices=8, cost_model="paper")
    assert strategy.solution.status.value == "optimal"


def _convs(imp):
    return [op for op in imp.graph.ops if op.kind == "Conv"]


def test_forms_have_the_documented_dims(imported):
    grouped = _convs(imported("grouped")[2])[-1]
    assert grouped.dim_names == ("b", "g", "c", "h", "w", "r", "s", "n")
    assert dict(zip(grouped.dim_names, grouped.shape)) == dict(b=2, g=4, c=2, h=16, w=16, r=3,
                                                               s=3, n=4)
    assert grouped.inputs[0].dims[1] == ("g", "c") and grouped.outputs[0].dims[1] == ("g", "n")
    depthwise = _convs(imported("depthwise")[2])[1]
    assert dict(zip(depthwise.dim_names, depthwise.shape))["c"] == 1
    assert _convs(imported("conv1d")[2])[0].dim_names == ("b", "c", "w", "s", "n")
    assert _convs(imported("conv3d")[2])[0].dim_names == tuple("bcdhwqrsn")
    t = _convs(imported("transposed2d-grouped")[2])[0]
    assert t.attrs["transposed"] is True and tuple(t.attrs["output_padding"]) == (1, 1)
    assert t.weights[0].dims[0] == ("g", "c")
    assert tuple(_convs(imported("dilated")[2])[0].attrs["dilation"]) == (2, 2)


def _cfg(op, **splits):
    return np.array([[splits.get(n, 1) for n in op.dim_names]])


def test_splitting_groups_needs_no_reduction(imported):
    op = _convs(imported("grouped")[2])[-1]
    by_g = op_work(op, _cfg(op, g=4))
    assert [c.label for c in by_g.collectives if by_g.group_size(c)[0] > 1] == []
    assert by_g.forward_flop[0] == pytest.approx(op_work(op, _cfg(op)).forward_flop[0] / 4)
    by_c = op_work(op, _cfg(op, c=2))  # channels inside a group: the output is a partial sum
    assert [c.label for c in by_c.collectives if by_c.group_size(c)[0] > 1
            and c.phase == "forward"] == ["output"]


def test_resize_exchanges_a_halo_only_when_split(imported):
    op = next(o for o in imported("upsample-bilinear")[2].graph.ops if o.kind == "Resize")
    assert op.attrs["mode"] == "linear"
    whole = op_work(op, _cfg(op, b=2))
    assert all(float(c.nbytes[0]) == 0 or whole.group_size(c)[0] == 1
               for c in whole.collectives)
    split = op_work(op, _cfg(op, **{op.dim_names[2]: 2}))
    assert any(c.kind == "exchange" and float(c.nbytes[0]) > 0 for c in split.collectives)
    assert counts(imported("upsample-bilinear")[2].graph).by_op()[op.name].matmul_flops == 0


def test_old_conv_form_prices_as_before():
    # A plain conv is the GEMM m = b h w, n, k = c r s: 2 m n k forward FLOP (torch's count).
    b = GraphBuilder("one")
    b.conv(b.input((2, 3, 16, 16)), (8, 3, 3, 3), pad=1, name="conv")
    op = b.build().op("conv")
    assert counts(b.build()).matmul_flops == 2 * 2 * 16 * 16 * 8 * 3 * 3 * 3
    model = nn.Conv2d(3, 8, 3, padding=1, bias=False)
    assert counts(b.build()).matmul_flops == torch_flops(model, (torch.randn(2, 3, 16, 16),))
    assert op.dim_names == ("b", "c", "h", "w", "r", "s", "n")


def test_builder_grouped_and_dilated_conv_matches_torch():
    b = GraphBuilder("g")
    x = b.input((2, 8, 16, 16))
    b.conv(x, (16, 2, 3, 3), pad=2, dilation=2, groups=4, name="conv")
    g = b.build()
    model = nn.Conv2d(8, 16, 3, padding=2, dilation=2, groups=4, bias=False)
    assert pase.counts.parameters(g) == sum(p.numel() for p in model.parameters())
    assert counts(g).matmul_flops == torch_flops(model, (torch.randn(2, 8, 16, 16),))


def _grouped_graph() -> dict:
    b = GraphBuilder("g")
    b.conv(b.input((2, 8, 16, 16)), (16, 2, 3, 3), pad=1, groups=4, name="conv")
    return copy.deepcopy(b.build().to_dict())


def _op(data, name):
    return next(o for o in data["ops"] if o["name"] == name)


@pytest.mark.parametrize("mutate, words", [
    (lambda op: op["inputs"][0].update(dims=[["b"], ["c"], ["h"], ["w"]]),
     ["op 'conv' (Conv) input 0 maps its axes to [[b], [c], [h], [w]]",
      "so it must map them to [[b], [g, c], [h], [w]]"]),
    (lambda op: op["weights"][0].update(dims=[["n"], ["c"], ["r"], ["s"]]),
     ["op 'conv' (Conv) weight 0", "must map them to [[g, n], [c], [r], [s]]"]),
    (lambda op: op["dims"].insert(0, op["dims"].pop(1)),
     ["op 'conv' (Conv) has dims g, b, c", "with g after b when grouped"]),
    (lambda op: op["attrs"].update(dilation=[2, 2, 2]),
     ["op 'conv' (Conv) attribute 'dilation' is [2, 2, 2]", "one entry per spatial axis (2)"]),
    (lambda op: op["attrs"].update(output_padding=[1, 1]),
     ["op 'conv' (Conv) has output_padding [1, 1]", "only a transposed Conv"]),
])
def test_schema_refuses_a_malformed_grouped_conv(mutate, words):
    data = _grouped_graph()
    mutate(_op(data, "conv"))
    with pytest.raises(GraphError) as info:
        Graph.from_dict(data)
    message = str(info.value)
    assert "\n" not in message
    for w in words:
        assert w in message, (w, message)


def test_unsupported_forms_are_refused_up_front():
    # An antialiased resize has a filter wider than the taps pase prices: refused, one line.
    class AA(nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=0.5, mode="bilinear",
                                                   antialias=True)
    with pytest.raises(Exception) as info:
        import_torch(AA(), (torch.randn(2, 3, 8, 8),), name="aa")
    assert "_upsample_bilinear2d_aa" in str(info.value)


def test_jax_export_refuses_the_new_forms_clearly():
    from pase.export import to_jax
    b = GraphBuilder("g")
    b.conv(b.input((2, 8, 16, 16)), (16, 2, 3, 3), pad=2, dilation=2, groups=4, name="conv")
    with pytest.raises(GraphError, match=r"op 'conv' \(Conv\) is grouped, dilated; the JAX "
                                         r"exporter writes 2-D convolutions with no groups"):
        to_jax(b.build(), {}, 1)


def test_same_padding_of_an_even_window_is_refused_in_one_line():
    from pase.frontends.torch import ModelImportError
    with pytest.raises(ModelImportError, match=r"cannot import conv2d at .*padding='same' with "
                                               r"an effective window of 4"):
        import_torch(nn.Conv2d(4, 8, 4, padding="same"), (torch.randn(2, 4, 16, 16),), name="e")
