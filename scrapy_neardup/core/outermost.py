"""The outermost of a set of elements found by a CSS selection (``"main"`` mode reads each main element once)."""

from __future__ import annotations

from selectolax.lexbor import LexborNode


def outermost(nodes: list[LexborNode]) -> list[LexborNode]:
    """``nodes`` without repeats (lexbor returns a node once per selector of a group it matches: ``<main
    role="main">`` twice) and without those inside another of them (nested elements are read once)."""
    ids: set[int] = set()
    unique = []
    for node in nodes:
        if node.mem_id not in ids:
            ids.add(node.mem_id)
            unique.append(node)
    if len(unique) < 2:
        return unique
    out = []
    for node in unique:
        parent = node.parent
        while parent is not None and parent.mem_id not in ids:
            parent = parent.parent
        if parent is None:
            out.append(node)
    return out
