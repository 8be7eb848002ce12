"""The command line stays light: commands that need no PyTorch never import it (nor the other
heavy optional packages), and the import cache gives back exactly what a fresh import gives."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Heavy optional packages no listing, inspection or solve of a built-in model needs.
HEAVY = ("torch", "torchvision", "transformers", "timm", "jax", "jaxlib", "dask", "distributed",
         "matplotlib", "ortools", "pulp", "highspy", "pandas")
# `pase solvers` says whether each ILP backend imports, so it imports them (and only those;
# OR-Tools' CP-SAT module imports pandas itself).
ILP_BACKENDS = ("ortools", "pulp", "highspy", "pandas")

LIGHT_COMMANDS = [["--help"], ["models"], ["models", "--options"], ["cost-models"],
                  ["clusters"], ["solve", "--help"], ["import", "--help"],
                  ["inspect", "gpt2", "-p", "8"], ["solve", "alexnet", "-p", "8"],
                  ["solve", "gpt2", "-p", "8", "--dry-run"],
                  ["solve", "mlp", "-p", "8", "--cluster", "dgx-a100"]]

# Runs each command in one fresh interpreter; after each, prints which heavy modules are loaded
# (sys.modules only grows, so a module any command imports shows from that command on).
PROBE = """
import contextlib, io, json, sys
from pase.cli import main
heavy, report = json.loads(sys.argv[1]), []
for argv in json.loads(sys.argv[2]):
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = main(argv)
    report.append({"argv": argv, "code": code, "output": sink.getvalue()[-300:],
                   "loaded": [m for m in heavy if m in sys.modules]})
print(json.dumps(report))
"""


def probe(commands, env=None):
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(HEAVY), json.dumps(commands)],
                         cwd=ROOT, capture_output=True, text=True, check=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    return json.loads(out.stdout)


def test_commands_without_pytorch_import_no_heavy_package():
    """Fails if a module these commands load gains a top-level ``import torch`` (or jax...)."""
    commands = LIGHT_COMMANDS + [["solvers"]]  # last: it imports the ILP backends on purpose
    for row in probe(commands):
        assert row["code"] == 0, row
        allowed = ILP_BACKENDS if row["argv"] == ["solvers"] else ()
        assert [m for m in row["loaded"] if m not in allowed] == [], row["argv"]
