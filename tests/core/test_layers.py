"""Imports point one way: the core loads no framework, nothing in scrapy_neardup imports es_integration, and the
local node launcher (neardup_devnode, a distribution of its own in devnode/) depends on the product, never the
reverse, with no import circle inside it."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "scrapy_neardup"
FRAMEWORKS = ("scrapy", "twisted", "elasticsearch", "elastic_transport", "es_integration")
#: The product's import roots (the scrapy-neardup distribution), and the launcher's.
PRODUCT = (REPO / "scrapy_neardup", REPO / "es_integration")
DEVNODE = REPO / "devnode" / "neardup_devnode"


def imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` in ``path`` names (relative ones resolved), at any depth
    (imports inside functions included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    root = next(p for p in (PACKAGE, *PRODUCT, DEVNODE) if p in path.parents).parent
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
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
    assert "scrapy.exceptions" in pipeline and "scrapy_neardup.store.backend" in pipeline


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
        "import sys, scrapy_neardup, scrapy_neardup.core.sketch, scrapy_neardup.store.embedded\n"
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
    assert helper_imports(root / "opensearch_adapter.py"), "control: the adapter itself imports elasticsearch.helpers"
    adapter = root / "opensearch_adapter.py"
    offenders = {str(p.relative_to(root)): helper_imports(p) for p in root.rglob("*.py") if p != adapter}
    assert {name: found for name, found in offenders.items() if found} == {}


# -- the layers of the whole product ------------------------------------------------------------------------------

#: Each product package's layer: a module imports only modules of its own layer or below (every import counts,
#: those inside functions too). The dev-node launcher is above them all, and nothing in the product imports it.
LAYERS = {
    "scrapy_neardup.errors": 0,
    "scrapy_neardup.core": 1,
    "scrapy_neardup.store": 2,
    "scrapy_neardup.crawl": 3,
    "es_integration": 3,
    "scrapy_neardup.cli": 4,
    "es_integration.cli": 4,
    "es_integration.cli_jobs": 4,
    "es_integration.cli_report": 4,
    "neardup_devnode": 5,
}


def layer_of(module: str) -> int | None:
    best = None
    for prefix, layer in LAYERS.items():
        if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return None if best is None else best[1]


@functools.cache
def _package_dirs() -> dict[str, Path]:
    """Where each product package lives (the launcher is a distribution of its own, elsewhere in the tree)."""
    import importlib.util

    dirs = {}
    for package in ("scrapy_neardup", "es_integration", "neardup_devnode"):
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        dirs[package] = Path(next(iter(spec.submodule_search_locations)))
    return dirs


def _exists(module: str) -> bool:
    top_, *rest = module.split(".")
    base = _package_dirs().get(top_)
    return base is not None and (base.joinpath(*rest).with_suffix(".py").exists() or
                                 (base.joinpath(*rest) / "__init__.py").exists())


def product_graph() -> dict[str, set[str]]:
    """Module -> the product modules it imports (package faces ``__init__`` left out: they only hand names on)."""
    graph: dict[str, set[str]] = {}
    for package, base in _package_dirs().items():
        for path in base.rglob("*.py"):
            module = ".".join((package, *path.relative_to(base).with_suffix("").parts))
            if module.endswith(("__init__", "__main__")):
                continue
            names = _resolved(path, module)
            graph[module] = {n for n in names if layer_of(n) is not None and not n.endswith("__init__")}
    return graph


def _resolved(path: Path, module: str) -> set[str]:
    """Imports of ``path`` with relative ones resolved, and ``from package import module`` seen as the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module.rsplit(".", 1)[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, node.module] if node.module else parts)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if _exists(f"{base}.{alias.name}"))
    return {n for n in names if _exists(n)}


def test_the_layer_graph_sees_lazy_imports(tmp_path: Path) -> None:
    # Controls: a module of a subpackage, and imports inside a function (absolute and relative) of a module
    # written here for the test.
    graph = product_graph()
    protocol = "es_integration.backend.rounds"
    assert protocol in graph and "scrapy_neardup.core.match" in graph[protocol]
    assert any(n.startswith("scrapy_neardup.cli") for n in graph["es_integration.cli"])
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def f():\n    from scrapy_neardup.core import match\n    from ..core.sketch import Sketcher\n")
    assert {"scrapy_neardup.core.match", "scrapy_neardup.core.sketch"} <= _resolved(lazy, "scrapy_neardup.crawl.lazy")


def test_every_import_points_down_the_layers() -> None:
    graph = product_graph()
    upward = {f"{module} -> {name}" for module, names in graph.items() for name in names
              if layer_of(name) > layer_of(module)}  # type: ignore[operator]
    assert sorted(upward) == []


def test_crawl_and_es_integration_do_not_import_each_other_and_nothing_imports_the_launcher() -> None:
    graph = product_graph()
    across = {f"{m} -> {n}" for m, names in graph.items() for n in names
              if (m.startswith("scrapy_neardup.crawl") and n.startswith("es_integration"))
              or (m.startswith("es_integration") and n.startswith("scrapy_neardup.crawl"))
              or (not m.startswith("neardup_devnode") and n.startswith("neardup_devnode"))}
    assert sorted(across) == []


def test_no_import_circle() -> None:
    assert circles(product_graph()) == []


# -- the local node launcher ------------------------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = path.relative_to(DEVNODE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_product_package_imports_the_launcher() -> None:
    offenders = {
        str(path.relative_to(REPO)): sorted(n for n in imported_modules(path) if top(n) == "neardup_devnode")
        for root in PRODUCT
        for path in root.rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_product_distribution_does_not_ship_the_launcher() -> None:
    product = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert not (REPO / "neardup_devnode").exists()
    includes = product["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not [p for p in includes if "devnode" in p], includes
    assert "neardup_devnode" not in product["tool"]["setuptools"].get("package-data", {})
    assert "devnode" not in product["project"].get("optional-dependencies", {})
    # The launcher's own distribution depends on the product and adds its commands through the entry point.
    launcher = tomllib.loads((REPO / "devnode" / "pyproject.toml").read_text())
    assert "scrapy-neardup" in launcher["project"]["dependencies"]
    assert launcher["project"]["entry-points"]["neardup.commands"] == {"es-devnode": "neardup_devnode.cli:register"}


def launcher_imports() -> dict[str, set[str]]:
    """Each module of neardup_devnode and the modules of neardup_devnode it imports (at any depth)."""
    modules = {module_name(p): p for p in DEVNODE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in imported_modules(path):
            # `from .x import y` names neardup_devnode.x; `from . import x` names the package: take the longest
            # module it names
            parts = imported.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts and ".".join(parts) != name:
                targets.add(".".join(parts))
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_circle_finder_finds_circles() -> None:
    # Negative control: a circle of two, one of three through a tail, and none in a chain.
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_launcher_has_no_import_circle() -> None:
    graph = launcher_imports()
    assert "neardup_devnode.state" in graph["neardup_devnode.background"], "control: the graph sees imports"
    assert "neardup_devnode.node" in graph["neardup_devnode.background"]
    assert circles(graph) == []


def test_mypy_reports_missing_first_party_modules() -> None:
    """A wrong module path in a product import (one inside a function too) fails mypy: missing imports are
    ignored only for the third-party modules named in an override, never globally."""
    mypy = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert "ignore_missing_imports" not in mypy
    ignored = [name for o in mypy.get("overrides", []) if o.get("ignore_missing_imports") for name in o["module"]]
    assert ignored and not [n for n in ignored if n.split(".")[0] in ("scrapy_neardup", "es_integration",
                                                                      "neardup_devnode")]


# -- module size ------------------------------------------------------------------------------------------------

#: Lines a product module may have: past it, split it into modules named after what they hold.
MAX_MODULE_LINES = 500


def oversized(roots: tuple[Path, ...], limit: int = MAX_MODULE_LINES, base: Path = REPO) -> dict[str, int]:
    """``{path relative to base: lines}`` of the Python modules under ``roots`` longer than ``limit`` lines."""
    sizes = {str(path.relative_to(base)): len(path.read_text(encoding="utf-8").splitlines())
             for root in roots for path in root.rglob("*.py")}
    return {path: lines for path, lines in sorted(sizes.items()) if lines > limit}


def test_the_size_check_sees_a_large_module(tmp_path: Path) -> None:
    # Negative control: a module one line over a limit is listed with its size; one at the limit is not.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "large.py").write_text("x = 1\n" * 11)
    (tmp_path / "pkg" / "fits.py").write_text("x = 1\n" * 10)
    assert oversized((tmp_path,), limit=10, base=tmp_path) == {"pkg/large.py": 11}


def test_no_product_module_is_over_the_size_limit() -> None:
    assert oversized(PRODUCT) == {}, (
        f"modules over {MAX_MODULE_LINES} lines: split them into modules named after what they hold")
