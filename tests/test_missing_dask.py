"""Without the sweep extra, ``pase sweep`` and ``pase reproduce`` refuse in one line that
names the extra, and leave no file behind (issue 39's frictions: ``reproduce`` said
``internal error: ModuleNotFoundError`` and left an empty folder; ``sweep`` left its
SQLite store)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Blocks Dask's imports the way a missing package does, then runs the CLI.
WITHOUT_DASK = """
import sys
for name in ("distributed", "dask"):
    sys.modules[name] = None
from pase.cli import main
sys.argv = ["pase", *sys.argv[1:]]
sys.exit(main())
"""

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sweep.toml"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_DASK, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["sweep", "reproduce"])
def test_missing_dask_names_the_extra_and_leaves_nothing(tmp_path, command):
    if command == "sweep":
        spec = tmp_path / "grid.toml"
        shutil.copy(EXAMPLE, spec)
        args = ["sweep", str(spec)]
    else:
        args = ["reproduce", "pase-ipdps2021", "--quick", "--out", str(tmp_path / "out")]
    before = sorted(p.name for p in tmp_path.iterdir())
    done = _run(args, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f'pase: error: pase {command} needs Dask: pip install "pase[sweep]"\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == before
