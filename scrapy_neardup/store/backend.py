"""The contract between the Scrapy pipeline and a store of kept sketches: :class:`Backend`.

Design notes: docs/architecture.md#scrapy_neardupstorebackend
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from ..core.match import Decision, Match, Outcome

if TYPE_CHECKING:
    from typing import Self

    from ..core.host_template import HostTemplate
    from ..core.mirror_table import HostStore
    from ..core.params import SketchParams
    from ..core.sketch import Sketch
    from .config import SettingsLike

class Backend(ABC):
    """A store of kept sketches, as the pipeline uses it.

    Lifecycle: :meth:`from_settings` (when the crawler is built), :meth:`open` (``open_spider``), then
    :meth:`check_and_add_many` per ready item, :meth:`close` (``close_spider``, also after a failed check,
    never after a failed :meth:`open`), and :meth:`stats` after :meth:`open` and after :meth:`close`.
    """

    #: ``True`` when :meth:`check_and_add` never awaits: on Scrapy's single reactor thread such calls cannot
    #: interleave, so the pipeline skips its lock and saves a trip through the event loop per item.
    never_suspends: ClassVar[bool] = False
    #: Pages the pipeline hands to one :meth:`check_and_add_many` call at most (pages that arrive while a call
    #: is under way wait for the next one).
    max_batch: int = 1

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: SettingsLike, params: SketchParams) -> Self:
        """Build the backend from the crawl's settings (any mapping with ``.get``; Scrapy's ``Settings``
        qualifies) and the validated sketch parameters (``k``, ``t``, tag).

        Parses the backend's own settings; connects to nothing (that is :meth:`open`'s job).

        Raises:
            NearDupSettingsError: a setting has a wrong value (the message names it).
        """

    @abstractmethod
    async def open(self) -> None:
        """Connect or load state; raise with a clear one-line message naming what to fix when impossible."""

    @abstractmethod
    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        """Return the best kept match of ``sketch``; when there is none, keep it under ``key``.

        Must be atomic with respect to other calls: of near-duplicates checked at the same time, exactly one
        is kept and every other one names a kept page.

        Raises:
            BackendError: no decision could be made; the page may or may not have been stored.
        """

    async def check_and_add_many(self, pages: Sequence[tuple[str, Sketch]]) -> list[Decision]:
        """Decide ``pages`` in order, as if each were checked alone in turn: one :class:`Decision` per page.

        The default checks them one by one with :meth:`check_and_add`.

        Raises:
            BackendError: a page could not be decided; the pages before it may have been stored.
        """
        return [Decision.of(await self.check_and_add(key, sketch)) for key, sketch in pages]

    @abstractmethod
    async def close(self) -> None:
        """Persist what must survive a graceful stop and release resources."""

    def host_store(self) -> HostStore | None:
        """A new, unopened :class:`~scrapy_neardup.core.mirror_table.HostStore` shared by every crawler process
        using this backend's store, so that a fleet agrees on mirror hosts; ``None`` (the default): the mirror
        table is local to the process (the embedded backend saves it in its state directory instead).

        Called on a backend built by :meth:`from_settings` and never opened: the store connects on its own.
        """
        return None

    async def load_template(self, host: str) -> HostTemplate | None:
        """The template saved for ``host`` (``scheme://host[:port]``), or ``None`` when none is.

        Raises:
            BackendError: the store could not be read.
        """
        return self._process_templates().get(host)

    async def save_template(self, host: str, template: HostTemplate) -> HostTemplate:
        """Save ``host``'s template unless one is saved already, and return the one saved: the first wins, so that
        every page of a host, in every process and every later crawl, is sketched under one template. The template
        must be durable (as durable as a kept page) when this returns: pages sketched under it follow.

        Raises:
            BackendError: the store could not record it; the caller must not use it.
        """
        return self._process_templates().setdefault(host, template)

    def _process_templates(self) -> dict[str, HostTemplate]:
        """The defaults' store: a dict of this backend object (subclasses need not call a constructor for it)."""
        templates: dict[str, HostTemplate] = self.__dict__.setdefault("_host_templates", {})
        return templates

    def stats(self) -> Mapping[str, int]:
        """Counters for the crawl's ``neardup/*`` stats, cumulative since the backend was built: what opening
        found (e.g. ``state_loaded``, ``journal_replayed``), retries (``backend_retries``), what closing did
        (e.g. ``unchecked_indexed``). The pipeline adds what grew since its last read."""
        return {}


__all__ = ["Backend", "Decision", "Outcome"]
