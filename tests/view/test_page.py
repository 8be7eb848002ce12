"""The page model and the HTML file: self-contained, its JSON intact, the costs the cost
model's own, the tiles the placement rule's."""
import json
import re

import pytest

import pase
from pase.api import build_problem, choice_of
from pase.viewer.build import page_model
from pase.viewer.page import assemble, embed_json
from pase.viewer.write import planned

DATA = re.compile(r'<script type="application/json" id="pase-data">(.*?)</script>', re.S)


def page_data(html: str):
    return json.loads(DATA.search(html).group(1))


@pytest.fixture(scope="module")
def mlp_cluster():
    return pase.solve("mlp", 4, cost_model="alpha-beta", cluster="dgx-a100", solver="dp")


def test_page_is_one_self_contained_file(mlp_cluster, tmp_path):
    path = pase.view(mlp_cluster, tmp_path / "plan.html")
    html = path.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<script") == 2
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # nothing fetched
    assert "<link" not in html and "@import" not in html and "url(" not in html
    assert "default-src 'none'" in html  # the page forbids itself any request
    assert page_data(html)["summary"]["model"] == "mlp"


def test_script_closing_tags_in_values_are_escaped():
    text = embed_json({"n": "</script><script>alert(1)</script>", "c": "<!-- x"})
    assert "</" not in text and "<!--" not in text
    assert json.loads(text) == {"n": "</script><script>alert(1)</script>", "c": "<!-- x"}
    html = assemble({"n": "{{js}} </script>"}, "t {{css}}")
    assert page_data(html) == {"n": "{{js}} </script>"}  # placeholders are filled once


def test_rows_hold_the_cost_models_own_costs(mlp_cluster):
    p = planned(mlp_cluster)
    data = page_model(p, simulate=False)
    built = build_problem("mlp", 4, "alpha-beta", cluster="dgx-a100")
    names = built.problem.names
    choice = choice_of(built, p.strategy.configs)
    for v, row in enumerate(data["ops"]):
        c = choice[v]
        assert row["n"] == names[v]
        assert row["c"] == pytest.approx(float(built.problem.vertex_costs[v][c]), rel=1e-5)
        assert row["m"] == pytest.approx(float(built.problem.memory[v][c]), rel=1e-5)
    total = sum(r["c"] for r in data["ops"]) + sum(r["x"] for r in data["ops"])
    assert total == pytest.approx(mlp_cluster.total_cost, rel=1e-5)
    s = data["summary"]
    assert s["cluster"] == "dgx-a100" and s["unit"] == "s" and s["status"] == "optimal"
    assert s["memory"] == pytest.approx(mlp_cluster.meta["memory_bytes"])


def test_tiles_follow_the_placement_rule_by_hand():
    # p = 4: mesh axes x0, x1 of size 2, device d at (d // 2, d % 2). fc1 split b=2, n=2: the
    # batch dim takes the first axis, the other the last, so device d holds output block
    # (d // 2, d % 2) of the (b, n) output.
    s = pase.evaluate("mlp", {"fc1": {"b": 2, "n": 2}}, 4, "alpha-beta", cluster="dgx-a100")
    data = page_model(planned(s), simulate=False)
    i = [r["n"] for r in data["ops"]].index("fc1")
    tile = data["devices"]["tiles"][data["devices"]["op_tile"][i]]
    assert tile["f"] == [2, 2]
    assert tile["b"] == [[d // 2, d % 2] for d in range(4)]
    assert data["devices"]["per_node"] == 8


def test_incoming_relayouts_name_their_producers(mlp_cluster):
    data = page_model(planned(mlp_cluster), simulate=False)
    names = [r["n"] for r in data["ops"]]
    graph = pase.load_graph("mlp")
    for op, edges in zip(graph.ops, data["devices"]["edges"]):
        producers = [p.source[0] for p in op.inputs if p.source is not None]
        assert [names[e[0]] for e in edges] == producers
        assert all(e[2] >= 0 and e[3] >= 0 for e in edges)


def test_timeline_round_trips_the_simulators_events(mlp_cluster):
    from pase.sim import simulate
    from pase.viewer.timeline import pack

    result = simulate("mlp", mlp_cluster.configs, "dgx-a100", 4)
    data = pack(result.timeline, result.step_time)
    decoded = []
    for r, name in enumerate(data["rows"]):
        flat = data["events"][r if data["same"][r] is None else data["same"][r]] or []
        at = 0
        for j in range(0, len(flat), 4):
            at += flat[j]
            decoded.append((name, at * data["tick"], (at + flat[j + 1]) * data["tick"],
                            data["labels"][flat[j + 2]]))
    want = sorted((e.resource, e.start, e.end, e.label) for e in result.timeline)
    assert len(decoded) == len(want) == data["count"]
    for got, exp in zip(sorted(decoded), want):
        assert got[0] == exp[0] and got[3] == exp[3]
        assert got[1] == pytest.approx(exp[1], abs=2 * data["tick"])
        assert got[2] == pytest.approx(exp[2], abs=2 * data["tick"])


def test_events_past_the_limit_are_dropped_and_counted(monkeypatch):
    from pase.sim import Event
    from pase.viewer import timeline

    monkeypatch.setattr(timeline, "MAX_EVENTS", 3)
    events = [Event("gpu0", i, i + 0.5, f"op{i}", "forward") for i in range(5)]
    data = timeline.pack(events, 5.0)
    assert data["count"] == 3 and data["dropped"] == 2


def test_pages_are_deterministic(mlp_cluster):
    assert pase.view(mlp_cluster) == pase.view(mlp_cluster)


def test_compare_lists_exactly_the_ops_whose_split_differs():
    a = pase.solve("gpt2", 8, solver="dp", layers=2)
    changed = {"h0.mlp.fc1", "lm_head"}
    other = {op: dict(cfg) for op, cfg in a.configs.items()}
    for name in changed:  # unsplit if split, split the batch if not
        other[name] = {} if any(f > 1 for f in other[name].values()) else {"b": 2}
    b = pase.evaluate("gpt2", other, 8, model_options={"layers": 2})
    data = page_model(planned(a, model_options={"layers": 2}),
                      planned(b, model_options={"layers": 2}), simulate=False)
    names = [r["n"] for r in data["ops"]]
    assert {names[i] for i, _ in data["compare"]["ops"]} == changed
    t = data["compare"]["totals"]
    assert t[0]["total"] == pytest.approx(a.total_cost) and t[1]["total"] == pytest.approx(b.total_cost)


def test_a_strategy_for_another_model_is_refused():
    from pase.errors import StrategyError

    s = pase.solve("mlp", 4)
    with pytest.raises(StrategyError, match="not for graph 'alexnet'.*'fc1'"):
        pase.view(s, model="alexnet")


def test_a_calibrated_plan_is_drawn_with_its_own_prices(monkeypatch):
    # the Strategy carries its costs, memory, cluster and element size: the page is drawn
    # without a Problem, and shows what pricing it again (the earlier way) shows
    # a batch of 2 on 8 devices: the plan splits more than the batch, so it communicates
    opts = {"model_options": {"layers": 1, "width": 128, "heads": 2, "ff": 256, "vocab": 512,
                              "seq": 32, "batch": 2}}
    s = pase.solve("gpt2", 8, cluster="dgx-a100", **opts)
    again = page_model(planned(s, cluster="dgx-a100", memory_cap=None, **opts), simulate=False)
    def refuse(*args, **kwargs):
        raise AssertionError("the viewer built a Problem")

    monkeypatch.setattr("pase.api.build_problem", refuse)
    own = page_model(planned(s, **opts), simulate=False)
    assert own["ops"] == again["ops"] and own["devices"] == again["devices"]
    for key in ("total", "compute", "communication", "memory", "cluster", "per_node", "mfu"):
        assert own["summary"][key] == again["summary"][key], key
    assert own["summary"]["cluster"] == "dgx-a100"
    assert any(r["m"] for r in own["ops"]) and any(r["x"] for r in own["ops"])
