"""The items the pipeline drops, as Scrapy ``DropItem`` exceptions that name what they near-duplicate."""

from __future__ import annotations

from scrapy.exceptions import DropItem

from ..core.evidence import describe_evidence, match_evidence
from ..core.match import Match
from ..core.sketch import Sketch
from ..errors import NearDupError


class NearDuplicateDropped(DropItem, NearDupError):
    """An item dropped because its page near-duplicates a page kept earlier.

    Raised with ``log_level="DEBUG"``; Scrapy counts it as
    ``item_dropped_reasons_count/NearDuplicateDropped``.

    Attributes:
        url: the dropped page's key.
        match: the kept page it near-duplicates (``match.key``), with the shared positions and the estimated
            resemblance ``shared / k``.
        evidence: ``{"rule", "shared", "k", "interval"}`` (:mod:`scrapy_neardup.core.evidence`) when ``num_perm``
            was given, else ``None``.
    """

    def __init__(self, url: str, match: Match, num_perm: int | None = None, sketch: Sketch | None = None) -> None:
        super().__init__(f"near-duplicate of {match.key} ({describe(match, num_perm, sketch)})", log_level="DEBUG")
        self.url = url
        self.match = match
        self.evidence = None if num_perm is None else match_evidence(match, num_perm, sketch=sketch)


class RevisitDropped(DropItem, NearDupError):
    """An item dropped because its page was seen before under the same key with the same content
    (``NEARDUP_REVISIT = "drop_unchanged"``: incremental crawls that want only new and changed pages).

    Raised with ``log_level="DEBUG"``; Scrapy counts it as ``item_dropped_reasons_count/RevisitDropped``.

    Attributes:
        url: the page's key, which is also the kept page it names.
    """

    def __init__(self, url: str) -> None:
        super().__init__(f"unchanged revisit of {url}", log_level="DEBUG")
        self.url = url


class RepeatDropped(DropItem, NearDupError):
    """An item dropped because its page was already emitted by this very crawl under the same key, with the same
    content: a *repeat* (a start URL linked again, a page re-fetched after a resume), never emitted twice.

    A page met again by a *later* crawl is a revisit instead (``NEARDUP_REVISIT``). Raised with
    ``log_level="DEBUG"``; Scrapy counts it as ``item_dropped_reasons_count/RepeatDropped``.

    Attributes:
        url: the page's key, which is also the page it repeats.
    """

    def __init__(self, url: str) -> None:
        super().__init__(f"repeat of {url}: met again in this crawl, unchanged (emitted once)", log_level="DEBUG")
        self.url = url


def describe(match: Match, num_perm: int | None = None, sketch: Sketch | None = None) -> str:
    """How a log line or a drop names a match: ``resemblance 0.953, 122 positions shared[, exact duplicate]``, or
    with ``num_perm`` (``k``) its evidence too: ``resemblance 0.953, near_duplicate: 122 of 128 positions shared,
    r in [0.901, 0.978]`` (the 95% interval of the resemblance, :mod:`scrapy_neardup.core.evidence`)."""
    if num_perm is None:
        exact = ", exact duplicate" if match.exact else ""
        return f"resemblance {match.resemblance:.3f}, {match.shared} positions shared{exact}"
    return f"resemblance {match.resemblance:.3f}, {describe_evidence(match_evidence(match, num_perm, sketch=sketch))}"


