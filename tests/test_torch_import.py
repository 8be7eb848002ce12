"""pase.from_torch on the test-folder models: parameters, FLOP, dims, and dp at p = 8.

Expected values come from torch itself: ``numel()`` of the module's unique
parameters, and ``torch.utils.flop_counter.FlopCounterMode`` (2 FLOP per
multiply-add, as pase; attention through the math backend, which it counts as
matrix products). pase also counts what torch does not: element-wise ops,
norms, softmaxes, biases, and one kind of product torch's counter leaves out, a
broadcast ``mul`` by a tensor in another layout (an Einsum without contraction in
pase, an ``aten.mul`` in torch); the importer marks the ops torch counts
(``counted``). An embedding is a lookup in both: no matrix-product FLOP.
"""
import math
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import pase  # noqa: E402
from pase.counts import counts  # noqa: E402
from pase.frontends.torch import ModelImportError, from_torch, import_torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from torch_models import bert, gpt2, llama, mlp, moe, resnet, vit  # noqa: E402

MODELS = {
    "mlp": mlp.build, "cnn": mlp.cnn, "resnet18": resnet.build, "gpt2-block": gpt2.block,
    "gpt2-2-layers": gpt2.build, "bert-layer": bert.build, "llama-block": llama.build,
    "moe-layer": moe.build, "hand-written-gqa": llama.hand_attention, "vit-conv1d": vit.build,
    "interleaved-gqa": llama.interleaved_gqa,
}


@pytest.fixture(scope="module")
def imported():
    cache = {}

    def get(name):
        if name not in cache:
            model, args = MODELS[name]()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                imp = import_torch(model, args, name=name)
            assert [str(w.message) for w in caught] == []
            assert imp.relayouts == (["cat: a concatenation along a merged axis was re-laid "
                                      "out"] if name == "vit-conv1d" else [])
            cache[name] = (model, args, imp)
        return cache[name]
    return get


def torch_flops(model, args):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(*args)
    return counter.get_total_flops()


def uncounted(imp):
    """pase's forward FLOP of what torch's counter leaves out: ops that are not
    matrix products, and the point-wise tail and bias of those that are."""
    by_op = counts(imp.graph).by_op()
    rest = 0.0
    for op in imp.graph.ops:
        if not imp.ops[op.name].counted:
            rest += by_op[op.name].forward_flops
            continue
        out = math.prod(op.outputs[0].shape)
        rest += out * op.attrs.get("pw", 0) + (out if op.attrs.get("bias") else 0)
    return rest


@pytest.mark.parametrize("name", list(MODELS))
def test_parameters_are_the_modules_unique_numel(imported, name):
    model, _, imp = imported(name)
    unique = {id(p): p.numel() for p in model.parameters()}
    assert pase.counts.parameters(imp.graph) == sum(unique.values())


@pytest.mark.parametrize("name", list(MODELS))
def test_forward_flops_match_torchs_flop_counter(imported, name):
    model, args, imp = imported(name)
    torch_products = torch_flops(model, args)  # 2 FLOP per multiply-add, as pase
    total = counts(imp.graph).forward_flops
    products = total - uncounted(imp)
    assert torch_products > 0
    assert products == pytest.approx(torch_products, rel=0.01)


def _contracts(op) -> bool:
    """Whether an Einsum sums over a letter (a product, not a broadcast multiply)."""
    lhs, out = op.attrs["eq"].split("->")
    return bool(set(lhs.replace(",", "")) - set(out))


@pytest.mark.parametrize("name", list(MODELS))
def test_matmul_flops_are_torchs_flop_counter_total(imported, name):
    model, args, imp = imported(name)
    by_op = counts(imp.graph).by_op()
    counted = sum(by_op[op.name].matmul_flops for op in imp.graph.ops if imp.ops[op.name].counted)
    assert counted > 0
    assert counted == pytest.approx(torch_flops(model, args), rel=1e-12)
    # The products torch leaves out are only the one of the module docstring.
    for op in imp.graph.ops:
        if not imp.ops[op.name].counted and by_op[op.name].matmul_flops:
            assert op.kind == "Einsum" and not _contracts(op), op.name


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("cost_model", ["paper", "alpha-beta"])
def test_dp_solves_at_p8(imported, name, cost_model):
    _, _, imp = imported(name)
    strategy = pase.solve(imp.graph, devices=8, cost_model=cost_model)
    assert strategy.solution.status.value == "optimal"
    assert math.isfinite(strategy.total_cost) and strategy.total_cost > 0


def test_resnet18_has_torchvisions_parameter_count(imported):
    assert pase.counts.parameters(imported("resnet18")[2].graph) == 11_689_512


def test_tied_lm_head_is_counted_once(imported):
    model, _, imp = imported("gpt2-2-layers")
    head = imp.graph.op("lm_head")
    assert head.attrs["tied"] == "wte"
    listed = sum(p.numel() for p in model.parameters())  # the tied table once
    every = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert pase.counts.parameters(imp.graph) == listed < every


def test_roles_follow_batch_heads_sequence_vocabulary_experts(imported):
    graph = imported("gpt2-2-layers")[2].graph
    roles = {d.role for d in graph.op("h.0.attn.c_attn").dims}
    assert {"batch", "sequence", "heads"} <= roles
    scores = graph.op("h.0.attn.scaled_dot_product_attention.scores")
    assert [d.role for d in scores.dims] == ["batch", "heads", "sequence", "sequence", "channel"]
    assert "vocabulary" in {d.role for d in graph.op("lm_head").dims}
    experts = imported("moe-layer")[2].graph
    assert any(d.role == "expert" for op in experts.ops for d in op.dims)
    llama_graph = imported("llama-block")[2].graph
    grouped = [op for op in llama_graph.ops if op.name.endswith(".scores")][0]
    assert sum(d.role == "heads" for d in grouped.dims) == 2  # kv heads and queries per kv head


def test_hand_written_grouped_query_attention_broadcasts_kv(imported):
    graph = imported("hand-written-gqa")[2].graph
    scores = graph.op("matmul")  # q @ k^T: k read once per kv head, not copied per query head
    a, b = scores.attrs["eq"].split("->")[0].split(",")
    assert len(a) == len(b) + 1
    assert sum(d.role == "heads" for d in scores.dims) == 2
    assert "Ravel" not in {op.kind for op in graph.ops}


def test_class_token_is_a_concat_weight_and_conv1d_projections_find_heads(imported):
    graph = imported("vit-conv1d")[2].graph
    cat = [op for op in graph.ops if op.kind == "Concat"][0]
    assert [w.shape for w in cat.weights] == [(1, 1, 32)]
    qkv = graph.op("attn.c_attn")
    assert [d.size for d in qkv.dims if d.role == "heads"] == [4]
    assert qkv.weights[0].shape == (32, 3, 4, 8)  # Conv1D's (in, 3 out) weight, cut


def test_repeat_interleave_kv_heads_are_read_once(imported):
    graph = imported("interleaved-gqa")[2].graph
    scores = graph.op("scaled_dot_product_attention.scores")
    a, b = scores.attrs["eq"].split("->")[0].split(",")
    assert len(a) == len(b) + 1 and sum(d.role == "heads" for d in scores.dims) == 2
    kinds = [op.kind for op in graph.ops]
    assert kinds.count("ReduceMean") == 1 and "Ravel" not in kinds  # the hand-written RMSNorm


def test_views_cost_nothing_where_the_ir_follows_them(imported):
    kinds = {op.kind for op in imported("gpt2-2-layers")[2].graph.ops}
    assert "Ravel" not in kinds and "Unravel" not in kinds
    qkv = imported("gpt2-2-layers")[2].graph.op("h.0.attn.c_attn")
    assert qkv.weights[0].shape == (3, 4, 8, 32)  # (3e, e) cut into q/k/v, heads, head size


def test_fusion_is_an_option():
    model, args = gpt2.block()
    fused = from_torch(model, args)
    loose = from_torch(model, args, fuse_elementwise=False)
    assert len(loose.ops) == len(fused.ops) + 1  # the GELU
    assert counts(loose).forward_flops == pytest.approx(counts(fused).forward_flops)
    fc = fused.op("mlp.c_fc")
    assert (fc.attrs["act"], fc.attrs["pw"]) == ("gelu", 8)


class Unsupported(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.fmod(self.fc(x), 1.0)
        return torch.flip(y, [1])


def test_unsupported_ops_are_listed_with_their_lines():
    with pytest.raises(ModelImportError) as err:
        from_torch(Unsupported(), (torch.randn(2, 8),))
    text = str(err.value)
    assert "\n" not in text and "2 unsupported ATen op(s)" in text
    assert "aten.fmod at test_torch_import.py:" in text and "aten.flip at" in text


class Refused(torch.nn.Module):
    """An op pase does not know (flip), then one it knows but not as called here
    (dilated pooling), then another unknown one: all in one refusal."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = torch.flip(self.conv(x), [3])
        y = torch.nn.functional.max_pool2d(y, 2, dilation=2)
        return torch.fmod(torch.flip(y, [2]), 2.0)


def test_every_refused_op_is_listed_in_one_line_before_any_graph():
    with pytest.raises(ModelImportError) as err:
        from_torch(Refused(), (torch.randn(2, 3, 9, 9),))
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("3 unsupported ATen op(s): aten.flip at test_torch_import.py:")
    assert "(2 calls); aten.fmod at" in text
    assert "; cannot import max_pool2d at test_torch_import.py:" in text and "dilation" in text


def test_unsupported_ops_can_be_approximated_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = from_torch(Unsupported(), (torch.randn(2, 8),), unsupported="elementwise")
    assert any("fmod" in str(w.message) for w in caught)
    assert [op.kind for op in graph.ops] == ["Einsum", "Elementwise"]  # fmod, flip: one op


class Unfolds(torch.nn.Module):
    """An unsupported op whose output has more elements than its input (unfold)."""

    def __init__(self):
        super().__init__()
        self.fc, self.head = torch.nn.Linear(8, 8), torch.nn.Linear(3, 4)

    def forward(self, x):
        return self.head(self.fc(x).unfold(1, 3, 1)) + 0 * x.sum()


def test_an_op_that_cannot_be_approximated_is_left_out_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = from_torch(Unfolds(), (torch.randn(2, 8),), unsupported="elementwise")
    text = " ".join(str(w.message) for w in caught)
    assert "aten.unfold at test_torch_import.py:" in text and "left out, its output (2, 6, 3) " \
        "has not the elements of its input (2, 8)" in text
    assert "fc" in [op.name for op in graph.ops]


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ModelImportError, match="torch.nn.Module"):
        from_torch("not a module", (torch.randn(2, 8),))
    with pytest.raises(ModelImportError, match="example_args"):
        from_torch(torch.nn.Linear(8, 8), "x")
    with pytest.raises(pase.errors.OptionError, match="unsupported"):
        from_torch(torch.nn.Linear(8, 8), (torch.randn(2, 8),), unsupported="ignore")


def test_an_input_without_a_batch_axis_is_refused_not_miscounted():
    """The first input's leading axis is the batch: on an unbatched input a Linear's weight
    would read it and stop counting as a parameter (8 instead of 136)."""
    with pytest.raises(ModelImportError, match=r"parameter 'weight' .*\(size 16\), which pase takes as "
                                               r"the batch"):
        from_torch(torch.nn.Linear(16, 8), (torch.randn(16),))
    assert pase.counts.parameters(from_torch(torch.nn.Linear(16, 8), (torch.randn(4, 16),))) == 136


def test_meta_device_imports_full_size_models_without_memory():
    with torch.device("meta"):
        model = gpt2.GPT2(layers=1, width=768, heads=12, ff=3072, vocab=50257, positions=1024)
        ids = torch.zeros(2, 1024, dtype=torch.long)
    graph = from_torch(model, (ids, ids))
    unique = sum(p.numel() for p in model.parameters())
    assert pase.counts.parameters(graph) == unique


class Positions(torch.nn.Module):
    """Position ids computed from an attention mask (cumsum: an op pase has no rule
    for, on integers), then looked up in a learned table."""

    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(64, 32)
        self.wpe = torch.nn.Embedding(16, 32)
        self.fc = torch.nn.Linear(32, 64)

    def forward(self, ids, mask):
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        return self.fc(self.wte(ids) + self.wpe(positions))


def test_integer_computations_are_constants():
    model = Positions()
    graph = from_torch(model, (torch.randint(0, 64, (2, 16)), torch.ones(2, 16, dtype=torch.long)))
    assert [op.kind for op in graph.ops] == ["Embedding", "Elementwise", "Einsum"]
    assert graph.op("add").weights[0].shape == (16, 32)  # the position table, a parameter
    assert pase.counts.parameters(graph) == sum(p.numel() for p in model.parameters())
