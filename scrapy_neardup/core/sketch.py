"""Sketches: the one signature type that flows through the pipeline, the index and Elasticsearch.

A :class:`Sketch` holds a MinHash signature of ``k`` positions, a 64-bit exact fingerprint of the normalized
text, and a short parameter tag. Two sketches are comparable only when their tags are equal (same ``k``,
shingling, seed and hash scheme); comparing across tags raises :class:`IncompatibleSketches`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import mmh3
import numpy as np

from ..errors import IncompatibleSketches
from .blocks import own_selection, own_text, prose_share, split_blocks, split_blocks_many
from .minhash import OnePermutationHasher
from .params import (  # the tag codec is re-exported: it was defined here in earlier versions
    BODY_SCHEME_VERSION,
    DEFAULT_NUM_PERM,
    DEFAULT_SEED,
    SCHEME_VERSION,
    SketchParams,
    TagParts,
    check_content,
    check_num_perm,
    check_seed,
    check_shingling,
    content_change,
    make_tag,
    parse_tag,
)
from .shingles import ShingleKind, shingle_hashes, window_hashes
from .text import DEFAULT_MAX_CHARS, CleanText, ContentMode, clean_text
from .theory import DEFAULT_THRESHOLD, min_shared_for

__all__ = [
    "BODY_SCHEME_VERSION",
    "DEFAULT_NUM_PERM",  # re-exported: the default k belongs with the Sketcher's other defaults for readers
    "DEFAULT_SEED",
    "Content",
    "IncompatibleSketches",
    "SCHEME_VERSION",
    "Sketch",
    "Sketcher",
    "TagParts",
    "check_compatible",
    "content_change",
    "fingerprint",
    "jaccard",
    "make_tag",
    "parse_tag",
    "removed_share",
]
# Texts are shingled in groups of about this many characters: bounded temporary arrays.
#: What :attr:`Sketch.sketched` may say.
SKETCHED = ("main content", "own text", "whole text")
_BATCH_CHARS = 1 << 20


def removed_share(words: int, page_words: int) -> float | None:
    """``1 - words / page_words`` rounded to 2 decimals (the share of a page's text left out of what was
    sketched), ``None`` when ``page_words`` is 0 (not counted)."""
    if page_words <= 0:
        return None
    return round(max(0.0, 1.0 - words / page_words), 2)

Content = str | bytes | bytearray | memoryview


@dataclass(frozen=True, eq=False)
class Sketch:
    """A page's MinHash sketch.

    Attributes:
        signature: ``uint32[k]``; position ``i`` of two sketches agrees with probability ``r``, their
            resemblance (Jaccard similarity of shingle sets).
        fingerprint: unsigned 64-bit MurmurHash3 of the normalized text: equal for exact duplicates.
        tag: parameter tag, e.g. ``"mh3-k128-word5-s1"``; only sketches with equal tags are comparable.
        num_shingles: distinct-or-not shingles seen (0 means the text was empty after normalization).
        truncated: the content was longer than the sketcher's cap and only its head was sketched.
        blocks: ``"auto"`` mode: the page's distinct block hashes (sorted ``uint64``), from which its host's
            template is learned (:mod:`scrapy_neardup.core.host_template`); ``None`` in the other modes. Not part of
            the sketch's identity.
        sketched: what of the page was sketched (one of :data:`SKETCHED`): ``"main content"`` (what the page
            marks, or ``"main"`` mode), ``"own text"`` (``"auto"`` mode on a page that marks nothing: its text
            without its host's template and its link lists, if it had any), ``"whole text"`` (``"body"`` mode);
            ``""`` when not known. Not part of the
            sketch's identity, nor is ``words``.
        words: ``"auto"`` mode: the words sketched (0 in the other modes).
        page_words: ``"auto"`` mode: the words of the page's whole visible text (scripts and styles aside),
            before its ``nav``/``header``/``footer``/``aside``, what lies outside its marked main content, its
            host's template and its link lists were removed (an article page: its body's visible words, since its
            extraction also removes comment threads and teasers inside the main content); 0 when not counted
            (several main elements; the other modes). The share of the
            page removed before sketching is ``1 - words / page_words`` (:attr:`removed`).
    """

    signature: np.ndarray
    fingerprint: int
    tag: str
    num_shingles: int
    truncated: bool = False
    blocks: np.ndarray | None = field(default=None, repr=False)
    sketched: str = ""
    words: int = 0
    page_words: int = 0
    _hashable: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hashable", self.signature.tobytes())

    @property
    def num_perm(self) -> int:
        """k, the number of signature positions."""
        return int(self.signature.size)

    @property
    def removed(self) -> float | None:
        """The share of the page's text removed before sketching, ``1 - words / page_words`` (2 decimals), or
        ``None`` when ``page_words`` was not counted."""
        return removed_share(self.words, self.page_words)

    @property
    def empty(self) -> bool:
        """True when the text had no shingles (empty or whitespace-only after normalization)."""
        return self.num_shingles == 0

    def shared_positions(self, other: Sketch) -> int:
        """Number of positions where the two signatures agree (``~ Binomial(k, r)``)."""
        check_compatible(self, other)
        return int(np.count_nonzero(self.signature == other.signature))

    def resemblance(self, other: Sketch) -> float:
        """Estimated resemblance ``r_hat = shared_positions / k``, an unbiased estimate of Jaccard."""
        return self.shared_positions(other) / self.num_perm

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sketch):
            return NotImplemented
        return (self.tag, self.fingerprint, self._hashable) == (other.tag, other.fingerprint, other._hashable)

    def __hash__(self) -> int:
        return hash((self.tag, self.fingerprint, self._hashable))


def check_compatible(a: Sketch, b: Sketch) -> None:
    """Raise :class:`IncompatibleSketches` unless ``a`` and ``b`` were made with the same parameters."""
    if a.tag != b.tag:
        raise IncompatibleSketches(
            f"sketches made with different parameters cannot be compared: {a.tag!r} vs {b.tag!r}"
        )


class Sketcher:
    """Turns page content into :class:`Sketch` objects with fixed parameters.

    Args:
        num_perm: ``k``, signature positions. The estimate ``r_hat`` has standard deviation
            ``sqrt(r (1 - r) / k)``; the t-of-k test's S-curve sharpens as ``k`` grows
            (see :mod:`scrapy_neardup.core.theory`).
        shingle: ``"word"`` (word w-shingles, the default) or ``"char"`` (character n-grams, for languages
            without spaces or very short texts).
        shingle_size: units per shingle; default 5 words or 9 characters.
        seed: hash seed. Sketches agree across processes and machines for the same seed, and only then.
        max_chars: content longer than this is truncated before processing (``Sketch.truncated``).
        content: ``"auto"`` (default): what the page says itself: its marked main content (else its body) without
            link lists and without the blocks its host repeats on many pages (the ``template`` given to
            :meth:`sketch_many`; see :mod:`scrapy_neardup.core.blocks`); ``"main"``: the main content the page
            marks (nav, header, footer and aside dropped; ``<main>``, else ``<article>``, else ``<body>``: see
            :func:`scrapy_neardup.core.html.html_to_text`); ``"body"``: all the visible text of an HTML page. Part
            of the tag. Plain text is used whole in ``"main"`` and ``"body"``; ``"auto"`` takes each line for a
            block.

    Attributes:
        params: the :class:`~scrapy_neardup.core.params.SketchParams` this sketcher was made with
            (:meth:`from_params`), ``t`` included; made directly, ``t`` is the default threshold's for ``k``
            (:func:`~scrapy_neardup.core.theory.min_shared_for` of 0.9, at least 1). What jobs that compare
            sketches take, so that the tag is read once.

    >>> s = Sketcher()
    >>> a = s.sketch("the quick brown fox jumps over the lazy dog")
    >>> a.signature.shape, a.resemblance(s.sketch("The  QUICK brown fox jumps over the lazy dog"))
    ((128,), 1.0)
    """

    def __init__(
        self,
        num_perm: int = DEFAULT_NUM_PERM,
        shingle: ShingleKind = "word",
        shingle_size: int | None = None,
        seed: int = DEFAULT_SEED,
        max_chars: int = DEFAULT_MAX_CHARS,
        content: ContentMode = "auto",
    ) -> None:
        # One set of rules for every entry point (see scrapy_neardup.core.params): ParameterError names the field.
        num_perm = check_num_perm(num_perm)
        width = check_shingling(shingle, shingle_size)
        seed = check_seed(seed)
        content = check_content(content)
        if max_chars < 1:
            raise ValueError(f"max_chars must be positive, got {max_chars}")
        self.num_perm = num_perm
        self.shingle: ShingleKind = shingle
        self.shingle_size = width
        self.seed = seed
        self.max_chars = max_chars
        self.content: ContentMode = content
        self.params = SketchParams(num_perm, max(1, min_shared_for(DEFAULT_THRESHOLD, num_perm)), DEFAULT_THRESHOLD,
                                   shingle, shingle_size, seed, content)
        self.tag = self.params.tag
        self._hasher = OnePermutationHasher(num_perm, seed)

    @classmethod
    def from_params(cls, params: SketchParams, max_chars: int = DEFAULT_MAX_CHARS) -> Sketcher:
        """The sketcher for validated :class:`~scrapy_neardup.core.params.SketchParams` (kept as :attr:`params`)."""
        sketcher = cls(params.num_perm, params.shingle, params.shingle_size, params.seed, max_chars, params.content)
        sketcher.params = params
        return sketcher

    def __repr__(self) -> str:
        return f"Sketcher({self.tag!r})"

    def sketch(
        self, content: Content, is_html: bool | None = None, template: np.ndarray | None = None,
        leave_out: np.ndarray | None = None,
    ) -> Sketch:
        """Sketch one page (text, HTML or UTF-8 bytes; ``is_html=None`` sniffs for markup); ``template``: its host's
        template block hashes, ``leave_out``: word hashes not to shingle (``"auto"`` mode; see :meth:`sketch_many`)."""
        return self.sketch_many([content], is_html=is_html, templates=[template],
                                leave_out=None if leave_out is None else [leave_out])[0]

    def sketch_many(
        self, contents: Iterable[Content], is_html: bool | None = None,
        templates: Sequence[np.ndarray | None] | None = None, leave_out: Sequence[np.ndarray | None] | None = None,
    ) -> list[Sketch]:
        """Sketch many pages at once: the fast path (shingling and MinHash vectorized over the batch).

        Args:
            contents: the pages.
            is_html: ``True``/``False`` to force; ``None`` sniffs each page.
            templates: ``"auto"`` mode: per page, the sorted ``uint64`` block hashes of its host's template
                (:attr:`scrapy_neardup.core.host_template.HostTemplate.hashes`), or ``None`` where none is known;
                ignored in the other modes.
            leave_out: ``"auto"`` mode: per page, a sequence of word hashes
                (:func:`scrapy_neardup.core.shingles.word_hashes`) whose occurrences are left out of its own words, or
                ``None`` (the URL a "not found" page names:
                :func:`scrapy_neardup.core.soft404_templates.url_words`); ignored in the other modes.
        """
        if self.content == "auto":  # words are read from the text: its runs of spaces need no collapsing
            cleaned = [clean_text(c, is_html, self.max_chars, "auto", collapse=False) for c in contents]
        else:
            cleaned = [clean_text(c, is_html, self.max_chars, self.content) for c in contents]
        if self.content == "auto":
            nothing: list[np.ndarray | None] = [None] * len(cleaned)
            return self._sketch_auto(cleaned, templates if templates is not None else nothing,
                                     leave_out if leave_out is not None else nothing)
        texts = [c.utf8 for c in cleaned]
        sketches: list[Sketch] = []
        for lo, hi in _batches(texts):
            sigs, counts = self.signatures(texts[lo:hi])
            for i in range(lo, hi):
                sketches.append(
                    Sketch(
                        signature=sigs[i - lo],
                        fingerprint=fingerprint(texts[i]),
                        tag=self.tag,
                        num_shingles=int(counts[i - lo]),
                        truncated=cleaned[i].truncated,
                        sketched="whole text" if self.content == "body" else "main content",
                    )
                )
        return sketches

    def _sketch_auto(
        self, cleaned: list[CleanText], templates: Sequence[np.ndarray | None], leave_out: Sequence[np.ndarray | None],
    ) -> list[Sketch]:
        """``"auto"`` sketches: each page's own words (:func:`~scrapy_neardup.core.blocks.own_words` under its
        host's template), shingled from the word hashes the blocks were read with; the fingerprint is that of
        the own words' hashes in order (equal for pages whose own words are equal)."""
        sketches: list[Sketch] = []
        for lo, hi in _batches([c.utf8 for c in cleaned]):
            pages = split_blocks_many([c.utf8 for c in cleaned[lo:hi]])
            selections = [own_selection(page, *auto_reading(c, template))
                          for page, c, template in zip(pages, cleaned[lo:hi], templates[lo:hi], strict=True)]
            # None: every word kept (plain text without a template): no selection to make.
            kept: list[np.ndarray | None] = []
            for page, (blocks, _), words in zip(pages, selections, leave_out[lo:hi], strict=True):
                keep = None if (blocks | (page.counts == 0)).all() else blocks[page.block]
                if words is not None and words.size:
                    left = ~_occurrences(page.words, words)
                    keep = left if keep is None else keep & left
                kept.append(keep)
            units = [page.words if keep is None else page.words[keep] for page, keep in zip(pages, kept, strict=True)]
            if self.shingle == "word":
                hashes, counts = window_hashes(
                    np.concatenate(units) if units else np.empty(0, dtype=np.uint64),
                    np.fromiter(map(len, units), dtype=np.int64, count=len(units)), self.shingle_size,
                )
            else:
                texts = [page.text(keep) for page, keep in zip(pages, kept, strict=True)]
                hashes, counts = shingle_hashes(texts, self.shingle, self.shingle_size)
            sigs = self._hasher.signatures(hashes, counts)
            for i, page in enumerate(pages):
                clean = cleaned[lo + i]
                fingerprint = int(mmh3.hash64(units[i].tobytes(), signed=False)[0])
                sketched = "main content" if clean.marked else "own text"
                sketches.append(Sketch(
                    signature=sigs[i], fingerprint=fingerprint,
                    tag=self.tag, num_shingles=int(counts[i]), truncated=clean.truncated,
                    blocks=None if clean.marked else page.distinct_hashes,
                    sketched=sketched, words=int(units[i].size),
                    page_words=0 if clean.outside_words is None else int(page.words.size) + clean.outside_words,
                ))
        return sketches

    def block_hashes(self, contents: Iterable[Content], is_html: bool | None = None) -> list[np.ndarray | None]:
        """``"auto"`` mode: each page's distinct block hashes (sorted ``uint64``), what its host's template is
        learned from (:mod:`scrapy_neardup.core.host_template`); ``None`` for a page that marks its main content, which
        is sketched without a template (``Sketch.blocks`` is ``None`` too)."""
        if self.content != "auto":
            raise ValueError(f"block hashes belong to 'auto' sketches; this sketcher's content is {self.content!r}")
        cleaned = [clean_text(c, is_html, self.max_chars, "auto", collapse=False) for c in contents]
        pages = split_blocks_many([c.utf8 for c in cleaned])
        return [None if c.marked else page.distinct_hashes for c, page in zip(cleaned, pages, strict=True)]

    def text(self, content: Content, is_html: bool | None = None, template: np.ndarray | None = None) -> bytes:
        """The normalized text of ``content`` that is shingled (``"auto"``: its own text under ``template``)."""
        cleaned = clean_text(content, is_html, self.max_chars, self.content)
        if self.content != "auto":
            return cleaned.utf8
        return own_text(split_blocks(cleaned.utf8), *auto_reading(cleaned, template))

    def signatures(self, texts: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Raw signatures of already normalized UTF-8 texts: ``(uint32[n, k], shingle counts[n])``."""
        hashes, counts = shingle_hashes(texts, self.shingle, self.shingle_size)
        return self._hasher.signatures(hashes, counts), counts

    def shingle_set(self, content: Content, is_html: bool | None = None) -> np.ndarray:
        """The distinct shingle hashes of a page (sorted uint64): the set that MinHash samples."""
        hashes, _ = shingle_hashes([self.text(content, is_html)], self.shingle, self.shingle_size)
        return np.unique(hashes)

    def jaccard(self, a: Content, b: Content, is_html: bool | None = None) -> float:
        """Exact resemblance ``|A ∩ B| / |A ∪ B|`` of two pages' shingle sets (1.0 when both are empty)."""
        return jaccard(self.shingle_set(a, is_html), self.shingle_set(b, is_html))


def auto_reading(cleaned: CleanText, template: np.ndarray | None) -> tuple[np.ndarray | None, float]:
    """How ``"auto"`` reads a cleaned page whose host's template is ``template``: the template it is read under
    (none for a page that marks its main content: the page says what it says), and the share of its own words its
    passages of prose must hold to be read alone (:func:`~scrapy_neardup.core.blocks.prose_share`)."""
    template = None if cleaned.marked else template
    return template, prose_share(cleaned.article, cleaned.marked, template)


def _occurrences(words: np.ndarray, run: np.ndarray) -> np.ndarray:
    """``bool[len(words)]``: the words that are part of an occurrence of the sequence ``run`` in ``words``."""
    hit = np.zeros(words.size, dtype=bool)
    n = words.size - run.size + 1
    if n <= 0:
        return hit
    starts = np.ones(n, dtype=bool)
    for j, word in enumerate(run.tolist()):
        starts &= words[j : j + n] == word
    for j in range(run.size):
        hit[j : j + n] |= starts
    return hit


def fingerprint(normalized_utf8: bytes) -> int:
    """Unsigned 64-bit MurmurHash3 (x64, 128-bit variant, first half) of a normalized UTF-8 text."""
    return int(mmh3.hash64(normalized_utf8, signed=False)[0])


def jaccard(a: Iterable[int] | np.ndarray, b: Iterable[int] | np.ndarray) -> float:
    """Jaccard similarity ``|A ∩ B| / |A ∪ B|`` of two sets of ints (1.0 for two empty sets)."""
    set_a = np.unique(np.asarray(list(a) if not isinstance(a, np.ndarray) else a))
    set_b = np.unique(np.asarray(list(b) if not isinstance(b, np.ndarray) else b))
    union = np.union1d(set_a, set_b).size
    if union == 0:
        return 1.0
    return np.intersect1d(set_a, set_b, assume_unique=True).size / union


def _batches(texts: Sequence[bytes]) -> Iterable[tuple[int, int]]:
    """Split ``texts`` into consecutive ranges of about ``_BATCH_CHARS`` characters (at least one text)."""
    lo, size = 0, 0
    for i, text in enumerate(texts):
        size += len(text) + 1
        if size >= _BATCH_CHARS:
            yield lo, i + 1
            lo, size = i + 1, 0
    if lo < len(texts):
        yield lo, len(texts)
