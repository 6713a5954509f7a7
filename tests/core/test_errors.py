"""Every exception the package defines derives from ``NearDupError``, so a caller can catch them all."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import es_integration
import scrapy_neardup
from scrapy_neardup import errors
from scrapy_neardup.errors import BackendError, EsError, NearDupError, ParameterError, StateError


def _modules() -> list[str]:
    names = []
    for package in (scrapy_neardup, es_integration):
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.endswith(".__main__"):  # running it is the command line
                names.append(info.name)
    return names


def _exceptions_defined_in(module_name: str) -> list[type[BaseException]]:
    module = importlib.import_module(module_name)
    return [obj for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, BaseException) and obj.__module__ == module_name]


def test_every_exception_of_the_package_is_a_neardup_error() -> None:
    found = {cls: name for name in _modules() for cls in _exceptions_defined_in(name)}
    # Control: the walk sees the errors module, the Scrapy layer's drops and Elasticsearch's internal ones.
    names = {cls.__name__ for cls in found}
    assert {"NearDupError", "NearDuplicateDropped", "Soft404Dropped", "ShardsUnavailable", "EsError"} <= names
    assert [f"{module}.{cls.__name__}" for cls, module in found.items() if not issubclass(cls, NearDupError)] == []


def test_errors_keep_the_builtin_type_a_caller_expects() -> None:
    assert issubclass(ParameterError, ValueError) and issubclass(StateError, RuntimeError)
    assert issubclass(EsError, BackendError)
    error = ParameterError("num_perm", 0, "is not valid: expected {num_perm} >= 1")
    assert str(error) == "num_perm=0 is not valid: expected num_perm >= 1"
    assert error.render({"num_perm": "--num-perm"}, "0") == "--num-perm='0' is not valid: expected --num-perm >= 1"
    with pytest.raises(NearDupError):
        scrapy_neardup.Sketcher(num_perm=0)


def _product_trees() -> list[tuple[str, ast.Module]]:
    root = Path(scrapy_neardup.__file__).resolve().parents[1]
    return [(str(path.relative_to(root)), ast.parse(path.read_text(encoding="utf-8")))
            for package in ("scrapy_neardup", "es_integration") for path in sorted((root / package).rglob("*.py"))]


ERROR_CLASSES = {name for name, obj in vars(errors).items() if isinstance(obj, type) and issubclass(obj, BaseException)
                 and obj.__module__ == errors.__name__ and not name.startswith("_")}
#: Exports left to remove with the module that holds them.
LEFT = {("scrapy_neardup/core/sketch.py", "IncompatibleSketches")}


def test_errors_are_exported_by_the_errors_module_only() -> None:
    assert {"NearDupError", "StateError", "EsError"} <= ERROR_CLASSES  # control
    exported = set()
    for path, tree in _product_trees():
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                exported |= {(path, name) for name in ast.literal_eval(node.value) if name in ERROR_CLASSES}
    assert exported - {(p, n) for p, n in exported if p == "scrapy_neardup/errors.py"} == LEFT


def test_product_modules_import_errors_from_the_errors_module() -> None:
    elsewhere = sorted(
        f"{path}: {alias.name} from {'.' * node.level}{node.module or ''}"
        for path, tree in _product_trees() for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").rsplit(".", 1)[-1] != "errors"
        for alias in node.names if alias.name in ERROR_CLASSES
    )
    assert elsewhere == []
