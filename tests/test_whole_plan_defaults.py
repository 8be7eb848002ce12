"""`pase solve MODEL -p N --cluster C --global-batch B`, as a user types it, searches each
op's ZeRO stage and recomputation (the layout family's knobs) unless they are given.

Before, the command searched ZeRO 0 and no recomputation only, and answered `optimal` for
a GPT-2 layer on 2 H100s at 2.681 ms while the layout family's best (dp=2, ZeRO-1) was
2.648 ms, the layout `--explain` sets beside it."""
from __future__ import annotations

import json

import pytest

from pase import api
from pase.cli import main
from pase.perf.search import search_layouts

RUN = ["gpt2", "--model-option", "layers=1", "-p", "2", "--cluster", "h100-sxm",
       "--global-batch", "4", "--format", "json"]


def _solve(folder, *extra: str) -> dict:
    path = folder / f"plan{len(list(folder.iterdir()))}.json"
    assert main(["solve", *RUN, *extra, "--output", str(path)]) == 0
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    return _solve(tmp_path_factory.mktemp("plans"))


def test_the_whole_plan_search_is_never_slower_than_the_best_layout(searched):
    family = search_layouts(lambda mb: api.load_graph("gpt2", batch=mb, layers=1), 2,
                            "h100-sxm", 4)
    best = family.ranked[0]
    plan = searched
    assert plan["cost_options"]["zero"] == "auto"
    assert plan["cost_options"]["recompute"] == "auto"
    assert plan["status"] == "optimal"
    assert plan["step_seconds"] <= best.step_seconds * (1 + 1e-9), (
        f"search {plan['step_seconds']} s against the layout {best.layout} at "
        f"{best.step_seconds} s")


def test_a_given_zero_stage_is_kept(searched, tmp_path):
    plan = _solve(tmp_path, "--zero", "0", "--recompute", "none")
    assert plan["cost_options"]["zero"] == "0"
    assert plan["cost_options"]["recompute"] == "none"
    # ZeRO 0 alone holds no ZeRO-1 layout: its optimum is the slower one
    assert plan["step_seconds"] > searched["step_seconds"] * 1.005


def test_the_defaults_belong_to_the_whole_plan_search_only(capsys):
    # `--pipeline` with its own batch keeps the cost model's defaults (ZeRO 0, none)
    capsys.readouterr()
    args = ["solve", "gpt2", "--model-option", "layers=1", "-p", "2", "--cluster", "h100-sxm",
            "--pipeline", "--microbatches", "1", "--format", "json"]
    assert main(args) == 0
    plan = json.loads(capsys.readouterr().out)
    assert "zero" not in plan["cost_options"]
