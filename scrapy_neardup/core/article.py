"""Whether a page's ``<article>`` elements are its article, in ``"auto"`` mode.

Many news sites mark the page's article with ``<article>``; others use ``<article>`` for the teaser cards of a
sidebar or for each post of a list. An ``<article>`` is the page's article only when one of them holds most of what
the ``<article>`` elements say (:data:`ARTICLE_SHARE`): a page whose articles are teaser cards, or a list of posts,
is read as a page without marked content (its link lists and host template removed as such), so that distinct
articles of such a site are not all sketched as the same trending box.
"""

from __future__ import annotations

from selectolax.lexbor import LexborNode

__all__ = ["ARTICLE_SHARE", "outermost", "the_article"]

#: Several ``<article>`` elements: the largest is the article if it holds at least this share of their words.
ARTICLE_SHARE = 0.6


def the_article(nodes: list[LexborNode]) -> list[LexborNode] | None:
    """The outermost ``<article>`` elements ``nodes`` reduced to the page's article: all of them if there is one,
    the largest if it holds :data:`ARTICLE_SHARE` of their words, else None (teaser cards, a list of posts)."""
    if len(nodes) < 2:
        return nodes
    lengths = [len(node.text(separator=" ").split()) for node in nodes]
    largest = max(range(len(nodes)), key=lengths.__getitem__)
    if lengths[largest] >= ARTICLE_SHARE * sum(lengths):
        return [nodes[largest]]
    return None


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
