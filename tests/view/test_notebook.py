"""``Strategy._repr_html_``: the summary and the plan table, static and small."""
import pase
from pase.viewer import notebook


def test_repr_html_shows_the_summary_and_every_op_of_a_small_plan():
    s = pase.solve("alexnet", 8, solver="dp")
    html = s._repr_html_()
    assert "<script" not in html and "alexnet" in html and "optimal" in html
    for name in s.configs:
        assert f">{name}<" in html or f">{name} .." in html  # a row, or the start of a fold
    split = next(op for op in s.configs if s.split(op))
    d, f = next(iter(s.split(split).items()))
    assert f">{d}={f}<" in html


def test_repr_html_folds_and_bounds_a_large_plan():
    s = pase.solve("gpt3-175b", 16)
    html = s._repr_html_()
    assert "<details>" in html and "x9" in html  # the layers fold (x95 or x96)
    assert len(html) < 100_000 and html.count("<tr>") < notebook.MAX_ROWS


def test_repr_html_of_an_unknown_graph_still_draws():
    s = pase.solve("mlp", 4)
    s.graph_name = "not-a-model"
    assert "fc1" in s._repr_html_()
