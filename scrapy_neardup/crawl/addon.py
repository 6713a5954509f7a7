"""The Scrapy add-on: one line in ``ADDONS`` switches near-duplicate detection on.

Design notes: docs/architecture.md#scrapy_neardupcrawladdon
"""

from __future__ import annotations

from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from .canonical import CanonicalLinkMiddleware
from .crawl_report import CrawlReport
from .exporters import CSV_EXPORTER
from .mirrors import MirrorHostsMiddleware
from .parse_trees import ParseTreeRelease
from .pipeline import NearDuplicatePipeline
from .search_writer import SearchIndexPipeline
from .soft404 import Soft404Middleware

#: Where the pipeline runs among the project's item pipelines: after ones that fill the text field (lower
#: numbers), before ones that store items (export, databases; usually higher).
PIPELINE_PRIORITY = 300
MIRRORS_PRIORITY = 60
SOFT404_PRIORITY = 70
CANONICAL_PRIORITY = 75
#: The spider middleware nearest the engine (below Scrapy's own, 50 and up): it sees a callback's output last, once
#: every other middleware is done with it.
PARSE_TREES_PRIORITY = 10
#: Where the search-index writer runs: after the project's pipelines, so that it writes the items they made.
SEARCH_INDEX_PRIORITY = 900



class NearDuplicateAddon:
    """Enables the near-duplicate pipeline and the soft-404 and mirror-host middlewares (see the module doc)."""

    def update_settings(self, settings: BaseSettings) -> None:
        """Add each component unless the project lists it already."""
        _add_component(settings, "ITEM_PIPELINES", NearDuplicatePipeline, PIPELINE_PRIORITY)
        _add_component(settings, "DOWNLOADER_MIDDLEWARES", MirrorHostsMiddleware, MIRRORS_PRIORITY)
        _add_component(settings, "DOWNLOADER_MIDDLEWARES", Soft404Middleware, SOFT404_PRIORITY)
        _add_component(settings, "DOWNLOADER_MIDDLEWARES", CanonicalLinkMiddleware, CANONICAL_PRIORITY)
        _add_component(settings, "SPIDER_MIDDLEWARES", ParseTreeRelease, PARSE_TREES_PRIORITY)
        if settings.get("NEARDUP_REPORT"):
            _add_component(settings, "EXTENSIONS", CrawlReport, 0)
        if settings.get("NEARDUP_SEARCH_INDEX"):
            _add_component(settings, "ITEM_PIPELINES", SearchIndexPipeline, SEARCH_INDEX_PRIORITY)
        # Per key, below the project's priority: a project's own csv exporter stands, its other formats too.
        exporters = settings["FEED_EXPORTERS"]
        if isinstance(exporters, BaseSettings) and exporters.get("csv") is None:
            exporters.set("csv", CSV_EXPORTER, priority="addon")


def _add_component(settings: BaseSettings, name: str, cls: type, priority: int) -> None:
    """Add ``cls`` to the component dict ``name`` at ``priority`` unless it is listed already (under any import
    path), keeping the setting's priority.

    Added by its import path, not as the class: Scrapy's "Enabled item pipelines / downloader middlewares" lines
    print the keys as they are, and a class object prints as ``<class '...'>``."""
    components = settings.getdict(name)
    if any(load_object(listed) is cls for listed in components):
        return
    components[f"{cls.__module__}.{cls.__qualname__}"] = priority
    settings.set(name, components, settings.getpriority(name) or 0)


