"""The example project from crawl to search results, on a real node: ``run_demo.py --search`` crawls the demo site
into a search index and serves a search page over it, which, in a real headless browser (Debian's chromium and
chromedriver), shows each story once with "N similar pages omitted" and lists those pages on demand."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_example_project import PROJECT, clean_env, report_section

from scrapy_neardup.core.sketch import removed_share

pytestmark = pytest.mark.es

STORY = "/news/harbor-bridge-reopens.html"


@pytest.fixture(scope="module")
def demo(es_url: str, es_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``run_demo.py --search`` against the session's node, as a user runs it: its report, the search page it
    serves (until Ctrl-C, sent at the end), the index, and the copies of :data:`STORY` the crawl dropped (full URLs,
    from the report's DROPPED section)."""
    index = f"demo-search-{uuid.uuid4().hex[:10]}"
    env = {**clean_env(), "NEARDUP_ES_URL": es_url, "NEARDUP_SEARCH_INDEX": index}
    workdir = tmp_path_factory.mktemp("elsewhere")
    out, err = workdir / "stdout.txt", workdir / "stderr.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, str(PROJECT / "run_demo.py"), "--search"], cwd=workdir, env=env,
                                stdout=stdout, stderr=stderr, text=True)
    try:
        deadline = time.monotonic() + 180
        while "Search page: " not in out.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        report = out.read_text()
        assert "Search page: " in report, report + err.read_text()
        page = re.search(r"Search page: (http://127\.0\.0\.1:\d+/)\?q=harbor\+bridge \(Ctrl-C to stop\)", report)
        assert page is not None, report
        base = report.splitlines()[0].split(" at ")[1].rstrip("/")
        copies = set()
        for line in report_section(report, "DROPPED"):
            match = re.match(r"^\s+(\S+)\s+->\s+(\S+)\s+resemblance", line)
            if match and match.group(2) == STORY:
                copies.add(match.group(1) if match.group(1).startswith("http") else base + match.group(1))
        assert len(copies) >= 4  # the control: printer, mirror, partner and updated copies, and the mirror host's
        yield {"report": report, "page": page.group(1), "index": index, "story": base + STORY, "copies": copies}
        proc.send_signal(signal.SIGINT)  # Ctrl-C ends the demo
        assert proc.wait(timeout=20) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        es_client.indices.delete(index=index, ignore_unavailable=True)


def test_one_command_crawls_into_the_index_and_searches_it_collapsed(demo: dict[str, Any]) -> None:
    lines = demo["report"].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('SEARCH "harbor bridge"'))
    title, url = lines[start + 1].strip(), lines[start + 2].strip()
    assert title == "1. Harbor Bridge reopens after two years of repairs - The Harbor Gazette"
    assert url == f"{demo['story']}  ({len(demo['copies'])} similar omitted)"
    stats = dict(line.split()[:2] for line in report_section(demo["report"], "STATS"))
    # Every page kept or dropped as a copy is in the index (soft 404s are not).
    assert int(stats["neardup/search_indexed"]) == int(stats["neardup/kept"]) + int(stats["neardup/dropped"])


@pytest.mark.parametrize("browser", [(1200, 900)], indirect=True)
def rows_id(es_client: Any, demo: dict[str, Any]) -> str:
    """The ``_id`` of the story's document (the kept page every copy's ``neardup.duplicate_of`` names)."""
    hits = es_client.search(index=demo["index"], query={"term": {"neardup.key": demo["story"]}})["hits"]["hits"]
    return str(hits[0]["_id"])


def test_the_search_page_shows_each_story_once_and_expands_its_copies(
    demo: dict[str, Any], browser: Any, tmp_path: Path, es_client: Any,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        wait = WebDriverWait(browser, 20)
        browser.get(demo["page"])
        box = browser.find_element(By.NAME, "q")
        box.send_keys("harbor bridge")
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "ol.results")))
        hits = browser.find_elements(By.CSS_SELECTOR, "li.hit")
        urls = [hit.find_element(By.CSS_SELECTOR, ".url").text for hit in hits]
        assert len(urls) == len(set(urls)) and demo["story"] in urls
        assert not set(urls) & demo["copies"]  # the copies are collapsed under their story
        story = hits[urls.index(demo["story"])]
        assert story.find_element(By.CSS_SELECTOR, "a.title").text.startswith("Harbor Bridge reopens")
        assert story.find_elements(By.CSS_SELECTOR, ".snippet mark")  # the words found, highlighted
        snippet = story.find_element(By.CSS_SELECTOR, ".snippet").get_attribute("innerHTML") or ""
        assert snippet.replace("<mark>", "").replace("</mark>", "").count("<") == 0, snippet  # text, no markup
        similar = story.find_element(By.CSS_SELECTOR, "a.similar")
        assert similar.text == f"{len(demo['copies'])} similar pages omitted"
        browser.save_screenshot(str(tmp_path / "results.png"))

        similar.click()
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "a.back")))
        listed = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "li.hit .url")]
        assert listed[0] == demo["story"] and set(listed[1:]) == demo["copies"] and len(listed) == len(set(listed))
        summary = browser.find_element(By.CSS_SELECTOR, ".summary").text
        assert summary == f"the result shown and its {len(demo['copies'])} similar pages"  # the link's count
        # Why each copy is grouped: the crawl's decision as the index holds it (neardup.shared of k = 128).
        rows = browser.find_elements(By.CSS_SELECTOR, "li.hit")
        assert not rows[0].find_elements(By.CSS_SELECTOR, "div.why")  # the kept page
        for row in rows[1:]:
            url = row.find_element(By.CSS_SELECTOR, ".url").text
            why = row.find_element(By.CSS_SELECTOR, "div.why").text
            found = re.fullmatch(r"grouped with the kept page: (near_duplicate|exact): (\d+) of 128 positions shared, "
                                 r"r in \[(0\.\d{3}|1\.000), (0\.\d{3}|1\.000)\]; sketched: (.+); kept: (.+) · "
                                 r"why grouped", why)
            assert found is not None, why
            stored = es_client.search(index=demo["index"], query={"term": {"neardup.key": url}},
                                      source=["neardup"])["hits"]["hits"][0]["_source"]["neardup"]
            assert int(found.group(2)) == stored["shared"] and stored["duplicate_of"] == rows_id(es_client, demo)
            assert float(found.group(3)) <= stored["shared"] / 128 <= float(found.group(4))
            # What of each page was sketched, as the index holds it for the copy and for the kept page.
            kept = es_client.search(index=demo["index"], query={"term": {"neardup.key": demo["story"]}},
                                    source=["neardup"])["hits"]["hits"][0]["_source"]["neardup"]
            for side, values in ((found.group(5), stored), (found.group(6), kept)):
                removed = removed_share(values["words"], values["page_words"])
                assert removed is not None and side == (
                    f"{values['sketched']}, {values['words']} words, {removed:.0%} removed"), (side, values)
        browser.save_screenshot(str(tmp_path / "similar.png"))

        # The side-by-side view of the story and a copy.
        copy = rows[1].find_element(By.CSS_SELECTOR, ".url").text
        rows[1].find_element(By.CSS_SELECTOR, "a.why").click()
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".verdict")))
        heads = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".cols h2")]
        assert heads == [f"A: {demo['story']}", f"B: {copy}"]
        assert browser.find_element(By.CSS_SELECTOR, ".verdict").text in ("Near-duplicates", "Exact copy")
        assert "Shared positions" in browser.find_element(By.CSS_SELECTOR, "table.ev").text
        browser.save_screenshot(str(tmp_path / "why.png"))
        browser.find_element(By.CSS_SELECTOR, "a.back").click()
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "div.why")))
        assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, "li.hit .url")] == listed

        browser.find_element(By.CSS_SELECTOR, "a.back").click()
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "a.similar")))
        assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, "li.hit .url")] == urls
    finally:
        browser.save_screenshot(str(tmp_path / "last.png"))
