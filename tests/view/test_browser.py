"""The pages in a real browser: Debian's Chromium, headless, through Playwright.

Every page opens with no console error and no request but its own file; a
collapsed block expands; clicking an op names the devices the placement rule
gives (worked out by hand here); the Compare tab lists exactly the ops whose
split differs. Screenshots go to tmp/artefacts/.
"""
import json

import pytest

import pase

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def only_own_file(opened, path):
    assert opened.errors == [], opened.errors
    assert set(opened.requests) == {path.resolve().as_uri()}, opened.requests


def test_alexnet_page_opens_and_sorts(open_page, tmp_path):
    path = pase.view(pase.solve("alexnet", 8, solver="dp"), tmp_path / "alexnet.html")
    o = open_page(path)
    page = o.page
    assert page.locator("#summary .card").count() >= 5
    names = page.locator("#plan tbody tr td:first-child").all_inner_texts()
    assert names[0] == "conv1"
    page.click("th[data-sort=c]")  # the costliest op first
    costs = pase.solve("alexnet", 8, solver="dp").op_costs
    first = page.locator("#plan tbody tr td:first-child").first.inner_text()
    assert costs[first] == max(costs.values())
    page.fill("#filter", "fc")
    shown = page.locator("#plan tbody tr td:first-child").all_inner_texts()
    assert shown and all("fc" in n.lower() for n in shown)
    o.screenshot("view_alexnet.png")
    only_own_file(o, path)


def test_gpt2_block_expands_and_time_draws(open_page, tmp_path):
    s = pase.solve("gpt2", 8, cost_model="alpha-beta", cluster="dgx-a100", solver="dp", layers=3)
    path = pase.view(s, tmp_path / "gpt2.html", model_options={"layers": 3})
    data = json.loads(path.read_text().split('id="pase-data">')[1].split("</script>")[0])
    fold = next(f for f in data["folds"] if f[2] > 1)
    o = open_page(path)
    page = o.page
    rows = page.locator("#plan tbody tr").count()
    block = page.locator("#plan tbody tr.block").first
    assert f"x{fold[2]}" in block.inner_text()
    block.click()
    assert page.locator("#plan tbody tr.inner").count() == fold[1]
    assert page.locator("#plan tbody tr").count() == rows + fold[1] + 1
    page.locator("#plan tbody tr.inner").first.click()
    assert page.locator("#device-panel h2").inner_text() == data["ops"][fold[0]]["n"]
    o.screenshot("view_gpt2.png")
    page.click("button[data-tab=time]")
    assert page.locator("#timeline").is_visible()
    page.click("#zoom-in")
    o.screenshot("view_gpt2_time.png")
    page.click("button[data-tab=compare]")
    assert "Nothing to compare" in page.locator("#tab-compare").inner_text()
    only_own_file(o, path)


def test_device_view_names_the_devices_of_each_tile(open_page, tmp_path):
    # p = 8 on 4-device nodes: mesh axes x0, x1, x2 of size 2, device d at
    # (d // 4, d // 2 % 2, d % 2). fc1 split b=2, n=4: the batch dim takes the first axis
    # (x0), n the last two (x1 x2). So tile (i, j) is held by device 4 i + j, on node i.
    from pase.cluster import Cluster, Device, Link

    cluster = Cluster("four-per-node", 2, 4, Device("X", 100.0, 16.0),
                      Link(100.0, 1.0), Link(10.0, 5.0))
    s = pase.evaluate("mlp", {"fc1": {"b": 2, "n": 4}}, 8, "alpha-beta", cluster=cluster)
    path = pase.view(s, tmp_path / "mlp.html", cluster=cluster)
    o = open_page(path)
    page = o.page
    page.locator("#plan tbody tr", has_text="fc1").first.click()
    for i in range(2):
        for j in range(4):
            row = page.locator(f"#device-panel tr[data-tile='({i}, {j})']")
            assert row.locator("td.devices").inner_text() == f"gpu{4 * i + j}"
            assert row.locator("td").nth(2).inner_text() == f"node {i}"
    assert page.locator("#device-panel .node").count() == 2
    o.screenshot("view_devices.png")
    only_own_file(o, path)


def test_compare_tab_lists_exactly_the_differing_ops(open_page, tmp_path):
    a = pase.solve("gpt2", 8, solver="dp", layers=2)
    other = {op: dict(cfg) for op, cfg in a.configs.items()}
    changed = ["h1.attn.qkv", "wte", "h0.mlp.fc2"]
    for name in changed:
        other[name] = {} if any(f > 1 for f in other[name].values()) else {"b": 2}
    b = pase.evaluate("gpt2", other, 8, model_options={"layers": 2})
    path = pase.view(a, tmp_path / "cmp.html", compare=b, model_options={"layers": 2})
    o = open_page(path)
    page = o.page
    page.click("button[data-tab=compare]")
    listed = page.locator("#compare-ops td.name").all_inner_texts()
    order = [op.name for op in pase.load_graph("gpt2", layers=2).ops]
    assert listed == sorted(changed, key=order.index)
    o.screenshot("view_compare.png")
    only_own_file(o, path)


@pytest.mark.slow
def test_gpt3_175b_page_opens_fast_and_small(open_page, tmp_path):
    s = pase.solve("gpt3-175b", 16, cost_model="alpha-beta", cluster="dgx-a100-80gb",
                   memory_cap="none")
    path = pase.view(s, tmp_path / "gpt3.html", memory_cap="none")
    assert path.stat().st_size < 2 * 2**20
    o = open_page(path)
    page = o.page
    timing = page.evaluate("performance.timing.loadEventEnd - performance.timing.navigationStart")
    assert timing < 2000 and page.evaluate("window.paseView.drawMs") < 2000
    assert page.locator("#plan tbody tr").count() <= 20
    page.locator("#plan tbody tr", has_text="lm_head").first.click()
    assert page.locator("#device-panel .dev").count() == 16
    o.screenshot("view_gpt3_175b.png")
    page.click("button[data-tab=time]")
    o.screenshot("view_gpt3_175b_time.png")
    only_own_file(o, path)


@pytest.mark.slow
@pytest.mark.parametrize("model", [n for n in sorted(__import__("pase.registry", fromlist=["MODELS"]).MODELS.names())])
def test_every_zoo_model_views(open_page, tmp_path, capsys, model):
    from pase.cli import main

    out = tmp_path / f"{model}.html"
    assert main(["view", model, "-p", "8", "--solver", "auto", "-o", str(out)]) == 0, capsys.readouterr().err
    o = open_page(out)
    assert o.page.locator("#plan tbody tr").count() >= 1
    only_own_file(o, out)


def test_an_imported_pytorch_model_views(open_page, tmp_path, capsys):
    pytest.importorskip("torch", reason="torch not installed (pip install \"pase[torch]\")")
    from pase.cli import main

    out = tmp_path / "torch.html"
    code = main(["view", "tests/torch_models/mlp.py:build", "-p", "4", "--solver", "auto",
                 "--cluster", "dgx-a100", "--no-cache", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    o = open_page(out)
    assert o.page.locator("#plan tbody tr").count() >= 2
    o.screenshot("view_torch_mlp.png")
    only_own_file(o, out)


def test_pipeline_page_draws_stages_by_microbatch(open_page, tmp_path):
    from pase.pipeline import solve_pipeline

    plan = solve_pipeline("chain", 4, batch=256, microbatches=16, stage_sizes=[1])
    path = pase.view(plan, tmp_path / "pipe.html")
    o = open_page(path)
    page = o.page
    assert page.locator("#plan th.stage-col").first.is_visible()
    page.click("button[data-tab=time]")
    assert page.locator("#stages tbody tr").count() == len(plan.stages)
    assert page.locator("#timeline").is_visible()
    o.screenshot("view_pipeline_time.png")
    only_own_file(o, path)


def test_interleaved_pipeline_page_draws_every_chunk(open_page, tmp_path):
    # the page refused interleaved plans ("variants name unknown op": each stage was drawn
    # from its first chunk's ops with every chunk's settings)
    from pase.pipeline import solve_pipeline

    plan = solve_pipeline("chain", 4, batch=256, microbatches=16, stage_sizes=[1],
                          schedule="interleaved:2", model_options={"length": 16})
    assert [len(st.ranges) for st in plan.stages] == [2] * 4
    path = pase.view(plan, tmp_path / "interleaved.html")
    o = open_page(path)
    page = o.page
    page.click("button[data-tab=time]")
    assert page.locator("#stages tbody tr").count() == len(plan.stages)
    first = plan.stages[0].ops  # each chunk's first and last op, in turn
    assert page.locator("#stages tbody tr").first.locator("td").nth(1).inner_text() == \
        f"{first[0]} .. {first[1]}, {first[2]} .. {first[3]}"
    assert page.locator("#timeline").is_visible()
    o.screenshot("view_interleaved_time.png")
    only_own_file(o, path)


def test_gpt2_tp_block_shows_its_tensor_splits_and_the_page_its_truth(open_page, gpt2_tp_page):
    """The new user's example: the folded `h0 .. h1 x2` row shows b=4 and the heads' and
    the MLP's tp=2 splits; the plan line says the layout; one step time with the simulated
    one beside it; the dim key; the command and version."""
    path, argv = gpt2_tp_page
    o = open_page(path)
    page = o.page
    block = page.locator("#plan tbody tr.block").first
    assert "h0 .. h1" in block.inner_text()
    chips = block.locator("td").nth(2).locator(".chip").all_inner_texts()
    assert {"b=4", "h=2", "f=2"} <= set(chips), chips
    assert page.locator("#plan-line").inner_text().startswith("layout: dp 4 \u00d7 tp 2")
    assert page.locator("#summary .card").filter(has_text="step time").count() == 1
    assert page.locator("#simulated").inner_text().startswith("simulated ")
    assert page.locator("#summary .card").filter(has_text="simulated step").count() == 0
    page.click("#dim-key summary")
    assert "attention heads" in page.locator("#dim-key tr[data-dim=h]").inner_text()
    assert "feed-forward" in page.locator("#dim-key tr[data-dim=f]").inner_text()
    made = page.locator("#made").inner_text()
    assert " ".join(["pase", *argv]) in made and f"pase {pase.__version__}" in made
    assert float(block.locator("td.block-comm").get_attribute("data-seconds")) > 0
    o.screenshot("view_gpt2_tp.png")
    only_own_file(o, path)
