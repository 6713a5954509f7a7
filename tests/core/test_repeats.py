"""Repeats in the embedded store: which keys this crawl met survives a stop (snapshot) and a kill (journal), and
only for the same crawl (the crawl's identity: NEARDUP_CRAWL_ID, else saved in JOBDIR)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from scrapy_neardup import Sketcher
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.theory import min_shared_for
from scrapy_neardup.errors import NearDupSettingsError
from scrapy_neardup.store.config import CRAWL_ID_FILE, crawl_identity
from scrapy_neardup.store.embedded import JOURNAL_FILE, EmbeddedBackend
from scrapy_neardup.store.journal import JOURNAL_FORMAT

SKETCHER = Sketcher()
K, T = SKETCHER.num_perm, min_shared_for(0.9, SKETCHER.num_perm)


def sketch(seed: int):  # noqa: ANN201 - a Sketch
    rng = np.random.default_rng(seed)
    return SKETCHER.sketch(" ".join(f"w{v}" for v in rng.integers(0, 100_000, size=300)))


PAGES = [(f"https://r.test/{i}", sketch(i)) for i in range(12)]


def opened(state: Path, crawl: str) -> EmbeddedBackend:
    store = EmbeddedBackend(K, T, SKETCHER.tag, state_dir=state, crawl_id=crawl)
    asyncio.run(store.open())
    return store


def outcomes(store: EmbeddedBackend, pages: list[tuple[str, object]]) -> list[str]:
    return [d.outcome for d in asyncio.run(store.check_and_add_many(pages))]  # type: ignore[arg-type]


def die(store: EmbeddedBackend) -> None:
    """What ``kill -9`` leaves: descriptors closed by the kernel, nothing saved."""
    store._release()


def test_a_killed_crawl_resumed_knows_the_pages_it_met(tmp_path: Path) -> None:
    first = opened(tmp_path, "crawl-1")
    assert outcomes(first, PAGES[:8]) == ["kept"] * 8
    asyncio.run(first.close())

    second = opened(tmp_path, "crawl-2")  # a later crawl: revisits, once each
    assert outcomes(second, PAGES[:3]) == ["revisit"] * 3
    assert outcomes(second, PAGES[8:10]) == ["kept"] * 2
    assert outcomes(second, PAGES[:1]) == ["repeat"]
    die(second)

    resumed = opened(tmp_path, "crawl-2")  # the same crawl, resumed: its revisits (seen) and kept pages (puts)
    assert resumed.open_stats["journal_replayed"] == 2
    assert outcomes(resumed, PAGES[:10]) == ["repeat"] * 3 + ["revisit"] * 5 + ["repeat"] * 2
    die(resumed)

    other = opened(tmp_path, "crawl-3")  # another crawl on the killed crawl's store: revisits again
    assert outcomes(other, PAGES[:10]) == ["revisit"] * 10
    asyncio.run(other.close())


def test_a_crawl_stopped_gracefully_and_resumed_keeps_its_flags(tmp_path: Path) -> None:
    first = opened(tmp_path, "a")
    outcomes(first, PAGES[:6])
    asyncio.run(first.close())
    second = opened(tmp_path, "b")
    assert outcomes(second, PAGES[:2]) == ["revisit"] * 2
    asyncio.run(second.close())  # the snapshot holds b's flags
    resumed = opened(tmp_path, "b")
    assert resumed.index.meta["crawl"] == "b" and resumed.index.seen_count == 2
    assert outcomes(resumed, PAGES[:4]) == ["repeat", "repeat", "revisit", "revisit"]
    asyncio.run(resumed.close())
    assert outcomes(opened(tmp_path, "c"), PAGES[:6]) == ["revisit"] * 6


def test_a_journal_of_another_crawl_is_rewritten_to_name_this_one(tmp_path: Path) -> None:
    first = opened(tmp_path, "a")
    outcomes(first, PAGES[:4])
    asyncio.run(first.close())  # an empty journal naming crawl a
    second = opened(tmp_path, "b")  # nothing to replay: the journal is started anew, naming b
    assert outcomes(second, PAGES[:2]) == ["revisit"] * 2
    die(second)
    data = (tmp_path / JOURNAL_FILE).read_bytes()
    assert int.from_bytes(data[8:12], "little") == JOURNAL_FORMAT == 4 and b'"crawl": "b"' in data
    assert outcomes(opened(tmp_path, "b"), PAGES[:3]) == ["repeat", "repeat", "revisit"]


def test_crawl_identity(tmp_path: Path) -> None:
    assert crawl_identity({"NEARDUP_CRAWL_ID": "fleet-2026-11-24"}) == "fleet-2026-11-24"
    jobdir = tmp_path / "job"
    first = crawl_identity({"JOBDIR": str(jobdir)})
    assert (jobdir / CRAWL_ID_FILE).read_text().strip() == first
    assert crawl_identity({"JOBDIR": str(jobdir)}) == first  # a resume: the same crawl
    assert crawl_identity({"JOBDIR": str(tmp_path / "job-2")}) != first
    assert crawl_identity({}) != crawl_identity({})  # without JOBDIR: a crawl per run
    with pytest.raises(NearDupSettingsError, match="NEARDUP_CRAWL_ID='a b' is not valid"):
        crawl_identity({"NEARDUP_CRAWL_ID": "a b"})
    store = EmbeddedBackend.from_settings({"JOBDIR": str(jobdir)}, SketchParams.create())
    assert store.crawl_id == first
