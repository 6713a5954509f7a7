"""The store the Scrapy pipeline checks pages against: the contract, and the embedded implementation.

A backend answers one question atomically: *is this sketch a near-duplicate of a page already kept? If not,
keep it.* Two backends implement it: :class:`EmbeddedBackend` (an in-process
:class:`~scrapy_neardup.index.SketchIndex`, optionally persisted to a state directory) and
``es_integration.backend.ElasticsearchBackend`` (several crawler processes sharing one index).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol, runtime_checkable

from .index import Match, SketchIndex, StateError
from .sketch import Sketch

logger = logging.getLogger(__name__)

STATE_FILE = "neardup-index.bin"


@runtime_checkable
class Backend(Protocol):
    """What the pipeline needs from a store of kept sketches."""

    async def open(self) -> None:
        """Connect or load state; raise with a clear message when that is impossible."""

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        """Return the best kept match of ``sketch``; when there is none, keep it under ``key``.

        Must be atomic with respect to other calls: of near-duplicates checked at the same time, exactly one
        is kept and every other one names a kept page.
        """

    async def close(self) -> None:
        """Persist what must survive a graceful stop and release resources."""


class EmbeddedBackend:
    """An in-process :class:`SketchIndex`, saved to ``state_dir`` on close (when one is given).

    ``check_and_add`` does no I/O and never awaits, so on Scrapy's single reactor thread concurrent items
    cannot interleave between the check and the insert.

    Args:
        num_perm, min_shared, tag: the index parameters (see :class:`SketchIndex`).
        state_dir: directory for ``neardup-index.bin``; ``None`` keeps nothing after the crawl.
        reset: discard saved state instead of loading it.
    """

    def __init__(
        self, num_perm: int, min_shared: int, tag: str, state_dir: str | os.PathLike[str] | None = None,
        reset: bool = False,
    ) -> None:
        self.num_perm = num_perm
        self.min_shared = min_shared
        self.tag = tag
        self.state_path = Path(state_dir) / STATE_FILE if state_dir is not None else None
        self.reset = reset
        self.index = SketchIndex(num_perm, min_shared, tag)

    async def open(self) -> None:
        self.load()

    def load(self) -> None:
        """Load saved state, unless there is none or ``reset`` was asked for (then delete it)."""
        path = self.state_path
        if path is None:
            return
        if self.reset:
            if path.exists():
                logger.info("discarding near-duplicate state %s (reset)", path)
                path.unlink()
            return
        if path.exists():
            self.index = SketchIndex.load(path, self.num_perm, self.min_shared, self.tag)
            logger.info("loaded %d kept sketches from %s", len(self.index), path)

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        return self.index.check_and_add(key, sketch)

    async def close(self) -> None:
        self.save()

    def save(self) -> None:
        """Write the index atomically to the state directory (no-op without one)."""
        if self.state_path is not None:
            self.index.save(self.state_path)
            logger.info("saved %d kept sketches to %s", len(self.index), self.state_path)


__all__ = ["STATE_FILE", "Backend", "EmbeddedBackend", "StateError"]
