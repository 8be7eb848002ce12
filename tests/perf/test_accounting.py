"""pase.perf's totals against the literature's closed forms for a plain GPT decoder.

FLOP: Narayanan et al., SC'21 (appendix): a step of global batch B does
``72 B s l h^2 (1 + s/(6h) + V/(12 l h))`` model FLOP, and
``96 B s l h^2 (1 + s/(6h) + V/(16 l h))`` with full recomputation.
Activations: Korthikanti et al., MLSys'23, bytes per layer and micro-batch with
dropout and unfused attention: ``s b h (34 + 5 a s / h)``, ``s b h (10 + 24/t + 5 a s/(h t))``
under tensor parallelism, ``/ t`` of the first under sequence parallelism,
``34 s b h / t`` with selective recomputation, ``2 s b h`` with full recomputation.
States: 16 bytes per parameter in mixed precision (ZeRO, Rajbhandari et al.).
"""
from __future__ import annotations

import pytest

from pase.api import load_graph
from pase.cluster import get_cluster
from pase.counts import counts
from pase.perf import evaluate_layout, make_layout

S, H, A, V, FF = 256, 128, 4, 512, 512  # seq, width, heads, vocab, MLP (4h)


def gpt(layers: int, batch: int):
    return load_graph("gpt3", layers=layers, width=H, heads=A, ff=FF, vocab=V, seq=S,
                      positions=S, batch=batch)


def estimate(layers: int, degrees: str = "dp=1", devices: int = 1, micro: int = 2, glob: int = 2,
             **options):
    lay = make_layout(degrees, devices=devices, micro_batch=micro, global_batch=glob, **options)
    return evaluate_layout(gpt(layers, micro), "dgx-a100-80gb", lay)


def model_flop(e, devices: int) -> float:
    return e.mfu * e.step_seconds * devices * get_cluster("dgx-a100-80gb").device.peak("bf16") * 1e12


@pytest.mark.parametrize("layers,glob", [(2, 2), (3, 8)])
def test_model_flop_is_narayanans_formula(layers, glob):
    e = estimate(layers, micro=2, glob=glob)
    expected = 72 * glob * S * layers * H**2 * (1 + S / (6 * H) + V / (12 * layers * H))
    assert model_flop(e, 1) == pytest.approx(expected, rel=1e-12)


def test_hardware_flop_under_full_recomputation_is_narayanans_formula():
    e = estimate(3, micro=2, glob=4, recompute="full")
    expected = 96 * 4 * S * 3 * H**2 * (1 + S / (6 * H) + V / (16 * 3 * H))
    hardware = e.hfu * e.step_seconds * get_cluster("dgx-a100-80gb").device.peak("bf16") * 1e12
    assert hardware == pytest.approx(expected, rel=1e-12)


def layer_activations(degrees="dp=1", devices=1, b=2, **options) -> float:
    """Bytes one more layer adds to the kept activations (one micro-batch in flight)."""
    two = estimate(2, degrees, devices, micro=b, glob=b, dropout=True, attention="unfused", **options)
    one = estimate(1, degrees, devices, micro=b, glob=b, dropout=True, attention="unfused", **options)
    return two.memory["activations"] - one.memory["activations"]


def test_activations_per_layer_are_korthikantis_without_parallelism():
    b = 2
    assert layer_activations(b=b) == pytest.approx(S * b * H * (34 + 5 * A * S / H))


@pytest.mark.parametrize("t", [2, 4])
def test_activations_under_tensor_parallelism(t):
    b = 2
    expected = S * b * H * (10 + 24 / t + 5 * A * S / (H * t))
    assert layer_activations(f"tp={t}", t, b=b) == pytest.approx(expected)


@pytest.mark.parametrize("t", [2, 4])
def test_activations_under_sequence_parallelism(t):
    b = 2
    got = layer_activations(f"tp={t}", t, b=b, sequence_parallel=True)
    assert got == pytest.approx(S * b * H * (34 + 5 * A * S / H) / t)
    selective = layer_activations(f"tp={t}", t, b=b, sequence_parallel=True, recompute="selective")
    assert selective == pytest.approx(S * b * H * 34 / t)


def test_full_recomputation_keeps_the_layer_input():
    b = 2
    assert layer_activations(b=b, recompute="full") == pytest.approx(2 * S * b * H)


def test_fused_attention_stores_no_scores():
    b = 2
    kw = dict(micro=b, glob=b)
    fused = estimate(2, **kw).memory["activations"] - estimate(1, **kw).memory["activations"]
    assert fused == pytest.approx(S * b * H * 32)  # 34 less the two dropout masks, no s x s term


@pytest.mark.parametrize("zero,per_param", [(0, 16), (1, 4 + 12 / 4), (2, 2 + 14 / 4), (3, 16 / 4)])
def test_states_are_16_bytes_per_parameter_sharded_by_zero(zero, per_param):
    graph = gpt(2, 2)
    lay = make_layout("dp=4", devices=4, micro_batch=2, global_batch=8, zero=zero)
    e = evaluate_layout(graph, "dgx-a100-80gb", lay)
    states = per_param * counts(graph).parameters
    if zero == 3:  # plus the gathered parameters of two units and one unit's full gradient
        assert e.memory["states"] > states
        assert e.memory["states"] < states + 6 * counts(graph).parameters
    else:
        assert e.memory["states"] == pytest.approx(states)


def test_same_input_same_estimate():
    a = estimate(2, "tp=2,dp=2", 4, micro=1, glob=4).to_dict()
    b = estimate(2, "tp=2,dp=2", 4, micro=1, glob=4).to_dict()
    assert a == b
