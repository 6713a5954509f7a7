"""Fixtures of the Scrapy tests: a static site on 127.0.0.1 and a helper that runs a real crawl.

Each crawl runs in a subprocess (``crawl_runner.py``): a Twisted reactor cannot be restarted within one
process, and a subprocess also exercises Scrapy's real start-up and Ctrl-C paths.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from neardup_testkit import (  # noqa: E402
    CrawlResult,
    NearDupSite,
    Page,
    SiteServer,
    run_crawl_process,
    soft_404_page,
)


@pytest.fixture
def run_crawl(tmp_path: Path) -> Callable[..., CrawlResult]:
    """``run_crawl(settings=..., spider=..., reactor=..., stop_after_items=..., kill_after_items=..., name=...)
    -> CrawlResult``."""

    def run(**kwargs: Any) -> CrawlResult:
        return run_crawl_process(tmp_path, **kwargs)

    return run


@pytest.fixture
def serve_site() -> Iterator[Callable[..., SiteServer]]:
    """``serve_site(pages, fallback=None) -> SiteServer`` on 127.0.0.1 at a free port, stopped after the test."""
    servers: list[SiteServer] = []

    def start(pages: dict[str, Page], fallback: Page | None = None) -> SiteServer:
        server = SiteServer(pages, fallback).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def serve_kinds_site(serve_site: Callable[..., SiteServer]) -> Callable[[NearDupSite], SiteServer]:
    """Serve a :func:`neardup_testkit.kinds_site`, answering unknown paths with a soft 404 (status 200)."""

    def start(site: NearDupSite) -> SiteServer:
        return serve_site(site.pages, fallback=soft_404_page())

    return start


CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Debian's headless chromium through chromedriver (selenium); the window size a test's
    ``@pytest.mark.parametrize("browser", [(width, height)], indirect=True)`` gives, else 1280 x 1800."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM.exists() and CHROMEDRIVER.exists(), "apt-get install -y chromium chromium-driver"
    width, height = getattr(request, "param", (1280, 1800))
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
