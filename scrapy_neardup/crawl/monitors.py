"""Spidermon monitors of near-duplicate detection: backend errors, the unchecked share, the drop rate.

Design notes: docs/architecture.md#scrapy_neardupcrawlmonitors
"""

from __future__ import annotations

from typing import Any

from spidermon import MonitorSuite, monitors
from spidermon.contrib.scrapy.monitors import BaseScrapyMonitor

from .context import STATS_PREFIX
from .outage import BACKEND_DOWN, describe_unchecked, unchecked_share
from .settings import MonitorThresholds


class _NearDupMonitor(BaseScrapyMonitor):
    """Reads the ``neardup/*`` stats and the thresholds."""

    def count(self, name: str) -> int:
        return int(self.stats.get(STATS_PREFIX + name, 0) or 0)

    @property
    def thresholds(self) -> MonitorThresholds:
        return MonitorThresholds.from_settings(self.crawler.settings)


@monitors.name("Near-duplicate backend")
class BackendMonitor(_NearDupMonitor):
    """The near-duplicate backend answered the crawl's checks."""

    @monitors.name("Backend errors at most NEARDUP_MONITOR_MAX_BACKEND_ERRORS")
    def test_backend_errors(self) -> None:
        errors, allowed = self.count("backend_errors"), self.thresholds.max_backend_errors
        self.assertLessEqual(errors, allowed, msg=(
            f"the near-duplicate backend failed to check {errors} pages (neardup/backend_errors); "
            f"NEARDUP_MONITOR_MAX_BACKEND_ERRORS allows {allowed}"
        ))

    @monitors.name("Crawl not stopped by a backend outage")
    def test_not_stopped_by_an_outage(self) -> None:
        reason: Any = self.stats.get("finish_reason")
        self.assertNotEqual(reason, BACKEND_DOWN, msg=(
            f"the crawl was stopped because the near-duplicate backend was down (close reason {BACKEND_DOWN})"
        ))


@monitors.name("Near-duplicate unchecked pages")
class UncheckedMonitor(_NearDupMonitor):
    """Few enough pages passed through without a near-duplicate check."""

    @monitors.name("Unchecked share at most NEARDUP_MONITOR_MAX_UNCHECKED")
    def test_unchecked_share(self) -> None:
        unchecked, checked = self.count("unchecked"), self.count("checked")
        allowed = self.thresholds.max_unchecked
        self.assertLessEqual(unchecked_share(unchecked, checked), allowed, msg=(
            f"{describe_unchecked(unchecked, checked)} passed through unchecked; NEARDUP_MONITOR_MAX_UNCHECKED "
            f"allows {allowed:.1%}"
        ))
        if allowed == 0:  # a share rounds; "none allowed" means none
            self.assertEqual(unchecked, 0, msg=f"{unchecked} pages passed through unchecked; none allowed")


@monitors.name("Near-duplicate drop rate")
class DropRateMonitor(_NearDupMonitor):
    """Not implausibly many of the checked pages were near-duplicates."""

    @monitors.name("Drop rate at most NEARDUP_MONITOR_MAX_DROP_RATE")
    def test_drop_rate(self) -> None:
        duplicates = self.count("dropped") + self.count("marked")
        decided = self.count("checked") - self.count("unchecked")
        if decided <= 0:
            self.skipTest("no page was checked")
        rate, allowed = duplicates / decided, self.thresholds.max_drop_rate
        self.assertLessEqual(rate, allowed, msg=(
            f"{duplicates} of {decided} checked pages ({rate:.1%}) were near-duplicates; "
            f"NEARDUP_MONITOR_MAX_DROP_RATE allows {allowed:.1%} (does NEARDUP_TEXT_FIELD hold each page's own "
            "text?)"
        ))


class NearDupMonitorSuite(MonitorSuite):
    """Near-duplicate detection: backend errors, the unchecked share, the drop rate (see the module doc)."""

    monitors = [BackendMonitor, UncheckedMonitor, DropRateMonitor]


