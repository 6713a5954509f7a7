"""Whether a page's ``<article>`` elements are its article, in ``"auto"`` mode.

Many news sites mark the page's article with ``<article>``; others use ``<article>`` for the teaser cards of a
sidebar or for each post of a list. An ``<article>`` is the page's article only when one of them holds most of what
the ``<article>`` elements say (:data:`ARTICLE_SHARE`): a page whose articles are teaser cards, or a list of posts,
is read as a page without marked content (its link lists and host template removed as such), so that distinct
articles of such a site are not all sketched as the same trending box. An ``<article>`` is measured by its own
words, those outside the ``<article>`` elements nested in it: a post whose "you may also like" cards are
``<article>`` elements inside it is measured without them.
"""

from __future__ import annotations

from selectolax.lexbor import LexborNode

__all__ = ["ARTICLE_SHARE", "outermost", "page_article", "the_article"]

#: Several ``<article>`` elements: the largest is the article if it holds at least this share of their words.
ARTICLE_SHARE = 0.6


def page_article(own_words: list[int]) -> int | None:
    """Which of several outermost ``<article>`` elements is the page's article, from the number of words of each
    that lie outside the ``<article>`` elements nested in it: the largest, if it holds :data:`ARTICLE_SHARE` of
    them all, else None (teaser cards, a list of posts)."""
    largest = max(range(len(own_words)), key=own_words.__getitem__)
    return largest if own_words[largest] >= ARTICLE_SHARE * sum(own_words) else None


def the_article(nodes: list[LexborNode]) -> list[LexborNode] | None:
    """The outermost ``<article>`` elements ``nodes`` reduced to the page's article: all of them if there is one,
    else the one :func:`page_article` names, else None (teaser cards, a list of posts)."""
    if len(nodes) < 2:
        return nodes
    chosen = page_article([_own_words(node) for node in nodes])
    return None if chosen is None else [nodes[chosen]]


def _own_words(node: LexborNode) -> int:
    """Words of ``node`` outside the ``<article>`` elements nested in it (``css`` matches the node itself too)."""
    nested = outermost([inner for inner in node.css("article") if inner.mem_id != node.mem_id])
    return _words(node) - sum(_words(inner) for inner in nested)


def _words(node: LexborNode) -> int:
    return len(node.text(separator=" ").split())


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
