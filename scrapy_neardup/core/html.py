"""From HTML to the text a page shows: parsing, removal of what is not text, main content and block marks.

HTML is parsed by lexbor (selectolax's ``LexborHTMLParser``), an HTML5 parser in C. HTML5 tree building is
quadratic on some hostile markup (thousands of unclosed nested blocks; unclosed formatting elements with distinct
attributes, which are re-opened in every later paragraph; end tags that close nothing, each of which searches the
whole stack of open elements), so a vectorized scan of the tags (:mod:`scrapy_neardup.core.tag_scan`) sends such
pages to a parser-free tag stripper instead (:func:`strip_tags`), whose text is the same but for markup subtleties.

Three extractions (:data:`~scrapy_neardup.core.text.ContentMode`):

* ``"body"``: all visible text (:func:`html_to_text`);
* ``"main"``: the main content the page marks (:func:`html_to_text`);
* ``"auto"``, on pages that do not declare themselves articles (:mod:`scrapy_neardup.core.main_content` reads
  those): the marked main content if there is one, else the body, *with its block structure*
  (:func:`marked_text`): the byte :data:`~scrapy_neardup.core.marks.BLOCK` at each boundary of a block element,
  link text between :data:`~scrapy_neardup.core.marks.LINK_START` and :data:`~scrapy_neardup.core.marks.LINK_END`.
  The marks are put into the HTML before it is parsed, found by the same tag scan (one numpy pass, no walk over
  the tree in Python), and come out of lexbor's text walk in place; :mod:`scrapy_neardup.core.blocks` then
  removes link lists and the blocks a host repeats on its pages.
"""

from __future__ import annotations

import html as html_lib
import logging
import re
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np
from selectolax.lexbor import LexborHTMLParser, LexborNode

from .article import outermost, page_article, the_article
from .marks import BLOCK, LINK_END, LINK_START, clear_marks
from .normalize import scrub_unicode
from .tag_scan import (
    DROPPED_NAMES,
    LANDMARK,
    LANDMARK_NAMES,
    MARK_TABLE,
    SAFE_TAGS,
    TagScan,
    insert_marks,
    name_key,
    parse_hazard,
    tag_positions,
)

__all__ = [
    "HtmlMode", "html_to_text", "looks_like_html", "marked_text", "markup_to_text", "strip_tags", "tag_positions",
]

logger = logging.getLogger(__name__)

# For strip_tags: an unclosed comment or dropped element runs to the end, as it does for a parser.
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_DROPPED_ELEMENT = re.compile(
    rf"<({'|'.join(DROPPED_NAMES)})\b.*?(?:</\1\s*>|\Z)", re.DOTALL | re.IGNORECASE
)
_TAG = re.compile(r"<[^>]*>")
_HTML_SNIFF = re.compile(
    r"<\s*(?:!doctype\s+html|html|head|body|div|p|span|a\s|table|br|script|style|title|meta|h[1-6])\b",
    re.IGNORECASE,
)

HtmlMode = Literal["body", "main"]


def looks_like_html(text: str) -> bool:
    """Whether the first 4 KiB of ``text`` contain a typical HTML tag."""
    head = text[:4096]
    return "<" in head and _HTML_SNIFF.search(head) is not None


def html_to_text(html: str, mode: HtmlMode = "body") -> str:
    """Visible text of an HTML document: scripts, styles, templates, noscript, SVG, MathML, iframes, objects and
    ``<select>`` lists removed, comments too.

    Every element boundary separates words (block elements, ``<br>``, and inline ones alike), so
    ``<p>a</p><p>b</p>`` gives two words; so does ``<b>a</b>b`` (the price of extracting text in C: words split by
    inline markup are rare, and split alike in every copy of a page).

    Args:
        html: the document.
        mode: ``"body"``: all of the text, ``<title>`` included. ``"main"``: the main content: first ``nav``,
            ``header``, ``footer`` and ``aside`` elements (and the elements with the ARIA roles ``navigation``,
            ``banner``, ``contentinfo``, ``complementary``) are removed wherever they are; then the text is that
            of the ``<main>`` elements (or ``role="main"``; the outermost ones, in document order) if they hold
            any, else that of the outermost ``<article>`` elements if they hold any, else that of ``<body>``.
            The title and the rest of ``<head>`` are not used.
    """
    data = html.encode("utf-8", "surrogatepass")  # lexbor reads lone surrogates as invalid bytes: U+FFFD
    return markup_to_text(data, tag_positions(data), mode)


def markup_to_text(data: bytes, tags: np.ndarray, mode: HtmlMode) -> str:
    """:func:`html_to_text` of UTF-8 ``data`` (``tags``: where its ``<`` are)."""
    scan = TagScan.of(data, tags) if tags.size > SAFE_TAGS else None
    hazard, dropped, start_tags = parse_hazard(scan, data, tags)
    if hazard:
        logger.debug("HTML nested too deep for a linear-time parse: tags stripped instead")
        return strip_tags(scrub_unicode(data.decode("utf-8", "replace")))
    tree = LexborHTMLParser(data)
    if mode == "body":
        if dropped:
            _drop(tree, dropped, start_tags)
        return tree.text(separator=" ")
    if scan is None:
        return _main_text(tree, dropped, " ")[0]
    landmarks = _Landmarks.of(data, scan.table(MARK_TABLE), scan)
    if not landmarks.any:
        return _body_text(tree, dropped, start_tags)
    return _main_text(tree, dropped, " ", landmarks)[0]


def marked_text(data: bytes, tags: np.ndarray) -> tuple[str, bool]:
    """:func:`read_marked` without the text left out."""
    text, marked, _ = read_marked(data, tags)
    return text, marked


def read_marked(data: bytes, tags: np.ndarray) -> tuple[str, bool, int | None]:
    """The text of UTF-8 HTML ``data`` (``tags``: where its ``<`` are) that ``"auto"`` mode starts from, with its
    block marks, and whether the page marks its main content.

    The marked main content when the page has one, else the body (as in ``"main"`` mode: ``nav``, ``header``,
    ``footer``, ``aside`` and their ARIA roles removed, then ``<main>``/``role="main"``, else ``<article>``, else
    ``<body>``), :data:`~scrapy_neardup.core.marks.BLOCK` at every boundary of a block element and link text
    bracketed by :data:`~scrapy_neardup.core.marks.LINK_START` / :data:`~scrapy_neardup.core.marks.LINK_END`.
    Marker bytes already in ``data`` become spaces first. Third, the words of the visible text left out on the
    way (the ``nav``/``header``/``footer``/``aside`` elements, and what lies outside a marked main content,
    :func:`count_words`), read from the parsed tree only where that costs no walk of the page's main text;
    ``None`` when it was not read (several main elements).
    """
    data = clear_marks(data)
    scan = TagScan.of(data, tags)
    hazard, dropped, start_tags = parse_hazard(scan if tags.size > SAFE_TAGS else None, data, tags)
    marks = scan.table(MARK_TABLE)
    data = insert_marks(data, tags, scan, marks)
    if hazard:
        logger.debug("HTML nested too deep for a linear-time parse: tags stripped instead")
        return strip_tags(scrub_unicode(data.decode("utf-8", "replace"), keep_marks=True)), False, 0
    tree = LexborHTMLParser(data)
    landmarks = _Landmarks.of(data, marks, scan)
    if not landmarks.any:
        return _body_text(tree, dropped, start_tags), False, 0
    outside: list[str | None] = []
    text, marked = _main_text(tree, dropped, _BLOCK_STR, landmarks, articles=True, outside=outside)
    return text, marked, None if None in outside else count_words(" ".join(cast("list[str]", outside)))


_BLOCK_STR = chr(BLOCK)
_ROLE = re.compile(rb"role", re.IGNORECASE)
_LANDMARK_BY_KEY = {name_key(name): name for name in LANDMARK_NAMES}
_BOILERPLATE_ROLES = ("[role=navigation]", "[role=banner]", "[role=contentinfo]", "[role=complementary]")


@dataclass(frozen=True, slots=True)
class _Landmarks:
    """What the scan of a page's tags found that "main" mode looks for: the landmark elements present and whether
    a ``role`` attribute may be (so that CSS selections that would find nothing are left out)."""

    names: frozenset[str]
    roles: bool

    @classmethod
    def of(cls, data: bytes, marks: np.ndarray, scan: TagScan) -> _Landmarks:
        keys = scan.keys[(marks & LANDMARK != 0) & scan.letter & ~scan.closing]
        return cls(frozenset(_LANDMARK_BY_KEY[key] for key in np.unique(keys).tolist()),
                   _ROLE.search(data) is not None)

    @property
    def any(self) -> bool:
        return bool(self.names) or self.roles

    def boilerplate(self) -> str:
        """The CSS selector of the boilerplate present."""
        parts = [name for name in ("nav", "header", "footer", "aside") if name in self.names]
        return ",".join([*parts, *(_BOILERPLATE_ROLES if self.roles else ())])

    def main_candidates(self) -> tuple[str, ...]:
        """The selectors of the main content, in order of preference, present."""
        main = [*(["main"] if "main" in self.names else []), *(["[role=main]"] if self.roles else [])]
        return tuple(c for c in (",".join(main), "article" if "article" in self.names else "") if c)


_EVERY_LANDMARK = _Landmarks(frozenset(LANDMARK_NAMES), True)


def _body_text(tree: LexborHTMLParser, dropped: str, start_tags: int) -> str:
    """The text of ``<body>`` once the elements ``dropped`` selects are removed: what ``"main"`` mode reads of a
    page without landmarks."""
    if dropped:
        _drop(tree, dropped, start_tags)
    root = tree.body or tree.root
    return "" if root is None else root.text(separator=" ")


_NOT_TEXT_TAGS = frozenset((*DROPPED_NAMES, "title", "head", "_comment"))


def _main_text(
    tree: LexborHTMLParser, dropped: str, joiner: str, landmarks: _Landmarks = _EVERY_LANDMARK,
    articles: bool = False, outside: list[str | None] | None = None,
) -> tuple[str, bool]:
    """The main content of ``tree`` (see :func:`html_to_text`, mode ``"main"``), after removing the elements
    selected by ``dropped``, several main elements joined with ``joiner``; and whether it is marked (a main or
    article element with text) rather than the body. ``landmarks``: what the page may have (all by default).
    ``articles`` (``"auto"`` mode): ``<article>`` elements are the main content only where one of them is the
    page's article (:func:`scrapy_neardup.core.article.the_article`); teaser cards leave the page unmarked; of
    several main elements, the one that holds most of their words (:func:`scrapy_neardup.core.article.page_article`)
    is the main content, and none when none does.
    ``outside``: receives the visible text left out (the boilerplate elements, and what lies outside the one main
    element; ``None`` when several main elements leave it unread)."""
    names = [name for name in dropped.split(",") if name]
    dropped = ",".join(part for part in (dropped, landmarks.boilerplate()) if part)
    root_id = tree.root.mem_id if tree.root is not None else None
    candidates = landmarks.main_candidates()
    first: list[LexborNode] | None = None
    if dropped and candidates and candidates[0] != "article":
        # One walk of the tree finds what goes and the first main candidates (a walk costs about as much whatever
        # the selectors); each node found is told apart by its name and role, as the selectors read them.
        first, removed = _split_matches(tree.css(dropped + "," + candidates[0]), landmarks,
                                        frozenset(names) | landmarks.names & _BOILERPLATE_NAMES, root_id)
    else:
        removed = [node for node in tree.css(dropped) if node.mem_id != root_id] if dropped else []
    if articles:
        removed = [node for node in removed if not _section_part(node)]
    if outside is not None and removed:
        # Scripts and styles go first, so that the boilerplate's text read next is visible text only.
        for node in removed:
            if node.tag in _NOT_TEXT_TAGS:
                node.decompose()
        removed = [node for node in removed if node.tag not in _NOT_TEXT_TAGS]
        outside.extend(node.text(separator=" ") for node in outermost(removed))
    # <html role="navigation"> cannot be removed (lexbor refuses to remove the root): the document's text is not
    # boilerplate because its root says so; its inner boilerplate still goes.
    for node in removed:
        node.decompose()
    for selector in candidates:
        if first is not None:
            nodes, first = outermost(first), None
        else:
            nodes = outermost(tree.css(selector))
        if articles and selector == "article":
            trusted = the_article(nodes)
            if trusted is None:
                break
            nodes = trusted
        elif articles and len(nodes) > 1:
            # Several main elements (a page may have one): the largest if it holds most of their words (the other a
            # loading placeholder), else cards of teasers, not the page's main content.
            chosen = page_article([len(node.text(separator=" ").split()) for node in nodes])
            if chosen is None:
                continue
            nodes = [nodes[chosen]]
        text = joiner.join(node.text(separator=" ") for node in nodes)
        if _has_text(text):
            if outside is not None:
                _read_outside(nodes, outside)
            return text, True
    root = tree.body or tree.root
    return ("" if root is None else root.text(separator=" ")), False


def _section_part(node: LexborNode) -> bool:
    """Whether ``node`` is a ``<header>`` or ``<footer>`` inside a ``<main>``, ``role="main"`` or ``<article>``
    element: that part's own header or footer (its title and byline, on some sites the whole article), not the
    page's banner or footer (HTML-AAM maps them to ``banner``/``contentinfo`` only outside such parts)."""
    if node.tag not in _SECTION_PART_TAGS:
        return False
    parent = node.parent
    while parent is not None and parent.tag != "html":  # above it: the document node, which has no attributes
        if parent.tag in _CONTENT_TAGS or parent.attrs.get("role") == "main":
            return True
        parent = parent.parent
    return False


_SECTION_PART_TAGS = frozenset(("header", "footer"))
_CONTENT_TAGS = frozenset(("main", "article"))


def _read_outside(nodes: list[LexborNode], outside: list[str | None]) -> None:
    """Add to ``outside`` the text of the page outside its one main element (the siblings of it and of each of
    its ancestors, up to the root): the sidebar and the rest of the template, without walking the main text
    again; ``None`` for several main elements."""
    if len(nodes) != 1:
        outside.append(None)
        return
    node: LexborNode | None = nodes[0]
    while node is not None and node.parent is not None:
        sibling = node.prev
        while sibling is not None:
            if sibling.tag not in _NOT_TEXT_TAGS:
                outside.append(sibling.text(separator=" "))
            sibling = sibling.prev
        sibling = node.next
        while sibling is not None:
            if sibling.tag not in _NOT_TEXT_TAGS:
                outside.append(sibling.text(separator=" "))
            sibling = sibling.next
        node = node.parent


_BOILERPLATE_NAMES = frozenset(("nav", "header", "footer", "aside"))
_BOILERPLATE_ROLE_VALUES = frozenset(("navigation", "banner", "contentinfo", "complementary"))


def _split_matches(
    matches: list[LexborNode], landmarks: _Landmarks, dropped_names: frozenset[str], root_id: int | None,
) -> tuple[list[LexborNode], list[LexborNode]]:
    """The nodes of one selection of the dropped elements, the boilerplate and the main elements
    (``landmarks.main_candidates()[0]``), in document order: the main elements that survive the removal of the
    others, and the nodes to remove (the root excepted).

    A node is dropped when its name is one of ``dropped_names`` or its ``role`` one of the boilerplate roles
    (exact, case-sensitive, as the attribute selectors compare), main when it is ``<main>`` (``main`` present) or
    has ``role="main"``; a main element inside a removed one is removed with it.
    """
    roles, main_name = landmarks.roles, "main" in landmarks.names
    removed: list[LexborNode] = []
    removed_ids: set[int] = set()
    mains: list[LexborNode] = []
    for node in matches:
        tag = node.tag
        role = node.attrs.get("role") if roles else None
        dropped = tag in dropped_names or role in _BOILERPLATE_ROLE_VALUES
        if dropped and node.mem_id != root_id and node.mem_id not in removed_ids:
            removed_ids.add(node.mem_id)
            removed.append(node)
        if (main_name and tag == "main") or role == "main":
            mains.append(node)
    if not removed_ids:
        return mains, removed
    kept = []
    for node in mains:
        parent: LexborNode | None = node
        while parent is not None and parent.mem_id not in removed_ids:
            parent = parent.parent
        if parent is None:
            kept.append(node)
    return kept, removed


_NOT_TEXT_CHARS = " \t\n\r\f" + "".join(map(chr, (BLOCK, LINK_START, LINK_END)))


def _has_text(text: str) -> bool:
    return bool(text.strip(_NOT_TEXT_CHARS))


def _drop(tree: LexborHTMLParser, dropped: str, start_tags: int) -> None:
    """Remove from ``tree`` the elements that CSS selector ``dropped`` (element names) matches, knowing that the
    page has at most ``start_tags`` start tags of those names (-1: unknown).

    Each such element comes from a start tag of its own, so once as many elements are removed as there are start
    tags, none is left. Pages usually keep them in ``<head>`` (small) but for one or two in the body (an icon):
    the head is searched first, then a lone remaining one by a search that stops at the first match. Otherwise
    one selection walks the whole tree, as a walk that finds nothing would have (never more than two walks).
    """
    head = tree.head
    if start_tags >= 0 and head is not None:
        found = head.css(dropped)
        for node in found:
            node.decompose()
        start_tags -= len(found)
        if start_tags <= 0:
            return
        if start_tags == 1:
            last = tree.root.css_first(dropped) if tree.root is not None else None
            if last is not None:
                last.decompose()
            return
    for node in tree.css(dropped):
        node.decompose()


# Every ASCII byte but a letter or a digit separates words (as in the normalized text); other bytes are kept.
_SEPARATE = bytes(b if chr(b).isalnum() or b >= 0x80 else 0x20 for b in range(256))
def count_words(text: str) -> int:
    """The words of ``text`` much as its normalized text would hold them (ASCII punctuation separates words
    there too), counted on its bytes without normalizing it (a page's text that is not sketched)."""
    return len(text.encode("utf-8", "surrogatepass").translate(_SEPARATE).split())


def strip_tags(html: str) -> str:
    """Visible text without a parser, for HTML that the parser gives up on: comments and the non-text
    elements (scripts, styles...) removed, every tag a separator, character references decoded."""
    text = _COMMENT.sub(" ", html)
    text = _DROPPED_ELEMENT.sub(" ", text)
    return html_lib.unescape(_TAG.sub(" ", text))
