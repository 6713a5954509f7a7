"""What NEARDUP_REPORT costs a crawl: the report's handler time per item (scraped or dropped) against the time to
sketch one page, in the same run (a ratio, so a busy machine does not skew it), and the time to write the report.

    python benchmarks/bench_report.py [--items N] [--pages N]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from scrapy.utils.test import get_crawler

from scrapy_neardup.core.match import Match
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.crawl.crawl_report import CrawlReport
from scrapy_neardup.crawl.drops import NearDuplicateDropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=20_000, help="items handed to the report (a third dropped)")
    parser.add_argument("--pages", type=int, default=300, help="600-word pages sketched for the comparison")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "report.html")
        report = CrawlReport(get_crawler(settings_dict={"NEARDUP_REPORT": path}), path)
        items = [{"url": f"http://h{i % 50}.test/{i}", "text": "x"} for i in range(args.items)]
        drops = [NearDuplicateDropped(item["url"], Match("http://h.test/kept", 120, 120 / 128, False), 128)
                 for item in items]
        start = time.perf_counter()
        for i, item in enumerate(items):
            if i % 3:
                report.item_scraped(item)
            else:
                report.item_dropped(item, drops[i])
        per_item = (time.perf_counter() - start) / args.items
        start = time.perf_counter()
        report.spider_closed(reason="finished")
        write = time.perf_counter() - start
        size = Path(path).stat().st_size
    rng = random.Random(1)
    pages = ["<html><body><article><p>" + " ".join(f"w{rng.randint(0, 9999)}" for _ in range(600))
             + "</p></article></body></html>" for _ in range(args.pages)]
    start = time.perf_counter()
    Sketcher().sketch_many(pages)
    per_page = (time.perf_counter() - start) / args.pages
    print(json.dumps({"items": args.items, "handler_us_per_item": round(per_item * 1e6, 2),
                      "sketch_us_per_page": round(per_page * 1e6, 1), "ratio": round(per_item / per_page, 4),
                      "write_ms": round(write * 1e3, 1), "report_bytes": size}))


if __name__ == "__main__":
    main()
