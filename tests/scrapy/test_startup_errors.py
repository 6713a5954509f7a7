"""Start-up failures of every component the add-on installs are one line, and ``scrapy crawl`` exits 1; unknown
``NEARDUP_*`` settings get one WARNING per crawl.

Each test runs ``scrapy crawl`` in a project of its own (``run_scrapy_command``) against a site on 127.0.0.1.
The Elasticsearch settings are refused before any connection, so no node is needed: the URL is a closed port.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from neardup_testkit import Page, article_words, html_page, run_scrapy_command

ADDON = {"ADDONS": {"scrapy_neardup.NearDuplicateAddon": 0}, "ITEM_PIPELINES": {}}
CLOSED = "http://127.0.0.1:1"  # nothing listens there; never reached in these tests
ES = ["-s", "NEARDUP_BACKEND=elasticsearch", "-s", f"NEARDUP_ES_URL={CLOSED}", "-s", "NEARDUP_ES_INDEX=startup"]
#: A log line at ERROR or CRITICAL (Scrapy's format: ``<date> <time> [<logger>] <LEVEL>: <message>``).
ERROR_LINE = re.compile(r"^\S+ \S+ \[[^\]]+\] (ERROR|CRITICAL): ")


def _site(serve_site: Any) -> Any:
    return serve_site({"/": Page(html_page("Home", article_words(3, 80), links=["/a.html"])),
                       "/a.html": Page(html_page("A", article_words(4, 80)))})


def _crawl(tmp_path: Path, server: Any, *args: str, settings: dict[str, Any] | None = None) -> Any:
    return run_scrapy_command(tmp_path, "crawl", "neardup_test", "-a", f"start_url={server.url}/", *args,
                              settings=settings if settings is not None else ADDON)


def _error_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if ERROR_LINE.match(line)]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["-s", "NEARDUP_ES_INDEX="], "NEARDUP_ES_INDEX"),  # the report: no index
        (["-s", "NEARDUP_ES_INDEX=Not An Index"], "NEARDUP_ES_INDEX"),
        (["-s", "NEARDUP_ES_URL=127.0.0.1:9200"], "NEARDUP_ES_URL"),  # no scheme
        (["-s", f"NEARDUP_ES_URL={CLOSED},https://127.0.0.1:2"], "NEARDUP_ES_URL"),  # two schemes: the client's rule
        (["-s", "NEARDUP_ES_TIMEOUT=soon"], "NEARDUP_ES_TIMEOUT"),
        (["-s", "NEARDUP_ES_TIMEOUT=0"], "NEARDUP_ES_TIMEOUT"),
        (["-s", "NEARDUP_ES_USERNAME=elastic"], "NEARDUP_ES_PASSWORD"),  # a username without password
        (["-s", "NEARDUP_ES_API_KEY=a2V5", "-s", "NEARDUP_ES_USERNAME=u", "-s", "NEARDUP_ES_PASSWORD=p"],
         "NEARDUP_ES_API_KEY"),
        (["-s", "NEARDUP_ES_BATCH_SIZE=0"], "NEARDUP_ES_BATCH_SIZE"),
    ],
    ids=["no-index", "bad-index", "url-no-scheme", "url-two-schemes", "timeout-text", "timeout-zero",
         "username-alone", "key-and-password", "batch-size"],
)
def test_addon_with_a_wrong_elasticsearch_setting_is_one_line_and_exit_1(
    args: list[str], named: str, tmp_path: Path, serve_site: Any
) -> None:
    server = _site(serve_site)
    proc = _crawl(tmp_path, server, *ES, *args)
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = _error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr
    assert "[scrapy_neardup.crawl.startup] CRITICAL: " in errors[0] and named in errors[0], errors
    assert "Traceback" not in proc.stderr and "never retrieved" not in proc.stderr
    assert server.requests == []  # stopped before any request


@pytest.mark.parametrize(
    ("settings", "extra"),
    [
        (ADDON, ["-s", "NEARDUP_ACTION=bogus"]),  # met first by the mirror-host middleware
        ({**ADDON, "NEARDUP_MIRRORS_ENABLED": False}, ["-s", "NEARDUP_SOFT404_TIMEOUT=-1"]),  # by the soft-404 one
        ({**ADDON, "NEARDUP_MIRRORS_ENABLED": False, "NEARDUP_SOFT404_ENABLED": False},
         [*ES, "-s", "NEARDUP_ES_INDEX="]),  # by the pipeline alone
        ({}, [*ES, "-s", "NEARDUP_ES_TIMEOUT=soon"]),  # ITEM_PIPELINES without the add-on (run_scrapy_command's)
    ],
    ids=["mirrors-first", "soft404-first", "pipeline-only", "item-pipelines"],
)
def test_each_component_reports_a_wrong_setting_the_same_way(
    settings: dict[str, Any], extra: list[str], tmp_path: Path, serve_site: Any
) -> None:
    server = _site(serve_site)
    proc = _crawl(tmp_path, server, *extra, settings=settings)
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = _error_lines(proc.stderr)
    assert len(errors) == 1 and "[scrapy_neardup.crawl.startup] CRITICAL: NEARDUP_" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert server.requests == []


@pytest.mark.parametrize("setting", ["NEARDUP_THRESHOLD = 1.5", "NEARDUP_ACTION = 'bogus'"])
def test_a_startproject_project_at_debug_gets_one_line_and_no_unretrieved_task(
    setting: str, tmp_path: Path, serve_site: Any
) -> None:
    """A project made by ``scrapy startproject`` logs at DEBUG (Scrapy's default). A wrong setting is still one
    error line and exit 1: the crawl's task, which Scrapy re-raises the failure from and nobody awaits, has its
    exception retrieved, so asyncio prints no "Task exception was never retrieved" traceback."""
    import os
    import subprocess
    import sys

    server = _site(serve_site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-m", "scrapy", "startproject", "site_copy"], cwd=tmp_path, check=True,
                   capture_output=True, env=env)
    project = tmp_path / "site_copy"
    with open(project / "site_copy" / "settings.py", "a") as settings:
        settings.write(f'\nADDONS = {{"scrapy_neardup.NearDuplicateAddon": 0}}\n{setting}\n')
    (project / "site_copy" / "spiders" / "pages.py").write_text(
        "from neardup_testkit import NearDupTestSpider\n\n\nclass Pages(NearDupTestSpider):\n    name = 'pages'\n")
    proc = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "pages", "-a", f"start_url={server.url}/"],
                          cwd=project, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "DEBUG: " in proc.stderr  # the project's level: DEBUG
    errors = _error_lines(proc.stderr)
    assert len(errors) == 1 and "CRITICAL: NEARDUP_" in errors[0], proc.stderr
    assert setting.split()[0] in errors[0]
    assert "never retrieved" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert server.requests == []


def test_damaged_mirror_table_stops_the_crawl_and_is_left_untouched(tmp_path: Path, serve_site: Any) -> None:
    server = _site(serve_site)
    state = tmp_path / "state"
    state.mkdir()
    damaged = state / "neardup-hosts.json"
    damaged.write_text("not json")
    proc = _crawl(tmp_path, server, "-s", f"NEARDUP_STATE_DIR={state}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = _error_lines(proc.stderr)
    assert len(errors) == 1 and "CRITICAL: StateError: " in errors[0] and str(damaged) in errors[0], proc.stderr
    assert "NEARDUP_RESET" in errors[0]  # the way out
    assert "Traceback" not in proc.stderr
    assert damaged.read_text() == "not json"
    assert server.requests == []


def test_a_misspelt_setting_is_one_warning_naming_the_right_one(tmp_path: Path, serve_site: Any) -> None:
    server = _site(serve_site)
    proc = _crawl(tmp_path, server, "-s", "NEARDUP_TRESHOLD=0.8")
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if " WARNING: " in line and "NEARDUP_TRESHOLD" in line]
    # Once per crawl, although three components (two middlewares and the pipeline) read the settings.
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].endswith(
        "[scrapy_neardup.crawl.startup] WARNING: unknown setting NEARDUP_TRESHOLD is ignored; "
        "did you mean NEARDUP_THRESHOLD?"
    )
    assert "'item_scraped_count': 2" in proc.stderr  # the crawl ran
    assert _error_lines(proc.stderr) == []
