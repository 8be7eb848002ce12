"""Layouts: parsing, the checks against a graph, and what `pase evaluate --layout` refuses."""
from __future__ import annotations

import json

import pytest

from pase.api import evaluate_layout, load_graph
from pase.cli import main
from pase.errors import OptionError
from pase.perf import make_layout
from pase.perf.layout import op_splits

TINY = ["--model-option", "layers=2", "--model-option", "width=64", "--model-option", "heads=8",
        "--model-option", "ff=256", "--model-option", "vocab=512", "--model-option", "seq=64",
        "--model-option", "positions=64"]
OPTS = dict(layers=2, width=64, heads=8, ff=256, vocab=512, seq=64, positions=64)


@pytest.mark.parametrize("text,message", [
    ("tp=8,xx=2", "unknown key 'xx'"),
    ("tp=0", "tp must be a positive integer"),
    ("tp=two", "tp must be a positive integer"),
    ("tp=2,tp=2", "tp is given twice"),
])
def test_bad_degrees(text, message):
    with pytest.raises(OptionError, match=message):
        make_layout(text, devices=2, micro_batch=1, global_batch=1)


@pytest.mark.parametrize("kw,message", [
    (dict(devices=8), r"tp x pp x dp x cp = 2 x 1 x 1 x 1 = 2, but -p is 8"),
    (dict(micro_batch=3, global_batch=4), "must be a multiple of micro-batch x dp"),
    (dict(schedule="zigzag"), "unknown schedule 'zigzag'"),
    (dict(schedule="interleaved:2"), "needs pp > 1"),
    # V = 1 was taken, then broke later ("names 3 schedules") or was exported as is
    (dict(schedule="interleaved:1"), r"interleaved:V needs V >= 2 .*\(V = 1 is 1f1b\)"),
    (dict(schedule="interleaved:0"), "interleaved:V needs V >= 2"),
    (dict(recompute="half"), "unknown recompute 'half'"),
    (dict(zero=4), "unknown zero 4"),
    (dict(attention="sparse"), "unknown attention 'sparse'"),
])
def test_bad_layout_options(kw, message):
    args = dict(devices=2, micro_batch=1, global_batch=4)
    args.update(kw)
    with pytest.raises(OptionError, match=message):
        make_layout("tp=2", **args)


def test_interleaving_needs_a_multiple_of_pp_microbatches():
    with pytest.raises(OptionError, match=r"micro-batches per step \(3\) to be a multiple of pp \(2\)"):
        make_layout("pp=2", devices=2, micro_batch=1, global_batch=3, schedule="interleaved:2")


@pytest.mark.parametrize("layout,devices,options,message", [
    ("tp=3", 3, {}, r"tp \(3\) must divide heads .* size 8"),
    ("cp=3", 3, {}, r"the sequence \(64, op 'wte'\) must be a multiple of cp \(3\)"),
    ("ep=2,dp=2", 2, {}, "has no experts"),
    ("pp=4", 4, {}, "4 chunks, but model 'gpt3' has only 2 numbered layers"),
])
def test_layouts_the_graph_cannot_run(layout, devices, options, message):
    with pytest.raises(OptionError, match=message):
        evaluate_layout("gpt3", devices, layout, cluster="dgx-a100", micro_batch=1, global_batch=4,
                        model_options=OPTS)


def test_kv_heads_must_divide_by_tp():
    opts = dict(layers=1, width=64, heads=8, kv_heads=2, ff=128, vocab=256, seq=32)
    with pytest.raises(OptionError, match=r"tp \(4\) must divide heads .*'g' has size 2"):
        evaluate_layout("llama3-8b", 4, "tp=4", cluster="dgx-a100", micro_batch=1, global_batch=1,
                        model_options=opts)


def test_tp_splits_heads_mlp_and_vocabulary_and_cp_the_queries():
    graph = load_graph("gpt3", batch=1, **OPTS)
    lay = make_layout("tp=2,cp=2", devices=4, micro_batch=1, global_batch=1, sequence_parallel=True)
    split = {op.name: dict(zip((d.name for d in op.dims), op_splits(op, lay))) for op in graph.ops}
    assert split["h0.attn.qkv"] == {"s": 1, "b": 1, "h": 2, "l": 2, "k": 1, "e": 1}
    assert split["h0.attn.scores"]["m"] == 1 and split["h0.attn.scores"]["l"] == 2  # keys go round
    assert split["h0.mlp.fc1"]["f"] == 2 and split["lm_head"]["v"] == 2 and split["wte"]["c"] == 2
    assert split["h0.attn_norm"]["l"] == 4  # sequence parallel: cp x tp


def test_cli_json_keys_and_table(capsys):
    base = ["evaluate", "gpt3", "-p", "4", "--cluster", "dgx-a100", "--layout", "tp=2,pp=2",
            "--micro-batch", "1", "--global-batch", "4", *TINY]
    assert main(base + ["--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["version"] == 1
    for key in ("step_seconds", "tokens_per_second", "mfu", "hfu", "memory_bytes", "fits_memory"):
        assert key in data
    assert set(data["breakdown"]) == {"compute", "communication", "bubble", "optimizer"}
    assert data["tokens_per_second"] == pytest.approx(4 * 64 / data["step_seconds"])
    assert data["breakdown"]["bubble"] > 0  # two stages, four micro-batches
    assert main(base) == 0
    text = capsys.readouterr().out
    assert "MFU" in text and "bubble" in text and "fits in 40.0 GiB" in text


@pytest.mark.parametrize("extra,message", [
    (["--layout", "tp=2"], "--layout needs --micro-batch"),
    (["--layout", "tp=2", "--micro-batch", "1", "--global-batch", "1", "--zero", "auto"],
     "--zero is 0, 1, 2 or 3"),
    (["--layout", "tp=2", "--micro-batch", "1", "--global-batch", "1", "--cost-model", "paper"],
     "--cost-model does not apply with --layout"),
    (["--strategy", "x.json", "--micro-batch", "2"], "--micro-batch applies only with --layout"),
])
def test_cli_refusals_are_one_line_and_exit_2(capsys, extra, message):
    assert main(["evaluate", "gpt3", "-p", "2", "--cluster", "dgx-a100", *TINY, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
