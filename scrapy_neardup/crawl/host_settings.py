"""Settings of soft-404 probing, mirror-host skipping, which copy is kept and canonical links, validated once at
start-up.

=================================  ===========================================================================
Setting                            Meaning
=================================  ===========================================================================
NEARDUP_SOFT404_ENABLED            bool, default True: probe each host for its soft-404 template and drop
                                   pages that near-duplicate it (:mod:`scrapy_neardup.crawl.soft404`).
NEARDUP_SOFT404_PROBES_PER_HOST    int in [1, 100], default 20: probes per host at most (``/<random>``
                                   first, then one per first path segment met); a page under a segment
                                   beyond them is compared with every template of its host.
NEARDUP_SOFT404_TIMEOUT            seconds > 0, default 30: how long a page of a host waits for the host's
                                   probes; after it, the page is handed on unchecked for soft 404s.
NEARDUP_MIRRORS_ENABLED            bool, default True: skip the requests of a host that mirrors another
                                   (:mod:`scrapy_neardup.crawl.mirrors`).
NEARDUP_MIRROR_MIN_PAGES           int >= 1, default 20: checked pages a host needs before it can be a mirror.
NEARDUP_MIRROR_SHARE               share in (0, 1], default 0.9: of those, the share with a near-duplicate on
                                   the other host (1.0: only perfect mirrors are skipped).
NEARDUP_MIRROR_SYNC_INTERVAL       seconds > 0, default 5: with a backend shared by several crawler processes
                                   (Elasticsearch), how often each pushes its mirror counts and pulls the
                                   others' (also once at close).
NEARDUP_COPY_WAIT                  seconds >= 0, default the longer of 2 s and four ``DOWNLOAD_DELAY``: how
                                   long a page of a host met after another waits before its check while
                                   the host may copy an earlier one (:mod:`scrapy_neardup.crawl.order`);
                                   0 switches the waiting off.
NEARDUP_CANONICAL                  bool, default True: a page whose canonical link names a page checked
                                   earlier is its duplicate (:mod:`scrapy_neardup.crawl.canonical`).
=================================  ===========================================================================

A wrong value raises :class:`~scrapy_neardup.crawl.settings.NearDupSettingsError` from the middleware's
``from_crawler``: Scrapy aborts the crawl before the first request with one line naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured

from ..core.mirrors import DEFAULT_MIN_PAGES, DEFAULT_SHARE, DEFAULT_SYNC_INTERVAL
from ..store.config import SettingsLike, read_bool, read_float, read_int, settings_error
from .settings import NearDupSettings
from .startup import component_startup

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings


#: ``NEARDUP_SOFT404_PROBES_PER_HOST``: the root and 19 first path segments.
DEFAULT_PROBES_PER_HOST = 20
#: Seconds a page of a possible copy waits at least (``NEARDUP_COPY_WAIT`` unset, no long ``DOWNLOAD_DELAY``).
MIN_COPY_WAIT = 2.0


@dataclass(frozen=True, slots=True)
class HostSettings:
    """The validated soft-404 and mirror settings (see the module doc)."""

    soft404: bool = True
    probes_per_host: int = DEFAULT_PROBES_PER_HOST
    probe_timeout: float = 30.0
    mirrors: bool = True
    mirror_min_pages: int = DEFAULT_MIN_PAGES
    mirror_share: float = DEFAULT_SHARE
    mirror_sync_interval: float = DEFAULT_SYNC_INTERVAL
    copy_wait: float = MIN_COPY_WAIT
    canonical: bool = True

    @classmethod
    def from_settings(cls, settings: SettingsLike | BaseSettings) -> HostSettings:
        """Parse and validate; raises ``NearDupSettingsError`` naming the setting and the value."""
        timeout = read_float(settings, "NEARDUP_SOFT404_TIMEOUT")
        if timeout is not None and timeout <= 0:
            raise settings_error("NEARDUP_SOFT404_TIMEOUT", settings.get("NEARDUP_SOFT404_TIMEOUT"), "seconds > 0")
        share = read_float(settings, "NEARDUP_MIRROR_SHARE")
        if share is not None and not 0 < share <= 1:
            raise settings_error("NEARDUP_MIRROR_SHARE", settings.get("NEARDUP_MIRROR_SHARE"), "a share in (0, 1]")
        interval = read_float(settings, "NEARDUP_MIRROR_SYNC_INTERVAL")
        if interval is not None and not interval > 0:
            raise settings_error("NEARDUP_MIRROR_SYNC_INTERVAL", settings.get("NEARDUP_MIRROR_SYNC_INTERVAL"),
                                 "seconds > 0")
        copy_wait = read_float(settings, "NEARDUP_COPY_WAIT")
        if copy_wait is not None and not copy_wait >= 0:
            raise settings_error("NEARDUP_COPY_WAIT", settings.get("NEARDUP_COPY_WAIT"), "seconds >= 0")
        if copy_wait is None:
            copy_wait = default_copy_wait(settings)
        return cls(
            soft404=read_bool(settings, "NEARDUP_SOFT404_ENABLED", True),
            probes_per_host=_ranged_int(settings, "NEARDUP_SOFT404_PROBES_PER_HOST", DEFAULT_PROBES_PER_HOST, low=1,
                                        high=100),
            probe_timeout=30.0 if timeout is None else timeout,
            mirrors=read_bool(settings, "NEARDUP_MIRRORS_ENABLED", True),
            mirror_min_pages=_ranged_int(settings, "NEARDUP_MIRROR_MIN_PAGES", DEFAULT_MIN_PAGES, low=1),
            mirror_share=DEFAULT_SHARE if share is None else share,
            mirror_sync_interval=DEFAULT_SYNC_INTERVAL if interval is None else interval,
            copy_wait=copy_wait,
            canonical=read_bool(settings, "NEARDUP_CANONICAL", True),
        )


def default_copy_wait(settings: SettingsLike | BaseSettings) -> float:
    """``NEARDUP_COPY_WAIT`` when unset: the longer of :data:`MIN_COPY_WAIT` and four ``DOWNLOAD_DELAY``.

    Two hosts serving the same pages in the same order, each page ``DOWNLOAD_DELAY`` after the last (Scrapy
    randomizes it between 0.5 and 1.5 times), drift apart: after ``n`` pages the difference of their arrival
    times has a standard deviation of ``DOWNLOAD_DELAY * sqrt(n / 6)``, 1.8 delays at ``n = 20``. Four delays
    cover it about twice over."""
    try:
        delay = float(settings.get("DOWNLOAD_DELAY") or 0)
    except (TypeError, ValueError):
        delay = 0.0  # Scrapy reports a bad DOWNLOAD_DELAY itself
    return max(MIN_COPY_WAIT, 4 * delay)


def enabled_feature(crawler: Crawler, setting: str) -> tuple[NearDupSettings, HostSettings]:
    """The settings of a host middleware's ``from_crawler``, read under the start-up reporter
    (:func:`~scrapy_neardup.crawl.startup.component_startup`); ``NotConfigured``
    when the plugin (``NEARDUP_ENABLED``) or the feature (``setting``: ``NEARDUP_SOFT404_ENABLED``,
    ``NEARDUP_MIRRORS_ENABLED``) is switched off."""
    with component_startup(crawler):
        config = NearDupSettings.from_settings(crawler.settings)
        if not config.enabled:
            raise NotConfigured("NEARDUP_ENABLED is False")
        hosts = HostSettings.from_settings(crawler.settings)
    if not {"NEARDUP_SOFT404_ENABLED": hosts.soft404, "NEARDUP_MIRRORS_ENABLED": hosts.mirrors}[setting]:
        raise NotConfigured(f"{setting} is False")
    return config, hosts


def _ranged_int(settings: SettingsLike, name: str, default: int, *, low: int, high: int | None = None) -> int:
    expected = f"an integer in [{low}, {high}]" if high is not None else f"an integer >= {low}"
    value = read_int(settings, name, expected)
    if value is None:
        return default
    if value < low or (high is not None and value > high):
        raise settings_error(name, settings.get(name), expected)
    return value


__all__ = ["DEFAULT_PROBES_PER_HOST", "MIN_COPY_WAIT", "HostSettings", "default_copy_wait", "enabled_feature"]
