"""The line every benchmark prints first: the commit it ran on, the machine, Python.

A results file is dated by the commit its figures were measured on, not by prose
history ("was 27.6 s"): rerun the script and the line says which code the figures
belong to. A working tree with uncommitted changes says so (``+ local changes``).
"""
from __future__ import annotations

import os
import platform
import subprocess
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """``abc1234`` (``abc1234 + local changes`` in a dirty tree), or ``unknown`` outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()
    try:
        head = git("rev-parse", "--short=7", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + (" + local changes" if dirty else "")


def stamp() -> str:
    """One line: commit, date, machine, cores, Python."""
    machine = platform.processor() or platform.machine()
    return (f"measured at commit {commit()} on {date.today().isoformat()}; {machine}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}")
