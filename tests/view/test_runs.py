"""``pase report --views``: a page per run with a strategy, linked from report.md."""
import json

import pytest

pytest.importorskip("pandas", reason="pandas not installed (pip install \"pase[sweep]\")")


def test_report_links_each_run_to_its_page(tmp_path, capsys):
    import pase
    from pase.cli import main
    from pase.sweeps.store import NAMES, Store

    s = pase.solve("mlp", 4, solver="dp")
    row = {name: None for name in NAMES}
    row.update(key='{"run": 1}', model="mlp", devices=4, solver="dp", cost_model="paper",
               status="optimal", cost=s.total_cost, unit="FLOP", strategy=dict(s.configs),
               model_options={}, cost_options={}, solver_options={})
    failed = dict(row, key='{"run": 2}', status="time_limit", strategy=None, cost=None)
    db = tmp_path / "runs.sqlite"
    with Store(db) as store:
        store.write(row)
        store.write(failed)
    out = tmp_path / "report"
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install \"pase[plot]\")")
    assert main(["report", str(db), "-o", str(out), "--views"]) == 0
    report = (out / "report.md").read_text()
    assert report.count("[view](views/run-0.html)") == 1 and "run-1.html" not in report
    page = (out / "views" / "run-0.html").read_text()
    data = json.loads(page.split('id="pase-data">')[1].split("</script>")[0])
    assert data["summary"]["model"] == "mlp" and data["summary"]["total"] == pytest.approx(s.total_cost)
    assert data["made"]["command"].startswith(f"pase report {db} --views (run 0")
    capsys.readouterr()
    assert main(["report", str(db), "-o", str(out), "--views", "--format", "csv"]) == 2
    assert "--views" in capsys.readouterr().err
