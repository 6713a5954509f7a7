"""Unicode folding: one text however it is typed (lookalike letters, accents, soft hyphens, zero-width characters).

Each non-ASCII code point of NFKC-normalized text is replaced by its *fold*, a string of at most
:data:`MAX_FOLD` code points, by one numpy table look-up over the text's UTF-32 code units. The fold of a
character ``c`` is, in order (the full table with examples is in ``docs/folding.md``):

1. ``c`` decomposed (NFD) and its *accents* dropped: the combining marks of the diacritical
   blocks (U+0300-036F, U+1AB0-1AFF, U+1DC0-1DFF, U+20D0-20FF, U+FE20-FE2F, the Cyrillic U+0483-0489), Hebrew points
   and Arabic harakat (optional vowel signs), variation selectors; marks that write vowels in Indic and other
   scripts stay (they are letters of those scripts, not accents);
2. *format characters* dropped (category Cf: soft hyphen U+00AD, zero-width space, non-joiner and joiner
   U+200B-200D, word joiner U+2060, BOM U+FEFF, bidi controls...): they join the halves of a word they split;
3. each remaining letter or digit: a lookalike of an ASCII letter or digit (its *prototype* in Unicode's
   confusables, UTS #39, ``scrapy_neardup/data/confusables.tsv``) becomes that letter in lower case (Cyrillic ``а``
   and Greek ``α`` fold to ``a``, Cyrillic ``С`` to ``c``, Greek capital ``Ι`` to ``l``); any other letter is case
   folded (``str.casefold``), then replaced by its prototype: an ASCII one where a capital of its class has one
   (Cyrillic ``в``, prototype small capital ``ʙ``, folds like ``В``, prototype ``B``), else its own. So case is
   folded everywhere except for the few capitals that look like another ASCII letter than their lower case
   (Greek ``Ν``/``ν``: ``n``/``v``; ``Ι``/``ι``: ``l``/``i``);
4. any other character that is neither a letter, digit, underscore nor a kept mark: a word separator (a space).

The steps repeat until nothing changes, so folding is idempotent. ASCII characters are never remapped (``0``,
``1``, ``m`` stay themselves: their confusables ``O``, ``l``, ``rn`` would join distinct ASCII texts), which keeps
ASCII text on its byte path untouched. Folding joins only texts that read alike; it is part of the sketch scheme
(:data:`scrapy_neardup.core.params.SCHEME_VERSION`).
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
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    table, counts = _bmp_table()
    astral = points >= _BMP
    if astral.any():
        return _fold_mixed(points, astral, table, counts)
    wide = table[points]
    keep = counts[points][:, None] > _WIDTH_RANGE
    return wide[keep].tobytes().decode("utf-32-le", "surrogatepass")


def before_nfkc(text: str) -> str:
    """``text`` with the few letters whose NFKC form has another shape replaced by their prototype first.

    NFKC turns Greek lunate sigma ``ϲ`` (which looks like ``c``) into ``ς`` and ``ͺ`` (which looks like ``i``)
    into a space and a mark; folded after NFKC, a ``c`` typed as ``ϲ`` would read as ``σ``. The characters concerned
    (:func:`_shape_changes`) are letters of the Latin, Greek and Cyrillic blocks only; a regular expression finds
    them, so text without them costs one scan in C.
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


_WIDTH_RANGE = np.arange(MAX_FOLD, dtype=np.uint8)


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
