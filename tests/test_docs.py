"""The repository stands alone, and its guides' examples run as shown.

- No tracked file points at the specification the project was first built
  from, which lives outside the repository, by its path or by citing its
  numbered sections (docs/cost-model.md states its facts).
- Every relative link in a tracked Markdown file reaches a file or folder of the
  repository, and a ``#anchor`` into a Markdown file reaches one of its headings.
- Every ```python block of docs/writing-a-solver.md and docs/writing-a-cost-model.md
  runs: a block whose first line is ``# NAME.py`` is saved as that file, the
  other blocks run in order as one script next to those files, and a saved
  ``test_*.py`` file then runs under pytest. Each guide runs in a fresh
  interpreter, so the plug-ins it registers never leak into the other tests.
- docs/cost-model.md lists exactly the reference figures the tests check, and
  its formulas, re-implemented here from the page alone, give the paper model's
  costs for every configuration of every op of the five paper graphs.
"""
from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ["docs/writing-a-solver.md", "docs/writing-a-cost-model.md"]

# Spelled in pieces so that this file does not match itself. The last one cites the
# outside specification by a numbered section; docs/cost-model.md replaces it.
OUTSIDE = ["shared" + "/specs", "../" + "shared", "pase-paper-" + "cost-model",
           "spec" + " section"]


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no list of tracked files")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [name for name in out.stdout.decode().split("\0") if name]


def outside_references(root: Path, names: list[str]) -> list[str]:
    """``file:line: needle`` for every mention of the outside specification."""
    found = []
    for name in names:
        path = root / name
        if not path.is_file():
            continue  # deleted in the working tree, not yet committed
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary (images)
        text = data.decode("utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            found += [f"{name}:{lineno}: {needle}" for needle in OUTSIDE
                      if needle in line.lower()]
    return found


def test_no_file_points_outside_the_repository():
    offenders = outside_references(ROOT, tracked_files())
    assert not offenders, "references outside the repository:\n" + "\n".join(offenders)


def test_outside_references_are_found(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n# see " + OUTSIDE[0] + "/x.md\n")
    (tmp_path / "b.md").write_text("fine, a specification section\nas the " + OUTSIDE[3].title() + " 3 says\n")
    (tmp_path / "c.png").write_bytes(b"\x89PNG\0" + OUTSIDE[2].encode())
    assert outside_references(tmp_path, ["a.py", "b.md", "c.png", "gone.md"]) == [
        f"a.py:2: {OUTSIDE[0]}", f"b.md:2: {OUTSIDE[3]}"]


# -- links ----------------------------------------------------------------------------

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(text: str) -> list[str]:
    """Targets of the inline links and images of a Markdown text, outside code."""
    text = INLINE_CODE.sub("", FENCE.sub("", text))
    return LINK.findall(text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_links_helpers():
    text = "[a](x.md) ![b](img/c.png) `[d](nope.md)` [e](https://e.org) [f](#g)\n```\n[h](no.md)\n```\n"
    assert links(text) == ["x.md", "img/c.png", "https://e.org", "#g"]
    assert slug("AlexNet's strategy at p = 32 (the paper's Table II)") == \
        "alexnets-strategy-at-p--32-the-papers-table-ii"
    assert slug("`pase.costing.CostModel`: the interface") == "pasecostingcostmodel-the-interface"


def broken_links(root: Path, names: list[str]) -> list[str]:
    """Relative links of the Markdown files ``names`` (under ``root``) that reach nothing."""
    broken = []
    for name in names:
        source = root / name
        if not name.endswith(".md") or not source.is_file():
            continue
        for target in links(source.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):
                continue  # https:, mailto: ...
            file_part, _, anchor = target.partition("#")
            path = (source.parent / file_part).resolve() if file_part else source
            if not path.is_relative_to(root) or not path.exists():
                broken.append(f"{name}: {target} (no such file in the repository)")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{name}: {target} (no heading with that anchor)")
    return broken


def test_every_relative_link_resolves():
    broken = broken_links(ROOT, tracked_files())
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_broken_links_are_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# Title\n\n## Second part\n\n[ok](../b.md) [ok](#second-part) [ok](b.md#title)\n"
        "[missing](../nope.md) [bad anchor](#third) [outside](../../x.md) [web](https://x.org)\n")
    (tmp_path / "docs" / "b.md").write_text("# Title\n")
    (tmp_path / "b.md").write_text("# B\n")
    found = broken_links(tmp_path.resolve(), ["docs/a.md"])
    assert found == ["docs/a.md: ../nope.md (no such file in the repository)",
                     "docs/a.md: #third (no heading with that anchor)",
                     "docs/a.md: ../../x.md (no such file in the repository)"]


# -- the guides' examples ---------------------------------------------------------------

def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), flags=re.S | re.M)


def run_guide(doc: Path, folder: Path) -> None:
    script, tests = [], []
    for block in python_blocks(doc):
        first = block.splitlines()[0].strip()
        saved = re.fullmatch(r"#\s*([\w-]+\.py)", first)
        if saved:
            (folder / saved.group(1)).write_text(block)
            if saved.group(1).startswith("test_"):
                tests.append(saved.group(1))
        else:
            script.append(block)
    (folder / "guide.py").write_text("\n\n".join(script))
    commands = [[sys.executable, "guide.py"]]
    commands += [[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", t] for t in tests]
    for command in commands:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (f"{doc.name}: {' '.join(command[1:])} failed\n"
                                      f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")


@pytest.mark.parametrize("doc", GUIDES)
def test_guide_has_examples(doc):
    blocks = python_blocks(ROOT / doc)
    assert len(blocks) >= 2
    assert any(re.match(r"#\s*[\w-]+\.py\n", b) for b in blocks), "no block saved as a module"


@pytest.mark.slow  # seconds: fresh interpreters, and the solver guide runs the conformance battery
@pytest.mark.parametrize("doc", GUIDES)
def test_guide_examples_run(doc, tmp_path):
    run_guide(ROOT / doc, tmp_path)


def test_a_broken_example_fails(tmp_path):
    """The runner really reports a failing block (so the tests above can fail)."""
    doc = tmp_path / "guide.md"
    doc.write_text("```python\n# helper.py\nVALUE = 1\n```\n\n```python\nimport helper\n"
                   "assert helper.VALUE == 2, 'wrong value'\n```\n")
    with pytest.raises(AssertionError, match="wrong value"):
        run_guide(doc, tmp_path)


# -- docs/cost-model.md states the figures the tests check -----------------------------

def section(text: str, heading: str) -> str:
    """The body of the ``###`` section titled ``heading``."""
    start = text.index(f"### {heading}")
    end = text.find("\n#", start + 1)
    return text[start:end if end >= 0 else None]


def test_cost_model_doc_lists_the_reference_figures_the_tests_check():
    import test_reference_figures as figures

    from solvers.dp import test_reference as dp_ref

    doc = (ROOT / "docs" / "cost-model.md").read_text(encoding="utf-8")
    titles = {"AlexNet": "alexnet", "ResNet-101": "resnet101", "Inception-v3": "inception_v3",
              "RNNLM": "rnnlm", "Transformer": "transformer"}

    structure = {}
    for title, p8, p64 in re.findall(r"^\| (\S+) \| ([\d /]+) \| ([\d /]+) \|$",
                                     section(doc, "Structure"), flags=re.M):
        for p, cell in ((8, p8), (64, p64)):
            structure[(titles[title], p)] = tuple(int(x) for x in cell.split("/"))
    assert structure == figures.STRUCTURE

    def last_numbers(heading: str) -> list[int]:
        rows = [r for r in section(doc, heading).splitlines()
                if r.startswith("|") and not re.fullmatch(r"[|\- ]+", r)][1:]  # no header
        return sorted(int(r.rstrip(" |").rsplit("|", 1)[1]) for r in rows)

    assert last_numbers("Layer costs of single ops (p = 8)") == sorted(
        s[-1] for s in figures.LAYER_SPOTS)
    assert last_numbers("Edge costs (p = 8)") == sorted(s[-1] for s in figures.EDGE_SPOTS)
    assert last_numbers("Optimal total costs") == sorted(int(o) for *_, o in dp_ref.REFERENCE_OPTIMA)
    for spot in figures.LAYER_SPOTS:  # each spot's domain and config appear on its row
        name, n, kind, domain, config, cost = spot
        row = next(r for r in section(doc, "Layer costs of single ops (p = 8)").splitlines()
                   if r.endswith(f"| {cost} |"))
        assert f"op {n} |" in row and str(config) in row, row


# -- docs/cost-model.md's formulas, re-implemented from the page ------------------------

R = 10 * 1000 / (16 / 8)  # FLOP per word on the default machine


def allreduce(words: float, q: float) -> float:
    return R * (words / q) * 2 * (q - 1)


def gemm(m, n, k, cm, cn, ck, pw=0, batch=1.0) -> float:
    mt, nt, kt = m / cm, n / cn, k / ck
    compute = 3 * mt * nt * kt + 3 * pw * mt * nt
    return batch * (compute + allreduce(mt * nt, ck) + allreduce(mt * kt, cn)
                    + allreduce(nt * kt, cm))


def moved(shape, src, dst) -> float:
    """Elements a device receives: the page's edge rule without its factor 2."""
    a = [t / f for t, f in zip(shape, src)]
    b = [t / f for t, f in zip(shape, dst)]
    overlap = 0 if math.prod(dst) > math.prod(src) else math.prod(map(min, a, b))
    return max(math.prod(b) - overlap, 0)


def doc_layer_cost(op, cfg: list[int]) -> float:
    c, s = dict(zip(op.dim_names, cfg)), dict(zip(op.dim_names, op.shape))
    tile = [d / f for d, f in zip(op.shape, cfg)]
    elems, pw, kind = math.prod(tile), op.attrs.get("pw", 0), op.kind

    def prod(names, values):
        return math.prod(values[n] for n in names)

    if kind == "Conv":
        return gemm(prod("bhw", s), s["n"], prod("crs", s), prod("bhw", c), c["n"],
                    prod("crs", c), pw)
    if kind == "FC":
        lead = op.dim_names[:-2]
        return gemm(prod(lead, s), s["n"], s["k"], prod(lead, c), c["n"], c["k"], pw)
    if kind in ("Einsum", "Embedding"):
        (a, b), out = op.attrs["eq"].split("->")[0].split(","), op.attrs["eq"].split("->")[1]
        bt = [x for x in op.dim_names if x in a and x in b and x in out]
        ms = [x for x in op.dim_names if x in a and x not in b]
        ns = [x for x in op.dim_names if x in b and x not in a]
        ks = [x for x in op.dim_names if x in a and x in b and x not in out]
        return gemm(prod(ms, s), prod(ns, s), prod(ks, s), prod(ms, c), prod(ns, c),
                    prod(ks, c), pw, prod(bt, s) / prod(bt, c))
    if kind == "LSTM":
        e = s["n"]
        relayout = moved((s["b"], e), (c["b"], c["n"]), (c["b"], c["k"]))
        return (gemm(s["s"] * s["b"], 4 * e, 2 * e, c["s"] * c["b"], c["n"], c["k"], 3,
                     s["l"] / c["l"]) + s["l"] * s["s"] * R * relayout)
    if kind == "Pooling":
        _, _, h, w = op.inputs[0].shape
        kh, kw = op.attrs["window"]
        ht, wt = h / c["h"], w / c["w"]
        grown = (ht + (kh if c["h"] > 1 else 0)) * (wt + (kw if c["w"] > 1 else 0))
        return elems + R * (grown - ht * wt) * s["b"] / c["b"] * s["c"] / c["c"]
    if kind == "Elementwise":
        return (1 + pw) * elems
    if kind in ("Norm", "BatchNorm"):
        ax = 0 if kind == "BatchNorm" else op.attrs["axis"]
        others = math.prod(f for i, f in enumerate(cfg) if i != ax)
        return 16 * elems + 4 * allreduce(elems / tile[ax], cfg[ax]) + 4 * allreduce(tile[ax], others)
    if kind == "ReduceMean":
        return allreduce(elems, math.prod(cfg[i] for i in op.attrs["axes"]))
    if kind == "Softmax":
        ax = op.attrs["axis"]
        e, q, full = elems / tile[ax], cfg[ax], op.shape[ax]
        return 4 * elems + elems * full + 2 * allreduce(e, q) + allreduce(e * full, q)
    if kind == "SoftmaxCrossEntropy":
        rows = math.prod(tile[:-1])
        return 4 * elems + 2 * rows + (R * 2 * rows if cfg[-1] > 1 else 0)
    assert kind in ("Concat", "Stack", "Unstack", "Ravel", "Unravel"), kind
    return 0.0


def tensor_split(op, port, cfg) -> tuple[int, ...]:
    c = dict(zip(op.dim_names, cfg))
    return tuple(math.prod(c[n] for n in axis) for axis in port.dims)


@pytest.mark.parametrize("model", ["alexnet", "resnet101", "inception_v3", "rnnlm", "transformer"])
def test_cost_model_doc_formulas_match_the_paper_model(model):
    """Every config of every op at p = 8, and sampled config pairs of every costed edge."""
    import random

    import pase
    from pase.cost_models.paper import PaperCostModel
    from pase.space import ConfigSpace

    graph = pase.api.load_graph(model)
    space, paper = ConfigSpace(graph, 8), PaperCostModel()
    for i, op in enumerate(graph.ops):
        got = paper.layer_costs(op, space.configs[i])
        want = [doc_layer_cost(op, [int(f) for f in row]) for row in space.configs[i]]
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=op.name)

    last = {}  # only the last connection between two ops is costed
    for c in graph.connections:
        last[(c.src, c.dst)] = c
    problem = paper.problem(graph, space)
    assert len(problem.edges) == len(last)
    rng = random.Random(0)
    choice = [rng.randrange(len(k)) for k in space.configs]
    total = sum(doc_layer_cost(op, [int(f) for f in space.configs[i][choice[i]]])
                for i, op in enumerate(graph.ops))
    for (a, b), c in last.items():
        pu, pv = graph.op(a), graph.op(b)
        u, v = graph.index(a), graph.index(b)
        out, inp = pu.outputs[c.src_output], pv.inputs[c.dst_input]
        matrix = problem.edge_matrix(u, v)
        src = [tensor_split(pu, out, row) for row in space.configs[u]]
        dst = [tensor_split(pv, inp, row) for row in space.configs[v]]
        for _ in range(5):
            x, y = rng.randrange(matrix.shape[0]), rng.randrange(matrix.shape[1])
            want = R * 2 * moved(out.shape, src[x], dst[y])
            assert matrix[x, y] == pytest.approx(want, rel=1e-12, abs=1e-6), (a, b, x, y)
        total += R * 2 * moved(out.shape, src[choice[u]], dst[choice[v]])
    assert problem.evaluate(choice) == pytest.approx(total, rel=1e-12)
