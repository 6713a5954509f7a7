"""The Scrapy add-on that switches the whole plugin on in one line::

    ADDONS = {"scrapy_neardup.NearDuplicateAddon": 300}

It adds the near-duplicate pipeline (``ITEM_PIPELINES``, 300), the mirror-host middleware (60) and the
soft-404 middleware (70) to ``DOWNLOADER_MIDDLEWARES``: both before ``RobotsTxtMiddleware`` (100), so that a
skipped mirror's robots.txt is not fetched, and the soft-404 middleware sees the final response of a page
(after redirects). Switch parts off with ``NEARDUP_SOFT404_ENABLED`` / ``NEARDUP_MIRRORS_ENABLED`` = False.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: The path the README and the example project use: one path, so that the pipeline is never built twice.
PIPELINE = "scrapy_neardup.NearDuplicatePipeline"
MIRRORS_MIDDLEWARE = "scrapy_neardup.crawl.mirrors.MirrorHostsMiddleware"
SOFT404_MIDDLEWARE = "scrapy_neardup.crawl.soft404.Soft404Middleware"


class NearDuplicateAddon:
    """Enables the near-duplicate pipeline and the soft-404 and mirror-host middlewares."""

    def update_settings(self, settings: BaseSettings) -> None:
        settings["ITEM_PIPELINES"][PIPELINE] = 300
        settings["DOWNLOADER_MIDDLEWARES"][MIRRORS_MIDDLEWARE] = 60
        settings["DOWNLOADER_MIDDLEWARES"][SOFT404_MIDDLEWARE] = 70


__all__ = ["NearDuplicateAddon"]
