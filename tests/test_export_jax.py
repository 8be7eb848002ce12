"""The JAX exporter: mesh mapping, bad input, and programs that agree with an unsharded run.

Programs run in a subprocess with fake CPU devices (``pase.export.check_programs``);
this process never imports jax. Under CI (``CI=true``) jax is installed, so a
missing jax fails these tests instead of skipping them.
"""
from __future__ import annotations

import ast
import itertools
import math
import re

import numpy as np
import pytest

import pase
from pase.builder import GraphBuilder
from pase.errors import GraphError, OptionError, StrategyError
from pase.export import assign_axes, check_programs, mesh_axes, prime_factors, to_jax
from pase.space import enumerate_configs
from pase.work import device_coords, op_work

RTOL = 1e-5
# A slow device on a fast network: compute dominates, so the dp optimum splits every op
# (under the default paper model small graphs stay unsplit at p = 8).
COMPUTE_BOUND = {"tflops": 0.01, "bandwidth": 1000.0}
TRANSFORMER = dict(batch=8, seq=8, vocab=64, width=32, heads=4, d_k=8, ff=64, layers=1)



def splits(strategy) -> dict:
    return {op: {d: f for d, f in dims.items() if f > 1} for op, dims in strategy.configs.items()}


def cnn() -> pase.Graph:
    """Every op kind the CNN models use, at toy sizes: conv, batch norm, max and average
    pooling, an add with ReLU, concat, mean, FC, norm, softmax, cross-entropy."""
    b = GraphBuilder("cnn", cutoff=2, batch=8)
    x = b.conv(b.input((8, 4, 12, 12)), (8, 4, 3, 3), pad=1, pw=1, name="conv1")
    x = b.batch_norm(x, name="bn1")
    m = b.pool(x, 3, 2, pad=1, name="max_pool")
    a = b.pool(x, 2, 2, name="avg_pool")
    y = b.concat([m, b.elementwise(m, a, pw=1, name="add")], axis=1, name="concat")
    y = b.reduce_mean(y, (2, 3), name="mean")
    y = b.softmax(b.norm(b.fc(y, 16, pw=1, name="fc1"), name="norm"), axis=1, name="softmax")
    b.softmax_cross_entropy(b.fc(y, 8, name="fc2"), name="loss")
    return b.build()


def params_table(program: str, name: str = "PARAMS") -> dict:
    """The PARAMS (or DATA) table of a program, read without running it."""
    for node in ast.parse(program).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {name} in the program")


# -- the mesh ---------------------------------------------------------------------------

def test_mesh_axes_are_prime_factors():
    assert prime_factors(8) == [2, 2, 2]
    assert prime_factors(12) == [2, 2, 3]
    assert prime_factors(1) == [] and mesh_axes(1) == (("x0", 1),)
    assert mesh_axes(12) == (("x0", 2), ("x1", 2), ("x2", 3))


def mesh_coords(op, assigned, axes):
    """Per mesh device (row-major over axes): its coordinate along each op dim."""
    sizes = [s for _, s in axes]
    names = [n for n, _ in axes]
    out = []
    for ids in itertools.product(*[range(s) for s in sizes]):
        at = dict(zip(names, ids))
        coords = []
        for d in op.dims:
            c = 0
            for a in assigned.get(d.name, ()):
                c = c * sizes[names.index(a)] + at[a]
            coords.append(c)
        used = {a for v in assigned.values() for a in v}
        out.append((tuple(coords), all(at[a] == 0 for a in names if a not in used)))
    return out


@pytest.mark.parametrize("p", [8, 16])
def test_assign_axes_puts_each_tile_on_the_rank_pase_maps_it_to(p):
    b = GraphBuilder("t")
    x = b.input((16, 8, 32), names=("b", "l", "k"), roles=("batch", "sequence", "channel"))
    b.fc(x, 64, name="fc")
    op = b.build().ops[0]
    axes = mesh_axes(p)
    for cfg in enumerate_configs(op, p, cutoff=1):
        config = dict(zip(op.dim_names, (int(f) for f in cfg)))
        assigned = assign_axes(op, config, axes)
        for name, f in config.items():
            assert math.prod(dict(axes)[a] for a in assigned.get(name, ())) == f
        if p % math.prod(config.values()):
            continue
        expected = device_coords(op, list(config.values()))
        ranks = [coords for coords, first in mesh_coords(op, assigned, axes) if first]
        assert np.array_equal(np.array(ranks), expected), config


def test_assign_axes_batch_first_model_last_and_refuses_non_divisors():
    b = GraphBuilder("t")
    x = b.input((24, 24), names=("b", "k"))
    b.fc(x, 24, name="fc")
    op = b.build().ops[0]
    assert assign_axes(op, {"b": 2, "n": 4}, mesh_axes(8)) == {"b": ("x0",), "n": ("x1", "x2")}
    # on fewer devices than the mesh: the batch on the first axes, the model split on the last
    assert assign_axes(op, {"n": 2, "b": 2}, mesh_axes(8)) == {"b": ("x0",), "n": ("x2",)}
    assert assign_axes(op, {"b": 2}, mesh_axes(8)) == {"b": ("x0",)}
    twelve = assign_axes(op, {"b": 3, "n": 4}, mesh_axes(12))
    assert sorted(twelve["b"]) == ["x2"] and sorted(twelve["n"]) == ["x0", "x1"]
    with pytest.raises(OptionError, match="'fc'.*split 3 ways.*does not divide p=8"):
        assign_axes(op, {"b": 3}, mesh_axes(8))


# -- the program's text -------------------------------------------------------------------

def test_strategy_forms_give_the_same_program():
    s = pase.solve("mlp", 8, solver="megatron")
    text = to_jax("mlp", s, 8)
    assert to_jax("mlp", s.to_dict(), 8) == text
    numpy_ints = {op: {d: np.int64(f) for d, f in dims.items()} for op, dims in s.configs.items()}
    assert to_jax("mlp", numpy_ints, 8) == text
    assert "with_sharding_constraint" in text and "value_and_grad" in text
    imports = {line.split()[1] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"sys", "time", "jax", "jax.numpy", "numpy", "jax.sharding"}


def test_program_pins_the_pase_layouts():
    text = to_jax("mlp", {"fc1": {"b": 2, "n": 4}, "fc2": {"k": 8}}, 8)
    params = params_table(text)
    assert params["fc1:w0"][1] == (None, ("x1", "x2"))      # weight (k, n): n on the last axes
    assert params["fc2:w0"][1] == (("x0", "x1", "x2"), None)
    assert "pin(t0, (('x0',), ('x1', 'x2')), 'out/fc1')" in text      # fc1's output (b, n)
    # fc2 reads it split on k: re-laid from fc1's layout, written out
    assert "pin(t0, (None, ('x0', 'x1', 'x2')), 'edge/fc1->fc2', src=(('x0',), ('x1', 'x2')))" in text
    xla = to_jax("mlp", {"fc1": {"b": 2, "n": 4}, "fc2": {"k": 8}}, 8, relayout="xla")
    assert "pin(t0, (None, ('x0', 'x1', 'x2')), 'edge/fc1->fc2')" in xla    # left to XLA
    assert "with jax.named_scope('op/fc2'):" in text


def test_local_program_has_one_devices_tiles():
    text = to_jax("mlp", {"fc1": {"b": 2, "n": 4}, "fc2": {"k": 8}}, 8, local=True)
    params, data = params_table(text), params_table(text, "DATA")
    assert params["fc1:w0"][0] == (1024, 256)
    assert params["fc2:w0"][0] == (128, 1024)
    assert params["fc3:w0"][0] == (1024, 1024)
    assert data["fc1:x0"][0] == (32, 1024)
    assert "fit(t0, (64, 128))" in text and "pin(" not in text.split('def forward')[1].split('# --')[0].split('"""')[2]


# -- bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize("strategy, error, words", [
    ({"fc9": {"b": 2}}, StrategyError, ["unknown op 'fc9'", "fc1"]),
    ({"fc1": {"z": 2}}, StrategyError, ["unknown dim 'z'", "dims: b, n, k"]),
    ({"fc1": {"n": 3}}, StrategyError, ["dim 'n' of op 'fc1' 3 ways", "1024"]),
    ({"fc1": {"b": 4, "n": 4}}, StrategyError, ["16 ways", "p=8"]),
    ({"fc1": {"b": 0}}, StrategyError, ["integers >= 1"]),
    ({"fc1": {"b": 2, "n": 2}, "fc2": {"b": 8}}, None, []),
])
def test_bad_strategies_give_one_line_errors(strategy, error, words):
    if error is None:
        to_jax("mlp", strategy, 8)
        return
    with pytest.raises(error) as info:
        to_jax("mlp", strategy, 8)
    message = str(info.value)
    assert "\n" not in message
    for w in words:
        assert w in message


def test_bad_options_and_unknown_kinds(monkeypatch):
    with pytest.raises(OptionError, match="dtype must be one of"):
        to_jax("mlp", {}, 8, dtype="int8")
    with pytest.raises(OptionError, match="device count"):
        to_jax("mlp", {}, 0)
    with pytest.raises(OptionError, match="'fc1'.*split 6 ways.*does not divide p=8"):
        to_jax("mlp", {"fc1": {"b": 6}}, 8, batch=48)
    import pase.export.jax as exporter

    monkeypatch.setattr(exporter, "KINDS", tuple(k for k in exporter.KINDS if k != "Norm"))
    with pytest.raises(GraphError, match="op 'enc0.attn.norm' has kind 'Norm'.*known kinds"):
        to_jax("transformer", {}, 8, model_options=TRANSFORMER)


# -- equivalence: sharded on 8 fake devices vs one device ------------------------------------
# Without jax these skip; under CI=true tests/conftest.py turns such a skip into a failure.

def _cases(names, strategies):
    out = []
    for name, opts in names:
        model = cnn() if name == "cnn" else name
        for label in strategies:
            if label == "dp-compute-bound":
                s = pase.solve(model, 8, cost_options=COMPUTE_BOUND, model_options=opts)
            elif label == "dp":
                s = pase.solve(model, 8, model_options=opts)
            else:
                s = pase.solve(model, 8, solver=label, model_options=opts)
            out.append((f"{name}/{label}", splits(s), to_jax(model, s, 8, model_options=opts)))
    return out


def _check(cases):
    pytest.importorskip("jax")
    results = check_programs([text for _, _, text in cases], 8)
    assert len(results) == len(cases)
    failures = []
    for (label, split, _), r in zip(cases, results):
        if not (r["loss_rel_diff"] <= RTOL and r["grad_max_rel_diff"] <= RTOL):
            failures.append(f"{label}: loss {r['loss_rel_diff']:.2e}, grads {r['grad_max_rel_diff']:.2e} "
                            f"({r['worst_param']})")
        if any(split.values()) and any(d.get("b", 1) > 1 for d in split.values()):
            # a batch split leaves partial weight gradients: pase charges an all-reduce
            assert r["collectives"]["all-reduce"] + r["collectives"]["reduce-scatter"] >= 1, label
    assert not failures, failures
    return results


SMALL = [("mlp", {"batch": 32, "width": 64}), ("chain", {}), ("diamond", {}), ("fork-join", {}),
         ("random", {}), ("cnn", {})]


@pytest.mark.slow  # XLA compiles: minutes of the fast suite on 2 cores
def test_small_graphs_agree_with_one_device():
    cases = _cases(SMALL, ["dp-compute-bound", "data-parallel"])
    assert all(any(split.values()) for label, split, _ in cases)  # every strategy splits
    _check(cases)


def test_collectives_are_where_pase_predicts_them():
    """A matmul split on its output dim: pase charges an all-reduce of its input
    gradient over the 8 devices; split on its reduction dim, one of its output."""
    strategies = {"none": {}, "n": {"fc2": {"n": 8}}, "k": {"fc2": {"k": 8}}}
    graph = pase.load_graph("chain", length=2)
    texts = [to_jax(graph, s, 8) for s in strategies.values()]
    results = dict(zip(strategies, _check([(k, {}, t) for k, t in zip(strategies, texts)])))
    for label, strategy in strategies.items():
        found = results[label]["collective_shapes"]
        for op in graph.ops:
            cfg = np.array([[strategy.get(op.name, {}).get(d.name, 1) for d in op.dims]])
            work = op_work(op, cfg)
            for c in work.collectives:
                if work.group_size(c)[0] > 1 and c.nbytes[0] > 0 and c.phase != "gradient":
                    elems = int(c.nbytes[0]) // 4
                    shapes = [math.prod(int(n) for n in dims.split(",") if n)
                              for kind, text in found if kind == "all-reduce"
                              for dims in re.findall(r"f32\[([\d,]*)\]", text)]
                    assert elems in shapes, (label, op.name, c.label, elems, found)
        if label == "none":
            assert sum(results[label]["collectives"].values()) == 0


def test_twelve_devices_on_mixed_prime_axes():
    pytest.importorskip("jax")
    strategy = {"fc1": {"b": 3, "n": 4}, "fc2": {"b": 6, "k": 2}, "fc3": {"n": 12},
                "classifier": {"b": 2, "k": 3}, "loss": {"b": 12}}
    text = to_jax("mlp", strategy, 12, model_options={"batch": 48, "width": 48, "classes": 12})
    assert "MESH_AXES = (('x0', 2), ('x1', 2), ('x2', 3))" in text
    (r,) = check_programs([text], 12)
    assert r["loss_rel_diff"] <= RTOL and r["grad_max_rel_diff"] <= RTOL, r
    assert sum(r["collectives"].values()) > 0


@pytest.mark.slow
def test_transformer_and_rnnlm_agree_with_one_device():
    cases = _cases([("transformer", TRANSFORMER), ("rnnlm", {"batch": 8, "seq": 4, "vocab": 64,
                                                            "width": 16})],
                   ["dp-compute-bound", "dp", "data-parallel", "megatron"])
    _check(cases)


@pytest.mark.slow
def test_alexnet_agrees_with_one_device():
    cases = _cases([("alexnet", {"batch": 8, "classes": 16})], ["dp", "data-parallel"])
    assert all(any(split.values()) for _, split, _ in cases)
    _check(cases)


# -- the model zoo -------------------------------------------------------------------------

def test_every_builtin_model_exports():
    """Every op kind of every registered model has a JAX counterpart (text only, no jax)."""
    from pase.registry import MODELS

    for name in MODELS.names():
        options = MODELS.entry(name).info.get("tiny", {})
        text = to_jax(name, {}, 8, model_options=options)
        assert "def forward(params, batch, pin):" in text, name


def _zoo_cases(names):
    from pase.registry import MODELS

    out = []
    for name in names:
        tiny = MODELS.entry(name).info["tiny"]
        s = pase.solve(name, 8, cost_options=COMPUTE_BOUND, model_options=tiny)
        out.append((f"{name}/dp-compute-bound", splits(s), to_jax(name, s, 8, model_options=tiny)))
    return out


@pytest.mark.slow
def test_gpt2_and_llama_agree_with_one_device():
    """GPT-2 (causal, learned positions, tied head, GELU, biases) and Llama with GQA
    (2 kv heads for 4 query heads), rotary embeddings and SwiGLU."""
    cases = _zoo_cases(["gpt2", "llama2-70b"])
    assert all(any(split.values()) for _, split, _ in cases)
    _check(cases)


@pytest.mark.slow
def test_moe_and_vit_agree_with_one_device():
    """Mixtral (router, top-2, dispatch, experts split 4 ways, combine) and ViT (patch
    embedding, class token, first-token slice)."""
    cases = _zoo_cases(["mixtral-8x7b", "vit-b16"])
    moe = cases[0][1]
    assert any(d.get("x", 1) > 1 for op, d in moe.items() if ".experts." in op)  # expert parallel
    results = _check(cases)
    assert results[0]["collectives"]["all-to-all"] > 0  # the dispatch's all-to-all, as pase prices it



def test_routing_groups_fill_their_own_slots():
    """With routing groups each run of tokens fills its own share of the slots, first come
    first served, exactly as that run routed alone into that many slots; over capacity a
    token is dropped within its own group (here the second group's third choice of
    expert 0), which one group over the whole sequence would have let in."""
    from pase.export.jax_runtime import HEADER, OPS

    ops: dict = {}
    exec(HEADER + OPS, ops)  # the op library every exported program carries, as text
    _slots, jnp = ops["_slots"], ops["jnp"]

    gates = np.zeros((1, 6, 2), dtype=np.float32)
    gates[0, [0, 3, 4, 5], 0] = 1.0  # tokens 0, 3, 4, 5 choose expert 0
    gates[0, [1, 2], 1] = 1.0
    grouped = np.asarray(_slots(jnp.asarray(gates), 4, 2))  # (b, l, x, c): 2 slots a group
    for g in range(2):
        alone = np.asarray(_slots(jnp.asarray(gates[:, 3 * g:3 * g + 3]), 2))
        assert (grouped[:, 3 * g:3 * g + 3, :, 2 * g:2 * g + 2] == alone).all()
        assert not grouped[:, 3 * g:3 * g + 3, :, 2 * (1 - g):2 * (1 - g) + 2].any()
    assert grouped[0, 5, 0].sum() == 0  # dropped: its group's two slots for expert 0 are full
    assert np.asarray(_slots(jnp.asarray(gates), 4))[0, 5, 0].sum() == 1
