"""The import graph of pase: no cycles, and no layer importing the one above it.

Every runtime import of every module counts: top-level and function-level (lazy)
ones alike, relative ones resolved; only ``if TYPE_CHECKING:`` blocks are left
out (they never run). The top-level plug-in folders are read as the packages
they install as (``solvers/`` is ``pase.solvers``). The graph is read from the
source with ``ast``, so a cycle is caught before it bites at import time.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Folder -> the package it installs as.
FOLDERS = {"pase": "pase", "solvers": "pase.solvers", "cost_models": "pase.cost_models",
           "graphs": "pase.graphs", "papers": "pase.papers"}


def modules() -> dict[str, list[Path]]:
    """Module name -> its source files (a name may come from two folders while one moves)."""
    out: dict[str, list[Path]] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out.setdefault(".".join([package, *parts]), []).append(path)
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) blocks."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return skip


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name module ``name`` imports at run time, relative imports resolved;
    ``from a import b`` gives both ``a`` and ``a.b`` (b may be a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip = _type_checking_nodes(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


@functools.lru_cache(maxsize=1)  # parsed once for all the tests here
def import_graph() -> nx.DiGraph:
    """Module -> the modules its imports run: each known module a dotted name reaches,
    and the packages above it (their ``__init__`` runs first). A module's own
    ancestors are left out: Python has started them before the module itself."""
    known = modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for name, paths in known.items():
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        for path in paths:
            for target in imported_names(name, path):
                parts = target.split(".")
                for i in range(1, len(parts) + 1):
                    reached = ".".join(parts[:i])
                    if reached in known and reached != name and reached not in ancestors:
                        graph.add_edge(name, reached)
    return graph


def test_the_graph_sees_lazy_and_relative_imports():
    graph = import_graph()
    assert graph.has_edge("pase.cli", "pase.cli.solving")  # a function-level import
    assert graph.has_edge("pase.solvers", "pase.solvers.greedy")  # ``from pase.solvers import``
    assert len(graph) > 100


def test_no_import_cycles():
    graph = import_graph()
    lines = []
    for component in sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1):
        loop = nx.find_cycle(graph.subgraph(component))
        lines.append(f"{' <-> '.join(component)}\n  e.g. "
                     + " -> ".join([u for u, _ in loop] + [loop[0][0]]))
    if lines:
        pytest.fail("import cycles:\n" + "\n".join(lines), pytrace=False)


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


# (importers, what they must not import, why)
RULES = [
    ("pase", "pase.cli", "the command line sits on top: only pase.cli (and `python -m pase`) "
                         "may import it"),
    ("pase.solvers", "pase.cost_models", "solvers see Problems, never the cost model behind one"),
    ("pase.solvers", "pase.graphs", "solvers see Problems, never the graph behind one"),
    ("pase.cost_models", "pase.solvers", "a cost model builds Problems; it never solves one"),
    ("pase.pipeline", "pase.cost_models", "the pipeline reaches its cost model through the "
                                          "registry (pase.registry.COST_MODELS)"),
    ("pase.perf", "pase.cost_models", "the performance model sits below the cost models, "
                                      "which price compute with its kernels"),
    ("pase.perf", "pase.sim", "the performance model sits below the simulator"),
    ("pase.perf", "pase.api", "the performance model sits below the API that loads models for it"),
]
# Modules above the command line: the entry point that runs it.
ABOVE_CLI = {"pase.__main__"}


@pytest.mark.parametrize("importers, banned, why", RULES, ids=[f"{a}-{b}" for a, b, _ in RULES])
def test_no_layer_imports_the_one_above(importers, banned, why):
    graph = import_graph()
    wrong = sorted(f"{u} imports {v}" for u, v in graph.edges
                   if _under(u, importers) and not _under(u, banned) and u not in ABOVE_CLI
                   and _under(v, banned))
    if wrong:
        pytest.fail(f"{why}:\n" + "\n".join(wrong), pytrace=False)
