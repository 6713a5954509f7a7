"""The text ``"auto"`` mode sketches of an HTML page that declares itself an article: its article, without what
surrounds it (other pages: :func:`scrapy_neardup.core.html.marked_text`).

The page is parsed by lexbor through Resiliparse (``resiliparse.parse.html``), and its text taken by Resiliparse's
main-content extraction (``extract_plain_text(main_content=True)``), which leaves out, element by element, what its
rules recognize as not being the page's own content: navigation, headers and footers, sidebars, comment threads,
share/follow/subscribe blocks, related/trending/recommended teasers, post metadata (bylines, date lines, tags),
sign-in, ads, modals, print chrome, hidden elements, link clusters. Where the page marks its main content
(``<main>``, ``role="main"``, or an ``<article>`` that is the page's article: :func:`the_article`), only that part of
the page is read, with the same rules applied inside it (comments and share blocks inside an ``<article>`` go too).
Rules that read class names misfire on real themes, so what they keep is checked against the page's paragraph body
(:func:`~.paragraph_body.paragraph_body`): a reading that leaves it out, and says less, gives way to the body; on a
page that marks nothing, a reading that says much more than the body's column (:func:`~.paragraph_body.column`)
gives way to the column. On a forum topic, whose posts are all comments to those rules, the thread is what the
page says (:func:`_main_content`). Any page read as a few words that has ``<noscript>`` elements is read again as a
browser without scripts shows it (:func:`read_marked`): forums whose scripts render a topic serve it there.

The block marks of :mod:`scrapy_neardup.core.marks` are put into the HTML before it is parsed (:mod:`.tag_scan`),
and come out of the extraction in place for :mod:`scrapy_neardup.core.blocks`, which then removes the link lists
and host-template blocks that are left. See docs/content.md for what this keeps and measured figures.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

import numpy as np
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import ElementNode as RNode
from resiliparse.parse.html import HTMLTree

from .article import page_article
from .html import count_words, strip_tags, tag_positions
from .html import read_marked as block_read_marked
from .marks import BLOCK, LINK_END, LINK_START, clear_marks
from .normalize import scrub_unicode
from .paragraph_body import ParagraphBody, column, paragraph_body
from .tag_scan import LANDMARK, MARK_TABLE, TagScan, insert_marks, name_key, parse_hazard, tag_ends

__all__ = ["is_article_page", "marked_text", "read_marked"]

logger = logging.getLogger(__name__)

_MAIN_KEY = name_key("main")
_MAIN_OPEN = re.compile(rb"<main[\s>/]", re.IGNORECASE)
_MAIN_CLOSE = re.compile(rb"</main\s*>", re.IGNORECASE)
_ROLE = re.compile(rb"role", re.IGNORECASE)
_DECLARATIONS = (
    (b"og:type", re.compile(rb"[\"']?\s+content=[\"']?article", re.IGNORECASE)),
    (b'"@type"', re.compile(rb"\s*:\s*\[?\s*\"(?:News|Blog|Reportage|Analysis|Opinion|Review|Tech|Scholarly|Satirical)?"
                            rb"(?:Article|Posting)\"")),
)
_ARTICLE_KEY = name_key("article")
_SECTION_PARTS = np.array([name_key("header"), name_key("footer")], dtype=np.uint64)
_UL_KEY = name_key("ul")
_A_KEY = name_key("a")
_SLASH = ord("/")
#: Links with less text than this (bytes) are hidden from the extraction's link-density rules: it takes blocks
#: whose text is mostly links for link clusters, and a code signature made of type names, or an index entry, is
#: such a block. Menus of short links are left to the link-list rule of :mod:`scrapy_neardup.core.blocks`;
#: teasers, whose links are headlines, stay links.
SHORT_LINK = 24
#: A main content of fewer words is not trusted: the page's whole text is read instead.
MIN_MAIN_WORDS = 10
#: Where the page marks nothing, an extraction with more than this many times the words of the paragraph body's
#: column (and holding the body) has kept what surrounds the article (an author's bio, "most read" lists, a site's
#: blurb): the column is read instead.
COLUMN_EXCESS = 1.2
#: A page read as fewer words, with ``<noscript>`` elements, is read again with their content (:func:`read_marked`).
SCRIPT_SHELL_WORDS = 50
#: ... unless it has more bytes of HTML than this: a hostile page of a few words and millions of tags is not parsed
#: twice (a forum topic's page, scripts included, is a few hundred kilobytes).
SCRIPT_SHELL_BYTES = 2_000_000
#: A main content of fewer words beside a comment thread that makes it at least :data:`MIN_THREAD_WORDS` words is a
#: forum topic or a discussion: the thread is what the page says (:func:`_main_content`).
THREAD_PAGE_WORDS = 25
MIN_THREAD_WORDS = 50
_NOSCRIPT = re.compile(rb"<(/?)noscript\b", re.IGNORECASE)
_WRAP_OPEN, _WRAP_CLOSE = "<div><div>", "</div></div>"
_WRAP_OPEN_B, _WRAP_CLOSE_B = _WRAP_OPEN.encode(), _WRAP_CLOSE.encode()
_BLOCK_STR = chr(BLOCK)
_NOT_TEXT_CHARS = " \t\n\r\f" + "".join(map(chr, (BLOCK, LINK_START, LINK_END)))


def read_marked(data: bytes, tags: np.ndarray) -> tuple[str, bool, int | None, bool]:
    """:func:`marked_text`, the words of the visible text left out on the way where they were counted
    (:func:`scrapy_neardup.core.html.read_marked`), and whether the page declares itself an article
    (:func:`is_article_page`). An article's extraction also leaves out text inside the main content (comment
    threads, teasers): there, the words of the page's visible text (its body, scripts, styles and the other
    non-text elements aside, as :func:`~.html.count_words` counts them) less the words kept.

    A page read as fewer than :data:`SCRIPT_SHELL_WORDS` words that has ``<noscript>`` elements is read again as a
    browser without scripts shows it (and a crawler is one), their content included; that reading is kept when it
    says at least :data:`SCRIPT_SHELL_WORDS` words and more than twice the first: a forum whose scripts render the
    topic puts it in ``<noscript>`` for readers without them (Discourse, Flarum), while a page's "enable
    JavaScript" notice is a few words. A page of more than :data:`SCRIPT_SHELL_BYTES` bytes is read once."""
    reading = _read(data, tags)
    if len(data) > SCRIPT_SHELL_BYTES:
        return reading
    # Split no further than the words that tell: this runs on every page.
    if len(reading[0].split(maxsplit=SCRIPT_SHELL_WORDS - 1)) >= SCRIPT_SHELL_WORDS or _NOSCRIPT.search(data) is None:
        return reading
    shown = _NOSCRIPT.sub(rb"<\1div", data)
    without_scripts = _read(shown, tag_positions(shown))
    enough = max(SCRIPT_SHELL_WORDS, 2 * _words(reading[0]) + 1)
    return without_scripts if _words(without_scripts[0]) >= enough else reading


def _read(data: bytes, tags: np.ndarray) -> tuple[str, bool, int | None, bool]:
    """:func:`read_marked` of the page as it is."""
    if not is_article_page(data, tags):
        return (*block_read_marked(data, tags), False)
    text, marked, visible = _article_text(data, tags)
    # str.split() splits at the marks (Unicode whitespace), count_words at ASCII punctuation too
    return text, marked, max(0, visible - count_words(" ".join(text.split()))), True


def marked_text(data: bytes, tags: np.ndarray) -> tuple[str, bool]:
    """The text of UTF-8 HTML ``data`` (``tags``: where its ``<`` are) that ``"auto"`` mode starts from, with its
    block marks, and whether the page marks its main content.

    The main content of the marked part (``<main>``/``role="main"`` elements, else the page's ``<article>``) when
    it holds text, else of the whole page, as Resiliparse's main-content extraction finds it;
    :data:`~scrapy_neardup.core.marks.BLOCK` at every boundary of a block element and link text bracketed by
    :data:`~scrapy_neardup.core.marks.LINK_START` / :data:`~scrapy_neardup.core.marks.LINK_END`. Marker bytes
    already in ``data`` become spaces first. A page that does not declare itself an article
    (:func:`is_article_page`) is read by :func:`scrapy_neardup.core.html.marked_text` instead.
    """
    text, marked, _, _ = read_marked(data, tags)
    return text, marked


def _article_text(data: bytes, tags: np.ndarray) -> tuple[str, bool, int]:
    """:func:`marked_text` of an article page, and the words of its visible text
    (:func:`~.paragraph_body.paragraph_body`)."""
    data = clear_marks(data)
    scan = TagScan.of(data, tags)
    hazard, _, _ = parse_hazard(scan, data, tags)
    marks = scan.table(MARK_TABLE)
    data = insert_marks(_retagged(data, tags, scan), tags, scan, marks)
    if hazard:
        logger.debug("HTML nested too deep for a linear-time parse: tags stripped instead")
        text = strip_tags(scrub_unicode(data.decode("utf-8", "replace"), keep_marks=True))
        return text, False, count_words(text)
    body, visible = paragraph_body(data)
    landmark = scan.keys[(marks & LANDMARK != 0) & scan.letter & ~scan.closing]
    mains = int((landmark == _MAIN_KEY).sum())
    if mains == 1:
        # Most pages that mark their main content do it with <main>: only that span is parsed.
        span = _main_span(data, body)
        if span is not None:
            return span, True, visible
    tree = HTMLTree.parse_from_bytes(data, "utf-8", "replace")
    root = tree.body
    if root is None:
        return "", False, visible
    has_main = mains > 0 or _ROLE.search(data) is not None
    has_article = bool((landmark == _ARTICLE_KEY).any())
    if has_main or has_article:
        kept = _marked_part(root, has_main, has_article)
        if kept:
            # The marked part as a document of its own (the extraction reads a whole tree), two levels down as it
            # is on a page: the extraction takes lists near the top of a body for menus.
            part = HTMLTree.parse(_WRAP_OPEN + "".join(node.html for node in kept) + _WRAP_CLOSE)
            text = _main_content(part, body)
            if _has_text(text):
                return _with_heading(text, part), True, visible
    return _with_heading(_main_content(tree, body, marked=False), tree), False, visible


def _main_span(data: bytes, body: ParagraphBody | None) -> str | None:
    """The main content of the bytes from the first ``<main`` to the end of the last ``</main>`` (as
    :func:`marked_text` reads a marked part), or None when there is no such span or it holds no text."""
    first = _MAIN_OPEN.search(data)
    if first is None:
        return None
    last = max(_MAIN_CLOSE.finditer(data, first.end()), key=lambda match: match.end(), default=None)
    if last is None:
        return None
    part = HTMLTree.parse_from_bytes(_WRAP_OPEN_B + data[first.start():last.end()] + _WRAP_CLOSE_B, "utf-8",
                                     "replace")
    text = _main_content(part, body)
    return _with_heading(text, part) if _has_text(text) else None


def _with_heading(text: str, tree: HTMLTree) -> str:
    """``text`` with the page's first ``<h1>`` before it when the extraction left the heading out (it takes a
    heading inside a "heading" container, or made of links, for a site header): on short pages of one site the
    title is often what tells them apart."""
    body = tree.body
    heading = body.query_selector("h1") if body is not None else None
    if heading is None:
        return text
    title = _text(heading)
    # str.split() splits at the marks too (they are Unicode whitespace).
    if not _has_text(title) or " ".join(title.split()) in " ".join(text.split()):
        return text
    return _BLOCK_STR + title + _BLOCK_STR + text


def _main_content(tree: HTMLTree, body: ParagraphBody | None, marked: bool = True) -> str:
    """The main content of ``tree``; all of its text when the main content is shorter than
    :data:`MIN_MAIN_WORDS` (a short page's own words may be where the rules see boilerplate: a lone list, a
    date line). Where it is shorter than :data:`THREAD_PAGE_WORDS`, and the comment thread beside it makes it at
    least :data:`MIN_THREAD_WORDS` words, it is read with the thread: on a forum topic every post is a comment to the
    extraction's rules, and the first post is the topic.

    Where the main content leaves out the page's paragraph body ``body``
    (:func:`~.paragraph_body.paragraph_body`), has fewer words than it, and the extraction did not leave it out as a
    comment thread, the body is read instead: a class name the extraction's rules match ("share", "newsletter") on
    an element that wraps the article takes the article with it, and a ``<main>`` may hold a call to action while
    the article lies before it.

    ``marked``: whether ``tree`` is the part of the page it marks as its main content. Where it is not (a page
    that marks nothing), an extraction that holds the paragraph body and says more than :data:`COLUMN_EXCESS`
    times the words of the body's column (:func:`~.paragraph_body.column`) gives way to the column: without
    ``<aside>`` and ``<footer>`` to go by, the extraction keeps the widgets and blurbs around an article."""
    text = _extract(tree, main_content=True, comments=False, post_meta=False)
    words = _words(text)
    if words < THREAD_PAGE_WORDS:
        thread = _extract(tree, main_content=True, comments=True, post_meta=False)
        if _words(thread) >= MIN_THREAD_WORDS and (body is None or _holds(thread, body)):
            logger.debug("a comment thread beside a main content of a few words: the thread read")
            return thread
    if words < MIN_MAIN_WORDS:
        text = _extract(tree, main_content=False)
    if body is not None and _misses(text, body) and not _a_comment_thread(body):
        logger.debug("main content without the page's paragraph body: the body read instead")
        return _read_body(body)
    # The column holds the body, so a reading within COLUMN_EXCESS of the body's words is within it of the column's:
    # the walk up the tree is left out for it.
    if not marked and body is not None and _words(text) > COLUMN_EXCESS * body.words and _holds(text, body):
        wider = column(body)
        if _words(text) > COLUMN_EXCESS * wider.words:
            logger.debug("main content beyond the paragraph body's column: the column read instead")
            return _read_body(wider)
    return text


def _extract(tree: HTMLTree, main_content: bool, comments: bool = True, post_meta: bool = True) -> str:
    return extract_plain_text(tree, preserve_formatting=False, main_content=main_content, list_bullets=False,
                              alt_texts=False, comments=comments, post_meta=post_meta)



def _misses(text: str, body: ParagraphBody) -> bool:
    """Whether ``text`` leaves out the paragraph body ``body`` and has fewer words than it."""
    return _words(text) < body.words and not _holds(text, body)


def _holds(text: str, body: ParagraphBody) -> bool:
    """Whether ``text`` holds ``body``'s sample (whitespace aside: the extraction and lexbor space the text of
    inline elements differently)."""
    return body.sample in "".join(text.split())


def _a_comment_thread(body: ParagraphBody) -> bool:
    """Whether the extraction of the whole page leaves ``body`` out as a comment thread (it holds it when comment
    sections count as main content, not otherwise)."""
    tree = HTMLTree.parse_from_bytes(body.page, "utf-8", "replace")
    return _holds(_extract(tree, main_content=True, comments=True, post_meta=False), body) and not _holds(
        _extract(tree, main_content=True, comments=False, post_meta=False), body)


def _read_body(body: ParagraphBody) -> str:
    """The text of a paragraph body: its main content, or all of it if the extraction's rules leave it out again."""
    part = HTMLTree.parse(_WRAP_OPEN + body.html + _WRAP_CLOSE)
    text = _extract(part, main_content=True, comments=False, post_meta=False)
    return text if _holds(text, body) else _extract(part, main_content=False)


def _words(text: str) -> int:
    return len(text.split())  # the marks are Unicode whitespace


def is_article_page(data: bytes, tags: np.ndarray | None = None) -> bool:
    """Whether HTML ``data`` declares itself an article: an ``og:type`` of ``article``, a schema.org ``Article``,
    ``NewsArticle``, ``BlogPosting``... in its JSON-LD, or an ``<article>`` element. Documentation pages, which are
    read faster and whole by :func:`scrapy_neardup.core.html.marked_text` (their lists and signatures are their
    content), do not. ``tags``: where the ``<`` of ``data`` are, when known (:func:`~.tag_scan.tag_positions`)."""
    # Substring searches run at memory speed; a regular expression over the whole page would cost a tenth of
    # the page's sketching. Only the bytes after each marker are matched.
    if _has_article_tag(data, tags):  # upper-case tags are rare enough to be read the other way
        return True
    marker, after = _DECLARATIONS[0]
    if _declared(data, marker, after, data.find(marker)):
        return True
    # '"@type"': the '@' are found by memchr (few on a page), each checked in place; a page with many is searched
    # for the whole marker instead.
    marker, after = _DECLARATIONS[1]
    at = data.find(b"@")
    for _ in range(_AT_SIGNS):
        if at < 0:
            return False
        if data.startswith(marker, at - 1) and _declared(data, marker, after, at - 1):
            return True
        at = data.find(b"@", at + 1)
    return _declared(data, marker, after, data.find(marker, max(at - 1, 0)) if at >= 0 else -1)


# '@' checked one by one before the search for '"@type"' takes over.
_AT_SIGNS = 64
_ARTICLE_TAG = b"<article"


def _declared(data: bytes, marker: bytes, after: re.Pattern[bytes], at: int) -> bool:
    """Whether one of the occurrences of ``marker`` in ``data`` from ``at`` on (-1: none) is followed by ``after``."""
    while at >= 0:
        if after.match(data, at + len(marker), at + len(marker) + 64):
            return True
        at = data.find(marker, at + 1)
    return False


def _has_article_tag(data: bytes, tags: np.ndarray | None) -> bool:
    """``b"<article" in data``, read at the ``<`` (``tags``) when they are known: the tags whose next two bytes are
    ``ar`` (few: ``<a `` is not), each compared whole."""
    if tags is None:
        return _ARTICLE_TAG in data
    arr = np.frombuffer(data, dtype=np.uint8)
    near = tags[tags + 2 < arr.size]
    near = near[(arr[near + 1] == ord("a")) & (arr[near + 2] == ord("r"))]
    return any(data.startswith(_ARTICLE_TAG, at) for at in near.tolist())


def _retagged(data: bytes, tags: np.ndarray, scan: TagScan) -> bytes:
    """``data`` with three kinds of tags renamed in place (same length: the tag positions hold):

    * ``<ul>`` to ``<ol>``: the extraction drops every ``<ul>`` near the top of a page or with a fifth of its text
      in links, which takes an index page's entries ("name: a link to its class") for a menu; lists are left to
      the link-list rule of :mod:`scrapy_neardup.core.blocks`, which knows an index entry from a menu;
    * an empty XHTML anchor ``<a id="x"/>`` to ``<q id="x"/>``: an HTML parser reads it as an ``<a>`` left open,
      re-opened in every later paragraph, and the whole page would be link text; ``<q>`` is closed with its
      parent;
    * ``<header>``/``<footer>`` inside a ``<main>`` or an ``<article>`` to an element of no meaning (``<xeader>``,
      ``<xooter>``): there they are that part's own header and footer (its title and byline, and on some sites the
      whole article), not the page's banner and footer that the extraction removes (HTML-AAM maps them to
      ``banner``/``contentinfo`` only outside such parts).
    """
    lists = (scan.keys == _UL_KEY) & scan.letter
    anchors = _short_links(data, tags, scan)
    parts = _section_parts(scan)
    if not lists.any() and not anchors.any() and not parts.any():
        return data
    arr = np.frombuffer(data, dtype=np.uint8).copy()
    arr[tags[lists] + 1 + scan.closing[lists]] = ord("o")
    arr[tags[anchors] + 1 + scan.closing[anchors]] = ord("q")
    arr[tags[parts] + 1 + scan.closing[parts]] = ord("x")
    return arr.tobytes()


def _section_parts(scan: TagScan) -> np.ndarray:
    """Which tags are the start or end tag of a ``<header>`` or ``<footer>`` inside a ``<main>`` or an
    ``<article>``: where the count of those open before it (start tags less end tags) is positive."""
    named = np.isin(scan.keys, _SECTION_PARTS) & scan.letter
    if not named.any():
        return named
    content = ((scan.keys == _MAIN_KEY) | (scan.keys == _ARTICLE_KEY)) & scan.letter
    steps = np.where(content, np.where(scan.closing, -1, 1), 0)
    open_before = np.cumsum(steps) - steps
    return named & (open_before > 0)


def _short_links(data: bytes, tags: np.ndarray, scan: TagScan) -> np.ndarray:
    """Which tags are the start or end tag of a link whose text is shorter than :data:`SHORT_LINK` bytes with no
    tag inside (a type name in a signature, a menu entry), or of an empty XHTML anchor ``<a id="x"/>``."""
    is_a = (scan.keys == _A_KEY) & scan.letter
    start = np.flatnonzero(is_a & ~scan.closing)
    out = np.zeros(tags.size, dtype=bool)
    if start.size == 0:
        return out
    arr = np.frombuffer(data, dtype=np.uint8)
    tag_end = tag_ends(data, tags[start])
    closed = tag_end >= 0
    start, tag_end = start[closed], tag_end[closed]
    empty = arr[tag_end - 1] == _SLASH
    following = np.minimum(start + 1, tags.size - 1)
    next_is_end = (following > start) & is_a[following] & scan.closing[following]
    gap = np.where(following > start, tags[following], arr.size) - tag_end - 1
    short = next_is_end & (gap < SHORT_LINK)
    out[start[empty | short]] = True
    out[following[short & ~empty]] = True
    return out


def _marked_part(body: RNode, has_main: bool, has_article: bool) -> list[RNode]:
    """The outermost ``<main>``/``role="main"`` element if it holds text (of several, as a page may have one: the
    largest if it holds most of their words, else none: cards of teasers), else the page's article, else none."""
    if has_main:
        mains = _outermost(body.query_selector_all("main, [role=main]"))
        chosen = page_article([len(_text(node).split()) for node in mains]) if len(mains) > 1 else 0
        if mains and chosen is not None and _has_text(_text(mains[chosen])):
            return [mains[chosen]]
    if has_article:
        articles = _page_article(_outermost(body.query_selector_all("article")))
        if articles and any(_has_text(_text(node)) for node in articles):
            return articles
    return []


def _page_article(nodes: list[RNode]) -> list[RNode] | None:
    """The outermost ``<article>`` elements ``nodes`` reduced to the page's article: all of them if there is one,
    else the one :func:`scrapy_neardup.core.article.page_article` names, else None (teaser cards, a list of
    posts)."""
    if len(nodes) < 2:
        return nodes
    chosen = page_article([_own_words(node) for node in nodes])
    return None if chosen is None else [nodes[chosen]]


def _own_words(node: RNode) -> int:
    """Words of ``node`` outside the ``<article>`` elements nested in it."""
    nested = _outermost(node.query_selector_all("article"))
    return len(_text(node).split()) - sum(len(_text(inner).split()) for inner in nested)


def _outermost(nodes: Iterable[RNode]) -> list[RNode]:
    """``nodes`` (document order) without those inside another of them: nested elements are read once."""
    chosen: set[RNode] = set()
    out = []
    for node in nodes:
        parent = node.parent
        while parent is not None and parent not in chosen:
            parent = parent.parent
        if parent is None and node not in chosen:
            chosen.add(node)
            out.append(node)
    return out


def _text(node: RNode) -> str:
    return node.text or ""


def _has_text(text: str) -> bool:
    return bool(text.strip(_NOT_TEXT_CHARS))
