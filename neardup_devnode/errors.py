"""The launcher's two exception types."""

from __future__ import annotations


class NodeError(RuntimeError):
    """Something went wrong preparing, starting or stopping a node."""


class NodeStartError(NodeError):
    """The node did not become ready. The message includes the tail of its log."""


def missing_extra(package: str, why: str) -> NodeError:
    """The one-line error for a package of the ``devnode`` extra that is not installed."""
    return NodeError(f"{why} needs the Python package {package!r}: pip install 'scrapy-neardup[devnode]'")
