"""Building blocks of the reliability tests: a site server that also serves bytes, slow pages and 50 MB pages;
a spider that puts non-HTML bodies into the text field; a *witness* pipeline that records, durably, every item
that left the near-duplicate pipeline; and a crawl launcher that can ``kill -9`` the crawl mid-way.

Reuses tests/scrapy's :class:`~neardup_testkit.SiteServer` and page generators. Imported by the pytest process
and by ``reliability_runner.py`` (the crawl subprocess), so it has no pytest import.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
SCRAPY_TESTS = HERE.parent / "scrapy"
REPO = HERE.parent.parent
if str(SCRAPY_TESTS) not in sys.path:
    sys.path.insert(0, str(SCRAPY_TESTS))

import scrapy  # noqa: E402
from neardup_testkit import CrawlResult, Page, SiteServer  # noqa: E402
from scrapy.http import Response, TextResponse  # noqa: E402

from scrapy_neardup.crawl.pipeline import NearDuplicatePipeline  # noqa: E402
from scrapy_neardup.store.backend import Backend  # noqa: E402

#: Seconds a crawl subprocess may take before the test fails.
CRAWL_TIMEOUT = 120


# -- the ledger: what each test tried and lost ------------------------------------------------------------------


@dataclass
class Entry:
    test: str
    tried: str
    lost: int
    notes: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


#: Every entry of this run, printed by conftest's terminal summary.
LEDGER: list[Entry] = []


class Ledger:
    """What one test tried (faults injected, items checked) and lost (0 unless the test says otherwise)."""

    def __init__(self, test: str) -> None:
        self.test = test

    def record(self, tried: str, lost: int, notes: str = "", **figures: Any) -> None:
        LEDGER.append(Entry(self.test, tried, lost, notes, figures))


# -- a site that also serves bytes, slowly or hugely ----------------------------------------------------------


@dataclass(frozen=True)
class RawPage:
    """A response body of ``head + unit * count + tail`` bytes, streamed (50 MB never sits in memory)."""

    head: bytes
    content_type: str = "text/html; charset=utf-8"
    unit: bytes = b""
    count: int = 0
    tail: bytes = b""
    status: int = 200

    @property
    def length(self) -> int:
        return len(self.head) + len(self.unit) * self.count + len(self.tail)

    def chunks(self) -> Iterator[bytes]:
        yield self.head
        if self.unit and self.count:
            per_chunk = max(1, (1 << 20) // len(self.unit))
            for start in range(0, self.count, per_chunk):
                yield self.unit * min(per_chunk, self.count - start)
        yield self.tail


class RawSiteServer(SiteServer):
    """tests/scrapy's :class:`SiteServer`, also serving :class:`RawPage` bodies, each after ``delay`` seconds."""

    def __init__(self, pages: dict[str, Page | RawPage], fallback: Page | None = None, delay: float = 0.0) -> None:
        super().__init__(pages, fallback)  # type: ignore[arg-type, unused-ignore]
        self.delay = delay

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        site = self
        base = super()._handler_class()

        class Handler(base):  # type: ignore[valid-type, misc]
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if site.delay:
                    time.sleep(site.delay)
                page = site.pages.get(urlsplit(self.path).path)
                if not isinstance(page, RawPage):
                    super().do_GET()
                    return
                site.requests.append(urlsplit(self.path).path)
                self.send_response(page.status)
                self.send_header("Content-Type", page.content_type)
                self.send_header("Content-Length", str(page.length))
                self.end_headers()
                try:
                    for chunk in page.chunks():
                        self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):  # the crawler was killed mid-download
                    pass

        return Handler


def links_page(title: str, hrefs: list[str]) -> Page:
    anchors = "".join(f'<li><a href="{h}">{h}</a></li>' for h in hrefs)
    return Page(f"<html><head><title>{title}</title></head><body><ul>{anchors}</ul></body></html>")


# -- the spider and the witness, used inside the crawl subprocess -----------------------------------------------

#: Responses larger than this are not parsed for links (the spider's own cost, not the pipeline's).
_MAX_PARSED = 1 << 20


class ReliabilitySpider(scrapy.Spider):
    """Follows links from ``start_url``; one item ``{url, text, length}`` per page.

    ``text`` is ``response.text`` for text responses and ``response.body`` (bytes) for the others (PDF, PNG,
    gzip...): what a spider that stores whatever it downloaded does.
    """

    name = "neardup_reliability"

    def __init__(self, start_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_url = start_url

    async def start(self) -> Any:
        yield scrapy.Request(self.start_url, callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Any:
        is_text = isinstance(response, TextResponse)
        text: str | bytes = response.text if is_text else response.body
        yield {"url": response.url, "text": text, "length": len(response.body)}
        if is_text and len(response.body) <= _MAX_PARSED:
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)


class WitnessPipeline:
    """Appends the URL of every item that got past the near-duplicate pipeline to ``WITNESS_FILE``.

    One unbuffered ``write(2)`` per item, so that the file survives ``kill -9``: it is the independent record
    of which pages the crawl kept (and passed on) before it was killed.
    """

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @classmethod
    def from_crawler(cls, crawler: Any) -> WitnessPipeline:
        return cls(crawler.settings.get("WITNESS_FILE"))

    def process_item(self, item: Any, spider: Any = None) -> Any:
        os.write(self.fd, (item["url"] + "\n").encode())
        return item

    def close_spider(self, spider: Any = None) -> None:
        os.close(self.fd)


class ShortPendingPipeline(NearDuplicatePipeline):
    """The near-duplicate pipeline whose Elasticsearch backend waits ``NEARDUP_TEST_PENDING_TIMEOUT`` seconds,
    instead of 30, for a page another crawler left ``pending``: a test of a crawler killed mid-check need not
    wait half a minute for the page it left behind."""

    def make_backend(self) -> Backend:
        backend = super().make_backend()
        timeout = self.crawler.settings.getfloat("NEARDUP_TEST_PENDING_TIMEOUT", 0) if self.crawler else 0
        if timeout and hasattr(backend, "pending_timeout"):
            backend.pending_timeout = timeout
        return backend


# -- running a crawl in its own process ------------------------------------------------------------------------


@dataclass
class CrawlOutcome(CrawlResult):
    """What one crawl did: exit status (``-9`` when killed), its log, the runner's record, the witness.

    The reliability runner records drops flat (``{"url", ...}``) rather than under ``item``.
    """

    witnessed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def drops_by_url(self) -> dict[str, dict[str, Any]]:
        return {drop["url"]: drop for drop in self.dropped}


def run_crawl(
    workdir: Path, *, start_url: str, settings: dict[str, Any] | None = None, name: str = "crawl",
    kill_after: int | None = None, kill_at: float | None = None, kill_when: Callable[[], bool] | None = None,
) -> CrawlOutcome:
    """Run one crawl with the near-duplicate pipeline and the witness in a fresh process.

    With ``kill_after``, the process gets ``SIGKILL`` as soon as the witness has recorded that many items; with
    ``kill_at``, that many seconds after it started, wherever it is (start-up, loading state, crawling); with
    ``kill_when``, as soon as that returns true (polled every 2 ms). The caller checks that the crawl was still
    running then (``returncode == -9``).
    """
    witness = workdir / f"{name}-witness.txt"
    witness.unlink(missing_ok=True)
    spec = {"settings": {"WITNESS_FILE": str(witness), **(settings or {})}, "spider": {"start_url": start_url}}
    spec_path, out_path = workdir / f"{name}-spec.json", workdir / f"{name}-out.json"
    spec_path.write_text(json.dumps(spec))
    out_path.unlink(missing_ok=True)
    log_path = workdir / f"{name}.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(SCRAPY_TESTS), str(REPO),
                                                        os.environ.get("PYTHONPATH", "")])}
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "reliability_runner.py"), str(spec_path), str(out_path)],
            stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env,
        )
        try:
            if kill_after is not None or kill_at is not None or kill_when is not None:
                while proc.poll() is None and (
                    _lines(witness) < kill_after if kill_after is not None
                    else not kill_when() if kill_when is not None
                    else time.monotonic() - started < (kill_at or 0)
                ):
                    if time.monotonic() - started > CRAWL_TIMEOUT:
                        raise AssertionError(f"{name}: the kill condition never came true")
                    time.sleep(0.002)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)  # kill -9: no handler, no close_spider, no flush
            proc.wait(timeout=CRAWL_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    seconds = time.monotonic() - started
    data = json.loads(out_path.read_text()) if out_path.exists() else {}
    witnessed = witness.read_text().split() if witness.exists() else []
    return CrawlOutcome(proc.returncode, log_path.read_text(errors="replace"), data, witnessed, seconds)


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0
