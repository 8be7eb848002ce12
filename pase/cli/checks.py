"""Checks the ``pase`` command makes before any work: output paths and flag combinations.

A flag the command would silently ignore is refused, naming the flag and why,
so a user never believes a setting took effect when it did not.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Iterable

from pase.errors import OptionError
from pase.files import STDOUT, check_output

# File types matplotlib writes (by extension); a plot path without one is a PNG.
PLOT_TYPES = ("png", "pdf", "svg", "svgz", "jpg", "jpeg", "eps", "ps", "tif", "tiff", "webp")


def output_file(path: str | None, flag: str, *, stdout: bool = False) -> None:
    """Refuse an output file that could not be written or must not be replaced: a folder,
    a device, a FIFO, a missing or read-only folder (:func:`pase.files.check_output`).
    ``-`` means stdout where ``stdout`` says the flag allows it; elsewhere it is refused
    (stdout carries the command's table or JSON), not taken as a file's name."""
    if path is None:
        return
    if path == STDOUT and not stdout:
        raise OptionError(f"{flag} -: this output cannot go to stdout; give a file name "
                          f"(./- for a file named -)")
    check_output(path, flag, stdout=stdout)


# Output flags and the inputs they must not name (argparse dests -> the flag to name).
_OUTPUTS = {"output": "--output", "plot": "--plot", "db": "--db"}
_INPUTS = {"model": "the model", "reference": "the model", "strategy": "--strategy", "from_": "--from",
           "from_config": "--from", "cluster": "--cluster", "from_cluster": "--from-cluster",
           "compare": "--compare", "spec": "the spec"}


def outputs_spare_inputs(args: object) -> None:
    """Refuse an output file that is one of the command's input files: writing it would
    replace what the command reads (``pase view --strategy p.json -o p.json`` left HTML
    where the plan was)."""
    from pase.api import model_files

    for out_dest, out_flag in _OUTPUTS.items():
        out = getattr(args, out_dest, None)
        if not isinstance(out, str) or out == STDOUT or not os.path.exists(out):
            continue
        for in_dest, in_flag in _INPUTS.items():
            given = getattr(args, in_dest, None)
            paths = given if isinstance(given, (list, tuple)) else (given,)
            if in_dest in ("model", "reference") and isinstance(given, str):
                paths = model_files(given)  # as load_graph finds them
            for path in paths:
                if isinstance(path, str) and os.path.exists(path) and os.path.samefile(out, path):
                    raise OptionError(f"{out_flag} {out} is the file {in_flag} reads ({path}); "
                                      f"writing it would replace that input: give another file")


def output_folder(path: str | Path, flag: str) -> None:
    """Refuse an output folder that is a file, or that could not be created or written."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise OptionError(f"{flag} {path} is a file, not a folder")
        _writable_folder(p, f"{flag} {path}")
        return
    ancestor = p.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OptionError(f"{flag} {path}: {ancestor} is a file, so the folder cannot be created")
    _writable_folder(ancestor, f"{flag} {path}")


def plot_file(path: str | None, flag: str = "--plot") -> None:
    """An output file of a type matplotlib writes, with matplotlib installed."""
    if path is None:
        return
    output_file(path, flag)
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix and suffix not in PLOT_TYPES:
        raise OptionError(f"{flag} {path}: cannot draw a .{suffix} file; use one of "
                          f"{', '.join('.' + t for t in PLOT_TYPES)}")
    if importlib.util.find_spec("matplotlib") is None:
        raise OptionError(f'{flag} needs matplotlib: pip install "pase[plot]"')


def _writable_folder(folder: Path, what: str) -> None:
    folder = folder if str(folder) else Path(".")
    if not folder.exists():
        raise OptionError(f"{what}: folder {folder} does not exist")
    if not folder.is_dir():
        raise OptionError(f"{what}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OptionError(f"{what}: folder {folder} is not writable")


def refuse(args: Any, flags: Iterable[str], reason: str) -> None:
    """Refuse the first of ``flags`` (argparse dests) the user set; ``reason`` says why it is ignored."""
    for dest in flags:
        if given(args, dest):
            raise OptionError(f"{flag_name(dest)} {reason}")


def given(args: Any, dest: str) -> bool:
    """Whether the user set a flag (defaults are None, False or an empty list)."""
    value = getattr(args, dest, None)
    return value not in (None, False, [])


def flag_name(dest: str) -> str:
    return "--" + dest.replace("_", "-")


