"""The command line stays light: commands that need no PyTorch never import it (nor the other
heavy optional packages), and the import cache gives back exactly what a fresh import gives."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    report.append({"argv": argv, "code": code, "output": sink.getvalue(),
                   "loaded": [m for m in heavy if m in sys.modules]})
print(json.dumps(report))
"""


def probe(commands, env=None):
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(HEAVY), json.dumps(commands)],
                         cwd=ROOT, capture_output=True, text=True, check=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": _pythonpath(), **(env or {})})
    return json.loads(out.stdout)


def _pythonpath():
    """This checkout first, then what the caller had (so these are the files tested)."""
    return os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])


def test_commands_without_pytorch_import_no_heavy_package():
    """Fails if a module these commands load gains a top-level ``import torch`` (or jax...)."""
    commands = LIGHT_COMMANDS + [["solvers"]]  # last: it imports the ILP backends on purpose
    for row in probe(commands):
        assert row["code"] == 0, row
        allowed = ILP_BACKENDS if row["argv"] == ["solvers"] else ()
        assert [m for m in row["loaded"] if m not in allowed] == [], row["argv"]


# -- the import cache ---------------------------------------------------------------------

MLP = ROOT / "tests" / "torch_models" / "mlp.py"


@pytest.mark.slow  # 20 s; CI runs it (the fast suite stays under 10 minutes on 2 cores)
def test_a_cached_reference_solves_alike_without_importing_torch(tmp_path):
    """The first solve of a FILE.py:FUNCTION imports torch; the second reads the cache and
    prints the same result without torch; --no-cache imports again."""
    pytest.importorskip("torch")
    command = ["solve", f"{MLP}:build", "-p", "8", "--format", "json"]
    env = {"PASE_CACHE_DIR": str(tmp_path / "cache")}
    first, second, fresh = (probe([argv], env)[0] for argv in
                            (command, command, command + ["--no-cache"]))
    assert first["code"] == second["code"] == fresh["code"] == 0
    assert "torch" in first["loaded"] and "torch" in fresh["loaded"]  # the probe sees torch
    assert "torch" not in second["loaded"]
    first, second, fresh = (_timeless(json.loads(r["output"])) for r in (first, second, fresh))
    assert first == second == fresh and first["total_cost"] > 0
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1


def _timeless(result):
    return {k: v for k, v in result.items() if not k.endswith("_seconds")}


HELPER_MODEL = """import json, pathlib, torch
import helper_{tag}

def build(batch=4):
    cfg = json.loads((pathlib.Path(__file__).parent / "config_{tag}.json").read_text())
    width = helper_{tag}.WIDTH * cfg["scale"]
    return torch.nn.Linear(width, 8), (torch.randn(batch, width),)
"""


@pytest.fixture
def cached(monkeypatch, tmp_path):
    """``import`` through the command line with the cache in tmp_path; returns a function
    giving (graph JSON, whether it was built, stderr)."""
    pytest.importorskip("torch")
    from pase.cli import main
    from pase.frontends import reference

    monkeypatch.setenv("PASE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PASE_NO_CACHE", raising=False)
    real, built = reference.load_module, []

    def counting(*a, **k):
        built.append(1)
        return real(*a, **k)

    monkeypatch.setattr(reference, "load_module", counting)

    def run(capsys, *argv):
        for name in [n for n in sys.modules if n.startswith("helper_")]:
            del sys.modules[name]  # each run as in a fresh process
        before = len(built)
        code = main(["import", *map(str, argv)])
        out = capsys.readouterr()
        assert code == 0, out.err
        return out.out, len(built) > before, out.err
    return run


def test_a_hit_equals_a_fresh_import(cached, capsys):
    ref = ROOT / "tests" / "torch_models" / "gpt2.py"
    fresh, built, _ = cached(capsys, f"{ref}:build", "--no-cache")
    first, built_first, _ = cached(capsys, f"{ref}:build")
    again, built_again, _ = cached(capsys, f"{ref}:build")
    assert built and built_first and not built_again
    assert fresh == first == again and json.loads(again)["ops"]


def test_any_change_the_build_read_is_a_miss(cached, capsys, tmp_path):
    """The reference file, a module it imports, a file it reads, a model option: each changed
    gives the graph a fresh import gives (Linear's in_features shows in the graph)."""
    import torch

    from pase import Graph
    from pase.counts import parameters

    def params(text):
        return parameters(Graph.from_json(text))

    model = tmp_path / "model.py"
    model.write_text(HELPER_MODEL.format(tag="a"))
    (tmp_path / "helper_a.py").write_text("WIDTH = 4\n")
    (tmp_path / "config_a.json").write_text('{"scale": 1}')
    expect = lambda width: torch.nn.Linear(width, 8).weight.numel() + 8  # noqa: E731
    ref = f"{model}:build"
    out, built, _ = cached(capsys, ref)
    assert built and params(out) == expect(4)
    assert not cached(capsys, ref)[1]  # unchanged: a hit
    (tmp_path / "helper_a.py").write_text("WIDTH = 6\n")
    out, built, _ = cached(capsys, ref)
    assert built and params(out) == expect(6)
    (tmp_path / "config_a.json").write_text('{"scale": 2}')
    out, built, _ = cached(capsys, ref)
    assert built and params(out) == expect(12)
    model.write_text(HELPER_MODEL.format(tag="a").replace("8)", "16)", 1))
    out, built, _ = cached(capsys, ref)
    assert built and params(out) == torch.nn.Linear(12, 16).weight.numel() + 16
    out, built, _ = cached(capsys, ref, "--model-option", "batch=2")
    assert built and json.loads(out)["attrs"]["batch"] == 2
    assert not cached(capsys, ref)[1] and not cached(capsys, ref, "--model-option", "batch=2")[1]


def test_bypass_and_a_broken_entry(cached, capsys, tmp_path, monkeypatch):
    ref = f"{MLP}:build"
    cached(capsys, ref, "--no-cache")
    monkeypatch.setenv("PASE_NO_CACHE", "1")
    assert cached(capsys, ref)[1]
    assert not (tmp_path / "cache").exists()  # bypassed: nothing read, nothing written
    monkeypatch.delenv("PASE_NO_CACHE")
    good, _, _ = cached(capsys, ref)
    (entry,) = (tmp_path / "cache").glob("*.json")
    entry.write_text(entry.read_text()[:100])  # half-written
    out, built, _ = cached(capsys, ref)
    assert built and out == good
    assert not cached(capsys, ref)[1]  # rewritten whole


def test_warnings_are_given_again_on_a_hit(cached, capsys, tmp_path):
    model = tmp_path / "flip.py"
    model.write_text("import torch\nclass M(torch.nn.Module):\n"
                     "    def forward(self, x):\n        return torch.flip(x, [1])\n"
                     "def build():\n    return M(), (torch.randn(2, 4),)\n")
    argv = (f"{model}:build", "--unsupported", "elementwise")
    out, built, err = cached(capsys, *argv)
    again, built_again, err_again = cached(capsys, *argv)
    assert built and not built_again and out == again
    assert "approximated aten.flip" in err and err_again == err


def test_the_python_api_does_not_cache(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    import pase

    monkeypatch.setenv("PASE_CACHE_DIR", str(tmp_path / "cache"))
    assert pase.load_graph(f"{MLP}:build").ops
    assert not (tmp_path / "cache").exists()


def test_the_command_spares_the_shutdown_after_torch(tmp_path):
    """`pase ...` (main() reading sys.argv) freezes the collector once torch is loaded, so the
    interpreter's exit does not traverse torch's objects; main(argv) in a test does not."""
    pytest.importorskip("torch")
    code = ("import gc, io, contextlib, sys\nfrom pase.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['models'])\n    frozen = gc.get_freeze_count()\n"
            f"    sys.argv = ['pase', 'import', {str(MLP) + ':build'!r}, '--no-cache']\n"
            "    main()\nprint(frozen, gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": _pythonpath()}).stdout
    before, after = map(int, out.split())
    assert before == 0 and after > 0


def test_a_cache_that_cannot_be_written_is_no_error(cached, capsys, tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("PASE_CACHE_DIR", str(blocked))
    out, built, err = cached(capsys, f"{MLP}:build")
    again, built_again, _ = cached(capsys, f"{MLP}:build")
    assert built and built_again and out == again and json.loads(out)["ops"] and err == ""
