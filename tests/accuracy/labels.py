"""The independent labeller: which pages of a corpus really are near-duplicates, judged on their main content.

The main content of each ``served`` page is found with lxml and selectors chosen per generator after looking at
the real pages (:data:`MAIN_SELECTORS`); scripts, styles, templates, noscript and iframe content are dropped; the
text is tokenized by a rule of its own (NFKC, lower case, runs of letters and digits: :func:`words`) and cut into word
5-shingles (:func:`shingles`). The labels are the exact Jaccard similarities of those shingle sets for every pair of
pages sharing at least one shingle, plus each page's main-content word count. They are computed once per corpus on
the ``served`` variant and hold for the ``stripped`` one too (same pages, same text), and are cached next to the
prepared corpus, keyed by the corpus and :data:`LABELLER_VERSION`.

Nothing here uses the product (``scrapy_neardup``): the labels must not share its mistakes.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import lxml.html
import numpy as np
from corpora import Corpus, parallel_map, parse

logger = logging.getLogger(__name__)

#: Bump when the selectors, the tokenizer or the shingling change: cached labels are then recomputed.
LABELLER_VERSION = 2
SHINGLE_WORDS = 5
#: Elements whose content is not visible text (an iframe shows another document, never its own content).
INVISIBLE = ("script", "style", "template", "noscript", "iframe")
#: Shingles in more pages than this are counted with a dense matrix product instead of pair lists (exact too).
COMMON_SHINGLE_PAGES = 24
_WORD = re.compile(r"[^\W_]+")


def _has_class(name: str) -> str:
    return f'contains(concat(" ", normalize-space(@class), " "), " {name} ")'


#: Per generator, XPath alternatives tried in order; the first that matches gives the main content (the text of all
#: its matches, in document order). Checked on the real pages (see the module's tests and the report).
MAIN_SELECTORS: dict[str, tuple[str, ...]] = {
    # Javadoc 9+ (HTML5): <main> holds the title (div.header) and the content; Javadoc 8 has no <main>: the
    # title block and div.contentContainer.
    "javadoc": (
        "//main",
        f"//div[{_has_class('header')}] | //div[{_has_class('contentContainer')}]",
    ),
    # Sphinx with the Read-the-Docs theme: the article body inside div[role=main] (breadcrumbs and the
    # previous/next footer are outside it).
    "sphinx-rtd": ('//div[@itemprop="articleBody"]', '//div[@role="main"]'),
    # Sphinx with the PyData theme: 0.7 puts the article in the first div of main.bd-content, followed by the
    # previous/next links (left out); later versions have article.bd-article.
    "sphinx-pydata": (
        f"//main[{_has_class('bd-content')}]/div[not({_has_class('prev-next-area')})]",
        f"//article[{_has_class('bd-article')}]",
    ),
    # Python's own theme (pydoctheme): div.body, which also has role=main.
    "python-docs": (f"//div[{_has_class('body')}]", '//div[@role="main"]'),
    # rustdoc 1.5x+: section#main-content (the search bar and sidebar are outside it); older: section#main.
    "rustdoc": ('//section[@id="main-content"]', '//*[@id="main-content"]', '//section[@id="main"]'),
    # doxygen: the title block (div.header) and div.contents; the menu, breadcrumbs and footer are outside.
    "doxygen": (f"//div[{_has_class('header')}] | //div[{_has_class('contents')}]",),
}


def words(text: str) -> list[str]:
    """The labeller's tokens: NFKC, lower case, maximal runs of letters and digits (underscore separates)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def shingles(tokens: Sequence[str]) -> set[str]:
    """Word 5-shingles (joined by spaces). Fewer than 5 words make one shingle of them all; none, the empty set."""
    if not tokens:
        return set()
    if len(tokens) < SHINGLE_WORDS:
        return {" ".join(tokens)}
    return {" ".join(tokens[i : i + SHINGLE_WORDS]) for i in range(len(tokens) - SHINGLE_WORDS + 1)}


def set_jaccard(a: set[str], b: set[str]) -> float:
    """Jaccard similarity of two sets; 1.0 for two empty sets (equal sets)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def visible_text(elements: Iterable[lxml.html.HtmlElement]) -> str:
    """The text of ``elements`` without invisible content, every element boundary a word separator."""
    pieces: list[str] = []
    for element in elements:
        for dropped in element.xpath(" | ".join(f".//{name}" for name in INVISIBLE)):
            dropped.drop_tree()
        pieces.extend(element.itertext())
    return " ".join(pieces)


def main_elements(root: lxml.html.HtmlElement, generator: str) -> list[lxml.html.HtmlElement]:
    """The elements holding the page's main content (empty when no selector of its generator matches)."""
    for selector in MAIN_SELECTORS[generator]:
        found = _outermost(root.xpath(selector))
        if found:
            return found
    return []


def _outermost(elements: list[lxml.html.HtmlElement]) -> list[lxml.html.HtmlElement]:
    chosen = set(elements)
    return [e for e in elements if not any(a in chosen for a in e.iterancestors())]


def main_text(html: bytes, generator: str) -> str:
    """The visible text of a page's main content."""
    return visible_text(main_elements(parse(html), generator))


def body_text(html: bytes) -> str:
    """The visible text of a page's whole ``<body>``."""
    return visible_text([parse(html).body])


# -- labels ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Labels:
    """Exact main-content Jaccard similarities of a corpus' pages.

    Attributes:
        corpus: the corpus name.
        keys: page keys, in the corpus' crawl order; page ``i`` is ``keys[i]``.
        words: main-content word count per page.
        sizes: shingle set size per page.
        pair_codes: ``i * n + j`` (``i < j``) of every pair sharing at least one shingle, sorted.
        shared: shared shingles of each pair in ``pair_codes``.
    """

    corpus: str
    keys: tuple[str, ...]
    words: np.ndarray
    sizes: np.ndarray
    pair_codes: np.ndarray
    shared: np.ndarray
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {key: i for i, key in enumerate(self.keys)})

    def __len__(self) -> int:
        return len(self.keys)

    def index(self, key: str) -> int:
        return self._index[key]

    def jaccard(self, a: str, b: str) -> float:
        """Exact Jaccard similarity of the main contents of pages ``a`` and ``b`` (1.0 for a page with itself and
        for two pages with empty main content; 0.0 for pages sharing no shingle)."""
        i, j = sorted((self._index[a], self._index[b]))
        if i == j:
            return 1.0
        size_i, size_j = int(self.sizes[i]), int(self.sizes[j])
        if size_i == 0 and size_j == 0:
            return 1.0
        code = i * len(self.keys) + j
        at = int(np.searchsorted(self.pair_codes, code))
        if at == len(self.pair_codes) or int(self.pair_codes[at]) != code:
            return 0.0
        shared = int(self.shared[at])
        return shared / (size_i + size_j - shared)

    def jaccard_matrix(self, pages: Sequence[int]) -> np.ndarray:
        """Jaccard similarities of the given pages (by index), all pairs at once: a square matrix."""
        idx = np.asarray(pages, dtype=np.int64)
        a, b = np.minimum.outer(idx, idx), np.maximum.outer(idx, idx)
        codes = a * len(self.keys) + b
        at = np.minimum(np.searchsorted(self.pair_codes, codes), max(len(self.pair_codes) - 1, 0))
        found = (self.pair_codes[at] == codes) if len(self.pair_codes) else np.zeros(codes.shape, dtype=bool)
        shared = np.where(found, self.shared[at] if len(self.shared) else 0, 0)
        union = self.sizes[a] + self.sizes[b] - shared
        with np.errstate(invalid="ignore", divide="ignore"):
            result = np.where(union > 0, shared / np.maximum(union, 1), 1.0)
        return np.where(a == b, 1.0, result)

    def pair_jaccards(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(i, j, jaccard)`` of every pair sharing a shingle."""
        n = len(self.keys)
        i, j = np.divmod(self.pair_codes, n)
        union = self.sizes[i] + self.sizes[j] - self.shared
        return i, j, self.shared / union

    def real_pairs(self, min_jaccard: float = 0.9) -> list[tuple[str, str, float]]:
        """The pairs ``(a, b, J)`` (``a`` before ``b`` in crawl order) with main-content Jaccard >= ``min_jaccard``,
        pairs of pages whose main content is empty included (their Jaccard is 1)."""
        i, j, jac = self.pair_jaccards()
        keep = jac >= min_jaccard
        found = [(self.keys[a], self.keys[b], float(x)) for a, b, x in zip(i[keep], j[keep], jac[keep], strict=True)]
        empty = np.flatnonzero(self.sizes == 0)
        found += [(self.keys[a], self.keys[b], 1.0) for n, a in enumerate(empty) for b in empty[n + 1 :]]
        return sorted(found, key=lambda p: (self._index[p[0]], self._index[p[1]]))

    def save(self, path: Path) -> None:
        partial = path.with_name(path.name + ".partial.npz")
        np.savez_compressed(
            partial, keys=np.array(self.keys), words=self.words, sizes=self.sizes,
            pair_codes=self.pair_codes, shared=self.shared,
        )
        partial.replace(path)

    @classmethod
    def load(cls, path: Path, corpus: str) -> Labels:
        with np.load(path) as data:
            return cls(corpus, tuple(str(k) for k in data["keys"]), data["words"], data["sizes"],
                       data["pair_codes"], data["shared"])


def _page_shingles(task: tuple[bytes, str]) -> tuple[str, int]:
    """A page's shingles, one a line (one string: cheap to send between processes), and its word count."""
    html, generator = task
    tokens = words(main_text(html, generator))
    return "\n".join(shingles(tokens)), len(tokens)


def page_shingles(corpus: Corpus) -> tuple[list[set[str]], list[int]]:
    """Each page's main-content shingle set and word count, in crawl order (served variant)."""
    done = parallel_map(_page_shingles, [(page.served, corpus.generator) for page in corpus.pages])
    return [set(lines.split("\n")) if lines else set() for lines, _ in done], [n for _, n in done]


def compute_labels(corpus: Corpus) -> Labels:
    """The labels of ``corpus`` (not cached: see :func:`labels_for`)."""
    sets, counts = page_shingles(corpus)
    vocabulary: dict[str, int] = {}
    id_sets = [np.unique(np.fromiter((vocabulary.setdefault(s, len(vocabulary)) for s in shingle_set),
                                     dtype=np.int64, count=len(shingle_set))) for shingle_set in sets]
    codes, shared = shared_counts(id_sets)
    sizes = np.array([len(s) for s in sets], dtype=np.int64)
    return Labels(corpus.name, tuple(corpus.keys), np.array(counts, dtype=np.int64), sizes, codes, shared)


def shared_counts(sets: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """For every pair of sets (of non-negative ints) with a common element: ``(i * n + j, |A_i & A_j|)``, ``i < j``,
    sorted by code.

    Exact. Shingles in at most :data:`COMMON_SHINGLE_PAGES` pages add their page pairs one by one (vectorized per
    posting-list length); the common ones, whose pair lists would grow quadratically, are counted for all pairs at
    once as a product of the dense page x shingle matrix (exact in float32: counts stay far below 2**24).
    """
    n = len(sets)
    counts = np.zeros((n, n), dtype=np.int64)
    if n < 2:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    ids = np.concatenate([np.asarray(s, dtype=np.int64) for s in sets]) if sets else np.empty(0, np.int64)
    docs = np.repeat(np.arange(n, dtype=np.int64), [len(s) for s in sets])
    order = np.lexsort((docs, ids))
    ids, docs = ids[order], docs[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    lengths = np.diff(np.r_[starts, ids.size])
    flat = counts.reshape(-1)
    for length in np.unique(lengths[(lengths >= 2) & (lengths <= COMMON_SHINGLE_PAGES)]):
        groups = docs[starts[lengths == length][:, None] + np.arange(length)]  # one row per shingle
        first, second = np.triu_indices(int(length), k=1)
        flat += np.bincount((groups[:, first] * n + groups[:, second]).reshape(-1), minlength=n * n)
    common = starts[lengths > COMMON_SHINGLE_PAGES]
    common_lengths = lengths[lengths > COMMON_SHINGLE_PAGES]
    for lo in range(0, common.size, 2048):
        block = np.zeros((n, min(2048, common.size - lo)), dtype=np.float32)
        for column, (start, length) in enumerate(zip(common[lo : lo + 2048], common_lengths[lo : lo + 2048],
                                                     strict=True)):
            block[docs[start : start + length], column] = 1.0
        counts += np.rint(block @ block.T).astype(np.int64)
    upper = np.triu(counts, k=1)
    codes = np.flatnonzero(upper)
    return codes.astype(np.int64), upper.reshape(-1)[codes]


def labels_for(corpus: Corpus) -> Labels:
    """The labels of ``corpus``, computed once and cached in the corpus' cache directory."""
    path = corpus.cache / f"labels-v{LABELLER_VERSION}.npz"
    if path.exists():
        labels = Labels.load(path, corpus.name)
        if labels.keys == tuple(corpus.keys):
            return labels
        logger.warning("cached labels %s do not match the corpus' pages: recomputed", path)
    labels = compute_labels(corpus)
    labels.save(path)
    return labels


def real_pairs(corpus: Corpus, min_jaccard: float = 0.9) -> list[tuple[str, str, float]]:
    """The real near-duplicate pairs of ``corpus``: main-content Jaccard >= ``min_jaccard`` (see
    :meth:`Labels.real_pairs`)."""
    return labels_for(corpus).real_pairs(min_jaccard)
