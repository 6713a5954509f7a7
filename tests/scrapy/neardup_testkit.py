"""Building blocks of the Scrapy tests: a local site server, running a crawl in a subprocess, generated
near-duplicate sites with their ground truth, a test spider and item classes, a backend that awaits between
its check and its insert, and the checks shared by the embedded and Elasticsearch crawl tests.

Imported both by the pytest process (conftest, tests) and by ``crawl_runner.py``, which runs each crawl in a
subprocess. Kept free of pytest imports for that reason.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import scrapy
from scrapy.http import Response

from scrapy_neardup.core.index import SketchIndex
from scrapy_neardup.core.match import Match
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.sketch import Sketch, Sketcher
from scrapy_neardup.crawl.pipeline import NearDuplicatePipeline
from scrapy_neardup.store.backend import Backend, Decision

# -- a static site on 127.0.0.1 ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    body: str
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    #: more response headers (``{"Link": '<http://...>; rel="canonical"'}``)
    headers: tuple[tuple[str, str], ...] = ()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog of 5 drops connections when Scrapy opens 16 at once; the client then retries
    # after a 1 s SYN timeout, which would make every test crawl a second slower.
    request_queue_size = 128


class SiteServer:
    """Serves ``pages`` (path -> :class:`Page`) on ``host`` (default 127.0.0.1) at a free port; other paths get
    ``fallback``, or ``section_fallbacks[prefix]`` for paths under ``prefix`` (e.g. ``"/news/"``); a request
    whose path contains a key of ``slow`` is answered that many seconds late."""

    def __init__(
        self, pages: dict[str, Page], fallback: Page | None = None, *, host: str = "127.0.0.1",
        section_fallbacks: dict[str, Page] | None = None, slow: dict[str, float] | None = None,
    ) -> None:
        self.pages = pages
        self.slow = slow or {}
        self.fallback = fallback or Page("<html><body><h1>404</h1></body></html>", status=404)
        self.section_fallbacks = section_fallbacks or {}
        self.host = host
        self.requests: list[str] = []
        #: ``(path with query, User-Agent header)`` of every request, in order.
        self.user_agents: list[tuple[str, str]] = []
        self._server = _Server((host, 0), self._handler_class())
        # A short poll interval: shutdown() waits for it, once per test.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._server.server_port}"

    def start(self) -> SiteServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def fallback_for(self, path: str) -> Page:
        for prefix, page in self.section_fallbacks.items():
            if path.startswith(prefix):
                return page
        return self.fallback

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path = urlsplit(self.path).path
                site.requests.append(path)
                site.user_agents.append((self.path, self.headers.get("User-Agent", "")))
                page = site.pages.get(path) or site.fallback_for(path)
                delay = max((seconds for part, seconds in site.slow.items() if part in path), default=0.0)
                if delay:
                    time.sleep(delay)
                data = page.body.encode("utf-8")
                self.send_response(page.status)
                self.send_header("Content-Type", page.content_type)
                for name, value in page.headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

        return Handler


# -- running a crawl in its own process --------------------------------------------------------------------------

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CRAWL_TIMEOUT = 60


@dataclass
class CrawlResult:
    """What one crawl did: its exit status, log (stderr) and the runner's JSON record."""

    returncode: int
    log: str
    data: dict[str, Any]
    #: URLs of the items passed on (``item_scraped``) as they went, written at once: what a crawl killed with
    #: ``kill_after_items`` had emitted (a killed crawl writes no ``data``).
    passed_on: list[str] = field(default_factory=list, kw_only=True)

    @property
    def scraped(self) -> list[dict[str, Any]]:
        return self.data.get("scraped", [])

    @property
    def dropped(self) -> list[dict[str, Any]]:
        return self.data.get("dropped", [])

    @property
    def stats(self) -> dict[str, Any]:
        return self.data.get("stats", {})

    def stat(self, name: str) -> int:
        return int(self.stats.get(name, 0))

    @property
    def kept_urls(self) -> list[str]:
        return [item["url"] for item in self.scraped]

    def drops_by_url(self) -> dict[str, dict[str, Any]]:
        return {drop["item"]["url"]: drop for drop in self.dropped}


def run_crawl_process(
    workdir: Path,
    *,
    settings: dict[str, Any] | None = None,
    spider: dict[str, Any] | None = None,
    reactor: str = "asyncio",
    stop_after_items: int | None = None,
    name: str = "crawl",
    timeout: float | None = None,
    kill_after_items: int | None = None,
) -> CrawlResult:
    """Run one crawl in a fresh Python process and return what happened; ``timeout``: seconds, default
    :data:`CRAWL_TIMEOUT` as it is at the call (tests raise it with ``monkeypatch``). With ``kill_after_items``,
    the process gets ``SIGKILL`` (``kill -9``: nothing is closed or saved) once that many items were passed on."""
    timeout = CRAWL_TIMEOUT if timeout is None else timeout
    witness = workdir / f"{name}-passed-on.txt"
    witness.unlink(missing_ok=True)
    spec = {"settings": settings or {}, "spider": spider or {}, "reactor": reactor,
            "stop_after_items": stop_after_items, "witness": str(witness)}
    spec_path = workdir / f"{name}-spec.json"
    out_path = workdir / f"{name}-out.json"
    log_path = workdir / f"{name}.log"
    spec_path.write_text(json.dumps(spec))
    out_path.unlink(missing_ok=True)
    pythonpath = [str(HERE), str(REPO), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "crawl_runner.py"), str(spec_path), str(out_path)],
            stdout=subprocess.DEVNULL, stderr=log, cwd=workdir, env=env,
        )
        try:
            while kill_after_items is not None and proc.poll() is None and _lines(witness) < kill_after_items:
                if time.monotonic() - started > timeout:
                    raise AssertionError(f"{name}: {kill_after_items} items were never passed on")
                time.sleep(0.002)
            if kill_after_items is not None and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    stderr = log_path.read_text(errors="replace")
    data = json.loads(out_path.read_text()) if out_path.exists() else {}
    if not data and proc.returncode == 0:
        raise AssertionError(f"crawl runner wrote nothing:\n{stderr[-4000:]}")
    passed_on = witness.read_text().split() if witness.exists() else []
    return CrawlResult(proc.returncode, stderr, data, passed_on=passed_on)


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def run_scrapy_command(
    workdir: Path, *args: str, settings: dict[str, Any] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``scrapy <args>`` (e.g. ``crawl neardup_test -a start_url=... -O out.csv``) as a user does, in a
    project made in ``workdir`` whose only spider is :class:`NearDupTestSpider` and whose pipeline is ours."""
    project = workdir / "cmdproject"
    (project / "cmdproject" / "spiders").mkdir(parents=True, exist_ok=True)
    (project / "scrapy.cfg").write_text("[settings]\ndefault = cmdproject.settings\n")
    (project / "cmdproject" / "__init__.py").write_text("")
    base = {
        "SPIDER_MODULES": ["cmdproject.spiders"],
        "ITEM_PIPELINES": {"scrapy_neardup.NearDuplicatePipeline": 300},
        "LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False, "RETRY_ENABLED": False,
        **(settings or {}),
    }
    (project / "cmdproject" / "settings.py").write_text(
        "".join(f"{name} = {value!r}\n" for name, value in base.items())
    )
    (project / "cmdproject" / "spiders" / "__init__.py").write_text(
        # Scrapy lists the spiders defined in SPIDER_MODULES, not the ones imported there.
        "from neardup_testkit import NearDupTestSpider\n\n\nclass Spider(NearDupTestSpider):\n    pass\n"
    )
    pythonpath = [str(project), str(HERE), str(REPO), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    return subprocess.run([sys.executable, "-m", "scrapy", *args], capture_output=True, text=True,
                          timeout=CRAWL_TIMEOUT, cwd=project, env=env)


# -- generated text ----------------------------------------------------------------------------------------------

_SYLLABLES = [
    "ba", "ke", "lo", "mi", "nu", "ra", "si", "to", "ve", "za", "dor", "fin", "gal", "hem", "jus", "kal", "lun",
    "mor", "nel", "pra", "qui", "rost", "sel", "tam", "ul", "vin", "wex", "yor", "zen", "ar", "em", "is",
]


def vocabulary(size: int = 4000, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


_VOCAB = vocabulary()


def article_words(seed: int, n: int = 400) -> list[str]:
    """``n`` pseudo-random words: two different seeds share (almost) no 5-word shingle."""
    rng = random.Random(seed)
    return [rng.choice(_VOCAB) for _ in range(n)]


def edit_words(words: list[str], changes: int, seed: int) -> list[str]:
    """Replace ``changes`` words spread over the text (each change alters at most 5 word 5-shingles)."""
    rng = random.Random(seed)
    out = list(words)
    step = len(words) // (changes + 1)
    for i in range(1, changes + 1):
        out[i * step] = rng.choice(_VOCAB) + "x"
    return out


def html_page(title: str, words: list[str], *, nav: str = "", footer: str = "", links: Sequence[str] = ()) -> str:
    """An HTML page whose visible text is ``nav``, ``title``, the words (as paragraphs) and ``footer``."""
    paragraphs = "\n".join(
        f"<p>{' '.join(words[i : i + 40])}</p>" for i in range(0, len(words), 40)
    )
    anchors = "\n".join(f'<li><a href="{html.escape(href)}">{html.escape(href)}</a></li>' for href in links)
    return (
        f"<!doctype html><html><head><title>{html.escape(title)}</title>"
        "<style>body { font-family: serif }</style><script>var tracking = 1;</script></head><body>"
        f"<nav>{html.escape(nav)}</nav><h1>{html.escape(title)}</h1><article>{paragraphs}</article>"
        f"<footer>{html.escape(footer)}</footer><ul class=links>{anchors}</ul></body></html>"
    )


# -- a site with every kind of near-duplicate ------------------------------------------------------------------

NAV = "Home News Sports Weather Contact"
MIRROR_NAV = "Mirror hosted by Example Mirror Network visit the original site"
ADDED_SENTENCE = ["one", "sentence", "was", "added", "here"]
COPYRIGHT = "Copyright 2024 The Example Gazette all rights reserved republished with permission"
SOFT_404 = (
    "Page not found. We are sorry, but the page you were looking for could not be found on this server. "
    "It may have been moved or deleted, or you may have mistyped the address. Please go back to the home page "
    "or use the search box to find what you were looking for. If you think this is an error, contact us."
)


@dataclass
class NearDupSite:
    """Pages plus ground truth: which page each copy duplicates (``original_of``) and the distinct pages."""

    pages: dict[str, Page] = field(default_factory=dict)
    original_of: dict[str, str] = field(default_factory=dict)
    distinct: list[str] = field(default_factory=list)
    soft_404: list[str] = field(default_factory=list)


def kinds_site(articles: int = 4, soft_404s: int = 3) -> NearDupSite:
    """Home -> distinct articles -> their mirror, printer, lightly edited and syndicated copies; home also
    links to URLs answered by a "page not found" template with status 200 (soft 404s).

    Copies are linked only from their original, so the original is always crawled (and kept) first.
    """
    site = NearDupSite()
    home_links = []
    for i in range(1, articles + 1):
        words = article_words(1000 + i)
        title = f"Article {i}"
        original = f"/news/{i}.html"
        copies = {
            f"/mirror/{i}.html": html_page(title, words, nav=MIRROR_NAV),
            f"/print/{i}.html": html_page(title + " (print)", words),
            f"/edited/{i}.html": html_page(title, edit_words(words, 2, seed=i) + ADDED_SENTENCE, nav=NAV),
            f"/syndicated/{i}.html": html_page(title, words, nav="Partner Daily", footer=COPYRIGHT),
        }
        site.pages[original] = Page(html_page(title, words, nav=NAV, links=list(copies)))
        site.distinct.append(original)
        home_links.append(original)
        for path, body in copies.items():
            site.pages[path] = Page(body)
            site.original_of[path] = original
    for j in range(1, soft_404s + 1):
        path = f"/old/story-{j}.html"
        site.soft_404.append(path)
        home_links.append(path)
    site.pages["/"] = Page(html_page("Home", article_words(999, 60), nav=NAV, links=home_links))
    site.distinct.append("/")
    return site


def template_site(pages: int = 48, copies: int = 6, seed: int = 11) -> NearDupSite:
    """A documentation-like site that marks nothing (``div`` layout, neutral classes) whose template is most of
    each short page: a header, a sidebar listing every page, a footer of prose; each page has 12-30 words of
    its own (an API stub). ``/v2/...`` pages repeat ``copies`` of them word for word under a sidebar of their own
    (another version's table of contents): ``original_of`` maps each copy to its original."""
    rng = random.Random(seed)
    names = [f"/api/item-{i:02d}.html" for i in range(pages)]
    footer = ("<div class='c9'><p>" + " ".join(article_words(seed + 1, 40)) + "</p><p>"
              + " ".join(article_words(seed + 2, 25)) + "</p></div>")

    def page(title: str, own: list[str], sidebar: Sequence[str]) -> str:
        links = "".join(f"<div class='c3'><a href='{href}'>{html.escape(href.rsplit('/', 1)[1])}"
                        f" {' '.join(article_words(500 + n, 3))}</a></div>" for n, href in enumerate(sidebar))
        return (f"<html><head><title>{title}</title></head><body><div class='c1'><div class='c2'>"
                f"<a href='/'>Home</a> <a href='/api/'>Reference</a> <a href='/about.html'>About</a></div>"
                f"<div class='c4'>{links}</div><div class='c5'><h1>{title}</h1><p>{' '.join(own)}</p></div>"
                f"{footer}</div></body></html>")

    site: dict[str, Page] = {}
    own_words = {name: article_words(1000 + i, rng.randint(12, 30)) for i, name in enumerate(names)}
    for i, name in enumerate(names):
        site[name] = Page(page(f"Item {i}", own_words[name], names))
    v2 = [name.replace("/api/", "/v2/api/") for name in names[:copies]]
    for i, name in enumerate(v2):
        site[name] = Page(page(f"Item {i}", own_words[names[i]], v2))
    site["/"] = Page(page("Home", article_words(5, 12), names + v2))
    return NearDupSite(site, original_of=dict(zip(v2, names, strict=False)), distinct=["/", *names])


def soft_404_page() -> Page:
    return Page(html_page("Page not found", SOFT_404.split(), nav=NAV))


# -- spider and items ----------------------------------------------------------------------------------------------


class PageItem(scrapy.Item):
    url = scrapy.Field()
    title = scrapy.Field()
    text = scrapy.Field()
    neardup = scrapy.Field()


class PageItemWithoutMark(scrapy.Item):
    url = scrapy.Field()
    title = scrapy.Field()
    text = scrapy.Field()


@dataclass
class PageRecord:
    url: str | None = None
    title: str | None = None
    text: Any = None
    neardup: dict[str, Any] | None = None


ITEM_TYPES: dict[str, Any] = {
    "dict": dict,
    "item": PageItem,
    "item_without_mark": PageItemWithoutMark,
    "dataclass": PageRecord,
}


def make_item(item_type: str, fields: dict[str, Any]) -> Any:
    cls = ITEM_TYPES[item_type]
    if cls is dict:
        return dict(fields)
    if dataclasses.is_dataclass(cls):
        return cast(Any, cls)(**fields)
    item = cls()
    for key, value in fields.items():
        item[key] = value
    return item


def item_to_dict(item: Any) -> dict[str, Any]:
    from itemadapter import ItemAdapter

    return ItemAdapter(item).asdict()


class NearDupTestSpider(scrapy.Spider):
    """Follows every link under the start URL's host and yields one item per page: ``{url, title, text}``.

    Spider arguments:
        start_url: where to start.
        item_type: ``dict`` (default), ``item``, ``item_without_mark`` or ``dataclass``.
        overrides: path -> fields to set on that page's item (``{"text": None}``), or ``{"__drop__": [..]}``
            to remove fields.
        burst: items (dicts) to yield all at once from the start page's callback, instead of following links.
        rename: field -> name it gets in every item (``{"text": "body"}``: a spider whose text field differs).
        extra_starts: more start URLs (other hosts), fetched after ``start_url``.
        start_hosts_only: follow links to the start URLs' hosts only (pages of real sites link to the web; the
            tests' traffic stays on loopback).
        start_dont_filter: start requests bypass the duplicate filter, as those of Scrapy's ``start_urls`` do
            (a start URL linked again is then fetched again, and a resumed JOBDIR crawl fetches it again).
        request_headers: headers every request of the spider is given (``{"User-Agent": ...}``).
    """

    name = "neardup_test"

    def __init__(
        self, start_url: str, item_type: str = "dict", overrides: dict[str, Any] | None = None,
        burst: list[dict[str, Any]] | None = None, rename: dict[str, str] | str | None = None,
        extra_starts: list[str] | None = None, start_hosts_only: bool = False, start_dont_filter: bool = False,
        request_headers: dict[str, str] | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # From the command line (scrapy crawl -a rename=...) it arrives as JSON.
        self.rename = json.loads(rename) if isinstance(rename, str) else (rename or {})
        self.start_url = start_url
        self.item_type = item_type
        self.overrides = overrides or {}
        self.burst = burst
        self.extra_starts = extra_starts or []
        self.start_dont_filter = start_dont_filter
        self.request_headers = request_headers
        self.hosts = {urlsplit(url).netloc for url in [start_url, *self.extra_starts]} if start_hosts_only else None

    async def start(self) -> Any:
        # dont_filter=False (unless asked): a resumed JOBDIR crawl must not re-fetch the start page.
        for url in [self.start_url, *self.extra_starts]:
            yield scrapy.Request(url, callback=self.parse, dont_filter=self.start_dont_filter,
                                 headers=self.request_headers)

    def parse(self, response: Response, **kwargs: Any) -> Any:
        if self.burst is not None:
            for burst_fields in self.burst:
                yield make_item(self.item_type, burst_fields)
            return
        fields: dict[str, Any] = {
            "url": response.url,
            "title": response.css("title::text").get(),
            "text": response.text,
        }
        path = urlsplit(response.url).path
        override = dict(self.overrides.get(path, {}))
        for name in override.pop("__drop__", []):
            fields.pop(name, None)
        fields.update(override)
        for old, new in self.rename.items():
            if old in fields:
                fields[new] = fields.pop(old)
        yield make_item(self.item_type, fields)
        for href in response.css("a::attr(href)").getall():
            request = response.follow(href, callback=self.parse, headers=self.request_headers)
            if self.hosts is None or urlsplit(request.url).netloc in self.hosts:
                yield request


class RecordChecks:
    """A Scrapy extension observing the pipeline's checked pages through the crawl's hooks, as a search index would
    (:class:`scrapy_neardup.crawl.hooks.CheckedObserver`): each call is appended as one JSON line to the file the
    ``TEST_CHECKS_FILE`` setting names. ``EXTENSIONS = {"neardup_testkit.RecordChecks": 0}``."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def from_crawler(cls, crawler: Any) -> RecordChecks:
        from scrapy_neardup.crawl.context import CrawlContext

        extension = cls(crawler.settings.get("TEST_CHECKS_FILE"))
        CrawlContext.of(crawler).hooks.observers.append(extension)
        return extension

    def page_checked(self, key: str, duplicate_of: str | None, *, representative_of: str | None = None,
                     canonical: str | None = None) -> None:
        record = {"key": key, "duplicate_of": duplicate_of, "representative_of": representative_of,
                  "canonical": canonical}
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


def read_checks(path: Path) -> list[dict[str, Any]]:
    """What :class:`RecordChecks` wrote."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- a backend that awaits between check and insert ------------------------------------------------------------


class SlowBackend(Backend):
    """Like the embedded backend, but awaits a short random sleep between its check and its insert, as a
    network backend does. Without the pipeline's lock, near-duplicates checked at the same time would all see
    "no match" and all be kept."""

    def __init__(self, num_perm: int, min_shared: int, tag: str) -> None:
        self.index = SketchIndex(num_perm, min_shared, tag)
        self.rng = random.Random(3)

    @classmethod
    def from_settings(cls, settings: Any, params: SketchParams) -> SlowBackend:
        return cls(params.num_perm, params.min_shared, params.tag)

    async def open(self) -> None:
        pass

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        from scrapy.utils.asyncio import sleep

        match = self.index.best_match(sketch)
        await sleep(self.rng.uniform(0.0005, 0.004))
        if match is None:
            self.index.add(key, sketch)
        return match

    async def close(self) -> None:
        pass


class SlowBackendPipeline(NearDuplicatePipeline):
    def make_backend(self) -> Any:
        return SlowBackend(self.config.num_perm, self.config.min_shared, self.sketcher.tag)


class UnlockedSlowBackendPipeline(SlowBackendPipeline):
    """Negative control: the same backend with the pipeline's lock bypassed."""

    async def _decide(self, key: str, sketch: Sketch) -> Decision:
        assert self.backend is not None
        (decision,) = await self.backend.check_and_add_many([(key, sketch)])
        return decision


class CopyingPipeline:
    """A user's pipeline that hands on a new object in place of each item (a plain dict copy), as pipelines that
    convert items do."""

    def process_item(self, item: Any, spider: Any = None) -> Any:
        return dict(item)


class OutageBackend(Backend):
    """An in-process store that goes down after ``NEARDUP_TEST_FAIL_AFTER`` pages checked, for
    ``NEARDUP_TEST_DOWN_FOR`` seconds (unset: for good): every check (and template load or save) then raises
    :class:`BackendError`, as a network store that cannot be reached does. Named by dotted path in
    ``NEARDUP_BACKEND`` (``neardup_testkit.OutageBackend``), so that a crawl subprocess builds it.

    ``outage`` counts the calls that failed; the crawl's stats get it as ``neardup/test_outage_calls``."""

    def __init__(self, num_perm: int, min_shared: int, tag: str, fail_after: int, down_for: float | None) -> None:
        self.index = SketchIndex(num_perm, min_shared, tag)
        self.fail_after = fail_after
        self.down_for = down_for
        self.pages = 0
        self.down_at: float | None = None
        self.outage = 0

    @classmethod
    def from_settings(cls, settings: Any, params: SketchParams) -> OutageBackend:
        down_for = settings.get("NEARDUP_TEST_DOWN_FOR")
        return cls(params.num_perm, params.min_shared, params.tag, int(settings.get("NEARDUP_TEST_FAIL_AFTER", 0)),
                   None if down_for in (None, "") else float(down_for))

    def _up(self) -> None:
        import time

        from scrapy_neardup.errors import BackendError

        if self.down_at is None and self.pages >= self.fail_after:
            self.down_at = time.monotonic()
        if self.down_at is not None and (self.down_for is None or time.monotonic() - self.down_at < self.down_for):
            self.outage += 1
            raise BackendError("the test store is down")

    async def open(self) -> None:
        pass

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        raise NotImplementedError  # check_and_add_many decides

    async def check_and_add_many(self, pages: Any) -> list[Decision]:
        self._up()
        self.pages += len(pages)
        return [self.index.check_key(key, sketch) for key, sketch in pages]

    async def load_template(self, host: str) -> Any:
        self._up()
        return await super().load_template(host)

    async def save_template(self, host: str, template: Any) -> Any:
        self._up()
        return await super().save_template(host, template)

    async def close(self) -> None:
        pass

    def stats(self) -> dict[str, int]:
        return {"test_outage_calls": self.outage}



class ColdTemplateLoadBackend(OutageBackend):
    """An in-process store that answers its first ``NEARDUP_TEST_SLOW_LOADS`` template loads after
    ``NEARDUP_TEST_LOAD_DELAY`` seconds and later ones at once, as a node does whose first requests are slow (a
    cold JVM, a TLS handshake): pages asking later get their answers first. Named by dotted path in
    ``NEARDUP_BACKEND`` (``neardup_testkit.ColdTemplateLoadBackend``); never goes down."""

    def __init__(self, num_perm: int, min_shared: int, tag: str, slow_loads: int, delay: float) -> None:
        super().__init__(num_perm, min_shared, tag, fail_after=10**9, down_for=None)
        self.slow_loads = slow_loads
        self.delay = delay
        self.loads = 0

    @classmethod
    def from_settings(cls, settings: Any, params: SketchParams) -> ColdTemplateLoadBackend:  # type: ignore[override]
        return cls(params.num_perm, params.min_shared, params.tag, int(settings.get("NEARDUP_TEST_SLOW_LOADS", 3)),
                   float(settings.get("NEARDUP_TEST_LOAD_DELAY", 2.0)))

    async def load_template(self, host: str) -> Any:
        from scrapy.utils.defer import maybe_deferred_to_future
        from twisted.internet import reactor
        from twisted.internet.task import deferLater

        self.loads += 1
        if self.loads <= self.slow_loads:
            await maybe_deferred_to_future(deferLater(reactor, self.delay, lambda: None))  # type: ignore[arg-type]
        return await super().load_template(host)

    def stats(self) -> dict[str, int]:
        return {"test_template_loads": self.loads}

# -- checks shared by the crawl tests (embedded and Elasticsearch) ----------------------------------------------


def path_of(url: str) -> str:
    return "/" + url.split("/", 3)[3] if url.count("/") >= 3 else url


def check_kinds_outcome(result: CrawlResult, site: NearDupSite, server: SiteServer) -> None:
    """Every distinct page kept, every copy dropped naming its original, exactly one soft 404 kept."""
    base = server.url
    kept = {path_of(u) for u in result.kept_urls}
    drops = {path_of(u): d for u, d in result.drops_by_url().items()}
    assert set(site.distinct) <= kept
    for copy, original in site.original_of.items():
        assert copy in drops, f"{copy} (a copy of {original}) was not dropped"
        assert drops[copy]["duplicate_of"] == base + original
        assert drops[copy]["reason"] == "NearDuplicateDropped"
        # The drop's evidence: the rule, shared positions of k, and a 95% interval holding the estimate.
        evidence, drop = drops[copy]["evidence"], drops[copy]
        assert evidence["rule"] == ("exact" if drop["exact"] else "near_duplicate")
        assert evidence["shared"] == round(drop["resemblance"] * evidence["k"])
        assert evidence["interval"][0] <= drop["resemblance"] <= evidence["interval"][1]
        low, high = evidence["interval"]
        assert f"positions shared, r in [{low:.3f}, {high:.3f}]" in drop["message"]
    kept_404 = [p for p in site.soft_404 if p in kept]
    assert len(kept_404) == 1, kept_404
    for path in set(site.soft_404) - set(kept_404):
        assert drops[path]["duplicate_of"] == base + kept_404[0] and drops[path]["exact"]
    assert kept == set(site.distinct) | set(kept_404)
    # Every drop names a page that was kept (and thus is in the output).
    assert {d["duplicate_of"] for d in result.dropped} <= set(result.kept_urls)


def burst_items(groups: int = 3, per_group: int = 25, words: int = 300) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Interleaved near-duplicate variants of ``groups`` articles of ``words`` words (each variant appends a
    distinct word)."""
    items, group_of = [], {}
    bases = [article_words(500 + g, words) for g in range(groups)]
    for i, g in itertools.product(range(per_group), range(groups)):
        url = f"http://variants.test/g{g}/v{i}"
        items.append({"url": url, "title": f"g{g} v{i}", "text": " ".join(bases[g] + [f"variant{i}"])})
        group_of[url] = g
    return items, group_of


def check_burst_precondition(items: list[dict[str, Any]], group_of: dict[str, int]) -> None:
    """Within a group every pair is a near-duplicate, across groups none is: "exactly one kept per group"
    is then the only correct outcome."""
    sketcher = Sketcher()
    sketches = dict(zip([i["url"] for i in items], sketcher.sketch_many([i["text"] for i in items]), strict=True))
    urls = list(sketches)
    for a, b in itertools.combinations(urls[:12], 2):
        shared = sketches[a].shared_positions(sketches[b])
        assert (shared >= 107) == (group_of[a] == group_of[b]), (a, b, shared)


def check_one_kept_per_group(result: CrawlResult, group_of: dict[str, int], groups: int) -> None:
    kept = result.kept_urls
    assert sorted(group_of[u] for u in kept) == list(range(groups)), kept
    for drop in result.dropped:
        assert drop["duplicate_of"] in kept
        assert group_of[drop["duplicate_of"]] == group_of[drop["item"]["url"]]
    assert len(kept) + len(result.dropped) == len(group_of)
