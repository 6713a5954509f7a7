"""The launcher's exception types."""

from __future__ import annotations


class NodeError(RuntimeError):
    """Something went wrong preparing, starting or stopping a node."""


class NodeStartError(NodeError):
    """The node did not become ready. The message includes the tail of its log."""


#: What to install for the launcher and its dependencies, from a checkout of the repository.
INSTALL = "pip install -e ./devnode (the neardup-devnode distribution of the scrapy-neardup repository)"


def missing_package(package: str, why: str) -> NodeError:
    """The one-line error for a dependency of the launcher that is not installed."""
    return NodeError(f"{why} needs the Python package {package!r}, a dependency of neardup-devnode: {INSTALL}")
