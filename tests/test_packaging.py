"""Both an editable and a regular install expose every plug-in and paper module under pase.*."""
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_FOLDERS = ("solvers", "graphs", "cost_models", "papers")


def plugin_modules() -> list[str]:
    names = []
    for folder in PLUGIN_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            names.append("pase." + ".".join(parts))
    return names


def test_plugin_folders_are_not_empty():
    assert len(plugin_modules()) >= 10


@pytest.mark.parametrize("module", plugin_modules())
def test_editable_install_imports_every_plugin(module):
    importlib.import_module(module)


@pytest.mark.slow
def test_regular_install_imports_every_plugin(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), str(ROOT)],
                   check=True, cwd=tmp_path)
    code = ("import importlib, sys, pase; "
            f"assert pase.__file__.startswith({str(target)!r}), pase.__file__; "
            f"[importlib.import_module(m) for m in {plugin_modules()!r}]; "
            "from pase.registry import SOLVERS, MODELS; print(len(MODELS.names()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target)},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 10
    # The reproductions' code ships as pase.papers; their committed results do not.
    papers = target / "pase" / "papers" / "pase_ipdps2021"
    assert (papers / "table2.py").is_file() and not (papers / "results").exists()
    help_ = subprocess.run([str(target / "bin" / "pase"), "reproduce", "--help"], cwd=tmp_path,
                           env={"PYTHONPATH": str(target)}, capture_output=True, text=True)
    assert help_.returncode == 0 and "--quick" in help_.stdout, help_.stderr
