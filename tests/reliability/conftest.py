"""Fixtures of the reliability tests (issue 6, items 3 and 4: hostile input, state damage).

Every test reports what it tried and what was lost through the ``ledger`` fixture; the table is printed at the
end of the run (``Reliability ledger``), and a test fails when anything was lost beyond what it allows.

Tests marked ``slow`` here (the ``kill -9`` soak, about 35 s) are deselected unless the ``-m`` expression names
``slow`` or ``NEARDUP_SLOW=1`` is set: the default run of this directory stays under two minutes. (Deselected,
not skipped: under ``CI`` a skip fails the run.)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent / "scrapy"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from neardup_testkit import Page  # noqa: E402  (after the path set-up above)
from reliability_kit import LEDGER, Ledger, RawPage, RawSiteServer  # noqa: E402


@pytest.fixture
def ledger(request: pytest.FixtureRequest) -> Ledger:
    return Ledger(request.node.name)


@pytest.fixture
def serve_raw_site() -> Iterator[Callable[..., RawSiteServer]]:
    """``serve_raw_site(pages, delay=0.0) -> RawSiteServer`` on 127.0.0.1, stopped after the test."""
    servers: list[RawSiteServer] = []

    def start(pages: dict[str, Page | RawPage], delay: float = 0.0) -> RawSiteServer:
        server = RawSiteServer(pages, delay=delay).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow" in (config.getoption("markexpr") or "") or os.environ.get("NEARDUP_SLOW", "") not in ("", "0"):
        return
    slow = [item for item in items if item.get_closest_marker("slow") and HERE in Path(str(item.path)).parents]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item not in slow]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not LEDGER:
        return
    write = terminalreporter.write_line
    terminalreporter.section("Reliability ledger: what each test tried and what was lost")
    for entry in LEDGER:
        figures = ", ".join(f"{k}={v}" for k, v in entry.figures.items())
        write(f"{entry.test}: tried {entry.tried}; lost {entry.lost}" + (f" ({entry.notes})" if entry.notes else "")
              + (f"; {figures}" if figures else ""))
