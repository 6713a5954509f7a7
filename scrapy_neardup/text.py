"""From raw page content (HTML, text or bytes) to the normalized text that is shingled.

Normalization makes the sketch insensitive to differences that never make two pages different documents:
Unicode compatibility forms (NFKC), letter case (``str.casefold``, which also handles the Russian and German
cases that ``lower`` misses), runs of whitespace, and markup. Invalid Unicode (lone surrogates, NUL and other
control characters) is replaced or dropped rather than raised on, so hostile pages never stop a crawl.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

#: Default cap on the characters of raw content looked at; a longer page is truncated and flagged.
DEFAULT_MAX_CHARS = 8_000_000

# C0/C1 controls other than whitespace, plus the Unicode noncharacters U+FFFE/U+FFFF.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffe\uffff]")
# Non-ASCII characters that are not word characters (punctuation, symbols, odd spaces, C1 controls).
_NON_ASCII_SEPARATOR = re.compile(r"[^\w\x00-\x7f]+")
# ASCII bytes that separate words: everything but letters, digits and underscore. Bytes >= 128 belong to
# UTF-8 sequences of characters that survived the regex above, so they are word bytes.
_SEPARATOR_BYTE = np.array(
    [not (chr(b).isalnum() or chr(b) == "_") if b < 128 else False for b in range(256)], dtype=bool
)
_HTML_SNIFF = re.compile(
    r"<\s*(?:!doctype\s+html|html|head|body|div|p|span|a\s|table|br|script|style|title|meta|h[1-6])\b",
    re.IGNORECASE,
)
_DROPPED_TAGS = ("script", "style", "noscript", "template", "svg", "math", "iframe", "object")
# Elements after which text continues as a new block: a separator keeps words from gluing together.
_BLOCK_TAGS = (
    "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "fieldset", "figcaption",
    "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav",
    "ol", "p", "pre", "section", "table", "td", "th", "title", "tr", "ul",
)


@dataclass(frozen=True, slots=True)
class CleanText:
    """Normalized text plus what happened on the way.

    Attributes:
        utf8: the normalized text as UTF-8 (single spaces, no leading or trailing space; may be empty).
        truncated: the raw content was longer than the cap and only its head was used.
    """

    utf8: bytes
    truncated: bool = False

    @property
    def text(self) -> str:
        """The normalized text as a string."""
        return self.utf8.decode("utf-8")


def to_str(content: str | bytes | bytearray | memoryview) -> str:
    """Decode bytes as UTF-8 (invalid sequences become U+FFFD); strings pass through."""
    if isinstance(content, str):
        return content
    if isinstance(content, bytes | bytearray | memoryview):
        return bytes(content).decode("utf-8", errors="replace")
    raise TypeError(f"expected text or bytes, got {type(content).__name__}")


def looks_like_html(text: str) -> bool:
    """Whether the first 4 KiB of ``text`` contain a typical HTML tag."""
    return _HTML_SNIFF.search(text[:4096]) is not None


def html_to_text(html: str) -> str:
    """Visible text of an HTML document: scripts, styles and other non-text elements removed.

    Block-level elements are separated by whitespace so that ``<p>a</p><p>b</p>`` gives two words.
    """
    import lxml.etree
    import lxml.html

    # lxml refuses strings with an XML encoding declaration and chokes on NUL and lone surrogates.
    cleaned = scrub_unicode(html)
    if not cleaned.strip():
        return ""
    try:
        root = lxml.html.document_fromstring(cleaned)
    except (lxml.etree.ParserError, ValueError):
        logger.debug("unparsable HTML; using it as plain text")
        return re.sub(r"<[^>]*>", " ", cleaned)
    lxml.etree.strip_elements(root, *_DROPPED_TAGS, lxml.etree.Comment, with_tail=False)
    for element in root.iter(*_BLOCK_TAGS):
        element.tail = "\n" + (element.tail or "")
    return str(root.text_content())


def scrub_unicode(text: str) -> str:
    """Replace lone surrogates with U+FFFD and drop control characters (NUL included)."""
    if not text.isascii():
        text = text.encode("utf-8", errors="surrogatepass").decode("utf-8", errors="replace")
    return _CONTROL.sub("", text)


def normalize(text: str) -> str:
    """NFKC, case-fold, and words (runs of letters, digits, underscore) joined by single spaces.

    Punctuation, symbols and control characters separate words like whitespace does, so ``"Hello, World!"``
    and ``"hello world"`` normalize alike: edits to punctuation do not make pages different.
    """
    return normalize_utf8(text).decode("utf-8")


def normalize_utf8(text: str) -> bytes:
    """:func:`normalize`, returned as UTF-8 bytes: the form shingling and fingerprinting consume.

    ASCII separators are found and collapsed over the UTF-8 bytes with numpy (a regex over the string is
    several times slower on large pages); only non-ASCII text pays for a regex.
    """
    if not text.isascii():
        text = text.encode("utf-8", errors="surrogatepass").decode("utf-8", errors="replace")
        text = _NON_ASCII_SEPARATOR.sub(" ", unicodedata.normalize("NFKC", text))
    data = np.frombuffer(text.casefold().encode("utf-8"), dtype=np.uint8)
    space = _SEPARATOR_BYTE[data]
    if not space.any():
        return data.tobytes()
    # Keep a space only where the byte before it is not one; leading and trailing spaces go.
    keep = ~space
    keep[1:] |= ~space[:-1]
    nonspace = np.flatnonzero(~space)
    if nonspace.size == 0:
        return b""
    keep[: nonspace[0]] = False
    keep[nonspace[-1] + 1 :] = False
    out = data[keep]
    out[space[keep]] = 32
    return out.tobytes()


def clean_text(
    content: str | bytes | bytearray | memoryview,
    is_html: bool | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> CleanText:
    """Raw page content to normalized text.

    Args:
        content: page text, HTML, or bytes (decoded as UTF-8).
        is_html: ``True``/``False`` to force; ``None`` sniffs the first 4 KiB for HTML tags.
        max_chars: only the first ``max_chars`` characters of the content are used (bounded time and memory
            on hostile pages); ``CleanText.truncated`` tells when the cap applied.
    """
    raw = to_str(content)
    truncated = len(raw) > max_chars
    if truncated:
        raw = raw[:max_chars]
    if is_html is None:
        is_html = looks_like_html(raw)
    if is_html:
        raw = html_to_text(raw)
    return CleanText(normalize_utf8(raw), truncated)
