"""Crawl overhead of the near-duplicate pipeline (target: at most 5% more wall time).

Generates a static site (articles, plus near-duplicate copies of some of them, linked from listing pages),
serves it with nginx on 127.0.0.1 (a fast static server, so the crawler and not the server is the
bottleneck), and crawls it with Scrapy at CONCURRENT_REQUESTS=32 without the pipeline, with it (default
settings: sketching in the worker process), and with it sketching in the crawl's process (NEARDUP_WORKER=False),
alternating runs. Each crawl runs in its own process (a fresh Twisted reactor). Prints the median wall times and
the overheads, and writes ``benchmarks/results/crawl.json``. With ``--es-url`` it also crawls with the pipeline
writing every item into a search index on that node (``NEARDUP_SEARCH_INDEX``, duplicates too; the index emptied
before each run) and reports that cost against the pipeline alone.

    python benchmarks/bench_crawl.py [--pages 4000] [--rounds 3] [--quick] [--es-url URL]

The add-on as a user meets it (``--addon-site DIR``, e.g. the HTML of Debian's python3.11-doc): a plain
``CrawlSpider`` over the pages of DIR served by nginx, items ``{"url", "text": response.text}``, Scrapy's default
settings, crawled without and with ``ADDONS = {"scrapy_neardup.NearDuplicateAddon": 0}`` (its defaults), runs
alternated; on one host, and on three (the site, an identical mirror, a copy whose footers differ, on 127.0.0.1,
127.0.0.2 and 127.0.0.3). Prints the median wall time and the median peak memory (``VmHWM`` of the crawl's
process; the sketch worker's beside it) of each, and their ratios (targets: at most 1.10x the wall time and 1.5x
the peak memory), with the ratio of the CPU time of the crawl's process (the crawl is CPU-bound: a steadier
figure than wall time on a machine whose speed drifts); writes ``benchmarks/results/addon-crawl.json``.

    python benchmarks/bench_crawl.py --addon-site DIR [--rounds 3] [--max-pages N]

With ``--levers`` it crawls one host only: without the add-on, with it, and with each setting a user can turn off
(``LEVERS``) alone, alternated; prints each median and its ratio to the crawl without the add-on; writes
``benchmarks/results/addon-levers.json``.

nginx comes from Debian (``apt-get install -y nginx-light``); run as root the benchmark installs it if missing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
LINKS_PER_LISTING = 100


def build_site(root: Path, pages: int, seed: int = 7) -> int:
    """Write ``pages`` article pages (a fifth of them near-duplicates of others) and listing pages."""
    rng = random.Random(seed)
    vocabulary = [f"{rng.choice('bcdfghjklmnpqrstvwz')}{rng.choice('aeiou')}{i:x}" for i in range(20_000)]
    originals: list[list[str]] = []
    names = []
    for i in range(pages):
        if originals and rng.random() < 0.2:
            words = list(rng.choice(originals))
            for _ in range(3):  # a lightly edited copy
                words[rng.randrange(len(words))] = rng.choice(vocabulary)
        else:
            words = rng.choices(vocabulary, k=rng.randint(600, 1400))
            originals.append(words)
        name = f"p{i}.html"
        paragraphs = "".join(f"<p>{' '.join(words[j:j + 60])}</p>" for j in range(0, len(words), 60))
        (root / name).write_text(
            f"<html><head><title>Page {i}</title></head><body><nav><a href='/'>home</a></nav>"
            f"<article>{paragraphs}</article></body></html>"
        )
        names.append(name)
    listings = [names[i : i + LINKS_PER_LISTING] for i in range(0, len(names), LINKS_PER_LISTING)]
    for n, chunk in enumerate(listings):
        links = "".join(f"<li><a href='/{x}'>{x}</a></li>" for x in chunk)
        (root / f"list{n}.html").write_text(f"<html><body><ul>{links}</ul></body></html>")
    index = "".join(f"<li><a href='/list{n}.html'>list {n}</a></li>" for n in range(len(listings)))
    (root / "index.html").write_text(f"<html><body><ul>{index}</ul></body></html>")
    return pages + len(listings) + 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_nginx() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found:
        return found
    if os.geteuid() != 0:
        sys.exit("nginx is needed: apt-get install -y nginx-light")
    subprocess.run(["apt-get", "install", "-y", "-qq", "nginx-light"], check=True, stdout=subprocess.DEVNULL)
    return "/usr/sbin/nginx"


def start_nginx(site: Path, work: Path, port: int, host: str = "127.0.0.1") -> subprocess.Popen[bytes]:
    conf = work / "nginx.conf"
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf.write_text(
        f"{user}worker_processes 1;\ndaemon off;\npid {work}/nginx.pid;\nerror_log {work}/error.log;\n"
        "events { worker_connections 1024; }\n"
        "http { access_log off; sendfile on; keepalive_requests 100000;\n"
        f"  client_body_temp_path {work}/body; proxy_temp_path {work}/proxy; fastcgi_temp_path {work}/fcgi;\n"
        f"  uwsgi_temp_path {work}/uwsgi; scgi_temp_path {work}/scgi;\n"
        f"  server {{ listen {host}:{port}; root {site}; default_type text/html; }} }}\n"
    )
    process = subprocess.Popen([ensure_nginx(), "-c", str(conf), "-p", str(work)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return process
        time.sleep(0.05)
    process.kill()
    sys.exit(f"nginx did not start; see {work}/error.log")


MODES = ("without", "noop", "with", "in_process")
#: The search index of the ``search`` mode (``--es-url``).
SEARCH_INDEX = "neardup-bench-crawl"


class NoopPipeline:
    """An async pipeline that returns every item: what Scrapy itself charges for one more pipeline stage."""

    async def process_item(self, item: object, spider: object = None) -> object:
        return item


def crawl(url: str, mode: str, expected_pages: int) -> dict[str, float]:
    """One crawl in a fresh process; returns its wall time and item counts."""
    if mode == "search":  # a fresh index for each run
        from es_integration.client import ConnectionSettings, make_client

        client = make_client(ConnectionSettings.create(os.environ["NEARDUP_ES_URL"]))
        client.indices.delete(index=SEARCH_INDEX, ignore_unavailable=True)
        client.close()
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, __file__, "--run-crawl", url, "--mode", mode],
        capture_output=True, text=True, check=True,
    )
    wall = time.perf_counter() - started
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    if stats["responses"] < expected_pages:
        sys.exit(f"crawl fetched {stats['responses']} of {expected_pages} pages: {result.stderr[-2000:]}")
    return {"wall_s": wall, "crawl_s": stats["crawl_s"], **stats}


def site_spider(url: str) -> type:
    """The benchmark spider over :func:`build_site`'s site at ``url``: every page under ``/p`` is an item (its
    HTML as ``text``), every link is followed."""
    import scrapy

    class SiteSpider(scrapy.Spider):
        name = "bench"
        start_urls = [url]

        def parse(self, response):  # type: ignore[no-untyped-def]
            if "/p" in response.url:
                yield {"url": response.url, "text": response.text}
            yield from response.follow_all(css="a", callback=self.parse)

    return SiteSpider


def run_crawl(url: str, mode: str) -> None:
    """Child process: crawl the site and print stats as one JSON line."""
    from scrapy.crawler import CrawlerProcess

    settings = {
        "CONCURRENT_REQUESTS": 32,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 32,
        "LOG_LEVEL": "ERROR",
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "ITEM_PIPELINES": {
            "without": {}, "noop": {"bench_crawl.NoopPipeline": 300},
        }.get(mode, {"scrapy_neardup.NearDuplicatePipeline": 300}),
        "NEARDUP_WORKER": mode != "in_process",
    }
    if mode == "search":
        settings["ITEM_PIPELINES"] = {"scrapy_neardup.NearDuplicatePipeline": 300,
                                      "scrapy_neardup.SearchIndexPipeline": 900}
        settings.update(NEARDUP_SEARCH_INDEX=SEARCH_INDEX, NEARDUP_SEARCH_DUPLICATES="index",
                        NEARDUP_ES_URL=os.environ["NEARDUP_ES_URL"])
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(site_spider(url))
    started = time.perf_counter()
    process.crawl(crawler)
    process.start()
    elapsed = time.perf_counter() - started
    stats = crawler.stats.get_stats()
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({
        "crawl_s": elapsed,
        "cpu_s": own.ru_utime + own.ru_stime,  # the crawl's process: what the reactor thread (mostly) spent
        "worker_cpu_s": children.ru_utime + children.ru_stime,  # the sketch worker, once it has exited
        "responses": stats.get("response_received_count", 0),
        "items": stats.get("item_scraped_count", 0),
        "dropped": stats.get("item_dropped_count", 0),
        "sketched_in_worker": stats.get("neardup/sketched_in_worker", 0),
        "search_indexed": stats.get("neardup/search_indexed", 0),
        "search_failed": stats.get("neardup/search_failed", 0),
    }))


def addon_spider(urls: list[str], max_pages: int | None) -> type:
    """A plain CrawlSpider over the hosts of ``urls``: every page an item with its HTML."""
    from scrapy.linkextractors import LinkExtractor
    from scrapy.spiders import CrawlSpider, Rule

    hosts = sorted({u.split("/")[2].split(":")[0] for u in urls})

    class DocSpider(CrawlSpider):
        name = "docs"
        allowed_domains = hosts
        start_urls = urls
        rules = (Rule(LinkExtractor(), callback="parse_item", follow=True),)
        custom_settings = {"CLOSESPIDER_PAGECOUNT": max_pages or 0}

        def parse_start_url(self, response):  # type: ignore[no-untyped-def]
            return self.parse_item(response)

        def parse_item(self, response):  # type: ignore[no-untyped-def]
            yield {"url": response.url, "text": response.text}

    return DocSpider


def peak_rss_mb() -> float:
    """The process's peak resident memory (``VmHWM``), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_addon_crawl(urls: list[str], mode: str, max_pages: int | None, extra: dict[str, object] | None = None,
                    ) -> None:
    """Child process: the add-on crawl (``mode`` "with" or "without" the add-on; ``extra``: more settings); stats
    as one JSON line."""
    from scrapy.crawler import CrawlerProcess

    settings: dict[str, object] = {"LOG_LEVEL": "ERROR", "TELNETCONSOLE_ENABLED": False, **(extra or {})}
    if mode == "with":
        settings["ADDONS"] = {"scrapy_neardup.NearDuplicateAddon": 0}
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(addon_spider(urls, max_pages))
    started, cpu_started = time.perf_counter(), time.process_time()
    process.crawl(crawler)
    process.start()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    stats = crawler.stats.get_stats()
    print(json.dumps({
        "crawl_s": elapsed, "cpu_s": cpu, "peak_rss_mb": peak_rss_mb(),
        "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "responses": stats.get("response_received_count", 0), "items": stats.get("item_scraped_count", 0),
        "dropped": stats.get("item_dropped_count", 0),
        "template_pages_held": stats.get("neardup/template_pages_held", 0),
        "copy_waits": stats.get("neardup/copy_waits", 0),
    }))


def changed_footers(site: Path, copy: Path) -> None:
    """``site`` copied to ``copy`` with a sentence added to every page's footer (or end of body)."""
    shutil.copytree(site, copy, symlinks=True)
    for page in copy.rglob("*.html"):
        html = page.read_text(encoding="utf-8", errors="replace")
        marker = '<div class="footer">' if '<div class="footer">' in html else "</body>"
        note = "Served from a copy of this documentation, kept in sync every night by the mirror team."
        html = html.replace(marker, f"{marker}<p>{note}</p>" if marker != "</body>" else f"<p>{note}</p></body>", 1)
        page.write_text(html, encoding="utf-8")


Runs = dict[str, list[dict[str, float]]]


def alternated_crawls(urls: list[str], variants: dict[str, tuple[str, dict[str, object]]], rounds: int,
                      max_pages: int | None = None) -> Runs:
    """Each variant (``(mode, add-on settings)``: ``"without"`` or ``"with"`` the add-on) crawls ``urls`` once per
    round, in a process of its own, the variants taking turns within each round (so that load on the machine falls
    on all alike); each run's figures, by variant."""
    runs: Runs = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (mode, settings) in variants.items():
            result = subprocess.run(
                [sys.executable, __file__, "--run-addon-crawl", ",".join(urls), "--mode", mode,
                 "--addon-settings", json.dumps(settings), *(["--max-pages", str(max_pages)] if max_pages else [])],
                capture_output=True, text=True, check=True)
            runs[name].append(json.loads(result.stdout.strip().splitlines()[-1]))
    return runs


def medians(runs: Runs, field: str) -> dict[str, float]:
    """The median of one figure of the runs, by variant."""
    return {name: statistics.median(run[field] for run in variant) for name, variant in runs.items()}


def addon_crawls(site: Path, rounds: int, max_pages: int | None) -> dict[str, object]:
    """Without and with the add-on, alternated, on one host and on three (see the module doc)."""
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="neardup-addon-bench-") as tmp:
        os.chmod(tmp, 0o755)
        footers = Path(tmp) / "footers"
        changed_footers(site, footers)
        servers = []
        urls = []
        try:
            for n, root in enumerate((site, site, footers)):
                work = Path(tmp) / f"nginx{n}"
                work.mkdir()
                port = free_port()
                servers.append(start_nginx(root, work, port, host=f"127.0.0.{n + 1}"))
                urls.append(f"http://127.0.0.{n + 1}:{port}/index.html")
            for name, hosts in (("1 host", urls[:1]), ("3 hosts", urls)):
                runs = alternated_crawls(hosts, {"without": ("without", {}), "with": ("with", {})}, rounds, max_pages)
                wall, rss, cpu = medians(runs, "crawl_s"), medians(runs, "peak_rss_mb"), medians(runs, "cpu_s")
                worker = statistics.median(r["worker_peak_rss_mb"] for r in runs["with"])
                items = {m: v[-1]["items"] for m, v in runs.items()}
                print(f"{name}: without {wall['without']:.2f} s, {rss['without']:.0f} MB; with the add-on "
                      f"{wall['with']:.2f} s, {rss['with']:.0f} MB (sketch worker {worker:.0f} MB); "
                      f"wall {wall['with'] / wall['without']:.2f}x (target <= 1.10x), crawl process CPU "
                      f"{cpu['with'] / cpu['without']:.2f}x, peak memory "
                      f"{rss['with'] / rss['without']:.2f}x (target <= 1.5x); items {items['without']} / "
                      f"{items['with']} kept, held for templates {runs['with'][-1]['template_pages_held']}, "
                      f"copy waits {runs['with'][-1]['copy_waits']}")
                results[name] = {"median_crawl_s": wall, "median_cpu_s": cpu, "median_peak_rss_mb": rss,
                                 "worker_peak_rss_mb": worker, "wall_ratio": wall["with"] / wall["without"],
                                 "cpu_ratio": cpu["with"] / cpu["without"],
                                 "memory_ratio": rss["with"] / rss["without"], "runs": runs}
        finally:
            for server in servers:
                server.terminate()
                server.wait()
    return results


#: What a user can turn off (docs/addon.md), each measured alone on one host with ``--levers``.
LEVERS: dict[str, dict[str, object]] = {
    "NEARDUP_WORKER = False": {"NEARDUP_WORKER": False},
    "NEARDUP_SOFT404_ENABLED = False": {"NEARDUP_SOFT404_ENABLED": False},
    "NEARDUP_CANONICAL = False": {"NEARDUP_CANONICAL": False},
    "NEARDUP_FREE_PARSE_TREES = False": {"NEARDUP_FREE_PARSE_TREES": False},
    "NEARDUP_COPY_WAIT = 0": {"NEARDUP_COPY_WAIT": 0},
    "NEARDUP_MIRRORS_ENABLED = False, NEARDUP_COPY_WAIT = 0": {"NEARDUP_MIRRORS_ENABLED": False,
                                                                "NEARDUP_COPY_WAIT": 0},
}


def addon_levers(site: Path, rounds: int) -> dict[str, object]:
    """One host: without the add-on, with it, and with each of :data:`LEVERS`, alternated; medians and ratios to
    the crawl without the add-on."""
    variants: dict[str, tuple[str, dict[str, object]]] = {
        "without": ("without", {}), "with (defaults)": ("with", {}),
        **{name: ("with", settings) for name, settings in LEVERS.items()},
    }
    with tempfile.TemporaryDirectory(prefix="neardup-addon-levers-") as tmp:
        os.chmod(tmp, 0o755)
        port = free_port()
        server = start_nginx(site, Path(tmp), port)
        try:
            runs = alternated_crawls([f"http://127.0.0.1:{port}/index.html"], variants, rounds)
        finally:
            server.terminate()
            server.wait()
    wall, rss, cpu = medians(runs, "crawl_s"), medians(runs, "peak_rss_mb"), medians(runs, "cpu_s")
    for name in variants:
        print(f"{name:58s} {wall[name]:6.2f} s {wall[name] / wall['without']:5.2f}x  "
              f"CPU {cpu[name] / cpu['without']:5.2f}x  "
              f"{rss[name]:5.0f} MB {rss[name] / rss['without']:5.2f}x  items {runs[name][-1]['items']}")
    return {"median_crawl_s": wall, "median_cpu_s": cpu, "median_peak_rss_mb": rss,
            "wall_ratio": {name: wall[name] / wall["without"] for name in variants},
            "cpu_ratio": {name: cpu[name] / cpu["without"] for name in variants},
            "memory_ratio": {name: rss[name] / rss["without"] for name in variants}, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="400 pages, one round")
    parser.add_argument("--run-crawl", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=(*MODES, "search"), default="with", help=argparse.SUPPRESS)
    parser.add_argument("--es-url", help="also crawl writing every item into a search index on this node")
    parser.add_argument("--addon-site", type=Path, help="measure the add-on crawling the HTML pages of this directory")
    parser.add_argument("--max-pages", type=int, help="with --addon-site: stop each crawl after this many pages")
    parser.add_argument("--levers", action="store_true",
                        help="with --addon-site: one host, the add-on with each setting a user can turn off")
    parser.add_argument("--run-addon-crawl", metavar="URLS", help=argparse.SUPPRESS)
    parser.add_argument("--addon-settings", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_addon_crawl:
        run_addon_crawl(args.run_addon_crawl.split(","), args.mode, args.max_pages, json.loads(args.addon_settings))
        return
    if args.addon_site and args.levers:
        report = addon_levers(args.addon_site.resolve(), args.rounds)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "addon-levers.json").write_text(json.dumps({"site": str(args.addon_site), "rounds": args.rounds,
                                                                **report}, indent=2))
        return
    if args.addon_site:
        report = addon_crawls(args.addon_site.resolve(), args.rounds, args.max_pages)
        RESULTS.mkdir(exist_ok=True)
        name = "addon-crawl-quick.json" if args.max_pages else "addon-crawl.json"
        (RESULTS / name).write_text(json.dumps({"site": str(args.addon_site), "rounds": args.rounds,
                                                "max_pages": args.max_pages, **report}, indent=2))
        return
    modes = MODES + (("search",) if args.es_url else ())
    if args.es_url:
        os.environ["NEARDUP_ES_URL"] = args.es_url
    if args.run_crawl:
        run_crawl(args.run_crawl, args.mode)
        return
    pages, rounds = (400, 1) if args.quick else (args.pages, args.rounds)
    with tempfile.TemporaryDirectory(prefix="neardup-crawl-bench-") as tmp:
        site, work = Path(tmp) / "site", Path(tmp) / "nginx"
        site.mkdir()
        work.mkdir()
        os.chmod(tmp, 0o755)
        total = build_site(site, pages)
        port = free_port()
        server = start_nginx(site, work, port)
        try:
            url = f"http://127.0.0.1:{port}/"
            crawl(url, "with", total)  # warm-up: page cache, imports
            runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
            for _ in range(rounds):
                for mode in modes:
                    runs[mode].append(crawl(url, mode, total))
        finally:
            server.terminate()
            server.wait()
    median = {k: statistics.median(r["crawl_s"] for r in v) for k, v in runs.items()}
    median_cpu = {k: statistics.median(r["cpu_s"] for r in v) for k, v in runs.items()}
    ratio = median["with"] / median["without"]
    result = {
        "pages": total,
        "rounds": rounds,
        "concurrent_requests": 32,
        "load_average_end": os.getloadavg()[0],
        "median_crawl_s": median,
        "median_cpu_s": median_cpu,
        "cpu_overhead": median_cpu["with"] / median_cpu["without"] - 1,
        "overhead": ratio - 1,
        "overhead_in_process": median["in_process"] / median["without"] - 1,
        "overhead_noop_pipeline": median["noop"] / median["without"] - 1,
        "dropped_with_pipeline": runs["with"][-1]["dropped"],
        "runs": runs,
    }
    print(f"site: {total} pages served by nginx on 127.0.0.1, CONCURRENT_REQUESTS=32, {rounds} round(s)")
    print(f"crawl without pipeline: {median['without']:.2f} s (median)")
    print(f"crawl with pipeline:    {median['with']:.2f} s (median), {result['dropped_with_pipeline']} dropped")
    print(f"  sketching in-process: {median['in_process']:.2f} s (median, NEARDUP_WORKER=False)")
    print(f"  a no-op async pipeline: {median['noop']:.2f} s (median; Scrapy's own cost of a pipeline stage)")
    print(f"overhead: {100 * (ratio - 1):+.1f}%  (target: at most +5%); sketching in-process: "
          f"{100 * result['overhead_in_process']:+.1f}%")
    if "search" in median:
        result["overhead_search_index"] = median["search"] / median["with"] - 1
        written = runs["search"][-1]
        print(f"  writing a search index: {median['search']:.2f} s (median), {written['search_indexed']} documents "
              f"written, {written['search_failed']} failed; {100 * result['overhead_search_index']:+.1f}% against "
              "the pipeline alone")
    print("CPU of the crawl's process (median): " + ", ".join(f"{k} {v:.2f} s" for k, v in median_cpu.items())
          + f"; with the pipeline {100 * result['cpu_overhead']:+.1f}%")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / ("crawl-quick.json" if args.quick else "crawl.json")).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
