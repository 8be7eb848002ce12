"""Every benchmark dates its figures by the commit they ran on (benchmarks/provenance.py)."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if p.name != "provenance.py")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_prints_the_stamp(script):
    """Each script imports ``stamp`` and calls it (its output's first line names the commit)."""
    tree = ast.parse(script.read_text())
    imported = any(isinstance(n, ast.ImportFrom) and n.module == "provenance"
                   and any(a.name == "stamp" for a in n.names) for n in ast.walk(tree))
    called = any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "stamp"
                 for n in ast.walk(tree))
    assert imported and called, f"{script.name} does not print provenance.stamp()"


def test_stamp_names_the_checked_out_commit():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from provenance import stamp
    finally:
        sys.path.pop(0)
    try:
        head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    line = stamp()
    assert line.startswith(f"measured at commit {head}") and "Python" in line
