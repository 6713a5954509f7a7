"""A page's paragraph body and its column: where an article's paragraphs are, found without class names.

Readability's idea: an article's paragraphs are siblings, a comment thread's each sit in their own comment, an
author's bio or a footer's blurb has one or two. The *paragraph body* is the element whose ``<p>`` children hold the
most text (:func:`paragraph_body`); its *column* (:func:`column`) is the ancestor that holds the article when the
article is split into sections, without the sidebars and footers beside it. :mod:`scrapy_neardup.core.main_content`
checks the main-content extraction's reading against them.
"""

from __future__ import annotations

from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser, LexborNode

from .html import count_words
from .tag_scan import DROPPED

__all__ = ["BODY_CHARS", "MIN_BODY_PARAGRAPHS", "OTHER_TEXT_WEIGHT", "ParagraphBody", "column", "paragraph_body"]

#: A paragraph body (:func:`paragraph_body`) of fewer characters is not the page's article text.
BODY_CHARS = 500
#: A paragraph body has at least this many paragraphs (an author's bio or a footer's blurb has one or two).
MIN_BODY_PARAGRAPHS = 3
#: The paragraph body's column (:func:`column`) is its ancestor with the largest ``P - w (T - P)``: ``P`` the
#: characters of its paragraphs, ``T`` of all its text, ``w`` this weight. An article split into several paragraph
#: containers (one per section, ads between them) is one column; a sidebar or footer beside it adds text outside
#: paragraphs and lowers the score.
OTHER_TEXT_WEIGHT = 3
_SAMPLE_CHARS = 60
_CHROME = frozenset({"header", "footer", "nav", "aside"})
_COLUMN_STOPS = _CHROME | {"body", "html"}


@dataclass(frozen=True)
class ParagraphBody:
    """A page's paragraph body (:func:`paragraph_body`), or its column (:func:`column`).

    Attributes:
        sample: the middle :data:`_SAMPLE_CHARS` characters of its longest paragraph, whitespace removed (a
            reading holds the body when it holds this).
        words: the element's words.
        page: the page it was found in.
        node: the element, in the page's lexbor tree (which it keeps alive).
    """

    sample: str
    words: int
    page: bytes
    node: LexborNode

    @property
    def html(self) -> str:
        """The element's HTML (serialized when asked for: most readings never need it)."""
        return self.node.html or ""


def paragraph_body(data: bytes) -> tuple[ParagraphBody | None, int]:
    """The element of the page ``data`` whose ``<p>`` children hold the most text, if at least :data:`BODY_CHARS`
    and not a page's header, footer, navigation or sidebar (readability's paragraph parent: an article's
    paragraphs are siblings, a comment thread's each in its own comment); and the words of the page's visible text
    (its body without scripts, styles and the other non-text elements, as :func:`~.html.count_words` counts them),
    from the same parse.

    Read with lexbor through selectolax: a walk over Resiliparse's nodes costs ten times the page's parse."""
    tree = LexborHTMLParser(data)
    for node in tree.css(DROPPED):
        node.decompose()
    page = tree.body
    visible = 0 if page is None else count_words(page.text(separator=" "))
    return _paragraph_parent(tree, data), visible


def _paragraph_parent(tree: LexborHTMLParser, data: bytes) -> ParagraphBody | None:
    """:func:`paragraph_body`'s element."""
    totals: dict[int, int] = {}
    counts: dict[int, int] = {}
    longest: dict[int, str] = {}
    parents: dict[int, LexborNode] = {}
    for paragraph in tree.css("p"):
        parent = paragraph.parent
        if parent is None:
            continue
        key = parent.mem_id
        text = paragraph.text()
        totals[key] = totals.get(key, 0) + len(text)
        counts[key] = counts.get(key, 0) + 1
        if len(text) >= len(longest.get(key, "")):
            longest[key], parents[key] = text, parent
    for key in sorted(totals, key=totals.__getitem__, reverse=True):
        if totals[key] < BODY_CHARS:
            return None
        parent = parents[key]
        if counts[key] >= MIN_BODY_PARAGRAPHS and not _in_page_chrome(parent):
            sample = "".join(longest[key].split())
            middle = max(0, (len(sample) - _SAMPLE_CHARS) // 2)
            words = len(parent.text(separator=" ").split())
            return ParagraphBody(sample[middle : middle + _SAMPLE_CHARS], words, data, parent)
    return None


def column(body: ParagraphBody) -> ParagraphBody:
    """The paragraph body's column: of ``body``'s element and its ancestors below ``<body>`` (and below the page's
    header, footer, navigation and sidebars), the one with the largest ``P - w (T - P)`` of
    :data:`OTHER_TEXT_WEIGHT` (readability joins its top candidate's siblings that hold paragraphs, weighed by how
    much else they bring)."""
    best, best_score = body.node, None
    node: LexborNode | None = body.node
    while node is not None and node.tag not in _COLUMN_STOPS:
        paragraphs = sum(len(p.text(strip=True)) for p in node.css("p"))
        score = paragraphs - OTHER_TEXT_WEIGHT * (len(node.text(strip=True)) - paragraphs)
        if best_score is None or score > best_score:
            best, best_score = node, score
        node = node.parent
    if best is body.node:
        return body
    return ParagraphBody(body.sample, len(best.text(separator=" ").split()), body.page, best)


def _in_page_chrome(node: LexborNode) -> bool:
    """Whether ``node`` is or lies inside a ``<header>``, ``<footer>``, ``<nav>`` or ``<aside>``."""
    parent: LexborNode | None = node
    while parent is not None:
        if parent.tag in _CHROME:
            return True
        parent = parent.parent
    return False
