"""The example project: its demo site is what it claims to be, and its demo script really filters it."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scrapy.http import HtmlResponse

from scrapy_neardup import Sketcher

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "example_project"
SITE = PROJECT / "demo_site"
sys.path.insert(0, str(PROJECT))

from neardup_demo.spiders.demo import page_text  # noqa: E402


def site_path(file: Path) -> str:
    rel = file.relative_to(SITE).as_posix()
    return "/" if rel == "index.html" else "/" + rel


def original_of(path: str) -> str | None:
    """Ground truth from the site's layout: which article a copy reproduces (None for an original page)."""
    for pattern in (r"/print/(.+)\.html", r"/mirror/news/(.+)\.html", r"/partners/coastal-times/(.+)\.html",
                    r"/news/(.+)-updated\.html"):
        if m := re.fullmatch(pattern, path):
            return f"/news/{m.group(1)}.html"
    return None


PAGES = {site_path(f): f for f in SITE.rglob("*.html") if f.name != "404.html"}
COPIES = {p: o for p in PAGES if (o := original_of(p)) is not None}
ORIGINALS = sorted(set(COPIES.values()))
DISTINCT = sorted(set(PAGES) - set(COPIES))


def links_to_missing_pages() -> set[str]:
    """URLs linked from the site that have no file: the server answers them with the soft 404 page."""
    hrefs = {h for f in PAGES.values() for h in re.findall(r'href="(/[^"]*)"', f.read_text())}  # not the mirror
    return {h for h in hrefs if h not in PAGES and not (SITE / h.lstrip("/") / "index.html").exists()}


SOFT_404 = links_to_missing_pages()


def main_text(path: str) -> str:
    body = PAGES[path].read_bytes()
    return page_text(HtmlResponse(url="http://127.0.0.1" + path, body=body, encoding="utf-8"))


def test_site_has_every_kind_of_copy() -> None:
    def kind(path: str) -> str:
        return "edited" if path.endswith("-updated.html") else path.split("/")[1]

    assert {kind(p) for p in COPIES} == {"print", "mirror", "partners", "edited"}
    assert len(ORIGINALS) >= 5 and len(SOFT_404) >= 3
    # Soft 404s on more than one URL pattern: /news/ has its own "story not found" template.
    assert any(p.startswith("/news/") for p in SOFT_404) and any(not p.startswith("/news/") for p in SOFT_404)
    assert (SITE / "news" / "404.html").read_text() != (SITE / "404.html").read_text()
    # The mirror host is linked from the site.
    assert "http://MIRROR-HOST/" in (SITE / "about.html").read_text()


def test_edited_copies_resemble_their_originals_at_least_0_9() -> None:
    """Word 5-shingle Jaccard of the whole HTML files, as `neardup compare` computes it."""
    sketcher = Sketcher()
    edited = {c: o for c, o in COPIES.items() if c.endswith("-updated.html")}
    assert edited
    for copy, original in edited.items():
        jaccard = sketcher.jaccard(PAGES[copy].read_text(), PAGES[original].read_text())
        assert jaccard >= 0.9, (copy, jaccard)


def test_every_copy_shares_its_originals_main_text() -> None:
    sketcher = Sketcher()
    for copy, original in COPIES.items():
        jaccard = sketcher.jaccard(main_text(copy), main_text(original), is_html=False)
        assert 0.9 <= jaccard < 1.0, (copy, jaccard)  # near-duplicates, not exact ones
    for a, b in itertools.combinations(DISTINCT, 2):
        jaccard = sketcher.jaccard(main_text(a), main_text(b), is_html=False)
        assert jaccard < 0.3, (a, b, jaccard)


def clean_env() -> dict[str, str]:
    # The project's settings read NEARDUP_* environment variables; the demo must run on its defaults here.
    return {k: v for k, v in os.environ.items() if not k.startswith(("NEARDUP_", "SCRAPY_"))}


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # the script must work from any current directory
    proc = subprocess.run([sys.executable, str(PROJECT / "run_demo.py")], cwd=elsewhere, env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def report_section(report: str, title: str) -> list[str]:
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    section = []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        section.append(line)
    return section


def test_demo_keeps_every_distinct_page(demo_report: str) -> None:
    kept = [line.split()[0] for line in report_section(demo_report, "KEPT")]
    assert sorted(kept) == DISTINCT  # no soft 404 kept, nothing from the mirror host (all copies)


def test_demo_drops_every_soft_404(demo_report: str) -> None:
    pattern = re.compile(r"^\s+(\S+)\s+->\s+(\S+)\s+resemblance (\d\.\d{3})")
    soft = {m.group(1): m.group(2) for line in report_section(demo_report, "SOFT 404s DROPPED")
            if (m := pattern.match(line))}
    on_site = {url: probe for url, probe in soft.items() if url.startswith("/")}
    assert set(on_site) == SOFT_404
    for url, probe in on_site.items():  # each matches its section's template
        section = "/news/" if url.startswith("/news/") else "/"
        assert probe == f"{section}neardup-soft404-probe-...", url
    stats = dict(line.split()[:2] for line in report_section(demo_report, "STATS"))
    assert int(stats["neardup/soft404"]) == len(soft) == int(stats["item_dropped_reasons_count/Soft404Dropped"])
    assert int(stats["neardup/soft404_probes"]) >= 2 and "neardup/soft404_wait_timeouts" not in stats


def test_demo_skips_the_mirror_host(demo_report: str) -> None:
    title = next(line for line in demo_report.splitlines() if line.startswith("MIRROR HOSTS"))
    saved = int(re.fullmatch(r"MIRROR HOSTS: (\d+) requests saved, \d+ downloaded:", title).group(1))  # type: ignore[union-attr]
    assert saved > 0
    (line,) = report_section(demo_report, "MIRROR HOSTS")
    m = re.fullmatch(r"\s+host (\S+) mirrors host (\S+): (\d+) of (\d+) pages are copies; skipping its requests "
                     r"\(mirror: \3 of \4 checked pages are copies, share in \[0\.\d{3}, 1\.000\]\)", line)
    assert m is not None, line
    start = demo_report.splitlines()[0].split(" at ")[1].rstrip("/")
    assert m.group(2) == start and m.group(1) != start
    assert int(m.group(3)) >= 0.9 * int(m.group(4)) >= 0.9 * 5


def test_demo_drops_every_copy_naming_its_original(demo_report: str) -> None:
    pattern = re.compile(r"^\s+(\S+)\s+->\s+(\S+)\s+resemblance (\d\.\d{3})")
    drops = {m.group(1): (m.group(2), float(m.group(3)))
             for line in report_section(demo_report, "DROPPED") if (m := pattern.match(line))}
    for copy, original in COPIES.items():
        assert copy in drops, f"{copy} was not dropped:\n{demo_report}"
        assert drops[copy][0] == original
        assert 107 / 128 <= drops[copy][1] < 1.0
    # The rest are pages of the mirror host (full URLs), each naming the kept page of the site it copies.
    mirror_drops = {url: d for url, d in drops.items() if not url.startswith("/")}
    assert set(drops) == set(COPIES) | set(mirror_drops)
    for url, (original, _) in mirror_drops.items():
        path = "/" + url.split("/", 3)[3]
        assert original == COPIES.get(path, path), url
    stats = dict(line.split()[:2] for line in report_section(demo_report, "STATS"))
    assert int(stats["neardup/dropped"]) == len(drops) == int(stats["item_dropped_reasons_count/NearDuplicateDropped"])
    assert int(stats["neardup/checked"]) == len(drops) + len(report_section(demo_report, "KEPT"))


def test_scrapy_crawl_with_a_wrong_setting_fails_with_a_clear_message() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "demo", "-a", "start_url=http://127.0.0.1:9/",
         "-s", "NEARDUP_ACTION=bogus", "-s", "TELNETCONSOLE_ENABLED=0", "-s", "REMOTE_CONTROL_ENABLED=0"],
        cwd=PROJECT, env=clean_env(), capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1
    assert "NEARDUP_ACTION='bogus' is not valid: expected one of 'drop', 'mark'" in proc.stderr
    assert "Crawled (" not in proc.stderr


def _crawl(*settings: str, level: str | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "scrapy", "crawl", "demo", "-a", "start_url=http://127.0.0.1:9/",
            "-s", "TELNETCONSOLE_ENABLED=0", "-s", "REMOTE_CONTROL_ENABLED=0"]
    for setting in settings:
        args += ["-s", setting]
    if level:
        args += ["-L", level]
    return subprocess.run(args, cwd=PROJECT, env=clean_env(), capture_output=True, text=True, timeout=60)


def test_wrong_setting_is_one_line_without_traceback_above_debug() -> None:
    proc = _crawl("NEARDUP_THRESHOLD=2", level="INFO")
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if "NEARDUP_THRESHOLD" in line]
    assert len(lines) == 1 and lines[0].endswith(
        "[scrapy_neardup.crawl.startup] CRITICAL: NEARDUP_THRESHOLD='2' is not valid: expected a resemblance in (0, 1]"
    ), proc.stderr
    assert "Traceback" not in proc.stderr
    # At DEBUG (Scrapy's default level) the same one line, and no unretrieved task's traceback either.
    debug = _crawl("NEARDUP_THRESHOLD=2")
    assert debug.returncode == 1
    assert "CRITICAL: NEARDUP_THRESHOLD='2' is not valid" in debug.stderr
    assert "Traceback" not in debug.stderr and "never retrieved" not in debug.stderr


def test_unreachable_elasticsearch_is_one_line_and_no_unrelated_traceback() -> None:
    proc = _crawl("NEARDUP_BACKEND=elasticsearch", "NEARDUP_ES_URL=http://127.0.0.1:1", "NEARDUP_ES_INDEX=demo",
                  level="INFO")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "AssertionError" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "[scrapy_neardup.crawl.startup] CRITICAL: EsError: " in line]
    assert len(errors) == 1 and "cannot connect to Elasticsearch at http://127.0.0.1:1" in errors[0]
    assert "check NEARDUP_ES_URL" in errors[0]
    assert "Crawled (" not in proc.stderr


def test_demo_failure_prints_the_error_after_saying_it_failed(tmp_path: Path) -> None:
    env = {**clean_env(), "NEARDUP_ACTION": "bogus"}
    proc = subprocess.run([sys.executable, str(PROJECT / "run_demo.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-2:] == ["The demo crawl failed:",
                          "  NEARDUP_ACTION='bogus' is not valid: expected one of 'drop', 'mark'"], proc.stderr


@pytest.mark.es
def test_demo_on_elasticsearch_gives_the_same_report_when_run_twice(es_url: str, es_client: Any,
                                                                    tmp_path: Path) -> None:
    """``NEARDUP_BACKEND=elasticsearch NEARDUP_ES_URL=... python example_project/run_demo.py``, twice: the site is
    served on a new port each run, and the store index outlives the crawl; the demo deletes it first, so the
    second run keeps and drops the same pages as the first (not "KEPT 0", every page naming the first run's
    port)."""
    index = f"demo-twice-{os.getpid()}"
    env = {**clean_env(), "NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": es_url, "NEARDUP_ES_INDEX": index}
    runs = []
    try:
        for _ in range(2):
            proc = subprocess.run([sys.executable, str(PROJECT / "run_demo.py")], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=180)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            runs.append(proc)
    finally:
        es_client.indices.delete(index=f"{index},{index}-hosts,{index}-templates,{index}-order",
                                 ignore_unavailable=True)
    assert f"deleted its store index {index}" in runs[1].stderr
    kept = [sorted(line.split()[0] for line in report_section(run.stdout, "KEPT")) for run in runs]
    assert kept[0] == kept[1] == DISTINCT
    dropped = [{line.split()[0] for line in report_section(run.stdout, "DROPPED") if line.split()[0].startswith("/")}
               for run in runs]
    assert dropped[0] == dropped[1] == set(COPIES)
