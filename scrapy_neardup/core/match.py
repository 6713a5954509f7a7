"""The vocabulary of a check: the kept page a sketch near-duplicates (:class:`Match`), the one ranking of
matches (:func:`best_first`), and what was decided for a page (:class:`Decision`).

The embedded index, the backends, the Elasticsearch candidate queries, groups and collapse all speak it, so it
lives apart from any of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Outcome = Literal["kept", "duplicate", "revisit", "repeat"]


@dataclass(frozen=True, slots=True)
class Sketched:
    """What of a kept page was sketched, as its store remembers it (the evidence's kept side).

    Attributes:
        kind: one of :data:`scrapy_neardup.core.sketch.SKETCHED` (``"main content"``, ``"own text"``, ``"whole
            text"``).
        words: the words sketched (0: not counted).
        page_words: the words of the page's whole text before anything was removed (0: not counted).
    """

    kind: str
    words: int = 0
    page_words: int = 0


@dataclass(frozen=True, slots=True)
class Match:
    """A kept page that a query sketch near-duplicates.

    Attributes:
        key: the kept page's key (URL or id) as it was stored.
        shared: positions ``i`` of ``k`` where the signatures agree (``>= t``).
        resemblance: ``shared / k``, the estimated resemblance.
        exact: the normalized texts are identical (equal 64-bit fingerprints).
        kept: what of the kept page was sketched, when its store remembers it (``None``: not known, e.g. a page
            stored by an earlier version).
    """

    key: str
    shared: int
    resemblance: float
    exact: bool
    kept: Sketched | None = None


def best_first(
    exact: np.ndarray | list[bool], shared: np.ndarray | list[int], order: np.ndarray | list[float],
    keys: np.ndarray | list[str] | None = None,
) -> np.ndarray:
    """The one ranking of matches: indices of the matches, best first.

    Exact duplicates (equal fingerprints) first, then most shared positions, then the earliest kept (smallest
    ``order``: insertion number, ``neardup.seq`` or ``_seq_no``), then the smallest key. Used by the embedded
    index, the Elasticsearch candidate queries and the crawler backend, so all pick the same best match.
    """
    columns: list[np.ndarray] = [] if keys is None else [np.asarray(keys)]
    columns += [np.asarray(order, dtype=np.float64), -np.asarray(shared, dtype=np.int64),
                ~np.asarray(exact, dtype=bool)]
    return np.lexsort(columns)


@dataclass(frozen=True, slots=True)
class Decision:
    """What was decided for one page (by a backend, or by :meth:`SketchIndex.check_key`).

    Attributes:
        outcome: ``"kept"`` (stored under its key; later near-duplicates name it), ``"duplicate"`` (shares
            ``>= t`` of ``k`` positions with ``match``, a kept page; nothing stored), ``"revisit"`` (its key
            was stored before: a refetch of a kept page, never a copy of itself; unchanged, only the first time
            a crawl meets it) or ``"repeat"`` (unchanged, and its key was already kept or revisited in this
            very crawl: the same page met twice in one crawl, never emitted twice; nothing stored).
        match: the kept page a duplicate names (``None`` otherwise).
        changed: for a revisit, whether the content differs from the stored version (which was replaced).
        removed: for a duplicate whose key was stored: its stale entry was removed.
    """

    outcome: Outcome
    match: Match | None = None
    changed: bool = False
    removed: bool = False

    @classmethod
    def kept(cls) -> Decision:
        return _KEPT

    @classmethod
    def duplicate(cls, match: Match, removed: bool = False) -> Decision:
        return cls("duplicate", match, removed=removed)

    @classmethod
    def revisit(cls, changed: bool) -> Decision:
        return cls("revisit", None, changed)

    @classmethod
    def repeat(cls) -> Decision:
        return _REPEAT

    @classmethod
    def of(cls, match: Match | None) -> Decision:
        """The decision a ``check_and_add`` answer stands for: kept when ``None``."""
        return _KEPT if match is None else cls("duplicate", match)

    @property
    def is_duplicate(self) -> bool:
        return self.outcome == "duplicate"


_KEPT = Decision("kept")
_REPEAT = Decision("repeat")

