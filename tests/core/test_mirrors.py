"""The mirror table: the decision rule, first seen kept, partial mirrors never skipped, saved state."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrapy_neardup.core.index import StateError
from scrapy_neardup.core.mirrors import MIRRORS_FILE, MirrorTable, host_of

A, B, C = "http://a.test", "http://b.test:8080", "https://c.test"


def test_host_of() -> None:
    assert host_of("HTTP://Example.COM/x?y") == "http://example.com:80"
    assert host_of("https://example.com:8443/") == "https://example.com:8443"
    assert host_of("no-url:00ff") is None


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
                                       "skipping its requests")


def test_twins_count_in_either_direction_and_first_seen_is_kept() -> None:
    table = MirrorTable(min_pages=3, share=1.0)
    table.see(host_of(A))  # type: ignore[arg-type]
    for i in range(3):  # B's pages arrive first and are kept; A's copies are dropped naming them
        table.record(f"{B}/{i}", None)
        table.record(f"{A}/{i}", f"{B}/{i}")
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
    stricter = MirrorTable(min_pages=10)  # decisions follow the current settings, not the saved ones
    assert stricter.load(tmp_path) == []
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
    # Others met B before this process met A: B is the one seen first, so B is kept, whatever the copies.
    table = MirrorTable(min_pages=10, share=0.9)
    feed(table, 6, 6)
    fleet = table.local_counts()
    earlier = MirrorTable(min_pages=10, share=0.9)
    earlier.see(host_of(B))  # type: ignore[arg-type]
    earlier.record(f"{B}/{0}", f"{A}/{0}")
    counts = earlier.local_counts()
    counts.first_seen[host_of(B)] = fleet.first_seen[host_of(A)] - 1.0  # type: ignore[index]
    counts.checked[host_of(B)] = 6  # type: ignore[index]
    counts.twins[(host_of(B), host_of(A))] = 6  # type: ignore[index]
    assert table.set_fleet(counts) == []
    assert table.first_seen(host_of(B)) < table.first_seen(host_of(A))  # type: ignore[arg-type]
