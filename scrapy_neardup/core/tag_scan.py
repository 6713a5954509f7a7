"""A vectorized scan of a page's tags, without parsing: what each ``<`` opens or closes, read from tables of
known tag names in one numpy pass (:class:`TagScan`).

:mod:`scrapy_neardup.core.html` uses it twice. HTML5 tree building is quadratic on some hostile markup
(thousands of unclosed nested blocks; unclosed formatting elements with distinct attributes, which are re-opened
in every later paragraph; end tags that close nothing, each of which searches the whole stack of open elements):
:func:`parse_hazard` bounds how deep a parse could go from the tags alone, and such pages go to a tag stripper
instead.
And ``"auto"`` mode's block marks are put into the HTML before it is parsed, at the tags the scan finds
(:func:`insert_marks`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .marks import BLOCK, LINK_END, LINK_START

#: Pages whose tags could nest deeper than this go to the tag stripper: each block start tag checks the stack of
#: open elements, so the parse costs up to (tags x depth) steps; 512 is the depth Blink caps its DOM at.
MAX_NESTING = 512
#: ... and pages where (unclosed formatting elements) x (tags) exceeds this: the parser re-opens every unclosed
#: formatting element (``<b>``, ``<font>``...) in each later block, so ``<p><b id=1>x<p><b id=2>x...`` builds
#: n^2 / 2 elements (8,000 repeats: 24 s and gigabytes).
MAX_REOPENED = 1_000_000
#: Elements whose content is not page text (template content is kept out of the tree by the parser itself). A
#: ``<select>`` shows one of its options, and holds them all: a site's filter or country list of hundreds of
#: options is not what a page says.
DROPPED_NAMES = ("script", "style", "noscript", "template", "svg", "math", "iframe", "object", "select")
DROPPED = ",".join(DROPPED_NAMES)
# For TagScan: tag names packed little-endian into a uint64 (up to 8 lower-case bytes, zero-padded).
_SCAN = 8
_PAD = bytes(_SCAN + 2)


def name_key(name: str) -> int:
    """A tag name as the scan reads it: its first 8 bytes, little-endian, zero-padded."""
    return int.from_bytes(name[:_SCAN].encode("ascii").ljust(_SCAN, b"\0"), "little")


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
# Elements whose start and end tags bound a block of text (marked with marks.BLOCK): the block-level elements
# in which text may stand. The table elements other than cells are left out: a character the parser meets
# between "<table>" and "<td>" is moved before the table. Names past 8 letters are known by their first 8.
_BLOCK_NAMES = (
    "address", "article", "aside", "blockquote", "br", "caption", "center", "dd", "details", "dialog", "dir",
    "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
    "header", "hgroup", "hr", "legend", "li", "main", "menu", "nav", "ol", "p", "pre", "section", "summary", "td",
    "th", "ul",
)
# What MARK_TABLE says of a name, as bits: a block boundary, a link, a landmark "main" mode looks for.
_UNMARKED, _BLOCK_MARK, _LINK_MARK, LANDMARK = 0, 1, 2, 4
LANDMARK_NAMES = ("main", "article", "nav", "header", "footer", "aside")
# Pages with at most this many "<" cannot be slow to parse (at most 32,768 steps of depth, 1,024 re-opened
# elements): the scan is skipped.
SAFE_TAGS = 128
_HASH_BITS = 12


def _hash_tables() -> tuple[np.uint64, np.ndarray, np.ndarray, np.ndarray]:
    """A multiplicative hash of name keys into 2**_HASH_BITS slots with no collision among the names above, the
    table of the names' keys by slot (0 elsewhere: no tag name has key 0), that of their classes and that of
    their marks."""
    groups = ((_NO_NESTING, _VOID_OR_SIBLING), (_FORMATTING, _FORMATTING_ELEMENT),
              (DROPPED_NAMES, _DROPPED_ELEMENT_CLASS))
    kind_of = {name: kind for group, kind in groups for name in group}
    mark_of = {name: _BLOCK_MARK for name in _BLOCK_NAMES} | {"a": _LINK_MARK}
    for name in LANDMARK_NAMES:
        mark_of[name] = mark_of.get(name, _UNMARKED) | LANDMARK
    names = sorted(kind_of.keys() | mark_of.keys())
    classes = [kind_of.get(name, _OTHER) for name in names]
    marks = [mark_of.get(name, _UNMARKED) for name in names]
    keys = np.array([name_key(n) for n in names], dtype=np.uint64)
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
    mark_table = np.zeros(1 << _HASH_BITS, dtype=np.uint8)
    mark_table[slots] = marks
    return np.uint64(multiplier), key_table, class_table, mark_table


_HASH_MULTIPLIER, _KEY_TABLE, _CLASS_TABLE, MARK_TABLE = _hash_tables()
_DROPPED_BY_KEY = {name_key(name): name for name in DROPPED_NAMES}
_HASH_SHIFT = np.uint64(64 - _HASH_BITS)
_SHIFT_16 = np.uint64(48)
_LOWER_BITS = np.uint64(0x2020202020202020)
_ONE = np.uint64(1)
_LT = 0x3C
_GT = 0x3E
_SLASH = 0x2F
# Foreign content (closed_in_foreign): its roots; the start tags after which the parser reads HTML again (the names
# that break out of foreign content, then the SVG and MathML integration points, whose content is HTML; names as
# the scan keys them, on their first 8 bytes); the names SVG shares with HTML, whose end tags stay in SVG.
_FOREIGN_ROOT_KEYS = np.array([name_key(name) for name in ("svg", "math")], dtype=np.uint64)
_HTML_AGAIN_KEYS = np.array([name_key(name) for name in (
    "b", "big", "blockquote", "body", "br", "center", "code", "dd", "div", "dl", "dt", "em", "embed", "font", "h1",
    "h2", "h3", "h4", "h5", "h6", "head", "hr", "i", "img", "li", "listing", "menu", "meta", "nobr", "ol", "p",
    "pre", "ruby", "s", "small", "span", "strong", "strike", "sub", "sup", "table", "tt", "u", "ul", "var",
    "foreignobject", "desc", "title", "mi", "mo", "mn", "ms", "mtext", "annotation-xml",
)], dtype=np.uint64)
# Elements whose content the tokenizer reads as text, not tags (raw text and escapable raw text, the plaintext and
# noscript elements too).
_RAW_TEXT_KEYS = np.array([name_key(name) for name in (
    "script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes", "noscript", "plaintext",
)], dtype=np.uint64)
# Bytes that end a tag name: the HTML tokenizer's whitespace, "/" and ">".
_NAME_ENDS = np.frombuffer(b" \t\n\f\r/>", dtype=np.uint8)
_SHARED_WITH_SVG_KEYS = np.array([name_key(name) for name in ("a", "script", "style")], dtype=np.uint64)



def tag_positions(data: bytes) -> np.ndarray:
    """Where the ``<`` of UTF-8 HTML ``data`` are (every tag starts at one)."""
    return np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _LT)


@dataclass(frozen=True, slots=True)
class TagScan:
    """What a vectorized scan of the tags knows of each ``<``, without parsing.

    Attributes:
        keys: the name after ``<`` (after ``</`` for end tags): its first 8 bytes as a little-endian uint64,
            letters lower-cased, cut where a byte that cannot be in a name (a letter, digit or ``-``) comes.
        closing: an end tag.
        letter: the name starts with a letter: ``<@`` and ``<1`` are no tags.
        slots: the names' slots in the tables of known names (:data:`_KEY_TABLE`).
        known: the name is one of the tables' (its slot holds its key).
    """

    keys: np.ndarray
    closing: np.ndarray
    letter: np.ndarray
    slots: np.ndarray
    known: np.ndarray

    @classmethod
    def of(cls, data: bytes, tags: np.ndarray) -> TagScan:
        """Scan the tags of UTF-8 HTML ``data`` (``<`` at ``tags``)."""
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
        known = np.take(_KEY_TABLE, slots) == keys
        return cls(keys, closing, letter[:, 0], slots, known)

    def table(self, table: np.ndarray) -> np.ndarray:
        """Each tag's entry in ``table`` (one of the tables by slot), 0 for names the tables do not know."""
        return np.where(self.known, np.take(table, self.slots), np.uint8(0))


def tag_ends(data: bytes, at: np.ndarray) -> np.ndarray:
    """Where the tags whose ``<`` are at ``at`` (sorted) in UTF-8 ``data`` end: the first ``>`` after each (a ``>``
    inside an attribute value ends it early), -1 for a tag cut off before any."""
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _GT)
    if ends.size == 0:
        return np.full(at.size, -1, dtype=np.int64)
    after = np.searchsorted(ends, at)
    found: np.ndarray = np.where(after < ends.size, ends[np.minimum(after, ends.size - 1)], -1)
    return found


def parse_hazard(scan: TagScan | None, data: bytes, tags: np.ndarray) -> tuple[bool, str, int]:
    """Whether parsing the scanned page (UTF-8 ``data``, ``<`` at ``tags``) could take more than linear time (see
    :data:`MAX_NESTING`, :data:`MAX_REOPENED`), and the CSS selector of the dropped elements (:data:`DROPPED`)
    whose start tag appears (empty: none; all of them when the page is too small to be scanned: ``scan`` None),
    and how many such start tags there are (-1: unknown).

    For each name whose element can hold others (not void, not closed by its next sibling), ``<name`` counts +1
    and ``</name`` -1 in that name's own walk, kept at or above 0 (:func:`open_max`); the largest sum of the walks
    bounds the elements open at once, hence the depth of the tree. The same bound over formatting elements alone
    bounds how many the parser can re-open at once. Names are compared exactly (a made-up ``<brx>`` nests like
    any unknown element); ``<`` inside scripts and comments counts as a tag too: at worst a page takes the slower
    tag stripper, or a removal pass that finds nothing. An element of the parsed tree comes from a start tag
    ``<name`` followed by a byte that ends a name (ASCII letters lower-cased, as the tokenizer does), so a dropped
    element whose start tag the scan does not see cannot exist.

    Only when the bound is too high are the self-closing tags of SVG and MathML read (:func:`closed_in_foreign`):
    ``<rect .../>`` in an ``<svg>`` opens nothing, and a page with an inline chart of a thousand bars is an
    ordinary page.
    """
    if scan is None:
        return False, DROPPED, -1
    keys, closing = scan.keys, scan.closing
    kind = scan.table(_CLASS_TABLE)
    nesting = scan.letter & (kind != _VOID_OR_SIBLING)
    open_elements = open_max(keys[nesting], closing[nesting])
    if open_elements > MAX_NESTING:
        nesting &= ~closed_in_foreign(data, tags, scan)
        open_elements = open_max(keys[nesting], closing[nesting])
    if open_elements > MAX_NESTING:
        return True, DROPPED, -1
    tag_count = tags.size
    # Formatting elements are some of the names counted above, and the bound only grows with the names counted:
    # their own bound is needed only when the one above is too high to settle it.
    if open_elements * tag_count > MAX_REOPENED:
        formatting = kind == _FORMATTING_ELEMENT
        if open_max(keys[formatting], closing[formatting]) * tag_count > MAX_REOPENED:
            return True, DROPPED, -1
    dropped_keys = keys[(kind == _DROPPED_ELEMENT_CLASS) & ~closing]
    found = np.unique(dropped_keys).tolist()
    return False, ",".join(_DROPPED_BY_KEY[key] for key in found), dropped_keys.size


def closed_in_foreign(data: bytes, tags: np.ndarray, scan: TagScan) -> np.ndarray:
    """``bool[len(tags)]``: the self-closing start tags (``<rect .../>``) the parser closes at once, because they
    stand inside an ``<svg>`` or ``<math>`` element, where (unlike in HTML, which ignores the ``/``) a
    self-closing tag opens nothing.

    Read cautiously, so that a page can only be found to nest deeper than it does, never less deep: a tag is in
    foreign content when an ``<svg>`` or ``<math>`` start tag came after the last tag that may have taken the
    parser back to HTML: a start tag of a name that leaves foreign content (:data:`_HTML_AGAIN_KEYS`: ``<p>``,
    ``<div>``, ``<b>``... and the integration points whose content is HTML, such as ``<foreignObject>``), and an
    end tag of an HTML element (it may close the element the ``<svg>`` stands in; ``</a>``, ``</script>`` and
    ``</style>`` excepted, which SVG has too). A tag ends at the first ``>`` after its ``<``, and its ``/`` is
    read by :func:`_self_closing`, which takes a tag it cannot read for sure for one that opens an element.
    """
    arr = np.frombuffer(data, dtype=np.uint8)
    tag_end = tag_ends(data, tags)
    found = tag_end >= 0
    slash = np.zeros(tags.size, dtype=bool)
    slash[found] = arr[tag_end[found] - 1] == _SLASH
    start = scan.letter & ~scan.closing
    back = (start & np.isin(scan.keys, _HTML_AGAIN_KEYS)) | (
        scan.closing & scan.known & ~np.isin(scan.keys, _SHARED_WITH_SVG_KEYS))
    at = np.arange(tags.size)
    last_back = np.maximum.accumulate(np.where(back, at, -1))
    # The roots: "<svg" or "<math" and the end of the name (a "<svg:g>" is an HTML element of that name), not
    # ending in "/" (<svg/> opens nothing; taking every such root for one is the cautious reading).
    roots = start & np.isin(scan.keys, _FOREIGN_ROOT_KEYS) & ~slash
    at_root = np.flatnonzero(roots)
    name_end = tags[at_root] + 1 + np.where(scan.keys[at_root] == _FOREIGN_ROOT_KEYS[0], 3, 4)
    padded = np.frombuffer(data + b">", dtype=np.uint8)
    roots[at_root] = np.isin(padded[np.minimum(name_end, arr.size)], _NAME_ENDS) & ~_in_text(
        arr, tags, scan, tags[at_root])
    last_root = np.maximum.accumulate(np.where(roots, at, -1))
    closed = start & slash & (last_root > last_back)
    # Only pages the bound found too deep come here: the candidates are read one by one.
    for i in np.flatnonzero(closed).tolist():
        closed[i] = _self_closing(data[tags[i] + 1 : tag_end[i]])
    return closed


def _in_text(arr: np.ndarray, tags: np.ndarray, scan: TagScan, at: np.ndarray) -> np.ndarray:
    """``bool[len(at)]``: whether each position ``at`` may lie inside a comment or the text of an element whose
    content is not parsed as tags (``<script>``, ``<style>``, ``<textarea>``...), where a ``<svg`` is text, not an
    element. Cautious: an unclosed comment or element runs to the end of the page, and a comment ends only at
    ``-->``."""
    if at.size == 0:
        return np.zeros(0, dtype=bool)
    padded = np.concatenate((arr, np.zeros(4, dtype=np.uint8)))
    ends = np.flatnonzero(arr == _GT)
    comment_starts = tags[(padded[tags + 1] == ord("!")) & (padded[tags + 2] == ord("-"))
                          & (padded[tags + 3] == ord("-"))]
    comment_ends = ends[(ends >= 2) & (arr[np.maximum(ends - 1, 0)] == ord("-"))
                        & (arr[np.maximum(ends - 2, 0)] == ord("-"))]
    inside = _last_before(comment_starts, at) > _last_before(comment_ends, at)
    for key in _RAW_TEXT_KEYS.tolist():
        named = (scan.keys == key) & scan.letter
        opened, closed = tags[named & ~scan.closing], tags[named & scan.closing]
        inside |= _last_before(opened, at) > _last_before(closed, at)
    return inside


def _last_before(positions: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each of ``at``, the last of the sorted ``positions`` before it (-1: none)."""
    index = np.searchsorted(positions, at) - 1
    return np.where(index >= 0, positions[np.maximum(index, 0)] if positions.size else -1, -1)


def _self_closing(inside: bytes) -> bool:
    """Whether a start tag whose bytes between ``<`` and the first ``>`` are ``inside`` (ending in ``/``) is
    self-closing, as the HTML tokenizer reads it; ``False`` where that depends on more than this reading can tell.

    The ``/`` ends an unquoted attribute value (``<g a=/>``, ``<g a=x/>``, ``<g a= />``: no self-closing), and the
    ``>`` may stand inside a quoted value (``<g a="/>">``): so quotes must pair up (one kind only), and the ``/``
    must follow a closing quote, a space after a value or a name, or a name in a tag without values (``<rect/>``,
    ``<path d="M0 0"/>``, ``<rect x=1 />``)."""
    body = inside[:-1]
    double, single = body.count(b'"'), body.count(b"'")
    if (double and single) or double % 2 or single % 2:
        return False
    trimmed = body.rstrip(b" \t\n\r\f")
    last = trimmed[-1:]
    if last in (b'"', b"'"):
        return True
    if last == b"=" or not last:
        return False
    return len(trimmed) < len(body) or b"=" not in body


def insert_marks(data: bytes, tags: np.ndarray, scan: TagScan, mark: np.ndarray) -> bytes:
    """``data`` with :data:`~scrapy_neardup.core.marks.BLOCK` right after the start tag and right before the end
    tag of every block element, and :data:`~scrapy_neardup.core.marks.LINK_START` / ``LINK_END`` inside ``<a>``
    (``scan``: its tags; ``mark``: their entries in :data:`MARK_TABLE`).

    Inside the element, so the parser keeps each mark in the element's text; a start tag's end is the first
    ``>`` after its ``<`` (a ``>`` inside an attribute value puts the mark into that value instead: one lost
    boundary). A ``<`` in a script or a comment that looks like a tag gets its mark there, where it is not text.
    """
    if tags.size == 0:
        return data
    start = scan.letter & ~scan.closing
    block, link = (mark & _BLOCK_MARK) != 0, (mark & _LINK_MARK) != 0
    arr = np.frombuffer(data, dtype=np.uint8)
    opening = (block | link) & start
    end = tag_ends(data, tags[opening])
    closed = end >= 0  # a start tag with no ">" after it is cut off: no mark
    positions = [end[closed] + 1, tags[block & scan.closing], tags[link & scan.closing]]
    values = [
        np.where(block[opening][closed], np.uint8(BLOCK), np.uint8(LINK_START)),
        np.full(positions[1].size, BLOCK, dtype=np.uint8),
        np.full(positions[2].size, LINK_END, dtype=np.uint8),
    ]
    return np.insert(arr, np.concatenate(positions), np.concatenate(values)).tobytes()


def open_max(keys: np.ndarray, closing: np.ndarray) -> int:
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

