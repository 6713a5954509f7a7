"""Run one real Scrapy crawl with the near-duplicate pipeline and write what happened as JSON.

    python crawl_runner.py SPEC.json OUT.json

Each crawl runs in its own process: a Twisted reactor cannot be restarted, and a fresh process also gives the
real start-up path (settings errors, state loading) and the real Ctrl-C path (``stop_after_items`` sends this
process SIGINT, exactly what a user pressing Ctrl-C does, so Scrapy stops gracefully and JOBDIR can resume).

SPEC keys: ``settings`` (dict), ``spider`` (NearDupTestSpider kwargs), ``reactor`` (``asyncio`` - Scrapy's
default -, ``select`` - a non-asyncio reactor - or ``none`` - no reactor at all), ``stop_after_items`` (int),
``witness`` (a file to which the URL of each item passed on is appended at once: what a killed crawl emitted).
OUT keys: ``scraped`` (items), ``dropped`` ([{item, reason, message, duplicate_of, resemblance, exact}]),
``item_errors``, ``stats``, ``finish_reason``, ``crawl_error``. Exit status 1 when the crawl could not start.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from itemadapter import ItemAdapter  # noqa: E402
from neardup_testkit import NearDupTestSpider, item_to_dict  # noqa: E402
from scrapy import signals  # noqa: E402

PIPELINE = "scrapy_neardup.NearDuplicatePipeline"
REACTORS = {
    "asyncio": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
    "select": "twisted.internet.selectreactor.SelectReactor",
}


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    settings: dict[str, Any] = {
        "ITEM_PIPELINES": {PIPELINE: 300},
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "REMOTE_CONTROL_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "RETRY_ENABLED": False,
        **spec.get("settings", {}),
    }
    mode = spec.get("reactor", "asyncio")
    if mode == "none":
        from scrapy.crawler import AsyncCrawlerProcess

        settings["TWISTED_REACTOR_ENABLED"] = False
        process: Any = AsyncCrawlerProcess(settings)
    else:
        from scrapy.crawler import CrawlerProcess

        settings["TWISTED_REACTOR"] = REACTORS[mode]
        process = CrawlerProcess(settings)

    result: dict[str, Any] = {"scraped": [], "dropped": [], "item_errors": [], "crawl_error": None}
    crawler = process.create_crawler(NearDupTestSpider)
    _record_items(crawler, result, spec.get("stop_after_items"), spec.get("witness"))
    done = process.crawl(crawler, **spec.get("spider", {}))
    _record_failure(done, result)
    process.start()

    # crawler._stats stays None when the crawl failed before Scrapy made its stats collector.
    stats = getattr(crawler, "_stats", None)
    result["stats"] = stats.get_stats() if stats is not None else {}
    result["finish_reason"] = result["stats"].get("finish_reason")
    result["bootstrap_failed"] = bool(process.bootstrap_failed)
    Path(out_path).write_text(json.dumps(result, default=str, indent=1))
    return 1 if process.bootstrap_failed else 0


def _record_items(crawler: Any, result: dict[str, Any], stop_after_items: int | None,
                  witness_path: str | None = None) -> None:
    # Unbuffered: each line is in the file (the kernel's) before the next item, whatever kills the process.
    witness = open(witness_path, "ab", buffering=0) if witness_path else None  # noqa: SIM115 - lives with the process

    def scraped(item: Any, **kwargs: Any) -> None:
        result["scraped"].append(item_to_dict(item))
        if witness is not None:
            witness.write(f"{ItemAdapter(item).get('url')}\n".encode("utf-8", "backslashreplace"))
        if stop_after_items is not None and len(result["scraped"]) == stop_after_items:
            # What Ctrl-C does: Scrapy's handler starts a graceful stop (in-flight pages finish, the spider
            # closes, the pipeline saves its state, pending requests stay in JOBDIR).
            os.kill(os.getpid(), signal.SIGINT)

    def dropped(item: Any, exception: BaseException, **kwargs: Any) -> None:
        match = getattr(exception, "match", None)
        result["dropped"].append({
            "item": item_to_dict(item),
            "reason": type(exception).__name__,
            "message": str(exception),
            # CanonicalDropped names the kept page without a match (its text was not compared).
            "duplicate_of": match.key if match else getattr(exception, "duplicate_of", None),
            "resemblance": match.resemblance if match else None,
            "exact": match.exact if match else None,
            "evidence": getattr(exception, "evidence", None),
        })

    def item_error(item: Any, failure: Any, **kwargs: Any) -> None:
        result["item_errors"].append({"item": item_to_dict(item), "error": repr(failure.value)})

    crawler.signals.connect(scraped, signal=signals.item_scraped, weak=False)
    crawler.signals.connect(dropped, signal=signals.item_dropped, weak=False)
    crawler.signals.connect(item_error, signal=signals.item_error, weak=False)


def _record_failure(done: Any, result: dict[str, Any]) -> None:
    def record(exc: BaseException) -> None:
        result["crawl_error"] = {"type": type(exc).__name__, "message": str(exc)}

    if hasattr(done, "addErrback"):  # a Deferred (reactor modes)
        def errback(failure: Any) -> Any:
            record(failure.value)
            return failure  # keep it unhandled: Scrapy/Twisted log it as users would see it

        done.addErrback(errback)
    elif hasattr(done, "add_done_callback"):  # an asyncio task (no reactor)
        def on_done(task: Any) -> None:
            if not task.cancelled() and task.exception() is not None:
                record(task.exception())

        done.add_done_callback(on_done)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
