"""The README's Python examples run as shown."""
import re
from pathlib import Path

from pase.registry import SOLVERS
from pase.testing import check_solver

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_quick_start_python_block():
    block = next(b for b in BLOCKS if "pase.solve(" in b)
    exec(compile(block, "README quick start", "exec"), {})


def test_adding_a_solver_block_registers_a_conforming_solver():
    block = next(b for b in BLOCKS if "SOLVERS.register" in b)
    namespace: dict = {}
    try:
        exec(compile(block, "README solver", "exec"), namespace)
        check_solver("cheapest-alone")
        check_solver(namespace["solve"])
    finally:
        SOLVERS.remove("cheapest-alone")
