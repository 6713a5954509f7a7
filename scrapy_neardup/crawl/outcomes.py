"""What becomes of an item once the pipeline knows what it is: kept, dropped or marked (``NEARDUP_ACTION``),
counted, logged once. :class:`Page` is the item on its way through the pipeline's steps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.evidence import describe_evidence, evidence, match_evidence
from ..core.match import Match
from .canonical import CanonicalDropped
from .drops import NearDuplicateDropped, RepeatDropped, RevisitDropped, describe
from .soft404 import Soft404Dropped
from .summary import SKIP_STATS

if TYPE_CHECKING:
    from itemadapter import ItemAdapter
    from scrapy.exceptions import DropItem

    from ..core.sketch import Sketch
    from ..core.soft404_templates import Soft404Match
    from .context import CrawlContext

logger = logging.getLogger(__name__)

#: Key prefix for items without a URL; the rest is the text's exact fingerprint, so the key is stable.
NO_URL_PREFIX = "no-url:"


@dataclass(slots=True)
class Page:
    """One item on its way through the pipeline: what the steps learn of it, in the order they learn it."""

    item: Any
    adapter: ItemAdapter
    #: the item's URL field, as it is (``None`` when missing)
    url: Any
    #: the page's key (its URL, or :data:`NO_URL_PREFIX` and its fingerprint), once sketched
    key: str | None = None
    sketch: Sketch | None = None
    #: checks of it the backend could not answer so far
    failures: int = 0

    @property
    def name(self) -> str:
        """How logs and the outage policy name the page: its key once known, else its URL."""
        return self.key if self.key is not None else str(self.url)


class Outcomes:
    """Applies the crawl's action to the items the pipeline has settled.

    Args:
        context: the crawl's context: ``NEARDUP_ACTION``, the mark field, ``NEARDUP_REVISIT``, ``NEARDUP_DEBUG``
            (drops and marks logged at INFO instead of DEBUG), and the counters.
    """

    def __init__(self, context: CrawlContext) -> None:
        self.config = context.config
        self._count = context.count
        self._marking = self.config.action == "mark"

    @property
    def level(self) -> int:
        """Where each drop or mark is logged: DEBUG, or INFO with ``NEARDUP_DEBUG``."""
        return logging.INFO if self.config.debug else logging.DEBUG

    def skipped(self, reason: str, page: Page) -> Any:
        """Passed through unchecked for want of usable text (counted by ``reason``)."""
        self._count(SKIP_STATS[reason])
        return page.item

    def kept(self, page: Page) -> Any:
        self._count("kept")
        return page.item

    def duplicate(self, page: Page, match: Match, representative: bool = False, sketch: Sketch | None = None,
                  ) -> Any:
        """A near-duplicate of the kept page ``match.key``: dropped or marked; ``representative``: it is the
        canonical page of that content, met after it (the mark says ``"representative": True``); ``sketch``: the
        page's, whose ``sketched`` and ``words`` go into the evidence."""
        if match.exact:
            self._count("exact_duplicates")
        if self._marking:
            logger.log(self.level, "Marked near-duplicate %s of %s (%s)", page.key, match.key,
                       describe(match, self.config.num_perm, sketch))
            mark: dict[str, Any] = {"duplicate_of": match.key, "resemblance": match.resemblance, "exact": match.exact,
                                    **match_evidence(match, self.config.num_perm, sketch=sketch)}
            if representative:
                mark["representative"] = True
            return self._marked(page, mark)
        self._count("dropped")
        raise self._logged_once(NearDuplicateDropped(str(page.key), match, self.config.num_perm, sketch))

    def canonical(self, page: Page, canonical: str, holder: str) -> Any:
        """A page naming as canonical URL a page checked earlier, whose content ``holder`` holds: dropped as
        :class:`CanonicalDropped` or marked ``{"duplicate_of": holder, "canonical": canonical}``, never kept."""
        self._count("canonical")
        if self._marking:
            logger.log(self.level, "Marked %s: its canonical link names %s, kept as %s", page.key, canonical, holder)
            return self._marked(page, {"duplicate_of": holder, "canonical": canonical, "rule": "canonical"})
        self._count("dropped")
        raise self._logged_once(CanonicalDropped(str(page.key), canonical, holder))

    def revisit(self, page: Page, changed: bool) -> Any:
        """A page seen again under its key (see :meth:`~scrapy_neardup.core.index.SketchIndex.check_key`):
        counted in ``neardup/revisited`` (unchanged) or ``neardup/changed`` (the store now holds the new
        content); emitted, marked ``{"revisit": True, "changed": changed}`` in mark mode, or - unchanged, with
        ``NEARDUP_REVISIT = "drop_unchanged"`` - dropped (:class:`RevisitDropped`)."""
        key = str(page.key)
        if key.startswith(NO_URL_PREFIX):
            # Such a key is the text's fingerprint, not a page: "seen again" means an exact copy of the page
            # kept under that very key.
            return self.duplicate(page, Match(key=key, shared=self.config.num_perm, resemblance=1.0, exact=True))
        self._count("changed" if changed else "revisited")
        if not changed and self.config.revisit == "drop_unchanged":
            self._count("revisits_dropped")
            raise RevisitDropped(key)
        if self._marking:
            page.adapter[self.config.mark_field] = {"revisit": True, "changed": changed}
        return page.item

    def repeat(self, page: Page) -> Any:
        """A page this crawl already kept or revisited under its key, met again unchanged (a start URL linked
        again, a page fetched again after a resume): counted in ``neardup/repeats`` and dropped
        (:class:`RepeatDropped`, naming the page), or marked ``{"repeat": True}``; never emitted twice as a page.
        """
        self._count("repeats")
        if self._marking:
            logger.log(self.level, "Marked repeat of %s (met again in this crawl, unchanged)", page.key)
            page.adapter[self.config.mark_field] = {"repeat": True, "rule": "repeat"}
            return page.item
        raise self._logged_once(RepeatDropped(str(page.key)))

    def soft404(self, page: Page, soft404: Soft404Match) -> Any:
        """A page that near-duplicates its host's soft-404 template: dropped or marked, never kept."""
        url = str(page.url)
        self._count("soft404")
        if self._marking:
            fields = evidence(soft404.shared, soft404.num_perm, "soft404")
            logger.log(self.level, "Marked soft 404 %s (like the not-found page answered for %s, resemblance "
                       "%.3f, %s)", url, soft404.probe_url, soft404.resemblance, describe_evidence(fields))
            page.adapter[self.config.mark_field] = {"soft404": soft404.probe_url, "resemblance": soft404.resemblance,
                                                    **fields}
            return page.item
        raise self._logged_once(Soft404Dropped(url, soft404))

    def _marked(self, page: Page, mark: dict[str, Any]) -> Any:
        page.adapter[self.config.mark_field] = mark
        self._count("marked")
        return page.item

    def _logged_once(self, drop: DropItem) -> DropItem:
        """A dropped item is logged by Scrapy (its "Dropped: <reason>" line, at the exception's ``log_level``);
        the pipeline adds no line of its own, so each drop is logged once, at INFO with ``NEARDUP_DEBUG``."""
        drop.log_level = logging.getLevelName(self.level)
        return drop

