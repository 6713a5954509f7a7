"""From raw page content (HTML, text or bytes) to the normalized text that is shingled.

The steps live in their own modules: :mod:`scrapy_neardup.core.html` (HTML to visible text, main content, block
marks), :mod:`scrapy_neardup.core.normalize` (Unicode normalization), :mod:`scrapy_neardup.core.blocks` (a page's
own text). This module chains them and bounds what hostile content can cost.

Hostile sizes are bounded: only the first ``max_chars`` characters (:data:`DEFAULT_MAX_CHARS`) of a page are
used, bytes are decoded only as far as those characters go, HTML is cut before its
``max_chars // CHARS_PER_TAG``-th tag, and NFKC's output (which can be 18 times its input) is capped at
``max_chars`` characters; whichever cap applies sets ``CleanText.truncated`` (``Sketch.truncated``, counted by
the pipeline and the ``neardup`` command). So a 50 MB page costs what 8 MB cost: at most about 2.5 s and
250 MB beyond the page itself (tests/reliability measures it, hostile pages included). Binary data
(:func:`looks_binary`) is recognized so that callers can skip it instead of sketching garbage.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .html import looks_like_html, markup_to_text
from .main_content import read_marked
from .marks import LINK_END, LINK_START
from .normalize import LINES, MARKED, normalize_capped

#: Default cap on the characters of raw content looked at; a longer page is truncated and flagged.
DEFAULT_MAX_CHARS = 8_000_000
#: HTML is also cut before its ``max_chars // CHARS_PER_TAG``-th tag (500,000 tags under the default cap): bounded
#: parse time and memory per page; real pages have one tag per 30-100 characters and meet the character cap first.
CHARS_PER_TAG = 16
#: What of a page is sketched: ``"auto"`` (the default: what the page says itself, see
#: :mod:`scrapy_neardup.core.blocks`), ``"main"`` (the main content the page marks) or ``"body"`` (all visible text,
#: the title included). See :func:`scrapy_neardup.core.html.html_to_text` and :func:`clean_text`.
ContentMode = Literal["auto", "main", "body"]
CONTENT_MODES: tuple[ContentMode, ...] = ("auto", "main", "body")
DEFAULT_CONTENT: ContentMode = "auto"
#: Characters sampled at the head of content to tell text from binary data (see :func:`looks_binary`).
BINARY_SAMPLE = 8192
#: Content is binary when more than this share of the sample is control characters, lone surrogates or
#: bytes that are not UTF-8 (random bytes give about 0.5; text in a legacy 8-bit encoding read as UTF-8 with
#: a few accented letters stays under 0.05).
BINARY_SHARE = 0.10
# UTF-8 takes at most 4 bytes a character: the bytes beyond 4 * max_chars are never decoded.
_MAX_UTF8_BYTES = 4
# What text does not contain: C0/C1 controls other than whitespace, lone surrogates, and U+FFFD (what bytes
# that are not UTF-8 decode to).
_NOT_TEXT = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffd]")
# Leading bytes of common binary formats, each with a byte that text does not start with (PDF aside: a text
# starting with "%PDF-" is no text). PDF, PNG, gzip, zip (docx, xlsx, epub...), JPEG, xz, 7z, zstd, ELF, OLE2,
# WebAssembly. Other formats are caught by their share of non-text bytes.
_BINARY_SIGNATURES = (
    b"%PDF-", b"\x89PNG\r\n\x1a\n", b"\x1f\x8b", b"PK\x03\x04", b"\xff\xd8\xff", b"\xfd7zXZ\x00",
    b"7z\xbc\xaf\x27\x1c", b"\x28\xb5\x2f\xfd", b"\x7fELF", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", b"\x00asm",
)
_LT = 0x3C


@dataclass(frozen=True, slots=True)
class CleanText:
    """Normalized text plus what happened on the way.

    Attributes:
        utf8: the normalized text as UTF-8 (single spaces, no leading or trailing space; may be empty). In
            ``"auto"`` mode it still holds the block marks of :mod:`scrapy_neardup.core.marks`.
        truncated: the raw content was longer than the cap and only its head was used.
        marked: ``"auto"`` mode: the text is the main content the page marks (``<main>``, ``role="main"``,
            ``<article>``): what it says, with no template to learn.
        outside_words: ``"auto"`` mode: the words of the page's visible text left out before ``utf8`` (its
            ``nav``/``header``/``footer``/``aside``, what lies outside its marked main content), ``None`` where
            they were not counted (several main elements).
        article: ``"auto"`` mode: the page declares itself an article
            (:func:`scrapy_neardup.core.main_content.is_article_page`): its passages of prose are what it says
            (:func:`scrapy_neardup.core.blocks.passages`).
    """

    utf8: bytes
    truncated: bool = False
    marked: bool = False
    outside_words: int | None = 0
    article: bool = False

    @property
    def text(self) -> str:
        """The normalized text as a string."""
        return self.utf8.decode("utf-8")


def looks_binary(content: str | bytes | bytearray | memoryview) -> bool:
    """Whether ``content`` is binary data (a PDF, an image, compressed bytes...) rather than text.

    Looks at the first :data:`BINARY_SAMPLE` characters (or bytes) only, so it costs microseconds whatever the
    size: a known binary signature at the start, or more than :data:`BINARY_SHARE` of the sample made of control
    characters, lone surrogates and bytes that are not UTF-8. A spider that puts ``response.body`` of a PDF into
    the text field gets its item passed through unchecked instead of garbage sketched as text.
    """
    if isinstance(content, str):
        sample = content[:BINARY_SAMPLE]
        head = sample[:16].encode("latin-1", errors="replace")
    else:
        head = bytes(memoryview(content)[:BINARY_SAMPLE])
        # final=False: a character cut by the sample's end is not counted as an invalid byte.
        sample = codecs.getincrementaldecoder("utf-8")("replace").decode(head, final=False)
    if head.startswith(_BINARY_SIGNATURES):
        return True
    return len(_NOT_TEXT.findall(sample)) > BINARY_SHARE * len(sample)


def clean_text(
    content: str | bytes | bytearray | memoryview,
    is_html: bool | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    mode: ContentMode = "body",
    *,
    collapse: bool = True,
) -> CleanText:
    """Raw page content to normalized text.

    Args:
        content: page text, HTML, or bytes (decoded as UTF-8).
        is_html: ``True``/``False`` to force; ``None`` sniffs the first 4 KiB for HTML tags.
        max_chars: only the first ``max_chars`` characters of the content are used (bounded time and memory
            on hostile pages); HTML is also cut at ``max_chars // CHARS_PER_TAG`` tags and the normalized text
            at ``max_chars`` characters. ``CleanText.truncated`` tells when a cap applied.
        mode: ``"body"`` or ``"main"``: the part of an HTML page used
            (:func:`scrapy_neardup.core.html.html_to_text`), plain text whole. ``"auto"``: the text that mode starts
            from (:func:`scrapy_neardup.core.html.marked_text`), its block marks kept, plain text one block a line;
            :func:`scrapy_neardup.core.blocks.split_blocks` reads the blocks.
        collapse: ``False``: runs of spaces in the normalized text are left as they are (the same words, one pass
            over the text fewer, for callers that read words only, as sketching does).
    """
    raw, truncated = _head(content, max_chars)
    if is_html is None:
        is_html = looks_like_html(raw)
    marked = article = False
    outside: int | None = 0
    if is_html:
        data, tags, cut = _cap_tags(raw.encode("utf-8", "surrogatepass"), max(1, max_chars // CHARS_PER_TAG))
        truncated |= cut
        if mode == "auto":
            raw, marked, outside, article = read_marked(data, tags)
            raw = _addresses_as_links(raw)
        else:
            raw = markup_to_text(data, tags, mode)
    if mode == "auto":
        # Plain text: each line a block, its line feeds made block marks by the folding itself (which makes any
        # mark the text holds a space).
        utf8, cut = normalize_capped(raw, max_chars, MARKED if is_html else LINES, collapse)
    else:
        utf8, cut = normalize_capped(raw, max_chars, collapse=collapse)
    return CleanText(utf8, truncated or cut, marked, outside, article)


#: A web address written out in a page's text ("Find this article at: https://..."), to its next space or mark.
#: (No ``\b`` before it: a word boundary test at every position costs five times the search.)
_ADDRESS = re.compile(r"(?:https?://|www\.)\S+")
_AS_LINK = chr(LINK_START) + r"\g<0>" + chr(LINK_END)


def _addresses_as_links(raw: str) -> str:
    """``raw`` (marked text of an HTML page) with the web addresses written out in it read as link text, as if each
    were the text of an ``<a>``: a line that names a page's address is a link, not a paragraph of prose (the words
    of an address are its headline's slug) and not part of the page's own words on a page of links."""
    if "://" not in raw and "www." not in raw:  # two substring searches; the expression only on pages with one
        return raw
    return _ADDRESS.sub(_AS_LINK, raw)


def _head(content: str | bytes | bytearray | memoryview, max_chars: int) -> tuple[str, bool]:
    """The first ``max_chars`` characters of ``content`` and whether there was more.

    Bytes are decoded only up to ``4 * max_chars`` of them (at least ``max_chars`` characters, as a character
    takes at most 4 bytes and an invalid byte decodes to one U+FFFD): a 1 GB body is never decoded whole.
    """
    if isinstance(content, str):
        raw, truncated = content, False
    elif isinstance(content, bytes | bytearray | memoryview):
        data = memoryview(content)
        if data.format != "B" or not data.c_contiguous:
            data = memoryview(data.tobytes())
        limit = _MAX_UTF8_BYTES * max_chars
        truncated = data.nbytes > limit
        raw = str(data[:limit] if truncated else data, "utf-8", "replace")
    else:
        raise TypeError(f"expected text or bytes, got {type(content).__name__}")
    if len(raw) > max_chars:
        raw, truncated = raw[:max_chars], True
    return raw, truncated


def _cap_tags(data: bytes, max_tags: int) -> tuple[bytes, np.ndarray, bool]:
    """UTF-8 ``data`` cut before its ``max_tags + 1``-th ``<`` (bounded parse time and memory), where the ``<``
    of the result are, and whether it was cut.

    Counting ``<`` also counts a literal ``<`` in text: a few more cuts on pathological pages, never fewer. ``<``
    is ASCII, so the cut never splits a character.
    """
    tags = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _LT)
    if tags.size <= max_tags:
        return data, tags, False
    return data[: tags[max_tags]], tags[:max_tags], True
