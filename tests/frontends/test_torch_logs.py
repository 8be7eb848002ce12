"""`pase import` of a module whose example inputs do not fit it: one line on stderr, exit 2,
and none of torch's own log records (a full traceback) unless --debug."""
import logging

import pytest

pytest.importorskip("torch")

BAD = "import torch\n\ndef build():\n    return torch.nn.Linear(4, 8), (torch.randn(2, 5),)\n"


@pytest.mark.parametrize("debug", [False, True])
def test_a_failing_import_is_one_line(tmp_path, capsys, debug):
    """torch's handlers write to whatever ``sys.stderr`` is when they emit, so capsys sees
    their records as a user's terminal would."""
    from pase.cli import main

    model = tmp_path / "bad.py"
    model.write_text(BAD)
    disabled = logging.root.manager.disable
    code = main(["import", f"{model}:build", "--no-cache"] + ["--debug"] * debug)
    lines = capsys.readouterr().err.splitlines()
    assert code == 2
    assert logging.root.manager.disable == disabled  # logging as it was
    assert lines[-1].startswith("pase: error: torch.export failed: RuntimeError: a and b must")
    if debug:  # torch's records (a traceback under fake_tensor's name) shown
        assert any("fake_tensor" in line for line in lines)
    else:
        assert len(lines) == 1
