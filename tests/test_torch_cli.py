"""``pase import`` and FILE.py:FUNCTION as a MODEL: results, and one-line errors (exit 2)."""
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from pase.cli import main  # noqa: E402

MODELS = Path(__file__).parent / "torch_models"
GPT2 = f"{MODELS / 'gpt2.py'}:build"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_import_writes_a_graph_that_solves_like_the_reference(capsys, tmp_path):
    target = tmp_path / "gpt2.json"
    code, _, err = run(capsys, "import", GPT2, "-o", target, "--model-option", "layers=1")
    assert code == 0, err
    data = json.loads(target.read_text())
    assert data["schema"] == "pase.graph" and data["attrs"]["batch"] == 4
    costs = []
    for model in (target, GPT2):
        extra = [] if model == target else ["--model-option", "layers=1"]
        code, out, err = run(capsys, "solve", model, "-p", "8", "--cost-model", "alpha-beta",
                             "--format", "json", *extra)
        assert code == 0, err
        costs.append(json.loads(out)["total_cost"])
    assert costs[0] == costs[1]


def test_import_to_stdout_and_options(capsys):
    code, out, _ = run(capsys, "import", f"{MODELS / 'gpt2.py'}:block", "--no-fuse")
    assert code == 0
    names = [op["name"] for op in json.loads(out)["ops"]]
    assert any("gelu" in n for n in names)  # its own op without fusion


def write(tmp_path, text, name="model.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


BAD = {
    "raises": ("import torch\ndef build():\n    raise ValueError('width must be even')\n",
               "build() in", "raised ValueError: width must be even"),
    "not a pair": ("import torch\ndef build():\n    return torch.nn.Linear(2, 2)\n",
                   "returned a Linear", "must return (module, example_args)"),
    "args of the wrong type": ("import torch\ndef build():\n"
                               "    return torch.nn.Linear(2, 2), ('a', 'b')\n",
                               "example_args (str, str)", "tuple of tensors"),
    "not a module": ("import torch\ndef build():\n    return 3, (torch.randn(2, 2),)\n",
                     "returned a int as its module", "torch.nn.Module"),
    "export fails": ("import torch\nclass M(torch.nn.Module):\n"
                     "    def forward(self, x):\n        return x.view(3, -1)\n"
                     "def build():\n    return M(), (torch.randn(2, 2),)\n",
                     "torch.export failed", "strict"),
    "file does not import": ("import torch\nraise RuntimeError('boom')\n",
                             "could not be imported", "RuntimeError: boom"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_references_are_one_line_and_exit_2(capsys, tmp_path, case):
    text, *expected = BAD[case]
    path = write(tmp_path, text)
    code, out, err = run(capsys, "import", f"{path}:build")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("pase: error: ")
    for piece in expected:
        assert piece in err


def test_missing_file_and_function(capsys, tmp_path):
    code, _, err = run(capsys, "solve", f"{tmp_path / 'nope.py'}:build", "-p", "8")
    assert code == 2 and err.count("\n") == 1 and "no such file" in err
    path = write(tmp_path, "import torch\ndef build_a():\n    pass\ndef other():\n    pass\n")
    code, _, err = run(capsys, "inspect", f"{path}:build", "-p", "8")
    assert code == 2 and err.count("\n") == 1
    assert "has no function 'build'; its functions: build_a, other" in err


def test_bad_model_option(capsys):
    code, _, err = run(capsys, "import", GPT2, "--model-option", "layers=two")
    assert code == 2 and "option layers" in err and err.count("\n") == 1
    code, _, err = run(capsys, "import", GPT2, "--model-option", "depth=2")
    assert code == 2 and "no option 'depth'" in err


def test_torch_not_installed(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails
    code, _, err = run(capsys, "import", GPT2)
    assert code == 2 and err.count("\n") == 1
    assert 'pip install "pase[torch]"' in err


def test_unsupported_op_lists_every_one(capsys, tmp_path):
    path = write(tmp_path, "import torch\nclass M(torch.nn.Module):\n"
                           "    def __init__(self):\n        super().__init__()\n"
                           "        self.fc = torch.nn.Linear(4, 4)\n"
                           "    def forward(self, x):\n"
                           "        return torch.flip(torch.fmod(self.fc(x), 1.0), [1])\n"
                           "def build():\n    return M(), (torch.randn(2, 4),)\n")
    code, _, err = run(capsys, "import", f"{path}:build")
    assert code == 2 and err.count("\n") == 1
    assert "aten.fmod at model.py:7" in err and "aten.flip at model.py:7" in err
    code, out, err = run(capsys, "import", f"{path}:build", "--unsupported", "elementwise")
    assert code == 0 and json.loads(out)["ops"]
    assert err.startswith("pase: warning: pase.from_torch approximated aten.fmod")
    assert err.count("\n") == 1


def test_readme_flow(capsys, tmp_path, monkeypatch):
    """The README's import -> solve -> export commands, and its Python lines."""
    monkeypatch.chdir(tmp_path)
    ref = f"{MODELS / 'gpt2.py'}:small"
    assert run(capsys, "import", ref, "-o", "gpt2_torch.json")[0] == 0
    code, _, err = run(capsys, "solve", ref, "-p", "8", "--cost-model", "alpha-beta", "--cluster",
                       "h100-sxm", "--format", "json", "--output", "gpt2_p8.json")
    assert code == 0, err
    code, out, err = run(capsys, "export", ref, "-p", "8", "--strategy", "gpt2_p8.json",
                         "--engine", "torch")
    assert code == 0, err
    assert out.startswith("DeviceMesh") and "parameter h.0.attn.c_attn.weight" in out

    import torch

    import pase
    from pase.export.dtensor import to_dtensor
    from pase.frontends import import_torch

    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024))
    imported = import_torch(model, (torch.randn(256, 1024),))
    strategy = pase.solve(imported.graph, devices=8, cost_model="alpha-beta")
    table = to_dtensor(model, imported, strategy).table()
    assert "parameter 0.weight" in table and "expressed exactly" in table


def test_python_api_takes_the_reference():
    import pase

    graph = pase.load_graph(GPT2, layers=1, heads=2)
    assert graph.name == "gpt2.build" and len(graph.ops) == 17  # 2 + 12 per layer + 3
    strategy = pase.solve(GPT2, devices=4, model_options={"layers": 1})
    assert strategy.graph_name == "gpt2.build"
    with pytest.raises(pase.PaseError, match="no option 'depth'"):
        pase.load_graph(GPT2, depth=3)
