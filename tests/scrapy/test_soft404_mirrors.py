"""Soft-404 probing and mirror hosts in real crawls over four loopback hosts (each crawl in its own process).

* original (127.0.0.1): a home page, articles under ``/news/``, links to URLs that do not exist under
  ``/old/`` and ``/news/``; unknown URLs answer 200 with a "page not found" template, and unknown URLs under
  ``/news/`` with a second, "story not found", template (soft 404s on two URL patterns).
* mirror (127.0.0.2): every page of the original under another navigation bar, same soft-404s.
* partial (127.0.0.3): half of its articles copy the original's, half are its own; answers 404 correctly.
* distinct (127.0.0.4): a site of its own; answers 404 correctly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from neardup_testkit import (
    NAV,
    CrawlResult,
    Page,
    SiteServer,
    article_words,
    html_page,
    kinds_site,
    path_of,
)

from scrapy_neardup.core.evidence import describe_evidence, mirror_evidence
from scrapy_neardup.core.mirror_table import MIRRORS_FILE, MirrorTable, host_of

RunCrawl = Callable[..., CrawlResult]
ADDON = {"scrapy_neardup.NearDuplicateAddon": 300}
ARTICLES = 40
PARTIAL_COPIES = 8
PARTIAL_OWN = 8
DISTINCT_PAGES = 6
MIN_PAGES = 10

NOT_FOUND = ("Page not found. Sorry, we could not find the page you asked for. It may have moved, or the link you "
             "followed may be out of date. Try the home page or the search box, or contact the web team.")
STORY_NOT_FOUND = ("Story not found. This story is no longer available in our newsroom archive: stories are removed "
                   "after a year, or when a correction replaces them. Browse the latest headlines instead.")


@dataclass
class Hosts:
    original: SiteServer
    mirror: SiteServer
    partial: SiteServer
    distinct: SiteServer
    soft_404_paths: list[str] = field(default_factory=list)
    # Each set holds the URLs of one content (an article and its copies): exactly one of them must be kept.
    contents: list[set[str]] = field(default_factory=list)

    @property
    def servers(self) -> list[SiteServer]:
        return [self.original, self.mirror, self.partial, self.distinct]


def _article(i: int, nav: str) -> Page:
    return Page(html_page(f"Article {i}", article_words(3000 + i), nav=nav))


def _site(nav: str, *, soft_404_paths: list[str], links: list[str]) -> dict[str, Page]:
    pages = {f"/news/{i}.html": _article(i, nav) for i in range(ARTICLES)}
    pages["/"] = Page(html_page("Home", article_words(2999, 80), nav=nav, links=[*pages, *soft_404_paths, *links]))
    return pages


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    soft_404 = ["/old/story-1.html", "/old/story-2.html", "/news/missing-1.html", "/news/missing-2.html",
                "/gone.html"]
    fallbacks = {"fallback": Page(html_page("Page not found", NOT_FOUND.split(), nav=NAV)),
                 "section_fallbacks": {"/news/": Page(html_page("Story not found", STORY_NOT_FOUND.split(), nav=NAV))}}
    # The partner reprints the original's *last* articles: a mirror page that is also a reprint's twin may name
    # either copy, and only twins of the original count toward the mirror's share, so the mirror's first pages
    # (those the decision is taken on, after MIN_PAGES) must not be reprints.
    reprinted = range(ARTICLES - PARTIAL_COPIES, ARTICLES)
    partial_pages = {f"/copies/{i}.html": _article(i, "Partner reprints") for i in reprinted}
    partial_pages |= {f"/own/{i}.html": Page(html_page(f"Own {i}", article_words(5000 + i)))
                      for i in range(PARTIAL_OWN)}
    partial_pages["/"] = Page(html_page("Partner home", article_words(4999, 80), links=list(partial_pages)))
    distinct_pages = {f"/p/{i}.html": Page(html_page(f"Distinct {i}", article_words(6000 + i)))
                      for i in range(DISTINCT_PAGES)}
    distinct_pages["/"] = Page(html_page("Distinct home", article_words(5999, 80), links=list(distinct_pages)))
    # Probes obey robots.txt: this host forbids them (and answers 404 anyway).
    # The one rule docs/addon.md gives site owners: a wildcard covers the probes of every section.
    robots = {"/robots.txt": Page("User-agent: *\nDisallow: /*neardup-soft404-probe-\n", content_type="text/plain")}
    partial = SiteServer(partial_pages, host="127.0.0.3").start()
    distinct = SiteServer(distinct_pages | robots, host="127.0.0.4").start()
    # The original links to the other hosts' home pages; the crawl starts at the original, seen first. The mirror is
    # linked from the original's last article only: linked from the home page, its articles (another download slot)
    # raced the original's and were sometimes kept first, and the original then looked like the copy.
    mirror_pages = _site("Mirror hosted by Example Mirror Network", soft_404_paths=soft_404, links=[])
    mirror = SiteServer(mirror_pages, host="127.0.0.2", **fallbacks).start()  # type: ignore[arg-type]
    original_pages = _site(NAV, soft_404_paths=soft_404, links=[partial.url + "/", distinct.url + "/"])
    last = ARTICLES - 1
    original_pages[f"/news/{last}.html"] = Page(html_page(f"Article {last}", article_words(3000 + last), nav=NAV,
                                                          links=[mirror.url + "/"]))
    original = SiteServer(original_pages, host="127.0.0.1", **fallbacks).start()  # type: ignore[arg-type]
    contents = [{original.url + p, mirror.url + p} for p in mirror_pages]
    for i in reprinted:
        contents[i].add(f"{partial.url}/copies/{i}.html")  # mirror_pages starts with /news/0.html ...
    contents += [{partial.url + p} for p in partial_pages if not p.startswith("/copies/")]
    contents += [{distinct.url + p} for p in distinct_pages if p != "/robots.txt"]
    found = Hosts(original, mirror, partial, distinct, soft_404, contents)
    yield found
    for server in found.servers:
        server.stop()


def crawl_settings(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "ADDONS": ADDON, "NEARDUP_MIRROR_MIN_PAGES": MIN_PAGES, "NEARDUP_STATE_DIR": str(tmp_path / "state"),
        # Two requests at a time per host, a few ms apart: the pipeline keeps pace with the downloads, so the
        # mirror is recognized while most of its pages are still to be fetched (as on a real, slower site).
        # Breadth-first (as the example project crawls): the original's articles, one link from the start,
        # are reached before the mirror's, two links away.
        "DEPTH_PRIORITY": 1, "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        "CONCURRENT_REQUESTS_PER_DOMAIN": 2, "DOWNLOAD_DELAY": 0.01, "LOG_LEVEL": "DEBUG", "ROBOTSTXT_OBEY": True,
        **extra,
    }


def check_crawl_report(page: str, result: CrawlResult, hosts: Hosts) -> None:
    """The report NEARDUP_REPORT wrote: every drop a row with its rule and evidence, the mirror decision, the
    totals; one self-contained page."""
    import html

    assert "<script" not in page and " src=" not in page and "stylesheet" not in page
    drops_part = page.split("<h2>Every drop or mark", 1)[1]
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>(.*?)</td></tr>", drops_part)
    by_url = {html.unescape(u): (html.unescape(of), r, html.unescape(ev)) for u, of, r, ev in rows}
    assert set(by_url) == set(result.drops_by_url())
    for url, drop in result.drops_by_url().items():
        of, resemblance, evidence = by_url[url]
        if drop["reason"] == "NearDuplicateDropped":
            fields = drop["evidence"]
            low, high = fields["interval"]
            assert of == drop["duplicate_of"] and float(resemblance) == pytest.approx(drop["resemblance"], abs=5e-4)
            assert evidence.startswith(f"{fields['rule']}: {fields['shared']} of {fields['k']}, r in "
                                       f"[{low:.3f}, {high:.3f}]")
            assert f"neardup explain {of} {url}" in evidence
        else:
            assert drop["reason"] == "Soft404Dropped" and evidence.startswith("soft404: ") and "-probe-" in of
            fields = drop["evidence"]
            low, high = fields["interval"]
            assert evidence.startswith(f"soft404: {fields['shared']} of {fields['k']}, r in [{low:.3f}, {high:.3f}]")
    mirror = re.search(r"<h2>Mirror hosts</h2>.*?<table>.*?</table>", page)
    assert mirror is not None
    row = re.search(rf"<tr><td>{host_of(hosts.mirror.url)}</td><td>{host_of(hosts.original.url)}</td>"
                    r"<td>(\d+) of (\d+)</td><td>(.*?)</td></tr>", mirror.group(0))
    assert row is not None, mirror.group(0)
    copies, checked = int(row.group(1)), int(row.group(2))
    assert html.unescape(row.group(3)) == describe_evidence(mirror_evidence(copies, checked))
    pages = len(result.kept_urls) + len(result.dropped)
    assert f'<div class="card"><b>{pages}</b>pages</div>' in page
    assert f'<div class="card"><b>{len(result.dropped)}</b>dropped or marked</div>' in page
    assert "<polyline" in page


def test_soft_404s_dropped_mirror_skipped_nothing_distinct_lost(
    hosts: Hosts, run_crawl: RunCrawl, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.html"
    result = run_crawl(settings=crawl_settings(tmp_path, NEARDUP_REPORT=str(report)),
                       spider={"start_url": hosts.original.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    kept = set(result.kept_urls)
    drops = result.drops_by_url()
    check_crawl_report(report.read_text(), result, hosts)

    # Probes never become items, and every host was probed (the original under "/", /news/ and /old/).
    probe_items = [u for u in [*kept, *drops] if "neardup-soft404-probe-" in u]
    assert probe_items == []
    probes = {s.url: [p for p in s.requests if "neardup-soft404-probe-" in p] for s in hosts.servers}
    # Forbidden by robots.txt: never sent, counted as failed; no page waited for the full timeout.
    assert probes[hosts.distinct.url] == [] and result.stat("neardup/soft404_probes_failed") == 2
    assert result.stat("neardup/soft404_wait_timeouts") == 0
    for server in hosts.servers[:3]:
        # One probe for "/", one per first path segment a page was fetched under.
        segments = {p.split("/")[1] for p in server.requests if p.count("/") >= 2 and "neardup-soft404-probe-" not in p}
        assert len(probes[server.url]) == 1 + len(segments), (server.url, probes, segments)
    assert result.stat("neardup/soft404_probes") == sum(len(p) for p in probes.values()) + 2
    with_template = len(probes[hosts.original.url]) + len(probes[hosts.mirror.url])
    assert result.stat("neardup/soft404_templates") == with_template  # every probe of original and mirror
    assert result.stat("neardup/soft404_probes_404") == len(probes[hosts.partial.url])

    # No soft 404 kept; every one fetched was dropped as such (both URL patterns), without naming a kept page.
    soft_404_urls = {s.url + p for s in (hosts.original, hosts.mirror) for p in hosts.soft_404_paths}
    assert not kept & soft_404_urls
    fetched_404s = {hosts.original.url + p for p in hosts.soft_404_paths}
    fetched_404s |= {hosts.mirror.url + p for p in hosts.soft_404_paths if p in hosts.mirror.requests}
    assert {u for u, d in drops.items() if d["reason"] == "Soft404Dropped"} == fetched_404s
    # Each soft 404 says what it was compared with (the answer to a probe of its host) and its evidence.
    for url in fetched_404s:
        drop = drops[url]
        fields = drop["evidence"]
        assert fields["rule"] == "soft404" and fields["k"] == 128 and fields["shared"] >= 100
        low, high = fields["interval"]
        assert low <= fields["shared"] / fields["k"] <= high
        probe = re.search(r"answered for (\S+) ", drop["message"])
        assert probe is not None and host_of(probe.group(1)) == host_of(url)
        assert "neardup-soft404-probe-" in probe.group(1) and describe_evidence(fields) in drop["message"]
    assert result.stat("neardup/soft404") == len(fetched_404s)
    assert result.stat("item_dropped_reasons_count/Soft404Dropped") == len(fetched_404s)

    # No distinct page lost; the partial mirror crawled to the end; copies dropped naming a kept page.
    for content in hosts.contents:
        assert len(content & kept) == 1, content
    assert len(kept) == len(hosts.contents)
    assert set(hosts.partial.requests) >= set(hosts.partial.pages)
    for url, drop in drops.items():
        if drop["reason"] == "NearDuplicateDropped":
            assert drop["duplicate_of"] in kept, url

    # The mirror: recognized, one INFO line, its remaining requests skipped before download.
    skipped = result.stat("neardup/mirror_requests_skipped")
    fetched = [p for p in hosts.mirror.requests if "neardup-soft404-probe-" not in p and p != "/robots.txt"]
    line = re.search(rf"INFO: host {hosts.mirror.url}:?\d* mirrors host {hosts.original.url}:?\d*: (\d+) of (\d+) "
                     r"pages are copies; skipping its requests", result.log)
    assert line is not None, result.log[-3000:]
    copies, checked = int(line.group(1)), int(line.group(2))
    assert checked >= MIN_PAGES and copies >= 0.9 * checked
    # The line carries the decision's evidence: the share of copies with its 95% interval.
    assert f"skipping its requests ({describe_evidence(mirror_evidence(copies, checked))})" in result.log
    low, high = mirror_evidence(copies, checked)["interval"]
    assert low <= copies / checked <= high
    assert result.log.count("pages are copies; skipping its requests") == 1  # the partial mirror is not skipped
    # Part of the mirror was never downloaded (how much depends on download timing: half on a quiet machine).
    assert skipped >= len(hosts.mirror.pages) // 4, skipped
    assert len(fetched) + skipped == len(hosts.mirror.pages) + len(hosts.soft_404_paths)
    assert result.stat("neardup/mirror_hosts") == 1

    # Saved next to the index, loadable, and it names the same decision.
    table = MirrorTable(MIN_PAGES)
    decisions = table.load(tmp_path / "state")
    assert [(d.mirror, d.original) for d in decisions] == [(host_of(hosts.mirror.url), host_of(hosts.original.url))]
    assert json.loads((tmp_path / "state" / MIRRORS_FILE).read_text())["format"] == 1
    check_state_report(tmp_path, result, copies, checked, capsys)


def check_state_report(tmp_path: Path, result: CrawlResult, copies: int, checked: int,
                       capsys: pytest.CaptureFixture[str]) -> None:
    """``neardup report STATE_DIR``: the pages the store kept per host and the mirror decision with its evidence;
    ``neardup explain --state DIR A B`` compares two stored keys."""
    import html

    from scrapy_neardup.cli.main import main

    state, out = tmp_path / "state", tmp_path / "state-report.html"
    assert main(["report", str(state), "-o", str(out)]) == 0
    page = out.read_text()
    kept = set(result.kept_urls)
    assert f'<div class="card"><b>{len(kept)}</b>pages</div>' in page and "<polyline" in page
    per_host = re.findall(r"<tr><td>([^<]+)</td><td>(\d+)</td><td>(\d+)</td>", page.split("per host</h2>", 1)[1])
    counts = {host: 0 for host in map(host_of, kept)}
    for url in kept:
        counts[host_of(url)] += 1
    assert {h: int(n) for h, n, _ in per_host} == counts
    # The mirror as the saved table has it at the end of the crawl (every page of the mirror it checked).
    (decision,) = MirrorTable().load(state)
    assert decision.checked >= checked and decision.copies >= copies
    assert (f"<tr><td>{decision.mirror}</td><td>{decision.original}</td><td>{decision.copies} of {decision.checked}"
            f"</td><td>{html.escape(describe_evidence(decision.evidence))}</td></tr>") in page
    assert "no duplicates" in page  # every page was checked against the others: no two stored pages match
    capsys.readouterr()
    # Two stored keys (distinct articles): compared by their stored signatures, both kept.
    a, b = sorted(u for u in kept if "/news/" in u)[:2]
    assert main(["explain", "--state", str(state), a, b, "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert compared["decision"] == "kept" and compared["shared"] < 20 and compared["k"] == 128
    assert main(["explain", "--state", str(state), a, b]) == 0
    text = capsys.readouterr().out
    assert f"shared positions:      {compared['shared']} of 128" in text and "both are kept" in text
    # A dropped page is not in the store: one clear line, exit 1.
    dropped = next(u for u, d in result.drops_by_url().items() if d["reason"] == "NearDuplicateDropped")
    assert main(["explain", "--state", str(state), a, dropped]) == 1
    err = capsys.readouterr().err
    assert f"keeps no page under {dropped}" in err and err.count("\n") == 1


def test_each_feature_switches_off(hosts: Hosts, run_crawl: RunCrawl, tmp_path: Path) -> None:
    """The negative control: without the two features, soft 404s are kept once and the mirror is crawled to
    the end, so the assertions of the test above can fail."""
    result = run_crawl(settings=crawl_settings(tmp_path, NEARDUP_SOFT404_ENABLED=False,
                                               NEARDUP_MIRRORS_ENABLED="false"),
                       spider={"start_url": hosts.original.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    assert not [p for s in hosts.servers for p in s.requests if "neardup-soft404-probe-" in p]
    assert result.stat("neardup/mirror_requests_skipped") == 0 and result.stat("neardup/soft404") == 0
    assert set(hosts.mirror.requests) - {"/robots.txt"} == set(hosts.mirror.pages) | set(hosts.soft_404_paths)
    kept_404 = {path_of(u) for u in result.kept_urls} & set(hosts.soft_404_paths)
    assert len(kept_404) == 2  # one per template: the soft 404s are kept as pages


def test_mark_mode_marks_soft_404s(hosts: Hosts, run_crawl: RunCrawl, tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    result = run_crawl(settings=crawl_settings(tmp_path, NEARDUP_ACTION="mark", NEARDUP_MIRRORS_ENABLED=False,
                                               NEARDUP_REPORT=str(report)),
                       spider={"start_url": hosts.original.url + "/", "item_type": "item"})
    assert result.returncode == 0, result.log[-3000:]
    # The report reads the marks: every marked item is a row with its rule, every item counted once.
    page = report.read_text()
    marked = [i for i in result.scraped if i["neardup"] is not None]
    assert f'<div class="card"><b>{len(result.scraped)}</b>pages</div>' in page
    assert f'<div class="card"><b>{len(marked)}</b>dropped or marked</div>' in page
    rows = page.split("<h2>Every drop or mark", 1)[1].count("<tr><td>")
    assert rows == len(marked) and page.count("soft404: ") == sum(1 for i in marked if "soft404" in i["neardup"])
    by_url = {item["url"]: item for item in result.scraped}
    soft_404_urls = {s.url + p for s in (hosts.original, hosts.mirror) for p in hosts.soft_404_paths}
    assert soft_404_urls <= set(by_url)  # mirrors not skipped here: every soft 404 was fetched and marked
    for url in soft_404_urls:
        mark = by_url[url]["neardup"]
        assert "neardup-soft404-probe-" in mark["soft404"]
        assert mark["rule"] == "soft404" and mark["shared"] == round(mark["resemblance"] * mark["k"])
        assert mark["interval"][0] <= mark["resemblance"] <= mark["interval"][1]
        # Its log line (LOG_LEVEL DEBUG) names the probe it was compared with and the evidence.
        fields = {k: mark[k] for k in ("rule", "shared", "k", "interval")}
        assert (f"Marked soft 404 {url} (like the not-found page answered for {mark['soft404']}, resemblance "
                f"{mark['resemblance']:.3f}, {describe_evidence(fields)})") in result.log
    assert result.stat("neardup/soft404") == len(soft_404_urls)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("NEARDUP_MIRROR_SHARE", "1.5", "NEARDUP_MIRROR_SHARE='1.5' is not valid: expected a share in (0, 1]"),
    ("NEARDUP_MIRROR_MIN_PAGES", "0", "NEARDUP_MIRROR_MIN_PAGES='0' is not valid: expected an integer >= 1"),
    ("NEARDUP_SOFT404_ENABLED", "maybe", "NEARDUP_SOFT404_ENABLED='maybe' is not valid: expected a boolean"),
    ("NEARDUP_SOFT404_TIMEOUT", "-1", "NEARDUP_SOFT404_TIMEOUT='-1' is not valid: expected seconds > 0"),
    ("NEARDUP_MIRROR_SYNC_INTERVAL", "0", "NEARDUP_MIRROR_SYNC_INTERVAL='0' is not valid: expected seconds > 0"),
])
def test_wrong_setting_stops_the_crawl_at_start(
    name: str, value: str, message: str, hosts: Hosts, run_crawl: RunCrawl, tmp_path: Path
) -> None:
    result = run_crawl(settings=crawl_settings(tmp_path, **{name: value}), spider={"start_url": hosts.original.url})
    assert result.returncode == 1
    assert message in result.log
    assert hosts.original.requests == []


PROBE_PATH = re.compile(r"(/[^/]+)?/neardup-soft404-probe-[0-9a-f]{32}")


@pytest.mark.parametrize("own", ["setting", "request"])
def test_probes_are_recognisable_and_carry_the_crawls_own_user_agent(
    run_crawl: RunCrawl, serve_kinds_site: Any, own: str
) -> None:
    """What a site owner sees of the probes in the server's log: a path with the fixed marker, and the user agent
    of the crawl's own requests (``USER_AGENT``, or the one the spider gives its requests), never another."""
    server = serve_kinds_site(kinds_site(articles=2, soft_404s=1))
    agent = "ExampleBot/2.0 (+https://bot.example/about)"
    settings: dict[str, Any] = {"ITEM_PIPELINES": {}, "ADDONS": ADDON}
    spider: dict[str, Any] = {"start_url": server.url + "/"}
    if own == "setting":
        settings["USER_AGENT"] = agent
    else:
        spider["request_headers"] = {"User-Agent": agent}
    result = run_crawl(settings=settings, spider=spider)
    assert result.returncode == 0, result.log[-3000:]
    probes = [path for path, _ in server.user_agents if "neardup-soft404-probe-" in path]
    # "/" and each first path segment a page was fetched under: /news/, /old/ (the soft 404s), /mirror/, /print/...
    segments = {path.split("/")[1] for path in server.requests if path.count("/") >= 2 and path not in probes}
    assert len(segments) == 6 and len(probes) == 1 + len(segments), (segments, probes)
    assert all(PROBE_PATH.fullmatch(path) for path in probes), probes
    assert {ua for _, ua in server.user_agents} == {agent}  # pages and probes alike
    assert result.stat("neardup/soft404_probes") == len(probes)
