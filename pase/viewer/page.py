"""One self-contained HTML file: the template with the style, the page model and the script inline.

The page model is JSON in a ``<script type="application/json">`` element, read
by the script with ``JSON.parse``; ``</`` inside it is written ``<\\/`` (the
same string to JSON) so no value can close the element. Nothing is fetched when
the page opens: no network, no other file.
"""
from __future__ import annotations

import html
import json
import re
from functools import lru_cache
from importlib import resources
from typing import Any

STATIC = ("template.html", "view.css", "timeline.js", "view.js")
_PLACEHOLDER = re.compile(r"\{\{(title|css|data|js)\}\}")


@lru_cache(maxsize=None)
def static(name: str) -> str:
    """A file of ``pase/viewer/static`` (package data)."""
    return resources.files("pase.viewer").joinpath("static", name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """Compact JSON safe inside a script element."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\u0021--")


def assemble(data: dict[str, Any], title: str) -> str:
    """The page's HTML text."""
    parts = {"title": html.escape(title), "css": static("view.css"), "data": embed_json(data),
             "js": static("timeline.js") + "\n" + static("view.js")}
    # One pass over the template: a value that holds "{{js}}" is never substituted again.
    return _PLACEHOLDER.sub(lambda m: parts[m.group(1)], static("template.html"))
