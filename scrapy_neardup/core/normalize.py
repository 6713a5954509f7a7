"""Unicode normalization: the text that is shingled, the same for every page that says the same words.

Normalization makes the sketch insensitive to differences that never make two pages different documents:
Unicode compatibility forms (NFKC), then the folding of :mod:`scrapy_neardup.core.fold` (letter case, accents,
format characters such as soft hyphens and zero-width spaces, lookalike letters of other scripts), and runs of
whitespace and punctuation (every character that is not a letter, digit, underscore or kept mark separates words).
Invalid Unicode (lone surrogates) is replaced rather than raised on. See ``docs/folding.md``.

Three foldings share the code: the plain one; the *marked* one, which keeps the marker bytes of
:mod:`scrapy_neardup.core.marks` where they are (every other separator becomes a space), so that the block
structure HTML extraction recorded survives into the normalized text; and the *lines* one, for plain text read one
block a line: each line feed becomes a block mark.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from .fold import before_nfkc, fold_utf8
from .marks import BLOCK, MARKS

# Long non-ASCII texts get NFKC in pieces of about this many characters (see _nfkc).
_NFKC_PIECE = 1 << 16
_ASCII_CHAR = re.compile(r"[\x00-\x7f]")
# C0/C1 controls other than whitespace, plus the Unicode noncharacters U+FFFE/U+FFFF.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffe\uffff]")
_CONTROL_BUT_MARKS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1b\x1f\x7f-\x9f\ufffe\uffff]")
_SPACE = 32
# A non-ASCII text with more than one run of non-ASCII characters per this many bytes is folded whole.
_SPARSE_RUNS = 64
_RUN_CACHE_SIZE = 1 << 16
# Folded non-ASCII runs (:func:`_fold_sparse`), before the folding's table: the same for every folding.
_RUNS: dict[bytes, bytes] = {}
# NFKC turns one character into at most 18 (U+FDFA).
_NFKC_MAX_GROWTH = 18


@dataclass(frozen=True)
class Folding:
    """The byte table of one folding.

    Attributes:
        fold: ``bytes.translate`` table: ASCII separators (everything but letters, digits, underscore and, in the
            marked folding, the marker bytes) to spaces, A-Z lower-cased (ASCII's part of casefold). Bytes >= 128
            belong to UTF-8 sequences of characters that :mod:`scrapy_neardup.core.fold` kept as word characters,
            so they stay. Applied once to a text, after its non-ASCII characters are folded (which never yields an
            ASCII control character), so a table need not map its own output to itself.
    """

    fold: bytes

    @classmethod
    def keeping(cls, kept: tuple[int, ...] = ()) -> Folding:
        """The folding that leaves the bytes ``kept`` untouched."""
        separator = np.array(
            [b < 128 and b not in kept and not (chr(b).isalnum() or chr(b) == "_") for b in range(256)], dtype=bool
        )
        fold = bytes(_SPACE if separator[b] else b + 32 if 65 <= b <= 90 else b for b in range(256))
        return cls(fold)


#: Every separator a space.
PLAIN = Folding.keeping()
#: Every separator a space but the marker bytes.
MARKED = Folding.keeping(MARKS)
#: Every separator a space, a block mark the text holds too, but the line feed, which becomes
#: :data:`~scrapy_neardup.core.marks.BLOCK`: plain text read one block a line, in the same ``bytes.translate`` pass.
LINES = Folding(bytes(BLOCK if b == 0x0A else PLAIN.fold[b] for b in range(256)))


def scrub_unicode(text: str, keep_marks: bool = False) -> str:
    """Replace lone surrogates with U+FFFD and drop control characters (NUL included; the marker bytes of
    :mod:`scrapy_neardup.core.marks` stay when ``keep_marks``)."""
    if not text.isascii():
        text = text.encode("utf-8", errors="surrogatepass").decode("utf-8", errors="replace")
    return (_CONTROL_BUT_MARKS if keep_marks else _CONTROL).sub("", text)


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
    return normalize_capped(text, None)[0]


def normalize_capped(
    text: str, max_chars: int | None, folding: Folding = PLAIN, collapse: bool = True,
) -> tuple[bytes, bool]:
    """:func:`normalize_utf8`, with NFKC's output cut at ``max_chars`` characters (and whether it was), under
    ``folding`` (:data:`MARKED` keeps the marker bytes, :data:`LINES` marks the lines). ``collapse=False`` leaves
    runs of spaces (and spaces at either end) as they are: the same words, one pass fewer, for callers that only
    read words.

    Every step is local, so most of the work is done on bytes: ASCII letters are lower-cased and ASCII
    separators turned into spaces by one ``bytes.translate``, and runs of spaces collapsed with numpy. Only
    non-ASCII characters take the Unicode path (NFKC, then :func:`fold_utf8`): piecewise on mostly-ASCII
    text (:func:`_fold_sparse`), over the whole text otherwise (:func:`_fold_dense`). A text long enough for
    NFKC to reach ``max_chars`` (18 characters out per character in at most) takes the capped path.
    """
    spaces = collapse_spaces if collapse else bytes
    if text.isascii():
        return spaces(text.encode("ascii").translate(folding.fold)), False
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates become U+FFFD
        text = text.encode("utf-8", errors="surrogatepass").decode("utf-8", errors="replace")
        raw = text.encode("utf-8")
    if max_chars is None or len(text) * _NFKC_MAX_GROWTH <= max_chars:
        return spaces(_fold_non_ascii(raw, folding)), False
    text, cut = _nfkc(before_nfkc(text), max_chars)
    return spaces(fold_utf8(text.encode("utf-8")).translate(folding.fold)), cut


def collapse_spaces(folded: bytes) -> bytes:
    """Runs of spaces to one space, none at either end (``folded`` has no other separators left)."""
    data = np.frombuffer(folded, dtype=np.uint8)
    if data.size == 0:
        return b""
    space = data == _SPACE
    keep = np.empty(data.size, dtype=bool)
    keep[0] = not space[0]
    np.logical_not(space[1:] & space[:-1], out=keep[1:])
    return data[keep].tobytes().rstrip(b" ")


def _fold_non_ascii(raw: bytes, folding: Folding) -> bytes:
    """Folded UTF-8 of a non-ASCII text (every separator a space, runs of spaces not yet collapsed)."""
    data = np.frombuffer(raw, dtype=np.uint8)
    high = data >= 0x80
    edges = np.flatnonzero(high[1:] != high[:-1]) + 1
    if edges.size * _SPARSE_RUNS > data.size:
        return _fold_dense(raw, folding)
    return _fold_sparse(raw, edges.tolist(), bool(high[0]), folding)


def _fold_sparse(raw: bytes, edges: list[int], starts_high: bool, folding: Folding) -> bytes:
    """Fold a mostly-ASCII text piece by piece.

    NFKC never changes or reorders anything across the boundary before an ASCII character (ASCII characters
    are starters nothing composes onto); the separator test and case folding go character by character. So
    each run of non-ASCII characters, with the ASCII character before it (``e`` and a combining accent compose
    into ``é``), takes the Unicode path (:func:`_fold_unicode`) through a cache (pages repeat the same few runs:
    ``’``, ``—``, ``¶``, ``é``...), and the text joined again takes the folding's ``bytes.translate`` once.
    """
    if starts_high:
        edges.insert(0, 1)  # a run at the very start (there is no character before it)
    if len(edges) % 2:
        edges.append(len(raw))
    starts = [start - 1 for start in edges[::2]]  # runs begin with the ASCII character before them
    ends = edges[1::2]
    cache = _RUNS
    if len(cache) > _RUN_CACHE_SIZE:
        cache.clear()
    pieces = [raw[: starts[0]]]
    for start, end, next_start in zip(starts, ends, [*starts[1:], len(raw)], strict=True):
        run = raw[start:end]
        folded = cache.get(run)
        if folded is None:
            folded = cache[run] = _fold_unicode(run.decode("utf-8"))
        pieces.append(folded)
        pieces.append(raw[end:next_start])
    return b"".join(pieces).translate(folding.fold)


def _fold_unicode(text: str) -> bytes:
    """The Unicode part of the reference definition: NFKC, then every non-ASCII character folded
    (:func:`fold_utf8`: accents, format characters and lookalikes, case, separators to spaces); ASCII is left for
    the folding's table."""
    return fold_utf8(unicodedata.normalize("NFKC", before_nfkc(text)).encode("utf-8"))


def _fold_dense(raw: bytes, folding: Folding) -> bytes:
    """Fold a text with many non-ASCII characters (Cyrillic, Greek, CJK...) as a whole: NFKC only when the text is
    not already normalized (the few letters :func:`before_nfkc` reshapes are never), then :func:`fold_utf8` over its
    bytes."""
    text = raw.decode("utf-8")
    if not unicodedata.is_normalized("NFKC", text):
        raw = unicodedata.normalize("NFKC", before_nfkc(text)).encode("utf-8")
    return fold_utf8(raw).translate(folding.fold)


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
