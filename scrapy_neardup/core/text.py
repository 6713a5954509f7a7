"""From raw page content (HTML, text or bytes) to the normalized text that is shingled.

Normalization makes the sketch insensitive to differences that never make two pages different documents:
Unicode compatibility forms (NFKC), letter case (``str.casefold``, which also handles the Russian and German
cases that ``lower`` misses), runs of whitespace, and markup. Invalid Unicode (lone surrogates, NUL and other
control characters) is replaced or dropped rather than raised on, so hostile pages never stop a crawl.

Hostile sizes are bounded: only the first ``max_chars`` characters (:data:`DEFAULT_MAX_CHARS`) of a page are
used, bytes are decoded only as far as those characters go, HTML is cut before its
``max_chars // CHARS_PER_TAG``-th tag, and NFKC's output (which can be 18 times its input) is capped at
``max_chars`` characters; whichever cap applies sets ``CleanText.truncated`` (``Sketch.truncated``, counted by
the pipeline and the ``neardup`` command). So a 50 MB page costs what 8 MB cost: at most about 2.5 s and
250 MB beyond the page itself (tests/reliability measures it, hostile pages included). Binary data
(:func:`looks_binary`) is recognized so that callers can skip it instead of sketching garbage.

HTML is parsed by lexbor (selectolax's ``LexborHTMLParser``), an HTML5 parser in C. HTML5 tree building is
quadratic on some hostile markup (thousands of unclosed nested blocks; unclosed formatting elements with distinct
attributes, which are re-opened in every later paragraph; end tags that close nothing, each of which searches the
whole stack of open elements), so a vectorized scan of the tags
(:func:`_scan_tags`) sends such pages to a parser-free tag stripper instead (:func:`_strip_tags`), whose text
is the same but for markup subtleties.
"""

from __future__ import annotations

import codecs
import functools
import html as html_lib
import logging
import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

import numpy as np
from selectolax.lexbor import LexborHTMLParser

logger = logging.getLogger(__name__)

#: Default cap on the characters of raw content looked at; a longer page is truncated and flagged.
DEFAULT_MAX_CHARS = 8_000_000
#: HTML is also cut before its ``max_chars // CHARS_PER_TAG``-th tag (500,000 tags under the default cap): bounded
#: parse time and memory per page; real pages have one tag per 30-100 characters and meet the character cap first.
CHARS_PER_TAG = 16
#: What part of an HTML page is sketched: ``"body"`` (all visible text, the title included) or ``"main"`` (the
#: main content: see :func:`html_to_text`).
ContentMode = Literal["body", "main"]
CONTENT_MODES: tuple[ContentMode, ...] = ("body", "main")
#: Pages whose tags could nest deeper than this go to the tag stripper: each block start tag checks the stack of
#: open elements, so the parse costs up to (tags x depth) steps; 512 is the depth Blink caps its DOM at.
MAX_NESTING = 512
#: ... and pages where (unclosed formatting elements) x (tags) exceeds this: the parser re-opens every unclosed
#: formatting element (``<b>``, ``<font>``...) in each later block, so ``<p><b id=1>x<p><b id=2>x...`` builds
#: n^2 / 2 elements (8,000 repeats: 24 s and gigabytes).
MAX_REOPENED = 1_000_000
#: Characters sampled at the head of content to tell text from binary data (see :func:`looks_binary`).
BINARY_SAMPLE = 8192
#: Content is binary when more than this share of the sample is control characters, lone surrogates or
#: bytes that are not UTF-8 (random bytes give about 0.5; text in a legacy 8-bit encoding read as UTF-8 with
#: a few accented letters stays under 0.05).
BINARY_SHARE = 0.10
# Long non-ASCII texts get NFKC in pieces of about this many characters (see _nfkc).
_NFKC_PIECE = 1 << 16
_ASCII_CHAR = re.compile(r"[\x00-\x7f]")
# UTF-8 takes at most 4 bytes a character: the bytes beyond 4 * max_chars are never decoded.
_MAX_UTF8_BYTES = 4

# C0/C1 controls other than whitespace, plus the Unicode noncharacters U+FFFE/U+FFFF.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffe\uffff]")
# Non-ASCII characters that are not word characters (punctuation, symbols, odd spaces, C1 controls).
_NON_ASCII_SEPARATOR = re.compile(r"[^\w\x00-\x7f]+")
# ASCII bytes that separate words: everything but letters, digits and underscore. Bytes >= 128 belong to
# UTF-8 sequences of characters that survived the regex above, so they are word bytes.
_SEPARATOR_BYTE = np.array(
    [not (chr(b).isalnum() or chr(b) == "_") if b < 128 else False for b in range(256)], dtype=bool
)
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
# For _strip_tags: an unclosed comment or dropped element runs to the end, as it does for a parser.
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_DROPPED_ELEMENT = re.compile(
    r"<(script|style|noscript|template|svg|math|iframe|object)\b.*?(?:</\1\s*>|\Z)", re.DOTALL | re.IGNORECASE
)
_TAG = re.compile(r"<[^>]*>")
# bytes.translate tables: ASCII separators to spaces; _FOLD also lower-cases A-Z (ASCII's part of casefold).
_SPACE_ONLY = bytes(32 if _SEPARATOR_BYTE[b] else b for b in range(256))
_FOLD = bytes(32 if _SEPARATOR_BYTE[b] else b + 32 if 65 <= b <= 90 else b for b in range(256))
_SPACE = 32
# A non-ASCII text with more than one run of non-ASCII characters per this many bytes is folded whole.
_SPARSE_RUNS = 64
_RUN_CACHE: dict[bytes, bytes] = {}
_RUN_CACHE_SIZE = 1 << 16
# NFKC turns one character into at most 18 (U+FDFA).
_NFKC_MAX_GROWTH = 18
_HTML_SNIFF = re.compile(
    r"<\s*(?:!doctype\s+html|html|head|body|div|p|span|a\s|table|br|script|style|title|meta|h[1-6])\b",
    re.IGNORECASE,
)
# Elements whose content is not page text (template content is kept out of the tree by the parser itself).
_DROPPED_NAMES = ("script", "style", "noscript", "template", "svg", "math", "iframe", "object")
_DROPPED = ",".join(_DROPPED_NAMES)
# Boilerplate dropped in "main" mode: the elements and their ARIA landmark equivalents.
_BOILERPLATE = (
    "nav,header,footer,aside,[role=navigation],[role=banner],[role=contentinfo],[role=complementary]"
)
# Where "main" mode looks for the main content, in order of preference.
_MAIN_CANDIDATES = ("main,[role=main]", "article")
# For _scan_tags: tag names packed little-endian into a uint64 (up to 8 lower-case bytes, zero-padded).
_SCAN = 8
_PAD = bytes(_SCAN + 2)


def _name_key(name: str) -> int:
    return int.from_bytes(name.encode("ascii").ljust(_SCAN, b"\0"), "little")


# Elements whose start tag never deepens the tree: void elements, and those closed by their next sibling (names
# of 8 letters cannot be told from longer ones in 8 bytes, so they count as nesting: a cautious mistake).
_NO_NESTING = (
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr",
    "keygen", "p", "li", "dt", "dd", "option", "tr", "td", "th", "tbody", "thead", "tfoot", "caption", "rb", "rt",
    "rp", "rtc", "html", "head", "body", "a", "nobr",
)
# Formatting elements re-opened by the parser when a block closes them (``a`` and ``nobr`` close their own kind).
_FORMATTING = ("b", "big", "code", "em", "font", "i", "s", "small", "strike", "strong", "tt", "u")
# Classes of the names above in _CLASS_TABLE (0: any other name; dropped elements nest too). "noscript" and
# "template" have 8 letters: a longer name starting with them is taken for them, which only costs a needless
# removal pass.
_OTHER, _VOID_OR_SIBLING, _FORMATTING_ELEMENT, _DROPPED_ELEMENT_CLASS = 0, 1, 2, 3
# Pages with at most this many "<" cannot be slow to parse (at most 32,768 steps of depth, 1,024 re-opened
# elements): the scan is skipped.
_SAFE_TAGS = 128
_HASH_BITS = 10


def _hash_tables() -> tuple[np.uint64, np.ndarray, np.ndarray]:
    """A multiplicative hash of name keys into 2**_HASH_BITS slots with no collision among the names above, the
    table of the names' keys by slot (0 elsewhere: no tag name has key 0) and that of their classes."""
    groups = ((_NO_NESTING, _VOID_OR_SIBLING), (_FORMATTING, _FORMATTING_ELEMENT),
              (_DROPPED_NAMES, _DROPPED_ELEMENT_CLASS))
    names = [name for group, _ in groups for name in group]
    classes = [kind for group, kind in groups for _ in group]
    keys = np.array([_name_key(n) for n in names], dtype=np.uint64)
    multiplier = 0x9E3779B97F4A7C15  # the golden-ratio constant, then odd neighbours until injective
    while True:
        slots = (keys * np.uint64(multiplier)) >> np.uint64(64 - _HASH_BITS)
        if np.unique(slots).size == keys.size:
            break
        multiplier += 2
    key_table = np.zeros(1 << _HASH_BITS, dtype=np.uint64)
    key_table[slots] = keys
    class_table = np.zeros(1 << _HASH_BITS, dtype=np.uint8)
    class_table[slots] = classes
    return np.uint64(multiplier), key_table, class_table


_HASH_MULTIPLIER, _KEY_TABLE, _CLASS_TABLE = _hash_tables()
_DROPPED_BY_KEY = {_name_key(name): name for name in _DROPPED_NAMES}
_HASH_SHIFT = np.uint64(64 - _HASH_BITS)
_SHIFT_16 = np.uint64(48)
_LOWER_BITS = np.uint64(0x2020202020202020)
_ONE = np.uint64(1)
_LT = 0x3C


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


def looks_like_html(text: str) -> bool:
    """Whether the first 4 KiB of ``text`` contain a typical HTML tag."""
    head = text[:4096]
    return "<" in head and _HTML_SNIFF.search(head) is not None


def html_to_text(html: str, mode: ContentMode = "body") -> str:
    """Visible text of an HTML document: scripts, styles, templates, noscript, SVG, MathML, iframes and objects
    removed, comments too.

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
    return _markup_to_text(data, np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _LT), mode)


def _markup_to_text(data: bytes, tags: np.ndarray, mode: ContentMode) -> str:
    """:func:`html_to_text` of UTF-8 ``data`` (``tags``: where its ``<`` are)."""
    hazard, dropped, start_tags = _scan_tags(data, tags)
    if hazard:
        logger.debug("HTML nested too deep for a linear-time parse: tags stripped instead")
        return _strip_tags(scrub_unicode(data.decode("utf-8", "replace")))
    tree = LexborHTMLParser(data)
    if mode == "body":
        if dropped:
            _drop(tree, dropped, start_tags)
        return tree.text(separator=" ")
    dropped = f"{dropped},{_BOILERPLATE}" if dropped else _BOILERPLATE
    root_id = tree.root.mem_id if tree.root is not None else None
    for node in tree.css(dropped):  # one C-level selection
        # <html role="navigation"> cannot be removed (lexbor refuses to remove the root): the document's text
        # is not boilerplate because its root says so; its inner boilerplate still goes.
        if node.mem_id != root_id:
            node.decompose()
    for selector in _MAIN_CANDIDATES:
        nodes = _outermost(tree.css(selector))
        text = " ".join(node.text(separator=" ") for node in nodes)
        if text and not text.isspace():
            return text
    root = tree.body or tree.root
    return "" if root is None else root.text(separator=" ")


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


def _outermost(nodes: list) -> list:
    """``nodes`` without those inside another of them (nested ``<article>`` elements are read once)."""
    if len(nodes) < 2:
        return nodes
    ids = {node.mem_id for node in nodes}
    out = []
    for node in nodes:
        parent = node.parent
        while parent is not None and parent.mem_id not in ids:
            parent = parent.parent
        if parent is None:
            out.append(node)
    return out


def _scan_tags(data: bytes, tags: np.ndarray) -> tuple[bool, str, int]:
    """Whether parsing the HTML bytes ``data`` (``<`` at ``tags``) could take more than linear time (see
    :data:`MAX_NESTING`, :data:`MAX_REOPENED`), and the CSS selector of the dropped elements (:data:`_DROPPED`)
    whose start tag appears (empty: none; all of them when the page is too small to be scanned).

    A vectorized scan of the tags, without parsing: for each name whose element can hold others (not void, not
    closed by its next sibling), ``<name`` counts +1 and ``</name`` -1 in that name's own walk, kept at or above 0
    (:func:`_open_max`); the largest sum of the walks bounds the elements open at once, hence the depth of the
    tree. The same bound over formatting elements alone bounds how many the parser can re-open at once. Names are
    compared exactly (a made-up
    ``<brx>`` nests like any unknown element); ``<`` inside scripts and comments counts as a tag too: at worst a
    page takes the slower tag stripper, or a removal pass that finds nothing. An element of the parsed tree comes
    from a start tag ``<name`` followed by a byte that ends a name (ASCII letters lower-cased, as the tokenizer
    does), so a dropped element whose start tag the scan does not see cannot exist.
    """
    if tags.size <= _SAFE_TAGS:
        return False, _DROPPED, -1
    padded = np.frombuffer(data + _PAD, dtype=np.uint8)
    closing = padded[tags + 1] == 0x2F
    # The 8 bytes after each "<" (after "</" for end tags) as one little-endian uint64, through a uint64 view
    # starting at every byte (unaligned, overlapping): one gather per tag.
    at_every_byte = np.ndarray((padded.size - _SCAN + 1,), dtype="<u8", buffer=padded, strides=(1,))
    words = at_every_byte[tags + 1 + closing]
    window = words.view(np.uint8).reshape(-1, _SCAN)
    # Name bytes (ASCII letters, digits, "-") by wrapping uint8 arithmetic: (b | 0x20) - 0x61 < 26 holds for
    # exactly the 52 letters. The lowest set bit of "not a name byte" marks where the name ends; the bits below
    # it keep the name. OR-ing 0x20 lower-cases letters and leaves digits and "-" alone.
    letter = ((window | np.uint8(0x20)) - np.uint8(0x61)) < 26
    name = letter | ((window - np.uint8(0x30)) < 10)
    name |= window == 0x2D
    stop = (~name).view("<u8").ravel()
    keys = (words | _LOWER_BITS) & ((stop & (~stop + _ONE)) - _ONE)
    slots = ((keys * _HASH_MULTIPLIER) >> _HASH_SHIFT).view(np.intp)  # < 2**_HASH_BITS: no cast per lookup
    kind = np.where(np.take(_KEY_TABLE, slots) == keys, np.take(_CLASS_TABLE, slots), np.uint8(_OTHER))
    nesting = letter[:, 0] & (kind != _VOID_OR_SIBLING)  # a name starts with a letter: "<@", "<1" are no tags
    open_elements = _open_max(keys[nesting], closing[nesting])
    if open_elements > MAX_NESTING:
        return True, _DROPPED, -1
    # Formatting elements are some of the names counted above, and the bound only grows with the names counted:
    # their own bound is needed only when the one above is too high to settle it.
    if open_elements * tags.size > MAX_REOPENED:
        formatting = kind == _FORMATTING_ELEMENT
        if _open_max(keys[formatting], closing[formatting]) * tags.size > MAX_REOPENED:
            return True, _DROPPED, -1
    dropped_keys = keys[(kind == _DROPPED_ELEMENT_CLASS) & ~closing]
    found = np.unique(dropped_keys).tolist()
    return False, ",".join(_DROPPED_BY_KEY[key] for key in found), dropped_keys.size


def _open_max(keys: np.ndarray, closing: np.ndarray) -> int:
    """An upper bound of how many elements are open at once, from the names (``keys``) of the start and end tags
    (``closing``), in document order.

    An end tag closes only an element of its own name (``</div>`` with no ``<div>`` open is ignored by the parser,
    however many ``<span>`` are), so each name gets its own walk, +1 at its start tags and -1 at its end tags,
    reflected at 0; at any point the sum of the names' walks bounds the elements open. A single walk over all
    names would be fooled by ``<span></div>`` repeated: flat, while every span stays open (quadratic for the
    parser, whose scope checks walk the stack of open elements).

    Vectorized: the tags sorted by name (stable, so each name's tags keep their order); each name's walk is the
    running sum from its first tag and its reflection ``S_t - min(0, min_{s <= t} S_s)``, the running minimum kept
    within the name by offsetting each name's walk below the previous one's; the changes of the reflected walks,
    put back in document order, sum to the bound.
    """
    if keys.size == 0:
        return 0
    # Sorting 16-bit hashes of the names is a radix sort; should two names of the page share a hash, the names
    # themselves are sorted.
    hashes = ((keys * _HASH_MULTIPLIER) >> _SHIFT_16).astype(np.uint16)
    order = np.argsort(hashes, kind="stable")
    sorted_keys = keys[order]
    first = np.empty(keys.size, dtype=bool)
    first[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    sorted_hashes = hashes[order]
    if (first[1:] & (sorted_hashes[1:] == sorted_hashes[:-1])).any():  # two names, one hash
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    steps = 1 - 2 * closing[order].view(np.int8)
    walk = np.cumsum(steps, dtype=np.int32)
    starts = np.flatnonzero(first)
    base = walk[starts] - steps[starts]  # the running sum before each name's first tag
    # No end tag without an open element of its name (each name's running sum never dips below where it
    # started): the reflections change nothing and the walks add up to the plain one.
    if (np.minimum.reduceat(walk, starts) >= base).all():
        return int(np.cumsum(1 - 2 * closing.view(np.int8), dtype=np.int32).max())
    name = np.cumsum(first, dtype=np.int32) - 1
    walk -= base[name]  # each name's walk from its own first tag
    walk = walk.astype(np.int64)
    offset = name * np.int64(2 * keys.size + 2)  # a name's walk lies within +-size: the offsets keep names apart
    lowest = np.minimum.accumulate(walk - offset) + offset
    reflected = walk - np.minimum(lowest, 0)
    change = np.diff(reflected, prepend=0)
    change[starts] = reflected[starts]
    in_order = np.empty_like(change)
    in_order[order] = change
    return int(np.cumsum(in_order).max())


def _strip_tags(html: str) -> str:
    """Visible text without a parser, for HTML that the parser gives up on: comments and the non-text
    elements (scripts, styles...) removed, every tag a separator, character references decoded."""
    text = _COMMENT.sub(" ", html)
    text = _DROPPED_ELEMENT.sub(" ", text)
    return html_lib.unescape(_TAG.sub(" ", text))


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
    return _normalize_utf8(text, None)[0]


def _normalize_utf8(text: str, max_chars: int | None) -> tuple[bytes, bool]:
    """:func:`normalize_utf8`, with NFKC's output cut at ``max_chars`` characters (and whether it was).

    Every step is local, so most of the work is done on bytes: ASCII letters are lower-cased and ASCII
    separators turned into spaces by one ``bytes.translate``, and runs of spaces collapsed with numpy. Only
    non-ASCII characters take the Unicode path (NFKC, ``\\w`` test, ``casefold``): piecewise on mostly-ASCII
    text (:func:`_fold_sparse`), over the whole text otherwise (:func:`_fold_dense`). A text long enough for
    NFKC to reach ``max_chars`` (18 characters out per character in at most) takes the capped path.
    """
    if text.isascii():
        return _collapse_spaces(text.encode("ascii").translate(_FOLD)), False
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates become U+FFFD
        text = text.encode("utf-8", errors="surrogatepass").decode("utf-8", errors="replace")
        raw = text.encode("utf-8")
    if max_chars is None or len(text) * _NFKC_MAX_GROWTH <= max_chars:
        return _collapse_spaces(_fold_non_ascii(raw)), False
    text, cut = _nfkc(text, max_chars)
    text = _NON_ASCII_SEPARATOR.sub(" ", text)
    return _collapse_separators(text), cut


def _collapse_spaces(folded: bytes) -> bytes:
    """Runs of spaces to one space, none at either end (``folded`` has no other separators left)."""
    data = np.frombuffer(folded, dtype=np.uint8)
    if data.size == 0:
        return b""
    space = data == _SPACE
    keep = np.empty(data.size, dtype=bool)
    keep[0] = not space[0]
    np.logical_not(space[1:] & space[:-1], out=keep[1:])
    return data[keep].tobytes().rstrip(b" ")


def _fold_non_ascii(raw: bytes) -> bytes:
    """Folded UTF-8 of a non-ASCII text (every separator a space, runs of spaces not yet collapsed)."""
    data = np.frombuffer(raw, dtype=np.uint8)
    high = data >= 0x80
    edges = np.flatnonzero(high[1:] != high[:-1]) + 1
    if edges.size * _SPARSE_RUNS > data.size:
        return _fold_dense(raw, data)
    return _fold_sparse(raw, edges.tolist(), bool(high[0]))


def _fold_sparse(raw: bytes, edges: list[int], starts_high: bool) -> bytes:
    """Fold a mostly-ASCII text piece by piece.

    NFKC never changes or reorders anything across the boundary before an ASCII character (ASCII characters
    are starters nothing composes onto); the separator test and case folding go character by character. So
    the ASCII stretches are folded by ``bytes.translate`` and each run of non-ASCII characters, with the
    ASCII character before it (``e`` and a combining accent compose into ``é``), by the exact path, through a
    cache: pages repeat the same few runs (``’``, ``—``, ``¶``, ``é``...).
    """
    if starts_high:
        edges.insert(0, 1)  # a run at the very start (there is no character before it)
    if len(edges) % 2:
        edges.append(len(raw))
    starts = [start - 1 for start in edges[::2]]  # runs begin with the ASCII character before them
    ends = edges[1::2]
    cache = _RUN_CACHE
    if len(cache) > _RUN_CACHE_SIZE:
        cache.clear()
    pieces = [raw[: starts[0]]]
    for start, end, next_start in zip(starts, ends, [*starts[1:], len(raw)], strict=True):
        run = raw[start:end]
        folded = cache.get(run)
        if folded is None:
            folded = cache[run] = _fold_exact(run.decode("utf-8"))
        pieces.append(folded)
        pieces.append(raw[end:next_start])
    return b"".join(pieces).translate(_FOLD)


def _fold_exact(text: str) -> bytes:
    """The reference definition: NFKC, non-ASCII separators to spaces, casefold, ASCII separators to spaces."""
    text = _NON_ASCII_SEPARATOR.sub(" ", unicodedata.normalize("NFKC", text))
    return text.casefold().encode("utf-8").translate(_SPACE_ONLY)


def _fold_dense(raw: bytes, data: np.ndarray) -> bytes:
    """Fold a text with many non-ASCII characters (Cyrillic, Greek, CJK...) as a whole.

    NFKC only when the text is not already normalized; the separator test by a code point table over the
    UTF-8 lead bytes instead of a regex; one ``casefold`` on the result.
    """
    text = raw.decode("utf-8")
    if not unicodedata.is_normalized("NFKC", text):
        raw = unicodedata.normalize("NFKC", text).encode("utf-8")
        data = np.frombuffer(raw, dtype=np.uint8)
    spaced = _space_non_ascii_separators(data)
    if spaced is not None:
        raw = spaced.tobytes()
    if raw.isascii():
        return raw.translate(_FOLD)
    return raw.decode("utf-8").casefold().encode("utf-8").translate(_SPACE_ONLY)


def _space_non_ascii_separators(data: np.ndarray) -> np.ndarray | None:
    """UTF-8 bytes with every byte of each non-ASCII non-word character set to a space (None if none)."""
    lead = np.flatnonzero(data >= 0xC0)
    if lead.size == 0:
        return None
    last = data.size - 1
    b0 = data[lead].astype(np.int32)
    b1 = data[np.minimum(lead + 1, last)].astype(np.int32) & 0x3F
    b2 = data[np.minimum(lead + 2, last)].astype(np.int32) & 0x3F
    size = 2 + (b0 >= 0xE0) + (b0 >= 0xF0)
    point = np.where(size == 2, ((b0 & 0x1F) << 6) | b1, ((b0 & 0x0F) << 12) | (b1 << 6) | b2)
    separator = np.zeros(lead.size, dtype=bool)
    bmp = size < 4
    separator[bmp] = _bmp_separators()[point[bmp]]
    for i in np.flatnonzero(~bmp).tolist():  # characters beyond the BMP (emoji...): rare
        char = bytes(data[lead[i] : lead[i] + 4]).decode("utf-8")
        separator[i] = not (char.isalnum() or char == "_")
    if not separator.any():
        return None
    out = data.copy()
    start, size = lead[separator], size[separator]
    out[start] = _SPACE
    out[start + 1] = _SPACE
    out[start[size > 2] + 2] = _SPACE
    out[start[size > 3] + 3] = _SPACE
    return out


@functools.cache
def _bmp_separators() -> np.ndarray:
    """For each code point below 0x10000: not a word character (``\\w``: ``isalnum()`` or ``_``)."""
    return np.array([not (chr(c).isalnum() or c == 0x5F) for c in range(0x10000)], dtype=bool)


def _nfkc(text: str, max_chars: int | None) -> tuple[str, bool]:
    """NFKC of ``text``, stopped once longer than ``max_chars`` (``None``: never), and whether it was.

    NFKC can turn one character into 18 (U+FDFA): 8 MB of it would take a minute and gigabytes. So long texts
    are normalized in pieces of about 64K characters, and the output is capped. A piece ends before an ASCII
    character: ASCII characters are starters that never compose with what precedes them, so the pieces
    normalize exactly as the whole text does. Only where no ASCII character follows within another 64K
    characters is a piece cut elsewhere (a possible difference at that cut, on such pathological input; still
    deterministic).
    """
    if max_chars is None or len(text) <= _NFKC_PIECE:
        out = unicodedata.normalize("NFKC", text)
        if max_chars is not None and len(out) > max_chars:
            return out[:max_chars], True
        return out, False
    pieces: list[str] = []
    size = start = 0
    while start < len(text):
        stop = start + _NFKC_PIECE
        if stop < len(text):
            ascii_char = _ASCII_CHAR.search(text, stop, stop + _NFKC_PIECE)
            stop = ascii_char.start() if ascii_char else stop + _NFKC_PIECE
        piece = unicodedata.normalize("NFKC", text[start:stop])
        pieces.append(piece)
        size += len(piece)
        if size > max_chars:
            return "".join(pieces)[:max_chars], True
        start = stop
    return "".join(pieces), False


def _collapse_separators(text: str) -> bytes:
    """Case-fold, then words joined by single spaces, as UTF-8 (ASCII separators found with numpy)."""
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
    mode: ContentMode = "body",
) -> CleanText:
    """Raw page content to normalized text.

    Args:
        content: page text, HTML, or bytes (decoded as UTF-8).
        is_html: ``True``/``False`` to force; ``None`` sniffs the first 4 KiB for HTML tags.
        max_chars: only the first ``max_chars`` characters of the content are used (bounded time and memory
            on hostile pages); HTML is also cut at ``max_chars // CHARS_PER_TAG`` tags and the normalized text
            at ``max_chars`` characters. ``CleanText.truncated`` tells when a cap applied.
        mode: the part of an HTML page used (:func:`html_to_text`); plain text is used whole.
    """
    raw, truncated = _head(content, max_chars)
    if is_html is None:
        is_html = looks_like_html(raw)
    if is_html:
        data, tags, cut = _cap_tags(raw.encode("utf-8", "surrogatepass"), max(1, max_chars // CHARS_PER_TAG))
        truncated |= cut
        raw = _markup_to_text(data, tags, mode)
    utf8, cut = _normalize_utf8(raw, max_chars)
    return CleanText(utf8, truncated or cut)


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
