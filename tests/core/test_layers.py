"""Imports point one way: the core loads no framework, and nothing in scrapy_neardup imports es_integration."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "scrapy_neardup"
FRAMEWORKS = ("scrapy", "twisted", "elasticsearch", "elastic_transport", "es_integration")


def imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` in ``path`` names (relative ones resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                names.add(".".join([*base, node.module] if node.module else base))
            elif node.module:
                names.add(node.module)
    return names


def top(name: str) -> str:
    return name.split(".")[0]


def test_the_import_helper_sees_imports() -> None:
    # Negative control: a module known to import Scrapy, and relative imports resolved.
    pipeline = imported_modules(PACKAGE / "crawl" / "pipeline.py")
    assert "scrapy.exceptions" in pipeline and "scrapy_neardup.core.backend" in pipeline


def test_nothing_in_scrapy_neardup_imports_es_integration() -> None:
    offenders = {
        str(path.relative_to(PACKAGE.parent)): sorted(n for n in imported_modules(path) if top(n) == "es_integration")
        for path in PACKAGE.rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_core_imports_no_framework() -> None:
    offenders = {
        str(path.relative_to(PACKAGE.parent)): sorted(n for n in imported_modules(path) if top(n) in FRAMEWORKS)
        for path in (PACKAGE / "core").rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_importing_the_package_and_its_sketching_api_loads_no_framework() -> None:
    code = (
        "import sys, scrapy_neardup, scrapy_neardup.core.sketch, scrapy_neardup.core.embedded\n"
        "s = scrapy_neardup.Sketcher(); s.sketch('a b c d e f g')\n"
        f"loaded = sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r})\n"
        "assert not loaded, loaded\n"
        "import scrapy_neardup.crawl.pipeline\n"  # control: the Scrapy layer does load Scrapy
        "assert 'scrapy' in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


#: elasticsearch-py's bulk helpers read the client's internals (``client._otel``), which the OpenSearch adapter
#: does not have: es_integration takes them from ``engine.bulk_helpers(client)``, which picks the engine's own.
BULK_FUNCTIONS = {"streaming_bulk", "parallel_bulk", "bulk", "async_streaming_bulk", "async_bulk", "scan",
                  "async_scan", "reindex", "async_reindex"}


def helper_imports(path: Path) -> list[str]:
    """The imports in ``path`` that reach elasticsearch-py's bulk helper functions (its exception classes are
    fine: the adapter raises those)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("elasticsearch.helpers")]
        elif isinstance(node, ast.ImportFrom) and node.module == "elasticsearch":
            found += [f"elasticsearch.{a.name}" for a in node.names if a.name == "helpers"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("elasticsearch.helpers"):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name in BULK_FUNCTIONS]
    return found


def test_es_integration_takes_bulk_helpers_from_the_engine_adapter() -> None:
    root = PACKAGE.parent / "es_integration"
    assert helper_imports(root / "engine.py"), "control: the adapter itself imports elasticsearch.helpers"
    offenders = {p.name: helper_imports(p) for p in root.glob("*.py") if p.name != "engine.py"}
    assert {name: found for name, found in offenders.items() if found} == {}
