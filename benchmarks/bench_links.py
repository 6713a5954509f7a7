"""What the add-on costs per link a spider yields (the part of its crawl overhead that is per link, not per page).

A ``CrawlSpider`` yields a request for every link of every page, and Scrapy sends ``request_scheduled`` for each,
then refuses most as duplicates (sending ``request_dropped`` for those). The add-on follows scheduled requests when
the mirror middleware or the copy waits are on (its defaults). This replays the links of the HTML pages of DIR
(extracted with Scrapy's ``LinkExtractor`` as the crawl would, the pages given the URLs they would have on
``http://127.0.0.1:8000/``) through a crawler's signals as Scrapy's engine and default scheduler do (the
``request_scheduled`` signal, the duplicate filter's fingerprint, ``request_dropped`` for a fingerprint seen
before), with the add-on's followers connected as in its defaults, and with none connected (``NEARDUP_MIRRORS_ENABLED
= False``, ``NEARDUP_COPY_WAIT = 0``), alternated; prints the median time per link of each and the difference.

    python benchmarks/bench_links.py --site DIR [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

BASE = "http://127.0.0.1:8000/"
VARIANTS: dict[str, dict[str, object]] = {
    "no followers": {"NEARDUP_MIRRORS_ENABLED": False, "NEARDUP_COPY_WAIT": 0},
    "defaults": {},
}


def site_links(site: Path) -> list[str]:
    """Every link the crawl's ``LinkExtractor`` yields, page by page, over the HTML pages of ``site``."""
    from scrapy.http import HtmlResponse
    from scrapy.linkextractors import LinkExtractor

    extractor = LinkExtractor()
    links: list[str] = []
    for page in sorted(site.rglob("*.html")):
        url = BASE + page.relative_to(site).as_posix()
        response = HtmlResponse(url, body=page.read_bytes(), encoding="utf-8")
        links.extend(link.url for link in extractor.extract_links(response))
    return links


def replay(links: list[str], settings: dict[str, object]) -> float:
    """Seconds to schedule ``links`` as the engine does, with the add-on's parts built from ``settings``."""
    from scrapy import Request, signals
    from scrapy.utils.test import get_crawler

    from scrapy_neardup.crawl.mirrors import MirrorHostsMiddleware
    from scrapy_neardup.crawl.pipeline import NearDuplicatePipeline

    with tempfile.TemporaryDirectory() as state:
        crawler = get_crawler(settings_dict={"NEARDUP_STATE_DIR": state, **settings})
        parts: list[Any] = [NearDuplicatePipeline.from_crawler(crawler)]  # kept: Scrapy holds handlers weakly
        if settings.get("NEARDUP_MIRRORS_ENABLED", True):
            parts.append(MirrorHostsMiddleware.from_crawler(crawler))
        requests = [Request(url, meta={"rule": 0, "link_text": ""}) for url in links]
        fingerprint, seen, send = crawler.request_fingerprinter.fingerprint, set(), crawler.signals.send_catch_log
        started = time.perf_counter()
        for request in requests:
            send(signals.request_scheduled, request=request, spider=None)
            key = fingerprint(request)
            if key in seen:
                send(signals.request_dropped, request=request, spider=None)
            else:
                seen.add(key)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--site", type=Path, required=True, help="a directory of HTML pages")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    links = site_links(args.site)
    distinct = len(set(url.partition("#")[0] for url in links))
    print(f"{len(links):,} links on the pages of {args.site} ({distinct:,} distinct pages)")
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, settings in VARIANTS.items():
            times[name].append(replay(links, settings))
    per_link = {name: statistics.median(runs) / len(links) * 1e6 for name, runs in times.items()}
    for name in VARIANTS:
        print(f"{name:14s} {statistics.median(times[name]):6.3f} s  {per_link[name]:5.1f} us a link")
    added = per_link["defaults"] - per_link["no followers"]
    print(f"the add-on's followers: {added:.1f} us a link, {added * len(links) / 1e6:.2f} s for these links")


if __name__ == "__main__":
    main()
