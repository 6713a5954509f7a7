"""Spidermon suites the crawls of the tests name (``SPIDERMON_SPIDER_CLOSE_MONITORS``)."""

from __future__ import annotations

from spidermon import MonitorSuite
from spidermon.contrib.scrapy.monitors import DownloaderExceptionMonitor


class DownloadErrorsSuite(MonitorSuite):
    """Spidermon's own monitor of download errors (``downloader/exception_count`` at most
    ``SPIDERMON_MAX_DOWNLOADER_EXCEPTIONS``), as a project using Spidermon's standard suite runs it."""

    monitors = [DownloaderExceptionMonitor]
