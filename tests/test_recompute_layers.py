"""Full recomputation of the first N layers of each stage (Megatron-LM's
``--recompute-num-layers``): the layout family finds such layouts (the least recomputation
that fits), and ``--recompute full:N`` prices one by name, as the family prints it."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import pytest

from pase import api
from pase.cli import main
from pase.cluster import get_cluster
from pase.errors import OptionError
from pase.perf import evaluate_layout, make_layout

# the default suite keeps its ten minutes on two cores; CI runs these with -m slow
pytestmark = pytest.mark.slow

ARGS = ["evaluate", "gpt2", "-p", "8", "--model-option", "layers=4", "--cluster", "dgx-a100-80gb",
        "--layout", "tp=2,pp=2,dp=2", "--micro-batch", "2", "--global-batch", "16", "--format",
        "json"]


def test_full_n_is_the_layout_the_family_means(capsys):
    # the family's JSON carries recompute_layers, which no --recompute could name: a
    # layout it printed as "recompute=full" priced as every layer's recomputation
    assert main([*ARGS, "--recompute", "full:1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["layout"]["recompute"] == "full" and data["layout"]["recompute_layers"] == 1
    lay = replace(make_layout("tp=2,pp=2,dp=2", devices=8, micro_batch=2, global_batch=16,
                              recompute="full"), recompute_layers=1)
    est = evaluate_layout(api.load_graph("gpt2", batch=2, layers=4), "dgx-a100-80gb", lay)
    assert data["step_seconds"] == est.step_seconds
    assert main([*ARGS, "--recompute", "full"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert every["step_seconds"] > data["step_seconds"]  # two layers rebuilt, not one


@pytest.mark.parametrize("given, error", [
    ("full:3", "--recompute full:3: a stage holds at most 2 layers (4 over pp 2); give full:N "
               "with N <= 2, or full for every layer"),
    ("full:0", "argument --recompute: invalid choice: 'full:0' (choose from none, auto, all, "
               "selective, full, full:N with N >= 1)")])
def test_a_count_no_stage_holds_is_refused(capsys, given, error):
    assert main([*ARGS, "--recompute", given]) == 2
    assert capsys.readouterr().err.splitlines()[0] == f"pase: error: {error}"


def test_the_layout_search_prints_what_it_prices():
    # GPT-2 (8 layers) on 8 H100s held to 4 GiB, 256 sequences a step: some layouts fit
    # recomputing only part of each stage; their lines said "recompute=full"
    from pase.cli.layouts import _layout_text

    cl = get_cluster("h100-sxm", 8)
    small = dataclasses.replace(cl, device=dataclasses.replace(cl.device, memory_gib=4))
    result = api.search_layouts("gpt2", 8, cluster=small, global_batch=256,
                                model_options={"layers": 8}, keep=10**6)
    partial = [e.to_dict()["layout"] for e in result.ranked if e.layout.recompute_layers]
    assert partial, "the case must hold a layout recomputing some layers"
    for lay in partial:
        assert f"recompute=full:{lay['recompute_layers']}" in _layout_text(lay)
    with pytest.raises(OptionError, match="allowed: none, selective, full, full:N"):
        make_layout("tp=8", devices=8, micro_batch=1, global_batch=8, recompute="full:two")
