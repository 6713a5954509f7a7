"""A crawl that ran into a misconfiguration after start-up must still end with a non-zero exit status.

How Scrapy (2.13 - 2.19) decides the exit status of ``scrapy crawl`` and ``scrapy runspider``: the command
exits 1 when ``CrawlerProcess.bootstrap_failed`` is set, and 0 otherwise. That flag is set when the crawl's
Deferred (or task) fails - which only happens while the spider is created or opened - or when the crawler has
no spider once the crawl is over (``bootstrap_failed |= not crawler.spider``). Nothing a component raises
after start-up reaches it: the engine catches and logs errors of ``process_item``, ``close_spider`` and of
signal handlers. A pipeline that learns of a misconfiguration only from the first item (e.g. an item class
without the mark field: item classes are unknown before items arrive) therefore has one lever:
:func:`fail_exit_status` clears ``crawler.spider`` when the engine has stopped (``engine_stopped``, the last
signal of a crawl, after every ``close_spider`` and the stats dump), which makes Scrapy count the crawl as
failed. Scripts that run their own ``CrawlerProcess`` see the same ``bootstrap_failed``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

_FAILED_ATTR = "_neardup_exit_failure"


def fail_exit_status(crawler: Crawler, reason: str) -> None:
    """Make the crawl end with a non-zero exit status (see the module doc); ``reason`` goes to the log at the
    end of the crawl. Idempotent: the first reason is the one reported."""
    if getattr(crawler, _FAILED_ATTR, None) is not None:
        return
    setattr(crawler, _FAILED_ATTR, reason)

    def engine_stopped(**kwargs: Any) -> None:
        logger.error("the crawl ends with a non-zero exit status: %s", reason)
        # Scrapy's CrawlerProcess sets bootstrap_failed (exit status 1) for a crawler without a spider.
        crawler.spider = None

    crawler.signals.connect(engine_stopped, signal=signals.engine_stopped, weak=False)


def exit_failure(crawler: Crawler) -> str | None:
    """The reason given to :func:`fail_exit_status` for this crawler, if any."""
    return getattr(crawler, _FAILED_ATTR, None)


