"""A rule the product does not apply, measured beside its decisions: a page is also dropped when a larger kept page
holds nearly all of its text (containment), as estimated from the two sketches.

For shingle sets ``A`` (the new page, ``a`` shingles) and ``B`` (a kept page, ``b >= a``) of resemblance
``J = |A & B| / |A | B|``, ``|A & B| = J (a + b) / (1 + J)``, so the containment of ``A`` in ``B`` is::

    C = |A & B| / a = J (a + b) / ((1 + J) a)

with ``J`` estimated by the shared positions over ``k`` and ``a``, ``b`` by the sketches' shingle counts. Only kept
pages sharing at least :data:`MIN_RESEMBLANCE` of the positions are candidates (64 of 128): below it the
documentation labeller counts a drop as false whatever the containment.

``bench_openweb.py --containment C`` and ``bench_templates.py --method auto-contained`` (``...-articles``: only kept
pages that declare themselves articles hold others) print what the rule would change. The product decides on
resemblance alone (docs/content.md, "Containment").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scrapy_neardup.core.index import SketchIndex
from scrapy_neardup.core.sketch import Sketch, Sketcher
from scrapy_neardup.core.text import clean_text
from scrapy_neardup.core.theory import DEFAULT_THRESHOLD, min_shared_for

#: Least containment for a drop, least share of shared positions for a candidate, least shingles of a page dropped.
LEAST_CONTAINMENT = 0.9
MIN_RESEMBLANCE = 0.5
MIN_SHINGLES = 20


def decide(
    keys: Sequence[str], sketches: Sequence[Sketch], sketcher: Sketcher, *, threshold: float = DEFAULT_THRESHOLD,
    least: float = LEAST_CONTAINMENT, articles: Sequence[bool] | None = None,
) -> tuple[dict[str, str | None], int]:
    """First-seen-is-kept decisions in order: a page near-duplicating a kept page (resemblance, the product's rule)
    or contained in a larger one (``C >= least``; with ``articles``, only in a kept page flagged there) is dropped
    naming it. Returns ``{key: kept key or None}`` and how many drops containment alone made."""
    index = SketchIndex(sketcher.num_perm, min_shared_for(threshold, sketcher.num_perm), sketcher.tag)
    kept: list[int] = []
    signatures = np.stack([s.signature for s in sketches]) if sketches else np.empty((0, sketcher.num_perm))
    sizes = np.array([s.num_shingles for s in sketches], dtype=np.float64)
    holders = np.ones(len(sketches), dtype=bool) if articles is None else np.asarray(articles, dtype=bool)
    decisions: dict[str, str | None] = {}
    contained = 0
    for i, (key, sketch) in enumerate(zip(keys, sketches, strict=True)):
        if sketch.empty:
            decisions[key] = None
            continue
        match = index.best_match(sketch)
        holder = None if match is not None else _holder(i, kept, signatures, sizes, holders, least)
        if match is not None:
            decisions[key] = match.key
        elif holder is not None:
            decisions[key] = keys[holder]
            contained += 1
        else:
            decisions[key] = None
            index.add(key, sketch)
            kept.append(i)
    return decisions, contained


def _holder(i: int, kept: list[int], signatures: np.ndarray, sizes: np.ndarray, holders: np.ndarray,
            least: float) -> int | None:
    """The kept page that holds page ``i`` best (most shared positions), or None."""
    if not kept or sizes[i] < MIN_SHINGLES:
        return None
    rows = np.array(kept)
    shared = np.count_nonzero(signatures[rows] == signatures[i], axis=1)
    j = shared / signatures.shape[1]
    a, b = sizes[i], sizes[rows]
    containment = j * (a + b) / ((1 + j) * a)
    ok = holders[rows] & (j >= MIN_RESEMBLANCE) & (b >= a) & (containment >= least)
    if not ok.any():
        return None
    return int(rows[np.flatnonzero(ok)[np.argmax(shared[ok])]])


def declares_article(htmls: Sequence[bytes]) -> list[bool]:
    """Which pages declare themselves articles, as the default reads them (``CleanText.article``): the holders of
    the ``...-articles`` rows."""
    return [clean_text(html, None, mode="auto", collapse=False).article for html in htmls]
