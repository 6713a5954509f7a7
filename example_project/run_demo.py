#!/usr/bin/env python
"""Serve the bundled demo site on 127.0.0.1, crawl it with the near-duplicate pipeline, print what happened.

    pip install -e . && python example_project/run_demo.py

The demo site (``demo_site/``, static HTML) is a small newspaper with five articles and, for some of them, a
mirror (another header and navigation), a printer-friendly version, a lightly edited copy, and a copy
syndicated by a partner with a copyright notice; unknown URLs get a "page not found" template with status 200
(soft 404s), and unknown URLs under ``/news/`` a "story not found" one. The whole site is also served on a
second port, a mirror host linked from the About page: once enough of its pages proved to be copies, its
remaining requests are skipped, and the report says how many. The crawl uses this project's settings
(``neardup_demo/settings.py``), so environment variables
such as ``NEARDUP_BACKEND=elasticsearch NEARDUP_ES_URL=...`` or ``NEARDUP_ACTION=mark`` apply.

Options: ``--serve`` only serves the site (until Ctrl-C) so that you can run ``scrapy crawl demo`` yourself;
``--port`` picks the port (default: a free one).

Each run starts afresh, so that running it twice gives the same report: the site is served on a new port each
time (its pages are new URLs to a crawler), and a store kept from an earlier run would hold them under the old
port and drop every page as a copy. The embedded store keeps nothing between runs here (no ``JOBDIR``); with
``NEARDUP_BACKEND=elasticsearch`` the demo deletes its store index (``NEARDUP_ES_INDEX``, default
``neardup-demo``, and the sibling indices the backend keeps next to it) before crawling, and says so.

``--search`` goes on from crawl to search results: the crawl also writes its pages into a search index
(``NEARDUP_SEARCH_INDEX``, default ``neardup-demo-pages``, emptied first) on the node at ``NEARDUP_ES_URL``, or on a
local node it starts with the launcher (``neardup es start``; ``pip install -e ./devnode``); then it prints a
search with near-duplicates collapsed (``--query``) and serves a search page over the index until Ctrl-C
(``search_page.py``; ``--no-page``: print and exit).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import mimetypes
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

PROJECT_DIR = Path(__file__).resolve().parent
SITE_DIR = PROJECT_DIR / "demo_site"
SOFT_404_PAGE = "404.html"
#: Placeholder in the site's links, replaced by the mirror host's ``127.0.0.1:port`` when served.
MIRROR_PLACEHOLDER = b"MIRROR-HOST"
SPIDER = "demo"


# -- the demo site ------------------------------------------------------------------------------------------------


class DemoSiteHandler(BaseHTTPRequestHandler):
    """Static files from ``demo_site/``; any unknown path gets the "page not found" page of its section
    (``<section>/404.html``, else ``/404.html``) with status 200, as misconfigured sites do (a soft 404)."""

    #: ``127.0.0.1:port`` of the mirror host, put in place of MIRROR_PLACEHOLDER in the pages.
    mirror_host = b""

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._respond(send_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._respond(send_body=False)

    def _respond(self, send_body: bool) -> None:
        path = self._resolve(unquote(urlsplit(self.path).path))
        data = path.read_bytes().replace(MIRROR_PLACEHOLDER, self.mirror_host)
        content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if content_type.startswith("text/"):
            content_type += "; charset=utf-8"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if send_body:
            self.wfile.write(data)

    @staticmethod
    def _resolve(url_path: str) -> Path:
        relative = url_path.lstrip("/")
        if relative == "" or relative.endswith("/"):
            relative += "index.html"
        candidate = (SITE_DIR / relative).resolve()
        # Refuse anything outside the site directory (../ tricks) as well as unknown paths.
        if SITE_DIR.resolve() in candidate.parents and candidate.is_file():
            return candidate
        section = SITE_DIR / relative.split("/")[0] / SOFT_404_PAGE
        return section if "/" in relative and section.is_file() else SITE_DIR / SOFT_404_PAGE

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the report is the output


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # the default (5) drops connections when Scrapy opens many at once


def start_site(port: int = 0) -> ThreadingHTTPServer:
    """Serve the demo site on 127.0.0.1 (``port=0``: a free port) from a background thread."""
    server = _Server(("127.0.0.1", port), DemoSiteHandler)
    threading.Thread(target=server.serve_forever, name="demo-site", daemon=True).start()
    return server


def start_sites(port: int = 0) -> tuple[ThreadingHTTPServer, ThreadingHTTPServer]:
    """The site and its mirror host: the same files on a second port of 127.0.0.1 (another host to a crawler,
    which tells hosts by scheme, name and port), linked from the site's About page."""
    site, mirror = start_site(port), start_site(0)
    DemoSiteHandler.mirror_host = f"127.0.0.1:{mirror.server_port}".encode()
    return site, mirror


def site_url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_port}/"


# -- the crawl ----------------------------------------------------------------------------------------------------


@dataclass
class CrawlReport:
    """What the pipeline decided about each page, plus Scrapy's stats."""

    kept: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    mirrors: list[str] = field(default_factory=list)  # the mirror-host decisions, as logged
    failed: bool = False
    errors: list[str] = field(default_factory=list)


class _Collect(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.INFO)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def crawl(start_url: str) -> CrawlReport:
    """Crawl ``start_url`` with the example project's settings (quiet logging) and collect the outcome."""
    sys.path.insert(0, str(PROJECT_DIR))
    # Set explicitly: a scrapy.cfg in the current directory must not pick another project's settings.
    os.environ["SCRAPY_SETTINGS_MODULE"] = "neardup_demo.settings"
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess
    from scrapy.utils.project import get_project_settings

    settings = get_project_settings()
    settings.set("LOG_LEVEL", "ERROR", priority="cmdline")
    # No listening ports besides the demo site's.
    settings.set("TELNETCONSOLE_ENABLED", False, priority="cmdline")
    settings.set("REMOTE_CONTROL_ENABLED", False, priority="cmdline")
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(SPIDER)
    report = CrawlReport()

    def scraped(item: Any, **kwargs: Any) -> None:
        report.kept.append(dict(item))

    def dropped(item: Any, exception: BaseException, **kwargs: Any) -> None:
        match = getattr(exception, "match", None)
        soft404 = getattr(exception, "soft404", None)  # Soft404Dropped: no kept page, the probe it matches
        report.dropped.append({
            **dict(item),
            "duplicate_of": match.key if match else None,
            "resemblance": match.resemblance if match else soft404.resemblance if soft404 else None,
            "exact": match.exact if match else False,
            "soft404": soft404.probe_url if soft404 else None,
            "reason": str(exception),
        })

    crawler.signals.connect(scraped, signal=signals.item_scraped, weak=False)
    crawler.signals.connect(dropped, signal=signals.item_dropped, weak=False)
    # The mirror decision is logged at INFO; the demo logs errors only, so collect that one logger's lines.
    mirrors_log = logging.getLogger("scrapy_neardup.crawl.mirrors")
    mirrors_log.setLevel(logging.INFO)
    mirrors_log.addHandler(_Collect(report.mirrors))
    # Keep the crawl's outcome: a start-up failure (a wrong setting, an unreachable backend) is reported by
    # this script, in order, instead of being logged by Twisted whenever the failed Deferred is collected.
    outcome = process.crawl(crawler, start_url=start_url)
    outcome.addErrback(lambda failure: report.errors.append(failure.getErrorMessage()))
    process.start()
    stats = getattr(crawler, "_stats", None)  # None when the crawl failed before it started
    report.stats = stats.get_stats() if stats is not None else {}
    report.failed = bool(process.bootstrap_failed)
    return report


# -- the report ---------------------------------------------------------------------------------------------------


def render(report: CrawlReport, start_url: str) -> str:
    """A readable report: kept pages, dropped pages with the kept page each duplicates, and the stats."""
    base = start_url.rstrip("/")

    def short(url: str | None) -> str:
        return url[len(base):] or "/" if url and url.startswith(base) else str(url)

    def short_probe(url: str) -> str:  # the probe's random name is long; its section is what matters
        return re.sub(r"neardup-soft404-probe-[0-9a-f]+", "neardup-soft404-probe-...", short(url))

    marked = [item for item in report.kept if item.get("neardup") and "duplicate_of" in item["neardup"]]
    soft404s = [(d["url"], d["soft404"], d["resemblance"]) for d in report.dropped if d.get("soft404")]
    soft404s += [(m["url"], m["neardup"]["soft404"], m["neardup"]["resemblance"])
                 for m in report.kept if m.get("neardup") and "soft404" in m["neardup"]]
    dropped = [d for d in report.dropped if not d.get("soft404")]
    kept = [item for item in report.kept if not item.get("neardup")]
    lines = [f"Crawled the demo site at {start_url}", ""]
    lines.append(f"KEPT {len(kept)} pages:")
    for item in sorted(kept, key=lambda i: i["url"]):
        lines.append(f"  {short(item['url']):52} {item.get('title', '')}")
    duplicates = [
        (d["url"], d["duplicate_of"], d["resemblance"], d["exact"]) for d in dropped
    ] + [
        (m["url"], m["neardup"]["duplicate_of"], m["neardup"]["resemblance"], m["neardup"]["exact"])
        for m in marked
    ]
    verb = "MARKED" if marked and not dropped else "DROPPED"
    lines += ["", f"{verb} {len(duplicates)} near-duplicates (page -> the kept page it duplicates):"]
    for url, original, resemblance, exact in sorted(duplicates, key=lambda d: (str(d[1]), d[0])):
        note = "  (exact copy of the text)" if exact else ""
        lines.append(f"  {short(url):52} -> {short(original):42} resemblance {resemblance:.3f}{note}")
    lines += ["", f"SOFT 404s {verb} {len(soft404s)} (page -> the probe URL whose \"not found\" answer it matches):"]
    for url, probe, resemblance in sorted(soft404s):
        lines.append(f"  {short(url):52} -> {short_probe(probe):42} resemblance {resemblance:.3f}")
    skipped = int(report.stats.get("neardup/mirror_requests_skipped", 0))
    requests = int(report.stats.get("downloader/request_count", 0))
    lines += ["", f"MIRROR HOSTS: {skipped} requests saved, {requests} downloaded:"]
    lines += [f"  {line}" for line in report.mirrors]
    lines += ["", "STATS:"]
    for name in sorted(report.stats):
        if name.startswith(("neardup/", "item_", "downloader/request_count", "finish_reason")):
            lines.append(f"  {name:52} {report.stats[name]}")
    return "\n".join(lines)


# -- from crawl to search results ------------------------------------------------------------------------------

SEARCH_INDEX = "neardup-demo-pages"


def search_node() -> str:
    """``NEARDUP_ES_URL``, else the URL of a local node started (or found running) by the launcher."""
    url = os.environ.get("NEARDUP_ES_URL")
    if url:
        return url
    print("Starting a local node (neardup es start; the first run downloads it) ...", file=sys.stderr, flush=True)
    started = subprocess.run([sys.executable, "-m", "scrapy_neardup", "es", "start"], capture_output=True, text=True)
    if started.returncode != 0 or not started.stdout.strip():
        raise RuntimeError(f"cannot start a local node: {(started.stderr or started.stdout).strip()}")
    return started.stdout.strip().splitlines()[-1]


def prepare_search(url: str) -> tuple[Any, str]:
    """A client of the node, and the search index the crawl writes to, emptied (the demo starts afresh)."""
    from es_integration.client import ConnectionSettings, make_client

    index = os.environ.get("NEARDUP_SEARCH_INDEX") or SEARCH_INDEX
    client = make_client(ConnectionSettings.create(url))
    client.indices.delete(index=index, ignore_unavailable=True)
    os.environ.update(NEARDUP_ES_URL=url, NEARDUP_SEARCH_INDEX=index)
    return client, index


def render_search(client: Any, index: str, query: str) -> str:
    """The collapsed search the search page shows, as text."""
    from search_page import search_body

    from es_integration.collapse import search_with_collapse

    found = search_with_collapse(client, index, search_body(query))
    lines = [f'SEARCH "{query}" in {index}: {found.total} pages match, {len(found.hits)} shown, near-duplicates '
             "collapsed:"]
    for rank, hit in enumerate(found.hits, start=1):
        source = hit.source or {}
        omitted = f"  ({hit.omitted} similar omitted)" if hit.omitted else ""
        lines.append(f"  {rank}. {source.get('title')}\n     {source.get('url')}{omitted}")
    return "\n".join(lines)


def reset_es_store() -> str | None:
    """With ``NEARDUP_BACKEND=elasticsearch``: delete the demo's store index and its siblings (mirror counts, host
    templates, arrival order) so that this run starts afresh; returns a line saying what was deleted."""
    sys.path.insert(0, str(PROJECT_DIR))
    os.environ["SCRAPY_SETTINGS_MODULE"] = "neardup_demo.settings"
    from scrapy.utils.project import get_project_settings

    settings = get_project_settings()
    if settings.get("NEARDUP_BACKEND") != "elasticsearch" or not settings.get("NEARDUP_ES_URL"):
        return None  # the embedded store: nothing is kept without JOBDIR; a missing URL: the crawl says so
    from es_integration.backend.sequencer import sequencer_index
    from es_integration.client import ConnectionSettings, make_client
    from es_integration.host_template_index import TEMPLATES_SUFFIX
    from es_integration.hosts import HOSTS_SUFFIX

    index = settings.get("NEARDUP_ES_INDEX")
    client = make_client(ConnectionSettings.create(
        settings["NEARDUP_ES_URL"], api_key=settings.get("NEARDUP_ES_API_KEY"),
        username=settings.get("NEARDUP_ES_USERNAME"), password=settings.get("NEARDUP_ES_PASSWORD"),
        ca_certs=settings.get("NEARDUP_ES_CA_CERTS")))
    try:
        for name in (index, index + HOSTS_SUFFIX, index + TEMPLATES_SUFFIX, sequencer_index(index)):
            client.indices.delete(index=name, ignore_unavailable=True)
    finally:
        client.close()
    return f"The demo starts afresh: deleted its store index {index} (and its siblings) on {settings['NEARDUP_ES_URL']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", action="store_true", help="only serve the demo site, until Ctrl-C")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free port)")
    parser.add_argument("--search", action="store_true",
                        help="also write the pages into a search index, then search it collapsed (see above)")
    parser.add_argument("--query", default="harbor bridge", help="--search: what to search (default: %(default)s)")
    parser.add_argument("--no-page", action="store_true", help="--search: print the search, serve no page")
    parser.add_argument("--search-port", type=int, default=0, help="--search: the page's port (default: a free one)")
    args = parser.parse_args(argv)
    client, index = None, ""
    if args.search:
        try:
            client, index = prepare_search(search_node())
        except Exception as exc:  # noqa: BLE001 - the demo says what went wrong in one line
            print(f"The demo cannot search: {exc}", file=sys.stderr)
            return 1
    if not args.serve:
        try:
            reset = reset_es_store()
        except Exception as exc:  # noqa: BLE001 - the demo says what went wrong in one line
            print(f"The demo cannot reset its Elasticsearch store: {exc}", file=sys.stderr)
            return 1
        if reset:
            print(reset, file=sys.stderr, flush=True)
    server, mirror = start_sites(args.port)
    url = site_url(server)
    try:
        if args.serve:
            print(f"Serving the demo site at {url} (Ctrl-C to stop). In another shell:\n"
                  f"  cd {PROJECT_DIR} && scrapy crawl {SPIDER} -a start_url={url} -O pages.jsonl", flush=True)
            threading.Event().wait()
        report = crawl(url)
    except KeyboardInterrupt:
        return 0
    finally:
        for running in (server, mirror):
            running.shutdown()
            running.server_close()
    if report.failed or not (report.kept or report.dropped):
        print("The demo crawl failed:", *(report.errors or ["see the log above"]), sep="\n  ", file=sys.stderr)
        return 1
    print(render(report, url))
    if client is not None:
        return show_search(client, index, args)
    return 0


def show_search(client: Any, index: str, args: argparse.Namespace) -> int:
    """Print the collapsed search, then serve the search page (unless ``--no-page``) until Ctrl-C."""
    from search_page import serve

    print("\n" + render_search(client, index, args.query), flush=True)
    if args.no_page:
        return 0
    # Scrapy's crawl left its own SIGINT/SIGTERM handlers (they stop a reactor that has stopped): Ctrl-C is ours again.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    page = serve(client, index, args.search_port)
    query = "?" + urllib.parse.urlencode({"q": args.query})
    print(f"\nSearch page: http://127.0.0.1:{page.server_port}/{query} (Ctrl-C to stop)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
