"""Outputs never destroy a file: written whole through pase.files, only over a regular file.

Reproductions (issue "Reliability round 4"): ``pase view -o TARGET`` renamed its page
over a device, a FIFO or a symbolic link; ``pase solve --output keep.json`` under
``ulimit -f`` truncated the old file to the limit and left invalid JSON.
"""
from __future__ import annotations

import errno
import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import pase
from pase.cli import main
from pase.errors import OptionError
from pase.files import check_output, write_text_atomic

OLD = '{"old": "content the failed write must leave alone"}\n' * 80  # 4 KB


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def null_device(tmp_path):
    """A character device like /dev/null. As root, a fresh node (1, 3) in ``tmp_path``: the
    old code replaced the device it was given, and the machine's /dev/null is shared."""
    if os.geteuid() != 0:
        return Path("/dev/null")  # only root could replace it; others get it refused
    path = tmp_path / "null"
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("atomic") / "mlp.json"
    pase.solve("mlp", 8, solver="dp").to_json(path)
    return path


def _listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


# -- special files are refused, untouched ---------------------------------------------

@pytest.mark.parametrize("kind", ["device", "fifo", "folder"])
def test_view_refuses_a_device_a_fifo_and_a_folder(capsys, tmp_path, mlp_file, null_device,
                                                   fifo, kind):
    target = {"device": null_device, "fifo": fifo, "folder": tmp_path}[kind]
    before = os.lstat(target)
    code, out, err = run(capsys, "view", "mlp", "-p", "8", "--strategy", mlp_file,
                         "--no-timeline", "-o", target)
    said = {"device": "is a character device", "fifo": "is a FIFO", "folder": "is a folder"}[kind]
    assert code == 2 and out == "" and err.startswith(f"pase: error: -o {target} {said}"), err
    assert len(err.splitlines()) == 1
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode, after.st_rdev) == (before.st_ino, before.st_mode,
                                                            before.st_rdev)


def test_view_refuses_the_real_dev_null_before_any_work(capsys, mlp_file):
    # Refused by the check made before the work, so no write is ever tried.
    before = os.stat("/dev/null")
    code, _, err = run(capsys, "view", "mlp", "-p", "8", "--strategy", "/no/such.json",
                       "-o", "/dev/null")
    assert code == 2 and err == ("pase: error: -o /dev/null is a character device; pase writes "
                                 "only regular files: give a file name (or - for stdout)\n")
    assert os.stat("/dev/null").st_ino == before.st_ino and stat.S_ISCHR(before.st_mode)


def test_solve_output_refuses_a_fifo(capsys, fifo):
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the old plain write, unblocked
    try:
        code, _, err = run(capsys, "solve", "chain", "-p", "4", "--output", fifo)
    finally:
        os.close(reader)
    assert code == 2 and f"--output {fifo} is a FIFO" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("save", ["strategy", "graph", "cluster", "pipeline"])
def test_the_save_methods_refuse_a_device(null_device, save):
    from pase.api import load_graph
    from pase.cluster import get_cluster
    from pase.pipeline import solve_pipeline

    objects = {"strategy": lambda: pase.solve("chain", 2),
               "graph": lambda: load_graph("chain"),
               "cluster": lambda: get_cluster("dgx-a100"),
               "pipeline": lambda: solve_pipeline("chain", 4, batch=8, cluster="dgx-a100")}
    before = os.lstat(null_device)
    with pytest.raises(OptionError, match=f"{null_device} is a character device"):
        objects[save]().to_json(null_device)
    assert os.lstat(null_device).st_ino == before.st_ino


def test_view_writes_through_a_link(capsys, tmp_path, mlp_file):
    target = tmp_path / "real.html"
    target.write_text(OLD)
    link = tmp_path / "link.html"
    link.symlink_to(target.name)
    code, _, err = run(capsys, "view", "mlp", "-p", "8", "--strategy", mlp_file,
                       "--no-timeline", "-o", link)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == target.name  # the link stays a link
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert _listing(tmp_path) == ["link.html", "real.html"]


def test_a_link_to_a_device_is_refused(capsys, tmp_path, mlp_file, null_device):
    link = tmp_path / "page.html"
    link.symlink_to(null_device)
    code, _, err = run(capsys, "view", "mlp", "-p", "8", "--strategy", mlp_file, "-o", link)
    assert code == 2 and f"-o {link} (a link to {null_device}) is a character device" in err
    assert link.is_symlink() and stat.S_ISCHR(os.stat(link).st_mode)


def test_a_dangling_link_creates_its_target(tmp_path):
    link = tmp_path / "link.txt"
    link.symlink_to("made.txt")
    write_text_atomic(link, "new\n", what="test file")
    assert link.is_symlink() and (tmp_path / "made.txt").read_text() == "new\n"


# -- a failed write keeps the old file -------------------------------------------------

def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))


def test_solve_under_a_file_size_limit_keeps_the_old_file(tmp_path):
    keep = tmp_path / "keep.json"
    keep.write_text(OLD)
    proc = subprocess.run([sys.executable, "-m", "pase", "solve", "mlp", "-p", "8",
                           "--model-option", "layers=8", "--output", "keep.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          preexec_fn=_limit_file_size)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("pase: error: cannot write --output keep.json: File too large; "
                           "the old keep.json is unchanged\n")
    assert keep.read_text() == OLD
    assert _listing(tmp_path) == ["keep.json"]  # no temporary file left behind


def test_a_full_disk_keeps_the_old_file_and_its_mode(tmp_path, monkeypatch):
    keep = tmp_path / "keep.txt"
    keep.write_text(OLD)
    keep.chmod(0o640)

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OptionError) as caught:
        write_text_atomic(keep, "new", what="--output")
    assert str(caught.value) == (f"cannot write --output {keep}: No space left on device; "
                                 f"the old {keep} is unchanged")
    assert keep.read_text() == OLD and stat.S_IMODE(keep.stat().st_mode) == 0o640
    assert _listing(tmp_path) == ["keep.txt"]


def test_an_interrupted_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(tmp_path / "new.txt", "new", what="test file")
    assert _listing(tmp_path) == []


# -- what a replaced or new file looks like ---------------------------------------------

def test_a_replaced_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "out.json"
    path.write_text(OLD)
    path.chmod(0o600)
    write_text_atomic(path, "new\n", what="test file")
    assert path.read_text() == "new\n" and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "new.json", "x", what="test file")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640


def test_check_output_says_where_the_bytes_go(tmp_path):
    link = tmp_path / "link"
    link.symlink_to("real")
    assert check_output(link, "x") == tmp_path.resolve() / "real"
    assert check_output("-", "x", stdout=True) is None
    assert check_output(tmp_path / "new", "x") == tmp_path.resolve() / "new"


# -- `-` is stdout where the flag says so -------------------------------------------------

def test_view_dash_writes_the_page_to_stdout(capsys, tmp_path, mlp_file, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "view", "mlp", "-p", "8", "--strategy", mlp_file,
                         "--no-timeline", "-o", "-")
    assert code == 0, err
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    assert "wrote" not in out + err and _listing(tmp_path) == []


def test_export_dash_writes_the_program_to_stdout(capsys, tmp_path, mlp_file, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "export", "mlp", "-p", "8", "--strategy", mlp_file,
                         "--engine", "jax", "-o", "-")
    assert code == 0, err
    compile(out, "exported.py", "exec")  # the whole program, as Python
    assert "wrote" not in out + err and _listing(tmp_path) == []


def test_solve_output_dash_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "solve", "chain", "-p", "4", "--output", "-")
    assert code == 2 and err == ("pase: error: --output -: this output cannot go to stdout; "
                                 "give a file name (./- for a file named -)\n")
    assert _listing(tmp_path) == []
