"""Settings of soft-404 probing, mirror-host skipping, which copy is kept and canonical links, validated once at
start-up.

Each setting's type, default and bounds: :mod:`scrapy_neardup.store.settings_registry` (the reference page:
docs/settings.md).

A wrong value raises :class:`~scrapy_neardup.errors.NearDupSettingsError` from the middleware's
``from_crawler``: Scrapy aborts the crawl before the first request with one line naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..store.config import SettingsLike, setting_bool, setting_float, setting_int
from ..store.settings_registry import default_of

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


#: Seconds a page of a possible copy waits at least (``NEARDUP_COPY_WAIT`` unset, no long ``DOWNLOAD_DELAY``).
MIN_COPY_WAIT = 2.0


@dataclass(frozen=True, slots=True)
class HostSettings:
    """The validated soft-404 and mirror settings (see the module doc)."""

    soft404: bool = default_of("NEARDUP_SOFT404_ENABLED")
    probes_per_host: int = default_of("NEARDUP_SOFT404_PROBES_PER_HOST")
    probe_timeout: float = default_of("NEARDUP_SOFT404_TIMEOUT")
    mirrors: bool = default_of("NEARDUP_MIRRORS_ENABLED")
    mirror_min_pages: int = default_of("NEARDUP_MIRROR_MIN_PAGES")
    mirror_share: float = default_of("NEARDUP_MIRROR_SHARE")
    mirror_sync_interval: float = default_of("NEARDUP_MIRROR_SYNC_INTERVAL")
    copy_wait: float = MIN_COPY_WAIT
    canonical: bool = default_of("NEARDUP_CANONICAL")

    @classmethod
    def from_settings(cls, settings: SettingsLike | BaseSettings) -> HostSettings:
        """Parse and validate; raises ``NearDupSettingsError`` naming the setting and the value."""
        return cls(
            soft404=setting_bool(settings, "NEARDUP_SOFT404_ENABLED"),
            probes_per_host=setting_int(settings, "NEARDUP_SOFT404_PROBES_PER_HOST"),
            probe_timeout=setting_float(settings, "NEARDUP_SOFT404_TIMEOUT"),
            mirrors=setting_bool(settings, "NEARDUP_MIRRORS_ENABLED"),
            mirror_min_pages=setting_int(settings, "NEARDUP_MIRROR_MIN_PAGES"),
            mirror_share=setting_float(settings, "NEARDUP_MIRROR_SHARE"),
            mirror_sync_interval=setting_float(settings, "NEARDUP_MIRROR_SYNC_INTERVAL"),
            copy_wait=setting_float(settings, "NEARDUP_COPY_WAIT", default_copy_wait(settings)),
            canonical=setting_bool(settings, "NEARDUP_CANONICAL"),
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

