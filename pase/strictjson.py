"""Strict reading of the files users write: JSON without duplicate keys, names without
control characters.

Python's ``json`` keeps the last of two equal keys, so a hand-edited graph, strategy or
cluster file whose author pasted a field twice would silently lose the first value.
Control characters (newline, NUL, the C0/C1 controls, the Unicode line and paragraph
separators) in a name break every table and one-line message that prints it.
"""
from __future__ import annotations

import json
from typing import Any

# Unicode category Cc (C0 controls, DEL, C1 controls) and the two separators (Zl, Zp)
# that str.splitlines() also breaks lines at.
_CONTROL = frozenset(chr(c) for c in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029))


class DuplicateKeyError(ValueError):
    """Two equal keys in one JSON object; the reader turns it into its own PaseError."""

    def __init__(self, key: str, pairs: list[tuple[str, Any]]):
        self.key = key
        named = next((v for k, v in pairs if k == "name" and isinstance(v, str)), None)
        where = f" (the object with \"name\": {json.dumps(named)})" if named is not None else ""
        shown = json.dumps(key)
        super().__init__(f"the key {shown if len(shown) <= 60 else shown[:57] + '...'} appears "
                         f"twice in one object{where}; each key may appear once")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key, pairs)
        out[key] = value
    return out


def loads(text: str) -> Any:
    """``json.loads`` that raises :class:`DuplicateKeyError` on a key repeated in an object
    (and, like ``json.loads``, ValueError on invalid JSON, RecursionError on deep nesting)."""
    return json.loads(text, object_pairs_hook=_unique)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an op, graph or device (it holds a control character), or None."""
    at = next((i for i, c in enumerate(name) if c in _CONTROL), None)
    if at is None:
        return None
    return (f"holds the control character U+{ord(name[at]):04X} at position {at}; names must "
            f"not hold newlines, NUL or other control characters")
