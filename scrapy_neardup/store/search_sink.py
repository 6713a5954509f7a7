"""The contract between a crawl and the search index its items are written to: :class:`SearchSink`.

A crawl with ``NEARDUP_SEARCH_INDEX`` set hands every item that leaves its pipelines (and, with
``NEARDUP_SEARCH_DUPLICATES = "index"``, every near-duplicate it dropped) to a sink, as a :class:`SearchPage`:
the item's fields, the sketch the near-duplicate pipeline computed for it (never a second one), and the
pipeline's decision. The Scrapy component (:mod:`scrapy_neardup.crawl.search_writer`) builds the sink by dotted
path, as it builds a :class:`~scrapy_neardup.store.backend.Backend`, and never imports its module: the one sink
of this distribution writes to Elasticsearch or OpenSearch (``es_integration.search_index``).

A sink batches and retries as it sees fit; :meth:`SearchSink.write` may wait (that is the crawl's
back-pressure). What it could not write in the end it reports, page by page, through
:meth:`SinkEvents.failed`: the component records those pages in a file and fails the crawl's exit status, so
that no item is lost silently.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from typing import Self

    from ..core.sketch import Sketch
    from .config import SettingsLike

#: What a page is in the search index: kept (a group's visible page, or a page in no group), a near-duplicate
#: of a kept page (hidden by a collapsed search), or unchecked (the near-duplicate check failed: its own group).
SearchStatus = Literal["kept", "duplicate", "unchecked"]


@dataclass(frozen=True, slots=True)
class SearchPage:
    """One page to write to the search index.

    Attributes:
        key: the page's key (its URL; ``no-url:<fingerprint>`` for an item without one): its document id is a
            function of the key alone, so a later crawl of the page replaces its document.
        fields: the item's fields, JSON-ready (the document is these plus the near-duplicate fields).
        sketch: the sketch the pipeline made of the page's text; ``None`` for an item it did not sketch (no text).
        status: see :data:`SearchStatus`.
        duplicate_of: the key of the kept page a duplicate near-duplicates.
        shared: ``s``, the signature positions the duplicate shares with it (resemblance ~ s / k).
        representative_of: the key of a page kept earlier that named this page its canonical URL: this page
            becomes the representative of that page's group (kept), and that page a duplicate of it.
    """

    key: str
    fields: Mapping[str, Any]
    sketch: Sketch | None = None
    status: SearchStatus = "kept"
    duplicate_of: str | None = None
    shared: int | None = None
    representative_of: str | None = None


class SinkEvents(Protocol):
    """What a sink tells the crawl: counts for its stats, and the pages it could not write."""

    def count(self, name: str, value: int = 1) -> None:
        """Add ``value`` to the stat ``neardup/<name>``."""

    def failed(self, key: str, page: SearchPage | None, kind: str, reason: str) -> None:
        """The page under ``key`` could not be written (``page``: what was to be written; ``None`` for the
        removal of a key's document): ``kind`` names the error (``connection_error``, ``timeout``,
        ``http_503``, ``mapper_parsing_exception``, ...), ``reason`` says it for a person."""


class SearchSink(ABC):
    """A search index that a crawl writes its items to.

    Lifecycle: :meth:`from_settings` (when the crawler is built: a wrong setting stops the crawl before any
    request), :meth:`open` (when the spider opens), :meth:`write` / :meth:`remove` per page, :meth:`close`
    (when the spider closes: everything written or reported failed when it returns).
    """

    #: The setting naming the index, for messages.
    index: str

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: SettingsLike, tag: str | None) -> Self:
        """Build the sink from the crawl's settings; connect to nothing yet. ``tag``: the sketch parameter tag
        of the crawl's sketches (``None``: the near-duplicate pipeline is off), so that an index holding
        sketches of other parameters is refused at start instead of mixed.

        Raises:
            NearDupSettingsError: a setting is missing or wrong (the message names it).
        """

    @abstractmethod
    async def open(self, events: SinkEvents) -> None:
        """Connect and prepare the index; ``events`` receives counts and failures from now on.

        Raises:
            NearDupError: the index cannot be used (unreachable, refused, mapped otherwise); the message says
                what to fix.
        """

    @abstractmethod
    async def write(self, page: SearchPage) -> None:
        """Write ``page`` (replacing the document of its key); may wait while earlier writes are under way."""

    @abstractmethod
    async def remove(self, key: str) -> None:
        """Remove the document of ``key``, if there is one (a page now hidden from the index)."""

    @abstractmethod
    async def close(self) -> None:
        """Write what is still waiting and make it searchable; report what could not be written."""


__all__ = ["SearchPage", "SearchSink", "SearchStatus", "SinkEvents"]
