"""Input files are regular files: checked with ``stat`` before anything opens them.

Opening a FIFO for reading blocks until a writer comes, possibly forever, and a
character device (``/dev/zero``) never ends; a folder fails with a confusing
message. :func:`regular_file` refuses each of them in one line, naming the file.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Type

from pase.errors import OptionError, PaseError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


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
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    raise error(f"{what} {str(path)!r} is {kind}; give a regular file")
