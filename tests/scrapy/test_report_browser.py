"""``neardup report`` read in a real headless browser (Debian's chromium and chromedriver): the page loads nothing
from outside, shows the totals, the per-host rates, the plot of the pairs against the S-curve, and every duplicate's
"why" link leads to its side-by-side view with the differences highlighted."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from scrapy_neardup.cli.main import main


def _pages(path: Path) -> None:
    """Two hosts; news has three stories with an edited copy each, blog three distinct stories."""
    rng = random.Random(5)
    records, n = [], 0
    for host, copies in (("news.test", True), ("blog.test", False)):
        for story in range(3):
            words = [f"{host[0]}{story}w{rng.randint(0, 9999)}" for _ in range(300)]
            versions = [words]
            if copies:
                edited = list(words)
                edited[150] = "edited"
                versions.append(edited)
            for v, text in enumerate(versions):
                n += 1
                records.append({"id": n, "url": f"http://{host}/{story}-{v}.html",
                                "text": f"<html><body><article><p>{' '.join(text)}</p></article></body></html>"})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_report_reads_in_a_browser(tmp_path: Path, browser: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from selenium.webdriver.common.by import By

    _pages(tmp_path / "pages.jsonl")
    assert main(["dedupe", str(tmp_path / "pages.jsonl"), "-o", str(tmp_path / "out.jsonl")]) == 0
    report = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "out.jsonl"), "-o", str(report)]) == 0
    source = report.read_text()
    assert "http://" not in source.replace('http://news.test', '').replace('http://blog.test', '').replace(
        'http://www.w3.org', '')  # no asset from outside: every URL in it is a page of the report

    browser.get(report.as_uri())
    cards = [c.text.split("\n") for c in browser.find_elements(By.CSS_SELECTOR, ".card")]
    assert cards[:3] == [["9", "records"], ["6", "kept"], ["3", "duplicates"]]
    hosts = {r.find_elements(By.TAG_NAME, "td")[0].text: r.find_elements(By.TAG_NAME, "td")[3].text
             for r in browser.find_elements(By.XPATH, "//h2[.='Duplicate rate per host']/following-sibling::table[1]"
                                                       "//tr[td]")}
    assert hosts == {"http://news.test:80": "50%", "http://blog.test:80": "0%"}
    curve = browser.find_element(By.CSS_SELECTOR, "svg polyline.curve")
    assert curve.size["width"] > 300 and len(browser.find_elements(By.CSS_SELECTOR, "svg rect.hist")) >= 1
    # Resolved styles: the plot's frame is light, not the default black fill.
    assert browser.execute_script(
        "return getComputedStyle(document.querySelector('svg rect.frame')).fill") != "rgb(0, 0, 0)"
    rows = browser.find_elements(By.XPATH, "//tr[starts-with(@id, 'dup-')]")
    assert len(rows) == 3 and all("near_duplicate: " in r.text and "r in [" in r.text for r in rows)
    browser.save_screenshot(str(tmp_path / "report.png"))

    assert browser.execute_script("return window.scrollY") == 0
    rows[2].find_element(By.LINK_TEXT, "why").click()
    view = browser.find_element(By.ID, "why-2")
    # Scrolled to the pair's view: it lies within the window now.
    top, bottom, inner = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.top, r.bottom, window.innerHeight]", view)
    assert browser.execute_script("return window.scrollY") > 0 and top >= 0 and bottom <= inner
    assert browser.current_url.endswith("#why-2")
    assert [e.text for e in view.find_elements(By.TAG_NAME, "ins")] == ["edited"]
    assert len(view.find_elements(By.TAG_NAME, "del")) == 1 and "positions shared" in view.text
    browser.save_screenshot(str(tmp_path / "view.png"))
    # The words both share are folded around the difference, which stays in sight.
    assert "words the same" in view.text and view.find_element(By.TAG_NAME, "ins").is_displayed()


def test_the_report_of_a_state_directory_reads_in_a_browser(tmp_path: Path, browser: Any) -> None:
    """A store whose recrawled page turned into a copy of another: its report shows the stored pages per host,
    the pair with its evidence and the command that compares them."""
    from selenium.webdriver.common.by import By

    from scrapy_neardup.core.evidence import describe_evidence, evidence, sides
    from scrapy_neardup.core.match import Sketched
    from scrapy_neardup.core.sketch import Sketcher
    from scrapy_neardup.store.embedded import EmbeddedBackend

    rng = random.Random(9)
    texts = {f"http://{host}/{i}.html": " ".join(f"w{rng.randint(0, 9999)}" for _ in range(300))
             for host in ("news.test", "blog.test") for i in range(3)}
    sketcher = Sketcher()
    params, state = sketcher.params, tmp_path / "state"
    backend = EmbeddedBackend(params.num_perm, params.min_shared, params.tag, state_dir=state)
    backend.load()
    for key, text in texts.items():
        assert backend.decide(key, sketcher.sketch(text)).match is None
    copy = texts["http://news.test/0.html"].replace(texts["http://news.test/0.html"].split()[5], "edited", 1)
    backend.index.put("http://blog.test/2.html", sketcher.sketch(copy))
    backend.save()
    report = tmp_path / "state.html"
    assert main(["report", str(state), "-o", str(report)]) == 0

    browser.get(report.as_uri())
    cards = [c.text.split("\n") for c in browser.find_elements(By.CSS_SELECTOR, ".card")]
    assert cards == [["6", "pages"], ["5", "kept"], ["1", "duplicates"], ["16.7%", "duplicate rate"]]
    hosts = {r.find_elements(By.TAG_NAME, "td")[0].text: r.find_elements(By.TAG_NAME, "td")[3].text
             for r in browser.find_elements(By.XPATH, "//h2[.='Duplicate rate per host']/following-sibling::table[1]"
                                                       "//tr[td]")}
    assert hosts == {"http://blog.test:80": "33%", "http://news.test:80": "0%"}
    (row,) = browser.find_elements(By.XPATH, "//h2[starts-with(., 'Every duplicate')]/following-sibling::table[1]"
                                              "//tr[td]")
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    shared = sketcher.sketch(texts["http://news.test/0.html"]).shared_positions(sketcher.sketch(copy))
    assert cells[:3] == ["http://blog.test/2.html", "http://news.test/0.html", f"{shared / 128:.3f}"]
    # Both pages' sides as the store remembers them: plain text, 300 words each, nothing removed.
    both = sides(Sketched("own text", 300, 300), Sketched("own text", 300, 300))
    assert "; sketched: own text, 300 words, 0% removed; kept: own text, 300 words, 0% removed" in cells[3]
    described = describe_evidence({**evidence(shared, 128, "near_duplicate"), **both})
    assert cells[3] == (f"{described}\nneardup explain --state {state} http://news.test/0.html "
                        "http://blog.test/2.html")
    assert "none found" in browser.find_element(By.XPATH, "//h2[.='Mirror hosts']/following-sibling::table[1]").text
    browser.save_screenshot(str(tmp_path / "state.png"))
