"""Module docstrings stay short and point at their design notes in docs/architecture.md, and each note there
names a module that exists: the design arguments live in one place and cannot drift from the code's names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PACKAGES = ("scrapy_neardup", "es_integration")
#: A module docstring says what the module is and links its notes; an essay belongs in the notes.
MAX_DOCSTRING_LINES = 24


def _modules() -> dict[str, str]:
    """Dotted module name -> module docstring (empty when none)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return found


def _slug(heading: str) -> str:
    """MkDocs' default anchor of a heading (Python-Markdown's toc slugify)."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors() -> dict[str, str]:
    headings = re.findall(r"^#{2,4} (.+)$", ARCHITECTURE.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {_slug(h): h for h in headings}


def test_module_docstrings_are_short() -> None:
    modules = _modules()
    assert len(modules) > 100  # control: the walk sees the packages
    long = {name: doc.count("\n") + 1 for name, doc in modules.items() if doc.count("\n") + 1 > MAX_DOCSTRING_LINES}
    assert long == {}


def test_every_design_notes_link_names_a_heading_of_the_architecture_page() -> None:
    anchors = _anchors()
    links = {name: re.findall(r"docs/architecture\.md#([\w-]+)", doc) for name, doc in _modules().items()}
    linked = {name: found for name, found in links.items() if found}
    assert len(linked) > 30  # control: most modules with notes link them
    broken = {name: anchor for name, found in linked.items() for anchor in found if anchor not in anchors}
    assert broken == {}


def test_every_module_note_names_a_module_that_exists() -> None:
    modules = _modules()
    noted = re.findall(r"^### `([\w.]+)`$", ARCHITECTURE.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert len(noted) > 30
    assert [name for name in noted if name not in modules] == []
