"""The mirror table: the decision rule, the host holding the kept copies is the original (met first on a tie),
twins met through a third host, canonical representatives, partial mirrors never skipped, saved state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scrapy_neardup.core.mirror_table import MIRRORS_FILE, HostCounts, MirrorTable, host_of
from scrapy_neardup.errors import StateError

A, B, C = "http://a.test", "http://b.test:8080", "https://c.test"


def test_host_of() -> None:
    assert host_of("HTTP://Example.COM/x?y") == "http://example.com:80"
    assert host_of("https://example.com:8443/") == "https://example.com:8443"
    assert host_of("no-url:00ff") is None
    # Only the scheme and authority are read: they end at the first "/", "?" or "#" after "//".
    assert host_of("http://a.test?q=http://b.test/") == "http://a.test:80"
    assert host_of("http://a.test#http://b.test/") == "http://a.test:80"
    assert host_of("http://user:pw@A.test:81/p") == "http://a.test:81"
    assert host_of("http://[::1]:8080/x") == "http://::1:8080"
    assert host_of("http://a.test:/x") == "http://a.test:80"
    assert host_of("http://a.test:99999/") is None  # a port out of range
    assert host_of("http://a.test:port/") is None
    assert host_of("file:///etc/hosts") is None
    assert host_of("//a.test/x") is None  # no scheme


def feed(table: MirrorTable, pages: int, twins: int) -> list:
    """A first seen; B's first `twins` pages copy A's (B's copy dropped naming A's page), the rest are B's own."""
    decisions = []
    table.see(host_of(A))  # type: ignore[arg-type]
    for i in range(pages):
        decisions += table.record(f"{A}/{i}", None)
        decisions += table.record(f"{B}/{i}", f"{A}/{i}" if i < twins else None)
    return decisions


def test_full_mirror_is_decided_once_at_min_pages() -> None:
    table = MirrorTable(min_pages=20, share=0.9)
    decisions = feed(table, 30, 30)
    assert [(d.mirror, d.original, d.copies, d.checked) for d in decisions] == [(host_of(B), host_of(A), 20, 20)]
    assert table.mirror_of(host_of(A)) is None  # type: ignore[arg-type]
    assert decisions[0].describe() == (f"host {host_of(B)} mirrors host {host_of(A)}: 20 of 20 pages are copies; "
                                       "skipping its requests (mirror: 20 of 20 checked pages are copies, share in "
                                       "[0.839, 1.000])")
    assert decisions[0].evidence == {"rule": "mirror", "shared": 20, "k": 20, "interval": [0.839, 1.0]}


def test_the_host_holding_the_kept_copies_is_the_original_whoever_was_met_first() -> None:
    """B's pages were checked first and kept; A's copies were dropped naming them: A is the mirror (the pipeline
    kept B's pages), although A was met first; B, whose pages the feed holds, is never skipped."""
    table = MirrorTable(min_pages=3, share=1.0)
    table.see(host_of(A))  # type: ignore[arg-type]
    for i in range(3):
        table.record(f"{B}/{i}", None)
        table.record(f"{A}/{i}", f"{B}/{i}")
    assert table.copies(host_of(B), host_of(A)) == 3 and table.copies(host_of(A), host_of(B)) == 3  # type: ignore[arg-type]
    assert table.holds(host_of(B), host_of(A)) == 3 and table.holds(host_of(A), host_of(B)) == 0  # type: ignore[arg-type]
    assert table.mirror_of(host_of(B)) is None  # type: ignore[arg-type]
    assert table.mirror_of(host_of(A)).original == host_of(B)  # type: ignore[arg-type,union-attr]


def test_on_a_tie_the_host_met_first_is_the_original() -> None:
    table = MirrorTable(min_pages=4, share=1.0)
    table.see(host_of(A))  # type: ignore[arg-type]
    table.see(host_of(B))  # type: ignore[arg-type]
    for i in range(4):  # the race went both ways: two contents kept on each host
        first, second = (A, B) if i % 2 else (B, A)
        table.record(f"{first}/{i}", None)
        table.record(f"{second}/{i}", f"{first}/{i}")
    assert table.holds(host_of(A), host_of(B)) == table.holds(host_of(B), host_of(A)) == 2  # type: ignore[arg-type]
    assert table.mirror_of(host_of(A)) is None  # type: ignore[arg-type]
    assert table.mirror_of(host_of(B)).original == host_of(A)  # type: ignore[arg-type,union-attr]


SCRIPT_THREE_HOSTS = """
from scrapy_neardup.core.mirror_table import MirrorTable
a, b, c = "http://127.0.0.1:8701", "http://127.0.0.1:8702", "http://127.0.0.1:8703"
table = MirrorTable(min_pages=4, share=0.9)
for host in (a, b, c):
    table.see(host)
for i in range(4):
    table.record(f"{a}/{i}", None)
for i in range(4):
    table.record(f"{b}/{i}", f"{a}/{i}")
for i in range(4):
    table.record(f"{c}/{i}", f"{a}/{i}")
print(sorted((d.mirror, d.original) for d in table.decisions))
"""


@pytest.mark.parametrize("seed", ["0", "1", "2", "3"])
def test_the_mirror_named_holds_the_kept_pages_whatever_the_hash_seed(seed: str) -> None:
    """A kept the pages, B and C copy them: C's pages have as many twins on B as on A, and B (met before C) ties
    with C on kept copies held. C mirrors A, the host its dropped pages name, under every PYTHONHASHSEED."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", SCRIPT_THREE_HOSTS], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": seed}).stdout
    a, b, c = (host_of(f"http://127.0.0.1:{port}") for port in (8701, 8702, 8703))
    assert out.strip() == str(sorted([(b, a), (c, a)]))


def test_twins_met_through_a_third_host_count() -> None:
    """A partner P reprints A's pages and was checked first: A's and the mirror B's copies both name P's page.
    They are still twins of each other, so B is recognized as A's mirror; P, holding those contents but copying
    only part of A, is no mirror and neither is A."""
    table = MirrorTable(min_pages=10, share=0.9)
    p = "http://p.test"
    for host in (A, B, p):
        table.see(host_of(host))  # type: ignore[arg-type]
    for i in range(10):
        if i < 5:  # reprinted by P, whose copy came first
            table.record(f"{p}/r{i}", None)
            table.record(f"{A}/{i}", f"{p}/r{i}")
            table.record(f"{B}/{i}", f"{p}/r{i}")
        else:
            table.record(f"{A}/{i}", None)
            table.record(f"{B}/{i}", f"{A}/{i}")
    assert table.copies(host_of(B), host_of(A)) == 10  # type: ignore[arg-type]
    assert table.mirror_of(host_of(B)).original == host_of(A)  # type: ignore[arg-type,union-attr]
    assert table.mirror_of(host_of(A)) is None and table.mirror_of(host_of(p)) is None  # type: ignore[arg-type]


def test_a_canonical_page_met_late_makes_its_host_hold_the_content() -> None:
    """B's copies were kept first, but each names A's page as canonical: A's pages, met later and dropped naming
    B's, are the contents' representatives, so A holds them and B is the mirror."""
    table = MirrorTable(min_pages=3, share=1.0)
    table.see(host_of(B))  # type: ignore[arg-type]
    table.see(host_of(A))  # type: ignore[arg-type]
    for i in range(3):
        table.record(f"{B}/{i}", None)
        table.record(f"{A}/{i}", f"{B}/{i}", representative_of=f"{B}/{i}")
    assert table.holds(host_of(A), host_of(B)) == 3 and table.holds(host_of(B), host_of(A)) == 0  # type: ignore[arg-type]
    assert table.mirror_of(host_of(A)) is None  # type: ignore[arg-type]
    assert table.mirror_of(host_of(B)).original == host_of(A)  # type: ignore[arg-type,union-attr]


@pytest.mark.parametrize(("twins", "mirror"), [(26, False), (27, True)])
def test_share_bounds_the_skip(twins: int, mirror: bool) -> None:
    table = MirrorTable(min_pages=30, share=0.9)
    feed(table, 30, twins)  # 27 of 30 = 0.9 exactly
    assert (table.mirror_of(host_of(B)) is not None) == mirror  # type: ignore[arg-type]


def test_save_load_and_damaged_state(tmp_path: Path) -> None:
    table = MirrorTable(min_pages=5)
    feed(table, 6, 6)
    table.record(f"{C}/x", None)
    table.save(tmp_path)
    again = MirrorTable(min_pages=5)
    assert [(d.mirror, d.copies) for d in again.load(tmp_path)] == [(host_of(B), 6)]
    assert again.checked(host_of(B)) == 6 and again.copies(host_of(B), host_of(A)) == 6  # type: ignore[arg-type]
    assert again.holds(host_of(A), host_of(B)) == 6  # type: ignore[arg-type]
    stricter = MirrorTable(min_pages=10)  # decisions follow the current settings, not the saved ones
    assert stricter.load(tmp_path) == []
    # A file written before the table counted holds: the pairs go by "met first".
    data = json.loads((tmp_path / MIRRORS_FILE).read_text())
    del data["holds"]
    older = MirrorTable(min_pages=5)
    assert [(d.mirror, d.original) for d in older.merge_json(data)] == [(host_of(B), host_of(A))]
    (tmp_path / MIRRORS_FILE).write_text("{not json")
    with pytest.raises(StateError, match="damaged"):
        MirrorTable().load(tmp_path)
    assert (tmp_path / MIRRORS_FILE).read_text() == "{not json"


def test_the_fleet_decides_on_the_totals_and_its_earliest_first_seen() -> None:
    """Two processes each check 6 of B's pages (all copies of A's): alone neither reaches min_pages = 10;
    with the other's counts pulled, both decide B mirrors A, and A was first seen by the fleet."""
    one, two = MirrorTable(min_pages=10, share=0.9), MirrorTable(min_pages=10, share=0.9)
    assert feed(one, 6, 6) == [] and feed(two, 6, 6) == []
    assert one.checked(host_of(B)) == 6  # type: ignore[arg-type]
    pushed_by_two = two.local_counts()
    assert pushed_by_two.checked[host_of(B)] == 6 and pushed_by_two.twins[(host_of(B), host_of(A))] == 6
    decisions = one.set_fleet(pushed_by_two)
    assert [(d.mirror, d.original, d.copies, d.checked) for d in decisions] == [(host_of(B), host_of(A), 12, 12)]
    assert one.set_fleet(pushed_by_two) == []  # decided once
    assert [d.mirror for d in two.set_fleet(one.local_counts())] == [host_of(B)]


def test_the_fleet_can_keep_a_partial_mirror_or_a_host_seen_first_elsewhere() -> None:
    table = MirrorTable(min_pages=10, share=0.9)
    feed(table, 6, 6)
    # Others checked 8 pages of B without a twin: 6 of 14 copies, a partial mirror, never skipped.
    others = MirrorTable(min_pages=10, share=0.9)
    for i in range(8):
        others.record(f"{B}/own-{i}", None)
    assert table.set_fleet(others.local_counts()) == [] and table.checked(host_of(B)) == 14  # type: ignore[arg-type]
    # Others learned of the pair only through counts without holds (a store that keeps none), and met B before
    # this process met A: on the tie that leaves, B, met first by the fleet, is the original.
    table = MirrorTable(min_pages=10, share=0.9)
    table.see(host_of(A))  # type: ignore[arg-type]
    table.see(host_of(B))  # type: ignore[arg-type]
    for i in range(3):
        table.record(f"{B}/{i}", f"{A}/{i}")
    counts = HostCounts(checked={host_of(B): 9}, first_seen={host_of(B): table.first_seen(host_of(A)) - 1.0},  # type: ignore[arg-type,dict-item]
                        twins={(host_of(B), host_of(A)): 9}, holds={(host_of(B), host_of(A)): 3})  # type: ignore[dict-item]
    assert table.set_fleet(counts) == []  # holds 3 : 3, B met first by the fleet
    assert table.first_seen(host_of(B)) < table.first_seen(host_of(A))  # type: ignore[arg-type]
    assert table.original_of_pair(host_of(A), host_of(B)) == host_of(B)  # type: ignore[arg-type]
