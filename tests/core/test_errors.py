"""Every exception the package defines derives from ``NearDupError``, so a caller can catch them all."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import es_integration
import scrapy_neardup
from scrapy_neardup import NearDupError
from scrapy_neardup.errors import BackendError, EsError, ParameterError, StateError


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
