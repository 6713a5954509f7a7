"""Run one real crawl for the reliability tests and write what happened as JSON.

    python reliability_runner.py SPEC.json OUT.json

Like tests/scrapy's ``crawl_runner.py`` (whose reactor table and failure recorder it reuses), but with the
:class:`~reliability_kit.ReliabilitySpider` (bytes bodies of non-HTML responses go into the text field), the
:class:`~reliability_kit.WitnessPipeline` after the near-duplicate pipeline, and items recorded without
their text (pages of 50 MB). OUT keys: ``scraped`` ([{url, length}]), ``dropped`` ([{url, duplicate_of,
exact}]), ``item_errors``, ``stats``, ``crawl_error``, ``peak_rss_mb`` (of this process), ``crawl_seconds``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crawl_runner import PIPELINE, REACTORS, _record_failure  # noqa: E402
from reliability_kit import ReliabilitySpider  # noqa: E402
from scrapy import signals  # noqa: E402
from scrapy.crawler import CrawlerProcess  # noqa: E402

WITNESS = "reliability_kit.WitnessPipeline"


def peak_rss_mb() -> float:
    """This program's peak resident memory in MB: ``VmHWM``, the high-water mark of its own address space.

    Not ``getrusage(RUSAGE_SELF).ru_maxrss``: Linux carries the parent's resident size at ``fork`` into it across
    ``exec``, so a crawl started by a large test process (one that has loaded the accuracy corpora) would report
    that process's size, not its own.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    settings: dict[str, Any] = {
        "ITEM_PIPELINES": {PIPELINE: 300, WITNESS: 400},
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "RETRY_ENABLED": False,
        "TWISTED_REACTOR": REACTORS["asyncio"],
        **spec.get("settings", {}),
    }
    process = CrawlerProcess(settings)
    result: dict[str, Any] = {"scraped": [], "dropped": [], "item_errors": [], "crawl_error": None}
    crawler = process.create_crawler(ReliabilitySpider)

    def scraped(item: Any, **kwargs: Any) -> None:
        result["scraped"].append({"url": item["url"], "length": item["length"], "neardup": item.get("neardup")})

    def dropped(item: Any, exception: BaseException, **kwargs: Any) -> None:
        match = getattr(exception, "match", None)
        result["dropped"].append({
            "url": item["url"], "reason": type(exception).__name__,
            "duplicate_of": match.key if match else None, "exact": match.exact if match else None,
        })

    def item_error(item: Any, failure: Any, **kwargs: Any) -> None:
        result["item_errors"].append({"url": item.get("url"), "error": repr(failure.value)})

    crawler.signals.connect(scraped, signal=signals.item_scraped, weak=False)
    crawler.signals.connect(dropped, signal=signals.item_dropped, weak=False)
    crawler.signals.connect(item_error, signal=signals.item_error, weak=False)
    done = process.crawl(crawler, **spec.get("spider", {}))
    _record_failure(done, result)
    started = time.monotonic()
    process.start()
    result["crawl_seconds"] = time.monotonic() - started
    stats = getattr(crawler, "_stats", None)
    result["stats"] = stats.get_stats() if stats is not None else {}
    result["peak_rss_mb"] = peak_rss_mb()
    Path(out_path).write_text(json.dumps(result, default=str, indent=1))
    return 1 if process.bootstrap_failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
