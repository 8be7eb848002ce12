"""The import cache owns only its entries, never hangs and never trusts an entry: a damaged,
foreign, oversized or non-regular entry is a miss (the graph is built again), never an error.

These drive :func:`pase.frontends.cache.cached_graph` with a stand-in build that returns a
built-in graph, so no torch model is built; each test is well under a second."""
import hashlib
import json
import os
import sys
import threading
import warnings
from pathlib import Path

import pytest

import pase
from pase.frontends import cache, cache_store

pytest.importorskip("torch")  # the cache keys on torch's version: without it nothing is cached

MLP, ALEXNET = pase.load_graph("mlp"), pase.load_graph("alexnet")
OLD = 1_000_000_000  # 2001: older than any entry a build writes


@pytest.fixture
def store(tmp_path, monkeypatch):
    """(cache folder, the reference file, a build function counting its calls)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("PASE_CACHE_DIR", str(folder))
    model = tmp_path / "model.py"
    model.write_text("def build():\n    pass\n")
    calls = []

    def build(graph=MLP):
        calls.append(1)
        return graph
    build.calls = calls
    return folder, model, build


def lookup(model, build, **options):
    """The graph the cache gives, and whether ``build`` ran for it."""
    before = len(build.calls)
    graph = cache.cached_graph(model, "build", options, build)
    return graph, len(build.calls) > before


def only_entry(folder):
    """The one file the cache wrote in ``folder`` (old and new names alike end in .json)."""
    (entry,) = [p for p in folder.iterdir() if p.suffix == ".json"]
    return entry


def rewrite(entry, change):
    """Apply ``change`` to the entry's JSON; re-seal it when entries carry a digest, so the
    test reaches the check behind the digest (a forger can recompute one too)."""
    data = json.loads(entry.read_text())
    change(data)
    if "digest" in data:
        data["digest"] = seal(data)
    entry.write_text(json.dumps(data))


def seal(data):
    """The documented digest: SHA-256 of the entry's other fields as canonical JSON."""
    rest = {k: v for k, v in data.items() if k != "digest"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()
                          ).hexdigest()


def written(store):
    """A good entry for the store's reference; returns its path."""
    folder, model, build = store
    graph, built = lookup(model, build)
    assert built and graph == MLP
    assert lookup(model, build) == (MLP, False)  # a hit
    return only_entry(folder)


def finishes(fn, rescue=None, seconds=60):
    """``fn()``'s result, run in a thread; fails (after ``rescue()``, which unblocks a
    hung FIFO open) when it has not returned within ``seconds`` (generous: a hang is
    forever, a pass is well under a second)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported in the test's thread
            out["error"] = exc
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    hung = t.is_alive()
    if hung and rescue is not None:
        rescue()
        t.join(seconds)
    assert not hung, "hung"
    if "error" in out:
        raise out["error"]
    return out["value"]


def unblock(fifo):
    """Open ``fifo`` for writing and close it: a reader blocked in open() sees end of file."""
    def rescue():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    return rescue


# -- the cache owns only its entries ---------------------------------------------------

def test_pruning_leaves_files_the_cache_did_not_write(store):
    folder, model, build = store
    folder.mkdir()
    theirs = [folder / f"notes-{i}.json" for i in range(300)]
    for p in theirs:
        p.write_text("{}")
        os.utime(p, (OLD, OLD))
    lookup(model, build)
    assert all(p.exists() for p in theirs)
    assert len(list(folder.iterdir())) == 301


def test_pruning_keeps_the_newest_entries_and_only_removes_regular_files(store, tmp_path):
    folder, model, build = store
    folder.mkdir()
    ours = [folder / f"pase-import-{i:032x}.json" for i in range(300)]
    for i, p in enumerate(ours):
        p.write_text("{}")
        os.utime(p, (OLD + i, OLD + i))
    outside = tmp_path / "precious.json"
    outside.write_text("{}")
    link = folder / f"pase-import-{'f' * 32}.json"
    link.symlink_to(outside)
    os.utime(link, (OLD - 1, OLD - 1), follow_symlinks=False)  # the oldest of all
    lookup(model, build)
    kept = [p for p in ours if p.exists()]
    assert kept == ours[300 - (cache.MAX_ENTRIES - 1):]  # the newest old ones, and the new
    assert len([p for p in folder.glob("pase-import-*.json") if not p.is_symlink()]) \
        == cache.MAX_ENTRIES
    assert link.is_symlink() and outside.read_text() == "{}"


# -- never hangs ----------------------------------------------------------------------

def test_a_build_that_read_a_fifo_returns_its_graph(store, tmp_path):
    """The build reads a FIFO (a writer feeds it once); the cache must not open it again to
    hash it, which would wait for a writer forever. Such a build is not cached."""
    folder, model, build = store
    fifo = tmp_path / "width.fifo"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "w") as f:
            f.write("4")
    writer = threading.Thread(target=feed, daemon=True)
    writer.start()

    def reading_build():
        assert fifo.read_text() == "4"
        return build()
    graph = finishes(lambda: cache.cached_graph(model, "build", {}, reading_build),
                     rescue=unblock(fifo))
    assert graph == MLP
    assert not folder.exists() or not list(folder.glob("*.json"))  # nothing to check it by


def test_an_entry_that_is_a_fifo_is_a_miss(store):
    folder, model, build = store
    entry = written(store)
    entry.unlink()
    os.mkfifo(entry)
    graph, built = finishes(lambda: lookup(model, build), rescue=unblock(entry))
    assert built and graph == MLP
    assert lookup(model, build) == (MLP, False)  # the FIFO replaced by a good entry


def test_an_entry_depending_on_a_fifo_is_a_miss(store, tmp_path):
    folder, model, build = store
    entry = written(store)
    fifo = tmp_path / "dep.fifo"
    os.mkfifo(fifo)
    rewrite(entry, lambda e: e["depends"]["files"].update({str(fifo): "0" * 64}))
    assert finishes(lambda: lookup(model, build), rescue=unblock(fifo)) == (MLP, True)


def test_an_entry_depending_on_dev_zero_is_a_miss(store):
    """Hashing /dev/zero never ends (no rescue: on a failure the thread spins on)."""
    folder, model, build = store
    entry = written(store)
    rewrite(entry, lambda e: e["depends"]["files"].update({"/dev/zero": "0" * 64}))
    assert finishes(lambda: lookup(model, build)) == (MLP, True)


# -- never trusts an entry --------------------------------------------------------------

def _warned(record):
    def change(e):
        e["warnings"] = [record]
    return change


GOOD_WARNING = ["builtins.UserWarning", "pase.from_torch approximated aten.flip", "m.py", 3]


@pytest.mark.parametrize("change", [
    _warned(GOOD_WARNING[:2]),                       # a record of 2 fields
    _warned(GOOD_WARNING[:3] + ["3"]),               # a string line number
    _warned(GOOD_WARNING[:2] + [None, 3]),           # a null file name
    _warned(["os.system", "echo", "m.py", 3]),       # not a warning class
    lambda e: e.update(graph={"ops": 5}),            # not a graph
    lambda e: e["depends"].update(files=[]),
    lambda e: e.pop("depends"),
    lambda e: e.update(key="0" * 32),                # another reference's key
], ids=["2-fields", "str-line", "null-file", "not-a-warning", "bad-graph", "bad-depends",
        "no-depends", "other-key"])
def test_a_damaged_entry_is_a_miss(store, change):
    folder, model, build = store
    entry = written(store)
    rewrite(entry, change)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph, built = lookup(model, build)
    assert built and graph == MLP and not caught


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,                   # nested past the recursion limit
    '{"format": ' * 50_000 + "1" + "}" * 50_000,
    "\xff\xfe not UTF-8",
    "",
], ids=["deep-list", "deep-object", "not-utf8", "empty"])
def test_an_unreadable_entry_is_a_miss(store, text):
    folder, model, build = store
    entry = written(store)
    entry.write_bytes(text.encode("latin-1"))
    assert lookup(model, build) == (MLP, True)
    assert lookup(model, build) == (MLP, False)


def test_an_entry_linked_to_dev_zero_or_to_itself_is_a_miss(store):
    folder, model, build = store
    entry = written(store)
    entry.unlink()
    entry.symlink_to("/dev/zero")  # read whole, it never ends (MemoryError)
    assert finishes(lambda: lookup(model, build)) == (MLP, True)
    entry.unlink()
    entry.symlink_to(entry.name)  # a cycle
    assert lookup(model, build) == (MLP, True)


def test_an_entry_holding_another_graph_is_a_miss(store):
    """Its key and dependencies are right but its graph is another model's (the file was
    swapped or edited): the digest of its content no longer matches."""
    folder, model, build = store
    entry = written(store)
    data = json.loads(entry.read_text())
    data["graph"] = ALEXNET.to_dict()
    entry.write_text(json.dumps(data))
    assert lookup(model, build) == (MLP, True)


def test_an_entry_past_the_size_cap_is_a_miss(store, monkeypatch):
    folder, model, build = store
    entry = written(store)
    size = entry.stat().st_size
    monkeypatch.setattr(cache_store, "MAX_ENTRY_BYTES", size)
    assert lookup(model, build) == (MLP, False)  # at the cap: read
    entry.write_bytes(entry.read_bytes() + b" ")  # still the same JSON, one byte over
    assert lookup(model, build) == (MLP, True)


def test_a_graph_past_the_size_cap_is_not_written(store, monkeypatch):
    folder, model, build = store
    monkeypatch.setattr(cache_store, "MAX_ENTRY_BYTES", len(MLP.to_json()) // 2)
    assert lookup(model, build) == (MLP, True)
    assert not folder.exists() or not list(folder.glob("*.json"))


def test_a_warning_category_is_never_imported_from_an_entry(store):
    """``pase.__main__`` would run the whole command line while the entry is read."""
    folder, model, build = store
    entry = written(store)
    sys.modules.pop("pase.__main__", None)
    rewrite(entry, _warned(["pase.__main__.UserWarning", "hi", "m.py", 3]))
    assert lookup(model, build) == (MLP, True)
    assert "pase.__main__" not in sys.modules


def test_known_warnings_are_given_again_on_a_hit(store):
    folder, model, build = store
    entry = written(store)
    rewrite(entry, lambda e: e.update(warnings=[GOOD_WARNING,
                                                ["builtins.DeprecationWarning", "old", "m.py", 4]]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert lookup(model, build) == (MLP, False)
    assert [(w.category, str(w.message), w.lineno) for w in caught] == [
        (UserWarning, GOOD_WARNING[1], 3), (DeprecationWarning, "old", 4)]


def test_a_build_warning_of_a_foreign_class_is_not_cached(store):
    folder, model, build = store

    class Foreign(UserWarning):
        pass

    def warning_build():
        warnings.warn("from elsewhere", Foreign, stacklevel=1)
        return build()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        cache.cached_graph(model, "build", {}, warning_build)
    assert not folder.exists() or not list(folder.glob("*.json"))


def test_an_entry_is_written_whole(store):
    """Atomic writes: no temporary file stays, and the entry is one JSON object whose digest
    matches its content."""
    folder, model, build = store
    entry = written(store)
    assert [p.name for p in folder.iterdir()] == [entry.name]
    assert entry.name.startswith("pase-import-")
    data = json.loads(entry.read_text())
    assert data["digest"] == seal(data) and Path(entry).stat().st_size > 0
