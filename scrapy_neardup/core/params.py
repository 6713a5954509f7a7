"""The sketch parameters, validated once: ``k``, ``t`` (or the threshold it comes from), shingling and seed.

Every entry point (the Scrapy settings, the ``neardup`` and ``neardup es`` options, :class:`Sketcher`, the
backends) builds a :class:`SketchParams` or calls the checks below, so a value is judged by one rule wherever
it comes from. A wrong value raises :class:`ParameterError`, which knows the field it concerns; each entry
point renders it under its own names (``NEARDUP_NUM_PERM``, ``--num-perm``, ``num_perm``) with
:meth:`ParameterError.render`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import ParameterError
from .shingles import SHINGLE_KINDS, ShingleKind
from .text import CONTENT_MODES, DEFAULT_CONTENT, ContentMode
from .theory import DEFAULT_THRESHOLD, min_shared_for

#: Version of the hash scheme (HTML extraction, normalization, shingle hashing, MinHash); part of every tag.
#: 3: HTML text extracted by lexbor, every element boundary a word separator (2: lxml, block elements only).
#: 4: ``"auto"`` content (the page's own text, template and link lists out: :mod:`scrapy_neardup.core.blocks`), and
#: ``"main"`` content read once where the main element matched twice (``<main role="main">``).
#: 5: Unicode folding before words are split (accents, format characters, lookalike letters:
#: :mod:`scrapy_neardup.core.fold`), in every content mode.
#: 6: ``"auto"`` content read by main-content extraction (:mod:`scrapy_neardup.core.main_content`).
#: 7: ``"auto"`` content of article pages (and of pages without marked content or template) read by its passages of
#: prose (:func:`scrapy_neardup.core.blocks.passages`).
#: 8: ``"auto"``: an ``<article>`` measured by its words outside the ``<article>`` elements nested in it
#: (:func:`scrapy_neardup.core.article.page_article`), a passage measured once the teasers after it are cut off, and
#: web addresses written out in an HTML page's text read as link text.
#: 9: ``"auto"``: a ``<header>`` or ``<footer>`` inside ``<main>`` or ``<article>`` (or ``role="main"``, on pages
#: that do not declare themselves articles) read as part of it, not removed as the page's banner or footer.
#: 10: every mode: a page whose self-closing SVG or MathML elements (an inline chart of a thousand ``<rect/>``) the
#: scan took for open elements is parsed, not sent to the tag stripper.
#: 11: every mode: the options of a ``<select>`` list are not text; ``"auto"``: a reading that leaves out the page's
#: paragraph body (:mod:`scrapy_neardup.core.main_content`), not as a comment thread, reads that body instead,
#: and of several ``<main>`` elements only one that holds most of their words is the main content.
#: 12: ``"auto"``: a page that marks nothing, read under its host's template, and the main content a page marks
#: without declaring an article, read by their passages of prose when those hold most, or nearly all, of their own
#: words (:func:`scrapy_neardup.core.blocks.prose_share`), no longer whole.
#: 13: ``"auto"``: an article page that marks nothing read in its paragraph body's column when the extraction keeps
#: much more (:func:`scrapy_neardup.core.paragraph_body.column`).
#: 14: ``"auto"``: a page read as a few words read again with its ``<noscript>`` content when that says much more
#: (forums whose scripts render a topic), and a forum topic whose posts the extraction takes for comments read with
#: its thread (:mod:`scrapy_neardup.core.main_content`).
#: 15: ``"auto"``: a page's passages of prose parted by link blocks only, no longer by subheadings, list items and
#: one-line paragraphs (:func:`scrapy_neardup.core.blocks.passages`).
#: 16: ``"auto"``: a page with prose read whole (no passage to trust) read without its link blocks (a print bar,
#: share buttons, a "next post" link), as its passages are (:func:`scrapy_neardup.core.blocks.own_selection`).
SCHEME_VERSION = 16
#: The scheme ``"body"`` sketches carry in their tags: it stayed 3 while only the other modes changed (4), so
#: that stores of those versions stayed usable in that mode; folding changed every mode (5), and so did the reading
#: of self-closing SVG elements (10) and of ``<select>`` lists (11).
BODY_SCHEME_VERSION = 11
#: The scheme ``"main"`` sketches carry: 6 to 9 and 12 to 16 changed ``"auto"`` only.
MAIN_SCHEME_VERSION = 11
#: What each scheme changed in reading a page (the refusal of a store of an earlier scheme says it), and the modes
#: it changed (``None``: every mode).
_SCHEME_CHANGES: dict[int, tuple[tuple[str, ...] | None, str]] = {
    5: (None, "no folding of accents, lookalike letters and invisible characters"),
    6: (("auto",), "no main-content extraction of its own text"),
    7: (("auto",), "no passages of prose: an article read with the widgets around it"),
    8: (("auto",), "teaser cards nested in an <article> counted for it, a short article before teasers read whole, "
                   "and web addresses written out in the text read as words"),
    9: (("auto",), "a <header> or <footer> inside the main content or an <article> removed with the page's banner "
                   "and footer"),
    10: (None, "a page with many self-closing SVG elements (an inline chart) read as tag-stripped text"),
    11: (None, "the options of <select> lists read as text, and (auto) an article's paragraph body lost to a class "
               "name or a misplaced <main>"),
    12: (("auto",), "a page read whole under its host's template, or within the main content it marks, with the "
                    "teasers, bylines and neighbours' links around its prose"),
    13: (("auto",), "an article page that marks nothing read with the author's bio, \"most read\" lists and site "
                    "blurbs its extraction kept around the article"),
    14: (("auto",), "a forum topic that its scripts render, or whose posts the extraction takes for comments, read "
                    "as a few words"),
    15: (("auto",), "a guide or an agency story read for its largest section alone, where subheadings, list items or "
                    "one-line paragraphs lay between its paragraphs"),
    16: (("auto",), "a short article or a page without a passage of prose read with its print bar, share buttons "
                    "and other link blocks"),
}

#: ``k`` may not exceed this: the one-permutation hasher splits the hash range into ``k`` bins, and beyond a
#: thousand positions the candidate queries of Elasticsearch grow past its clause limits.
MAX_NUM_PERM = 1024
DEFAULT_NUM_PERM = 128
DEFAULT_SEED = 1
#: Units per shingle when none is given.
DEFAULT_WIDTH: dict[str, int] = {"word": 5, "char": 9}
#: Seeds are hashed as unsigned 64-bit integers; larger ones would silently alias smaller ones.
SEED_LIMIT = 1 << 64

#: The fields, under the names the Python API uses.
FIELDS = ("num_perm", "min_shared", "threshold", "shingle", "shingle_size", "seed", "content")
_CORE_NAMES = {name: name for name in FIELDS}


def check_num_perm(num_perm: Any) -> int:
    """``k`` in ``[1, MAX_NUM_PERM]``: each position agrees with probability ``r``, so the estimate
    ``r_hat = shared / k`` has standard deviation ``sqrt(r (1 - r) / k)``."""
    if not _is_int(num_perm) or not 1 <= num_perm <= MAX_NUM_PERM:
        raise ParameterError("num_perm", num_perm, f"is not valid: expected an integer in [1, {MAX_NUM_PERM}]")
    return int(num_perm)


def check_min_shared(min_shared: Any, num_perm: int) -> int:
    """``t`` in ``[1, k]``: a pair is flagged when its signatures agree in ``>= t`` positions."""
    if not _is_int(min_shared) or not 1 <= min_shared <= num_perm:
        raise ParameterError(
            "min_shared", min_shared, f"is not valid: expected an integer in [1, {{num_perm}}={num_perm}]"
        )
    return int(min_shared)


def check_threshold(threshold: Any) -> float:
    """The target resemblance ``r*`` in ``(0, 1]``."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold <= 1:
        raise ParameterError("threshold", threshold, "is not valid: expected a resemblance in (0, 1]")
    return float(threshold)


def check_shingling(shingle: Any, shingle_size: Any) -> int:
    """The shingle kind (``"word"`` or ``"char"``) and its width (``None``: the kind's default); returns the
    width."""
    if shingle not in SHINGLE_KINDS:
        raise ParameterError(
            "shingle", shingle, "is not valid: expected one of " + ", ".join(repr(k) for k in SHINGLE_KINDS)
        )
    width = DEFAULT_WIDTH[shingle] if shingle_size is None else shingle_size
    if not _is_int(width) or width < 1:
        raise ParameterError("shingle_size", shingle_size, "is not valid: expected an integer >= 1")
    return int(width)


def check_seed(seed: Any) -> int:
    """The hash seed, an unsigned 64-bit integer: sketches agree across machines for the same seed only."""
    if not _is_int(seed) or not 0 <= seed < SEED_LIMIT:
        raise ParameterError("seed", seed, f"is not valid: expected an integer in [0, {SEED_LIMIT - 1}]")
    return int(seed)


def check_content(content: Any) -> ContentMode:
    """What of a page is sketched: ``"auto"`` (its own text), ``"main"`` (the main content it marks) or
    ``"body"`` (all visible text); see :class:`~scrapy_neardup.core.sketch.Sketcher`."""
    if content not in CONTENT_MODES:
        raise ParameterError(
            "content", content, "is not valid: expected one of " + ", ".join(repr(c) for c in CONTENT_MODES)
        )
    return content


def _is_int(value: Any) -> bool:
    # bool is an int subclass: True must not silently mean 1.
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class SketchParams:
    """The validated parameters of one sketching set-up; build it with :meth:`create`.

    Attributes:
        num_perm: ``k``, signature positions.
        min_shared: ``t``: two pages are near-duplicates when their signatures agree in at least ``t`` of ``k``
            positions. Each position agrees with probability ``r`` (the pages' resemblance), so
            ``P(flag) = P[Binomial(k, r) >= t]``.
        threshold: the target resemblance ``r*`` that ``t`` was chosen for (the largest ``t`` flagging
            ``r = r*`` with probability >= 0.99: ``t = 107`` for ``k = 128, r* = 0.9``); ``None`` when ``t`` was
            given explicitly.
        shingle: ``"word"`` or ``"char"``.
        shingle_size: units per shingle as given; ``None`` for the kind's default (:attr:`width`).
        seed: hash seed.
        content: what of a page is sketched, ``"auto"``, ``"main"`` or ``"body"`` (part of the tag).
    """

    num_perm: int = DEFAULT_NUM_PERM
    min_shared: int = 107
    threshold: float | None = DEFAULT_THRESHOLD
    shingle: ShingleKind = "word"
    shingle_size: int | None = None
    seed: int = DEFAULT_SEED
    content: ContentMode = DEFAULT_CONTENT

    @classmethod
    def create(
        cls,
        *,
        num_perm: int = DEFAULT_NUM_PERM,
        threshold: float | None = None,
        min_shared: int | None = None,
        shingle: ShingleKind = "word",
        shingle_size: int | None = None,
        seed: int = DEFAULT_SEED,
        content: ContentMode = DEFAULT_CONTENT,
    ) -> SketchParams:
        """Check every value and derive ``t``: ``min_shared`` when given (it overrides ``threshold``), else
        :func:`~scrapy_neardup.core.theory.min_shared_for` of ``threshold`` (default 0.9).

        Raises:
            ParameterError: a value is out of range, or the threshold is too low for ``k`` to catch reliably.
        """
        k = check_num_perm(num_perm)
        check_shingling(shingle, shingle_size)
        seed = check_seed(seed)
        content = check_content(content)
        if threshold is not None:
            threshold = check_threshold(threshold)
        if min_shared is not None:
            return cls(k, check_min_shared(min_shared, k), None, shingle, shingle_size, seed, content)
        threshold = DEFAULT_THRESHOLD if threshold is None else threshold
        t = min_shared_for(threshold, k)
        if t < 1:
            raise ParameterError(
                "threshold", threshold,
                f"is too low for {{num_perm}}={k}: no number of shared positions catches it reliably; raise the "
                "threshold or {num_perm}, or set {min_shared}",
            )
        return cls(k, t, threshold, shingle, shingle_size, seed, content)

    @property
    def width(self) -> int:
        """Units per shingle, resolved: ``shingle_size``, or 5 words / 9 characters."""
        return DEFAULT_WIDTH[self.shingle] if self.shingle_size is None else self.shingle_size

    @property
    def tag(self) -> str:
        """The tag sketches made with these parameters carry (:func:`make_tag`); read back by :meth:`from_tag`."""
        return make_tag(self.num_perm, self.shingle, self.width, self.seed, self.content)

    @classmethod
    def from_tag(cls, tag: str, min_shared: int | None = None, threshold: float | None = None) -> SketchParams:
        """The parameters a tag names, with ``t`` from ``min_shared`` or ``threshold`` (default 0.9) as in
        :meth:`create`.

        Raises:
            ValueError: not a sketch parameter tag (:func:`parse_tag`).
            ParameterError: ``t`` does not suit the tag's ``k``.
        """
        parts = parse_tag(tag)
        shingle: ShingleKind = "char" if parts.shingle == "char" else "word"
        return cls.create(num_perm=parts.num_perm, threshold=threshold, min_shared=min_shared, shingle=shingle,
                          shingle_size=parts.width, seed=parts.seed, content=check_content(parts.content))


def make_tag(num_perm: int, shingle: str, width: int, seed: int, content: ContentMode = "auto") -> str:
    """The parameter tag: ``mh<scheme>-k<num_perm>-<shingle><width>-s<seed>``, plus ``-auto`` or ``-main`` for the
    content modes that do not sketch the whole body (``"body"`` adds nothing, so its tags read as in earlier
    versions, whose stores and indices it can still use: :data:`BODY_SCHEME_VERSION`). Sketches of different
    modes never compare. Read back by :func:`parse_tag`; :attr:`SketchParams.tag` gives it for a set of parameters."""
    suffix = "" if content == "body" else f"-{content}"
    scheme = {"body": BODY_SCHEME_VERSION, "main": MAIN_SCHEME_VERSION}.get(content, SCHEME_VERSION)
    return f"mh{scheme}-k{num_perm}-{shingle}{width}-s{seed}{suffix}"


@dataclass(frozen=True)
class TagParts:
    """The parameters a tag names (see :func:`make_tag`)."""

    scheme: int
    num_perm: int
    shingle: str
    width: int
    seed: int
    content: str = "body"


_TAG = re.compile(r"mh(\d+)-k(\d+)-(word|char)(\d+)-s(\d+)(?:-(main|auto))?")


def parse_tag(tag: str) -> TagParts:
    """The parameters of a tag made by :func:`make_tag`.

    Raises:
        ValueError: not a sketch parameter tag.
    """
    match = _TAG.fullmatch(tag)
    if match is None:
        raise ValueError(
            f"not a sketch parameter tag (mh<scheme>-k<k>-<word|char><width>-s<seed>[-main|-auto]): {tag!r}"
        )
    scheme, num_perm, shingle, width, seed, content = match.groups()
    return TagParts(int(scheme), int(num_perm), shingle, int(width), int(seed), content or "body")


def require_params(params: Any, caller: str) -> SketchParams:
    """``params`` when it is a :class:`SketchParams`; a tag string (or anything else) is refused in one line that
    says how to get one (a tag and ``t`` read back with :meth:`SketchParams.from_tag`).

    Raises:
        TypeError: ``params`` is not a :class:`SketchParams`.
    """
    if not isinstance(params, SketchParams):
        raise TypeError(f"{caller} takes SketchParams (a Sketcher's params, or SketchParams.from_tag(tag, "
                        f"min_shared=t) for a tag), not {type(params).__name__}")
    return params


_CONTENT_WORDS = {"body": "each page's whole body", "main": "the main content each page marks",
                  "auto": "each page's own text"}


def content_change(saved: str, tag: str) -> str | None:
    """When sketches tagged ``saved`` and ``tag`` differ only in what of a page they read (the content mode) or in
    how they read it (the scheme: an earlier version's text extraction or normalization): a sentence saying so, for
    the one-line refusal of a store or index made otherwise (e.g. by an earlier version). ``None`` when other
    parameters differ too, or none does. :func:`still_made` tells whether this version can still make ``saved``."""
    try:
        old, new = parse_tag(saved), parse_tag(tag)
    except ValueError:
        return None
    if (old.num_perm, old.shingle, old.width, old.seed) != (new.num_perm, new.shingle, new.width, new.seed):
        return None
    if old.content == new.content:
        if old.scheme == new.scheme:
            return None
        changes = "; ".join(what for scheme, (modes, what) in _SCHEME_CHANGES.items()
                            if old.scheme < scheme <= new.scheme and (modes is None or new.content in modes))
        return (f"its sketches were made by an earlier version ({saved}), which reads text otherwise "
                f"({changes or 'another scheme'}), this run's by {tag}: they never compare")
    # "body" was the default until "auto" came with scheme 4.
    default = ", the default of earlier versions" if old.content == "body" and old.scheme < 4 else ""
    return (f"its sketches read {_CONTENT_WORDS[old.content]} ({saved}{default}), this run's read "
            f"{_CONTENT_WORDS[new.content]} ({tag}): they never compare")


def still_made(tag: str) -> bool:
    """Whether this version makes sketches tagged ``tag`` in some content mode (a store made by an earlier
    scheme is not: choosing that mode would not make it usable)."""
    try:
        parts = parse_tag(tag)
    except ValueError:
        return False
    content = next((mode for mode in CONTENT_MODES if mode == parts.content), None)
    return content is not None and make_tag(parts.num_perm, parts.shingle, parts.width, parts.seed, content) == tag


__all__ = [
    "BODY_SCHEME_VERSION",
    "MAIN_SCHEME_VERSION",
    "DEFAULT_NUM_PERM",
    "DEFAULT_SEED",
    "DEFAULT_WIDTH",
    "FIELDS",
    "MAX_NUM_PERM",
    "SCHEME_VERSION",
    "SketchParams",
    "TagParts",
    "check_min_shared",
    "check_num_perm",
    "check_content",
    "check_seed",
    "check_shingling",
    "check_threshold",
    "content_change",
    "make_tag",
    "require_params",
    "parse_tag",
    "still_made",
]
