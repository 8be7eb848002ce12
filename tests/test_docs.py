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
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

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
    import test_dp_reference as dp_ref
    import test_reference_figures as figures

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
