"""Streaming near-duplicate removal: first seen is kept, later near-duplicates point at it.

:class:`Deduper` ties a :class:`~scrapy_neardup.Sketcher` to a :class:`~scrapy_neardup.core.index.SketchIndex`
and classifies pages in arrival order. Content that cannot be sketched (missing, not text, empty after
normalization) is never dropped: it is reported with reason ``skipped`` and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .index import SketchIndex
from .match import Match
from .sketch import Sketch, Sketcher
from .text import looks_binary
from .theory import DEFAULT_THRESHOLD, min_shared_for

logger = logging.getLogger(__name__)

#: Why a page was not checked.
SKIP_MISSING = "missing"
SKIP_NOT_TEXT = "not_text"
SKIP_EMPTY = "empty"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome for one page.

    Attributes:
        match: the kept page it near-duplicates (``None`` when kept or skipped).
        skipped: why the page was not checked (``None`` when it was): ``missing``, ``not_text`` or ``empty``.
        truncated: only the head of an over-long page was sketched.
        sketch: the page's sketch (``None`` when skipped).
    """

    match: Match | None
    skipped: str | None = None
    truncated: bool = False
    sketch: Sketch | None = None

    @property
    def kept(self) -> bool:
        """Kept: not a near-duplicate of an earlier page (skipped pages are kept too)."""
        return self.match is None


@dataclass
class DedupeStats:
    """Counts over a run; ``checked + skipped == seen`` and ``kept + near_duplicates == checked``."""

    seen: int = 0
    checked: int = 0
    kept: int = 0
    near_duplicates: int = 0
    exact_duplicates: int = 0
    skipped: int = 0
    truncated: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)

    def record(self, verdict: Verdict) -> None:
        self.seen += 1
        self.truncated += verdict.truncated
        if verdict.skipped is not None:
            self.skipped += 1
            self.skipped_by_reason[verdict.skipped] = self.skipped_by_reason.get(verdict.skipped, 0) + 1
            return
        self.checked += 1
        if verdict.match is None:
            self.kept += 1
        else:
            self.near_duplicates += 1
            self.exact_duplicates += verdict.match.exact

    def summary(self) -> str:
        skipped = ", ".join(f"{k}: {v}" for k, v in sorted(self.skipped_by_reason.items()))
        return (
            f"records: {self.seen}, kept: {self.kept}, near-duplicates: {self.near_duplicates} "
            f"(exact: {self.exact_duplicates}), skipped (bad text): {self.skipped}"
            + (f" ({skipped})" if skipped else "")
            + f", truncated: {self.truncated}"
        )


def skip_reason(content: Any, *, check_binary: bool = True) -> str | None:
    """Why ``content`` cannot be sketched at all (``None`` when it is text, or bytes of text).

    ``missing`` for ``None``; ``not_text`` for anything but ``str`` and bytes, and for binary data (a PDF, an
    image, compressed bytes: see :func:`~scrapy_neardup.core.text.looks_binary`), which sketched as text would be
    garbage that could near-duplicate other garbage. ``check_binary=False`` leaves that last test to whoever
    sketches (the sketch worker does it in its own process).
    """
    if content is None:
        return SKIP_MISSING
    if not isinstance(content, str | bytes | bytearray | memoryview):
        return SKIP_NOT_TEXT
    if check_binary and looks_binary(content):
        logger.debug("binary content (%d bytes or characters) is not sketched", len(content))
        return SKIP_NOT_TEXT
    return None


class Deduper:
    """Classifies pages in arrival order against an embedded index.

    Args:
        sketcher: makes the sketches (its ``num_perm`` is ``k``).
        min_shared: ``t``; default: the largest ``t`` that catches resemblance ``threshold`` with
            probability >= 0.99 (see :func:`scrapy_neardup.core.theory.min_shared_for`).
        threshold: target resemblance used when ``min_shared`` is not given.
        index: an existing index (e.g. loaded from disk) with the same parameters; default: a new one.
    """

    def __init__(
        self,
        sketcher: Sketcher | None = None,
        min_shared: int | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        index: SketchIndex | None = None,
    ) -> None:
        self.sketcher = sketcher or Sketcher()
        k = self.sketcher.num_perm
        self.min_shared = min_shared if min_shared is not None else min_shared_for(threshold, k)
        self.index = index if index is not None else SketchIndex(k, self.min_shared, self.sketcher.tag)
        self.stats = DedupeStats()

    def check_many(
        self, keys: Sequence[str], contents: Sequence[Any], templates: Sequence[np.ndarray | None] | None = None,
    ) -> list[Verdict]:
        """Classify a batch (sketched together: the fast path); earlier pages in the batch count as seen.

        Args:
            keys: the pages' keys (a duplicate names the key of the page it near-duplicates).
            contents: the pages' text or HTML.
            templates: ``"auto"`` mode: per page, its host's template block hashes
                (:attr:`scrapy_neardup.core.host_template.HostTemplate.hashes`), or ``None``.
        """
        reasons = [skip_reason(c) for c in contents]
        sketchable = [i for i, r in enumerate(reasons) if r is None]
        chosen = None if templates is None else [templates[i] for i in sketchable]
        sketches = self.sketcher.sketch_many([contents[i] for i in sketchable], templates=chosen)
        by_position: dict[int, Sketch] = dict(zip(sketchable, sketches, strict=True))
        verdicts = []
        for i, key in enumerate(keys):
            sketch = by_position.get(i)
            verdict = self.check_sketch(key, sketch) if sketch is not None else Verdict(None, reasons[i])
            self.stats.record(verdict)
            verdicts.append(verdict)
        return verdicts

    def check_sketch(self, key: str, sketch: Sketch) -> Verdict:
        """Classify one already-sketched page and keep it when it is new (stats are not updated)."""
        if sketch.empty:
            return Verdict(None, SKIP_EMPTY, sketch.truncated, sketch)
        match = self.index.check_and_add(key, sketch)
        if match is not None:
            logger.debug("%s near-duplicates %s (resemblance %.3f)", key, match.key, match.resemblance)
        return Verdict(match, None, sketch.truncated, sketch)
