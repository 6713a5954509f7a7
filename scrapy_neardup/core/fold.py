"""Unicode folding: one text however it is typed (lookalike letters, accents, soft hyphens, zero-width characters).

Design notes: docs/architecture.md#scrapy_neardupcorefold
"""

from __future__ import annotations

import functools
import re
import unicodedata
from pathlib import Path

import numpy as np

#: A code point folds to at most this many code points (longer folds, which no assigned character has, keep it).
MAX_FOLD = 3
_DATA = Path(__file__).resolve().parent.parent / "data" / "confusables.tsv"
_SPACE = " "
_BMP = 0x10000
_WIDTH_RANGE = np.arange(MAX_FOLD, dtype=np.uint8)
# Long texts are folded in pieces of this many characters (folding is per character: pieces join exactly).
_PIECE = 1 << 20
#: Combining marks that are accents, stress marks, optional vowel points or variation selectors (dropped).
_DROPPED_MARKS = (
    (0x0300, 0x036F), (0x0483, 0x0489), (0x0591, 0x05C7), (0x0610, 0x061A), (0x064B, 0x065F), (0x0670, 0x0670),
    (0x06D6, 0x06ED), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF), (0xFE00, 0xFE0F), (0xFE20, 0xFE2F),
    (0xE0100, 0xE01EF),
)


def fold_text(text: str) -> str:
    """``text`` with every non-ASCII character replaced by its fold (see the module docstring).

    ASCII characters are left as they are; the caller lower-cases them and turns ASCII separators into spaces.
    ``text`` should be NFKC-normalized (the folds are defined on NFKC's output). Vectorized: one look-up per code
    point in a table of the Basic Multilingual Plane; characters beyond it (rare: emoji, historic scripts) are
    folded one by one through a cache.
    """
    if text.isascii():
        return text
    if len(text) > _PIECE:  # bounded temporaries (12 bytes a character) on long texts
        return "".join(fold_text(text[start : start + _PIECE]) for start in range(0, len(text), _PIECE))
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    table, counts = _bmp_table()
    astral = points >= _BMP
    if astral.any():
        return _fold_mixed(points, astral, table, counts)
    sizes = counts[points]
    if (sizes == 1).all():  # no character dropped or folded to several: one gather
        return table[points, 0].tobytes().decode("utf-32-le", "surrogatepass")
    keep = sizes[:, None] > _WIDTH_RANGE
    return table[points][keep].tobytes().decode("utf-32-le", "surrogatepass")


def fold_utf8(raw: bytes) -> bytes:
    """:func:`fold_text` on UTF-8 bytes, the form normalization works on.

    Text of the Basic Multilingual Plane (every character takes two or three bytes in UTF-8, ASCII aside) is
    folded on its bytes: each character of two bytes (U+0080-07FF: Latin, Greek, Cyrillic... with their accents) or
    three (U+0800-FFFF: punctuation such as ``’`` and ``—``, CJK...) is replaced by its fold, which never takes more
    bytes than the character (padding bytes that UTF-8 never uses, 0xFF, are removed after), in a few numpy passes
    that leave ASCII bytes alone. Characters beyond the BMP, and the rare folds longer than their character, send
    the text through :func:`fold_text`.
    """
    data = np.frombuffer(raw, dtype=np.uint8)
    lead = np.flatnonzero(data >= 0xC0)
    if lead.size == 0:
        return raw
    first = data[lead]
    if first.max() >= 0xF0:
        return _through_text(raw)
    out = data.copy()
    for size, chosen in ((2, first < 0xE0), (3, first >= 0xE0)):
        starts = lead[chosen]
        if starts.size == 0:
            continue
        points = (data[starts].astype(np.uint32) & (0x1F if size == 2 else 0x0F)) << (6 * (size - 1))
        for offset in range(1, size):
            points |= (data[starts + offset].astype(np.uint32) & 0x3F) << (6 * (size - 1 - offset))
        folds, fits = _byte_table(size)
        if not fits[points].all():
            return _through_text(raw)
        replaced = folds[points]
        for offset in range(size):
            out[starts + offset] = replaced[:, offset]
    return out[out != _PAD_BYTE].tobytes()


def _through_text(raw: bytes) -> bytes:
    return fold_text(raw.decode("utf-8", "surrogatepass")).encode("utf-8", "surrogatepass")


_PAD_BYTE = 0xFF


@functools.cache
def _byte_table(size: int) -> tuple[np.ndarray, np.ndarray]:
    """For each code point that takes ``size`` bytes in UTF-8 (2: below U+0800, 3: the rest of the BMP, indexed
    by code point): the UTF-8 of its fold in ``size`` bytes, padded with 0xFF, and whether it fits."""
    table, counts = _bmp_table()
    stop = 0x800 if size == 2 else _BMP
    folds = np.full((stop, size), _PAD_BYTE, dtype=np.uint8)
    fits = np.ones(stop, dtype=bool)
    low = 0x80 if size == 2 else 0x800
    points = np.arange(low, stop, dtype=np.uint32)
    for offset in range(size):  # what folds to itself is itself: its own UTF-8, computed for all at once
        shift = 6 * (size - 1 - offset)
        folds[low:, offset] = (0x80 | ((points >> shift) & 0x3F)) if offset else ((0xC0 if size == 2 else 0xE0)
                                                                                   | (points >> shift))
    changed = np.flatnonzero((counts[low:stop] != 1) | (table[low:stop, 0] != points)) + low
    for point in changed.tolist():
        folded = "".join(map(chr, table[point, : counts[point]])).encode("utf-8", "surrogatepass")
        folds[point] = _PAD_BYTE
        if len(folded) > size:
            fits[point] = False
        else:
            folds[point, : len(folded)] = list(folded)
    return folds, fits


def before_nfkc(text: str) -> str:
    """``text`` with the few letters whose NFKC form has another shape replaced by their prototype first.

    NFKC turns Greek lunate sigma ``ϲ`` (which looks like ``c``) into ``ς`` and ``ͺ`` (which looks like ``i``)
    into a space and a mark; folded after NFKC, a ``c`` typed as ``ϲ`` would read as ``σ``. The characters concerned
    (:func:`_shape_changes`) are letters of the Latin, Greek and Cyrillic blocks only; none is NFKC-normalized, so
    callers need this only for text that is not; a regular expression finds them.
    """
    changes, pattern = _shape_changes()
    if pattern.search(text) is None:
        return text
    return text.translate(changes)


@functools.cache
def _shape_changes() -> tuple[dict[int, str], re.Pattern[str]]:
    """Letters below U+0530 whose NFKC form folds otherwise than their ASCII prototype: to that prototype."""
    changes: dict[int, str] = {}
    for char, prototype in _prototypes().items():
        if ord(char) < 0x530 and prototype.isascii() and unicodedata.normalize("NFKC", char) != char:
            after = "".join(_fold_char(part) for part in unicodedata.normalize("NFKC", char))
            if after.lower() != prototype.lower():
                changes[ord(char)] = prototype
    return changes, re.compile("[" + "".join(map(chr, changes)) + "]")


def _fold_mixed(points: np.ndarray, astral: np.ndarray, table: np.ndarray, counts: np.ndarray) -> str:
    """:func:`fold_text` of text with a few characters beyond the BMP: those folded one by one, the rest by table."""
    bmp = np.where(astral, 0, points)
    wide = table[bmp]
    keep = counts[bmp][:, None] > _WIDTH_RANGE
    keep[astral] = False
    pieces: list[str] = []
    start = 0
    for index in np.flatnonzero(astral).tolist():
        pieces.append(wide[start:index][keep[start:index]].tobytes().decode("utf-32-le", "surrogatepass"))
        pieces.append(_fold_char(chr(int(points[index]))))
        start = index + 1
    pieces.append(wide[start:][keep[start:]].tobytes().decode("utf-32-le", "surrogatepass"))
    return "".join(pieces)




@functools.cache
def _bmp_table() -> tuple[np.ndarray, np.ndarray]:
    """The folds of every BMP code point: ``uint32[0x10000, MAX_FOLD]`` code points and ``uint8[0x10000]`` counts."""
    table = np.zeros((_BMP, MAX_FOLD), dtype=np.uint32)
    counts = np.ones(_BMP, dtype=np.uint8)
    table[:, 0] = np.arange(_BMP, dtype=np.uint32)
    prototypes, classes = _prototypes(), _ascii_classes()
    for point in range(0x80, _BMP):
        char = chr(point)
        if (char.isalnum() and char not in prototypes and char.upper() not in prototypes and char.casefold() == char
                and char not in classes and not unicodedata.decomposition(char)):
            continue  # a letter or digit that folds to itself (most of the BMP: ideographs, syllables)
        folded = _fold_char(char)
        if folded != char:
            counts[point] = len(folded)
            table[point, : len(folded)] = [ord(part) for part in folded]
    return table, counts


@functools.lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    """The fold of one character (a code point; ASCII stays as it is)."""
    if char.isascii():
        return char
    folded = char
    for _ in range(8):  # every fold reaches its fixed point in two or three rounds
        step = "".join(_fold_once(part) for part in folded)
        if step == folded:
            break
        folded = step
    if len(folded) > MAX_FOLD:
        return char if _is_word(char) else _SPACE
    return folded


def _fold_once(char: str) -> str:
    """One round of the steps on one character: marks and format characters out (before case folding, which
    would turn the iota subscript U+0345 into a letter), then each letter or digit to its prototype or its case
    fold, each other non-ASCII character to a space."""
    if char.isascii():
        return char
    parts = unicodedata.normalize("NFD", char)
    kept = [part for part in parts if not _dropped(part)]
    if len(kept) == len(parts):
        kept = [char]  # nothing dropped: stay composed (Hangul syllables are not split into their letters)
    out: list[str] = []
    for part in kept:
        if part.isascii():
            out.append(part)
        elif not _is_word(part):
            out.append(_SPACE)
        elif (prototype := _prototype(part)) is not None:
            out.append(prototype.casefold())  # by shape first: a capital stands for what it looks like
        else:
            out.append(part.casefold())  # the next round folds the lower case
    return "".join(out)


def _prototype(char: str) -> str | None:
    """The prototype of a letter or digit (``None`` when it has none), ASCII wherever its class has one.

    Letters whose prototype is not ASCII (Cyrillic ``к`` -> Latin kra ``ĸ``, ``в`` -> small capital ``ʙ``) share it
    with the ASCII prototype of a capital in their class (``К`` -> ``K``, ``В`` -> ``B``): every member of the class
    folds to that letter. The prototype keeps its case until the caller folds it, so that a capital lookalike
    stands for what it looks like (Greek ``Ι`` for ``l``, ``ι`` for ``i``).
    """
    prototypes = _prototypes()
    own = prototypes.get(char)
    if own is None and char in _ascii_classes() and char.casefold() == char:
        return _ascii_classes()[char]  # a prototype itself, whose class has an ASCII one (not ß, which is ss)
    if own is None:
        capital = char.upper()
        theirs = prototypes.get(capital) if len(capital) == 1 else None
        return theirs if theirs is not None and theirs.isascii() else None
    return own if own.isascii() else _ascii_classes().get(own, own)


@functools.cache
def _ascii_classes() -> dict[str, str]:
    """For each prototype that is not ASCII, the ASCII prototype of a capital of one of its members, if any."""
    chosen: dict[str, str] = {}
    prototypes = _prototypes()
    for member, prototype in sorted(prototypes.items()):
        if prototype.isascii():
            continue
        for candidate in (member, prototype):
            capital = candidate.upper()
            theirs = prototypes.get(capital) if len(capital) == 1 else None
            if theirs is not None and theirs.isascii():
                chosen.setdefault(prototype, theirs)
    return chosen


def _dropped(char: str) -> bool:
    """Accents and the like (:data:`_DROPPED_MARKS`) and format characters (Cf)."""
    point = ord(char)
    if unicodedata.category(char) == "Cf":
        return True
    return any(low <= point <= high for low, high in _DROPPED_MARKS)


def _is_mark(char: str) -> bool:
    return unicodedata.category(char)[0] == "M"


def _is_word(char: str) -> bool:
    """A character words are made of: a letter, digit, underscore, or a mark that is not dropped."""
    return char.isalnum() or char == "_" or _is_mark(char)


@functools.cache
def _prototypes() -> dict[str, str]:
    """The prototype of each letter or digit that has one, read from the table derived from UTS #39."""
    prototypes: dict[str, str] = {}
    for line in _DATA.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            source, target = line.split("\t")
            prototypes[chr(int(source, 16))] = "".join(chr(int(point, 16)) for point in target.split())
    return prototypes
