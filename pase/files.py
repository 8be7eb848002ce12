"""Files pase reads and writes: inputs checked before opening, outputs written whole.

Inputs (:func:`regular_file`): opening a FIFO for reading blocks until a writer
comes, possibly forever, and a character device (``/dev/zero``) never ends; a
folder fails with a confusing message. Each is refused in one line, naming the file.

Outputs (:func:`write_text_atomic`, :func:`write_bytes_atomic`, :func:`save_figure`):
every file pase writes goes through one path. The bytes go to a temporary file
beside the target, are flushed to disk, and only then replace the target with
``os.replace``; a write that fails (a full disk, ``ulimit -f``, Ctrl-C) removes the
temporary file and leaves the old file as it was. Only a regular file or a new name
is replaced: a device (``/dev/null``), a FIFO or a folder is refused before any
work (:func:`check_output`), and a symbolic link is written through, so the link
stays and its target gets the new content. A replaced file keeps its permissions.
"""
from __future__ import annotations

import io
import os
import stat
import sys
from pathlib import Path
from typing import Any, Type

from pase.errors import OptionError, PaseError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))
# The path that means stdout where an output flag allows it.
STDOUT = "-"
# Characters of the target's name kept in its temporary file's (names stop at 255 bytes).
_NAME_KEPT = 48


def regular_file(path: str | os.PathLike, what: str,
                 error: Type[PaseError] = OptionError) -> Path:
    """``path`` as a Path when it names a regular file (links followed); else ``error``
    saying what it is. A missing or unreadable path is left to the reader, whose
    message already says so."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except (OSError, ValueError):  # missing, no permission, a NUL in the name
        return p
    if stat.S_ISREG(mode):
        return p
    raise error(f"{what} {str(path)!r} is {_kind(mode)}; give a regular file")


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


# -- outputs ---------------------------------------------------------------------

def check_output(path: str | os.PathLike, what: str, *, stdout: bool = False) -> Path | None:
    """The file an output to ``path`` will replace (links resolved), or None for stdout
    (``path`` is ``-`` and ``stdout`` allows it). Refused in one line, naming ``what``
    (the flag, or the kind of file) and ``path``: a folder, a device, a FIFO, a
    socket, a read-only file, a missing or read-only folder. Commands call it before
    their work; the writers call it again."""
    if stdout and str(path) == STDOUT:
        return None
    shown = f"{what} {path}"
    if not str(path):
        raise OptionError(f"{what}: the file name is empty")
    try:
        target = Path(os.path.realpath(path))  # write through links (a dangling one too)
    except (OSError, ValueError) as exc:  # a NUL in the name, a link loop (3.13)
        raise OptionError(f"cannot write {shown}: {_reason(exc)}") from None
    linked = f" (a link to {target})" if os.path.islink(path) else ""
    try:
        mode: int | None = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except (OSError, ValueError) as exc:
        raise OptionError(f"cannot write {shown}: {_reason(exc)}") from None
    if mode is not None and not stat.S_ISREG(mode):
        if stat.S_ISDIR(mode):
            raise OptionError(f"{shown}{linked} is a folder; give a file name")
        hint = " (or - for stdout)" if stdout else ""
        raise OptionError(f"{shown}{linked} is {_kind(mode)}; pase writes only regular "
                          f"files: give a file name{hint}")
    given = Path(path).parent  # named as the user wrote it, unless a link moved it
    _writable_folder(target.parent, shown,
                     given if os.path.realpath(given) == str(target.parent) else target.parent)
    if mode is not None and not os.access(target, os.W_OK):
        raise OptionError(f"{shown} exists and is not writable")
    return target


def _writable_folder(folder: Path, shown: str, name: Path) -> None:
    if not folder.exists():
        raise OptionError(f"{shown}: folder {name} does not exist")
    if not folder.is_dir():
        raise OptionError(f"{shown}: {name} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OptionError(f"{shown}: folder {name} is not writable")


def write_text_atomic(path: str | os.PathLike, text: str, *, what: str, stdout: bool = False,
                      encoding: str = "utf-8") -> Path | None:
    """Write ``text`` to ``path`` whole or not at all (see the module's notes); return
    ``path`` as a Path, or None when it went to stdout (``-`` with ``stdout``)."""
    if stdout and str(path) == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return None
    return write_bytes_atomic(path, text.encode(encoding), what=what)


def write_bytes_atomic(path: str | os.PathLike, data: bytes, *, what: str,
                       stdout: bool = False) -> Path | None:
    """:func:`write_text_atomic` for bytes."""
    target = check_output(path, what, stdout=stdout)
    if target is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return None
    try:
        old = os.stat(target)
    except FileNotFoundError:
        old = None
    tmp, fd = _temporary(target, f"{what} {path}")
    try:
        with os.fdopen(fd, "wb") as f:
            if old is not None:  # keep the old file's permissions (and owner, if allowed)
                os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode))
                _keep_owner(f.fileno(), old)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as exc:  # an OSError, or Ctrl-C mid-write: the old file stays
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if not isinstance(exc, OSError):
            raise
        kept = f"; the old {path} is unchanged" if old is not None else ""
        raise OptionError(f"cannot write {what} {path}: {_reason(exc)}{kept}") from None
    _sync_folder(target.parent)
    return Path(path)


def save_figure(fig: Any, path: str | os.PathLike, *, what: str, **options: Any) -> Path:
    """Draw a matplotlib ``fig`` into memory and write it with :func:`write_bytes_atomic`;
    the format follows the file's extension (a PNG without one), as ``fig.savefig``'s."""
    check_output(path, what)  # before the drawing, which takes a while
    suffix = Path(path).suffix.lower().lstrip(".")
    buffer = io.BytesIO()
    fig.savefig(buffer, format=suffix or None, **options)
    out = write_bytes_atomic(path, buffer.getvalue(), what=what)
    assert out is not None
    return out


def _temporary(target: Path, shown: str) -> tuple[Path, int]:
    """A new hidden file beside ``target`` (same file system, so the rename is atomic),
    open for writing; made with the permissions a plain new file would get."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = target.with_name(f".{target.name[:_NAME_KEPT]}.{os.urandom(4).hex()}.tmp")
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue
        except OSError as exc:
            raise OptionError(f"cannot write {shown}: {_reason(exc)}") from None


def _keep_owner(fd: int, old: os.stat_result) -> None:
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (old.st_uid, old.st_gid):
        try:
            os.fchown(fd, old.st_uid, old.st_gid)
        except OSError:  # only root may give a file away; the new owner is the writer
            pass


def _sync_folder(folder: Path) -> None:
    """Flush the rename to disk too (best effort: not every file system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or \
        type(exc).__name__
