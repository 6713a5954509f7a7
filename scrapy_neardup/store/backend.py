"""The contract between the Scrapy pipeline and a store of kept sketches: :class:`Backend`.

A backend answers one question atomically: *is this sketch a near-duplicate of a page already kept? If not,
keep it.* Two backends implement it: :class:`~scrapy_neardup.store.embedded.EmbeddedBackend` (an in-process
:class:`~scrapy_neardup.core.index.SketchIndex`, optionally persisted to a state directory) and
``es_integration.backend.ElasticsearchBackend`` (several crawler processes sharing one index). The pipeline
picks one with ``NEARDUP_BACKEND`` (an alias or the dotted path of a subclass, as Scrapy's
``HTTPCACHE_STORAGE``), builds it with :meth:`Backend.from_settings` when the crawler is built (so a wrong
setting stops the crawl before any request), and then only calls the methods below.

A new backend subclasses :class:`Backend`, implements the abstract methods, and raises :class:`BackendError`
(or a subclass) when it cannot answer; the pipeline then passes the item through unchecked instead of
dropping it without a kept page to name.

Extension points, so that later features need no ``getattr`` past this class:

* **Batches.** :meth:`Backend.check_and_add_many` decides a list of pages in order, as if each were checked
  alone in turn; the pipeline always calls it. The default loops over :meth:`Backend.check_and_add`; a
  network backend overrides it to decide a batch in a constant number of requests.
* **Recrawls.** A :class:`Decision` is ``kept``, ``duplicate`` (naming the kept :class:`Match`) or
  ``revisit`` (the key is stored already; ``changed`` tells whether its content changed, in which case the
  backend replaced the stored sketch). A key whose new content near-duplicates another kept page better than
  its own stored version is a ``duplicate`` naming that page, and the backend removes the key's stale entry.
  The embedded backend answers revisits (the rule: :meth:`~scrapy_neardup.core.index.SketchIndex.check_key`);
  a backend that never does inherits the default :meth:`Backend.check_and_add_many`.
* **Repeats.** A ``repeat`` is an unchanged page whose key this very crawl already kept or revisited (the crawl's
  identity: :func:`~scrapy_neardup.store.config.crawl_identity`, read in :meth:`Backend.from_settings`); the
  pipeline never emits it twice. The embedded and Elasticsearch backends keep which keys the crawl met with their
  data, so that a crawl resumed after a kill still knows; a backend that answers no repeat leaves them revisits.
* **Mirror hosts.** :meth:`Backend.host_store` gives the store through which the crawler processes sharing
  this backend's data also share their mirror-host counts (:mod:`scrapy_neardup.core.mirrors`); ``None`` (the
  default): each process counts alone.
* **Host templates.** ``"auto"`` sketches depend on the template of the page's host
  (:mod:`scrapy_neardup.core.template`), so the templates live with the kept pages: :meth:`Backend.load_template`
  and :meth:`Backend.save_template` (the first template saved for a host wins, for every process sharing the
  store). The defaults keep them in the process; the embedded backend saves them with its state, the Elasticsearch
  backend in an index every crawler process shares.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from ..core.match import Decision, Match, Outcome

if TYPE_CHECKING:
    from typing import Self

    from ..core.mirrors import HostStore
    from ..core.params import SketchParams
    from ..core.sketch import Sketch
    from ..core.template import HostTemplate
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
        """A new, unopened :class:`~scrapy_neardup.core.mirrors.HostStore` shared by every crawler process
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
