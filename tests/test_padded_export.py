"""A plan whose vocabulary split pads (the calibrated model's space, docs/cost-model.md)
exported to JAX and run on 4 fake CPU devices.

GPT-2 at toy sizes with a prime vocabulary, so no factor above 1 divides it. The plan
is the shape ``pase solve gpt2 -p 4 --cluster h100-sxm --model-option layers=1`` picks:
the tied table split on its width, ``lm_head`` and the loss split 2 ways on the
vocabulary (and 2 on the batch), every other op on the batch. The table's re-layout
for ``lm_head`` goes from unsplit rows to rows split 2 ways: uneven.
"""
from __future__ import annotations

import pytest

from pase.export import check_programs, to_jax

RTOL = 1e-5  # tests/test_export_jax.py's
BLOCK = ["wpe", "h0.attn_norm", "h0.attn.qkv", "h0.attn.unstack", "h0.attn.scores",
         "h0.attn.softmax", "h0.attn.context", "h0.attn.out", "h0.attn_residual", "h0.mlp_norm",
         "h0.mlp.fc1", "h0.mlp.fc2", "h0.mlp_residual", "ln_f"]
PLAN = {"wte": {"d": 4}, **{op: {"b": 4} for op in BLOCK},
        "lm_head": {"b": 2, "v": 2}, "loss": {"b": 2, "v": 2}}
# Vocabulary 1031 (a prime): each of 2 devices holds 516 rows, the second a pad row.
TINY = dict(layers=1, batch=4, seq=8, width=32, heads=4, ff=64, vocab=1031, positions=8)


def test_the_padded_split_is_pinned_not_dropped():
    """The program shards the vocabulary as planned (no replication of uneven dims)."""
    text = to_jax("gpt2", PLAN, 4, model_options=TINY)
    assert "'lm_head': {'b': 2, 'v': 2}" in text
    assert "pin(t15, (('x0',), None, ('x1',)), 'out/lm_head')" in text  # b on x0, v on x1
    assert "pin(params['wte:w1'], (('x1',), None), 'tied/wte->lm_head'" in text  # rows on x1


@pytest.mark.slow  # about 7 s: two JAX programs on 4 devices
def test_a_padded_vocabulary_split_agrees_with_one_device():
    """Loss and every gradient within 1e-5 of one device's, with pase's re-layouts written
    out and with XLA's (one JAX start-up for both)."""
    texts = [to_jax("gpt2", PLAN, 4, model_options=dict(TINY, vocab=67), relayout=relayout)
             for relayout in ("pase", "xla")]
    for r in check_programs(texts, 4):
        assert r["loss_rel_diff"] <= RTOL and r["grad_max_rel_diff"] <= RTOL, r


def test_the_uneven_table_relayout_moves_what_pase_prices():
    """The tied table (1031 x 32, split by width 4 ways) re-laid for lm_head (rows split
    2 ways): pase prices a device receiving its 516 x 32 tile less the part it holds.
    XLA left to itself all-gathers the whole table first (1.75 times that)."""
    from pase.export.verify import verify

    report = verify("gpt2", PLAN, 4, model_options=TINY)
    rows = {r["row"]: r for r in report["rows"]}
    tied = rows["tied/wte->lm_head"]
    assert tied["predicted_forward"] > 0
    assert tied["within"], tied  # 1%: the pad row is 0.1% of the rows
    assert report["total"]["within"], report["total"]
