"""The band filter of ``groups --new``: no false negatives, the false-positive rate its formula gives, and a file
used only for the index, tag and watermark it was written for (no Elasticsearch needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from es_integration.band_filter import PROBES, BandFilter, BandFilterStore
from scrapy_neardup.core.stored_signature import band_pairs, band_tokens, distinct_band_pairs, pair_tokens


def test_every_added_pair_may_be_held_and_others_rarely_are() -> None:
    rng = np.random.default_rng(7)
    held = rng.integers(0, 1 << 16, size=(20_000, 128), dtype=np.uint16)
    band_filter = BandFilter.sized_for(held.shape[0] * 22)
    band_filter.add(held)
    assert band_filter.may_hold(band_pairs(held)).all()  # no false negatives
    others = band_pairs(rng.integers(0, 1 << 16, size=(20_000, 128), dtype=np.uint16))
    rate = float(band_filter.may_hold(others).mean())
    expected = band_filter.false_positive_rate()
    assert 0 < expected < 0.02
    # 440,000 trials: the observed rate lies within a few standard deviations of (1 - e^(-h n / m))^h.
    assert abs(rate - expected) < 5 * np.sqrt(expected / others.size) + 1e-4, (rate, expected)
    empty = BandFilter.sized_for(10)
    assert not empty.may_hold(others).any() and PROBES == 3


def test_band_pairs_name_the_stored_band_tokens() -> None:
    values = np.random.default_rng(3).integers(0, 1 << 16, size=(5, 128), dtype=np.uint16)
    assert set(pair_tokens(np.unique(band_pairs(values)), 128)) == {t for row in band_tokens(values) for t in row}
    assert np.array_equal(np.unique(band_pairs(values)), distinct_band_pairs(values))


def test_a_filter_file_serves_only_its_index_tag_and_watermark(tmp_path: Path) -> None:
    store = BandFilterStore(tmp_path / "filters")
    values = np.random.default_rng(5).integers(0, 1 << 16, size=(100, 128), dtype=np.uint16)
    band_filter = BandFilter.sized_for(100 * 22)
    band_filter.add(values)
    store.save(band_filter, "uuid-a", "mh3-k128-word5-s1", 41)
    loaded = store.load("uuid-a", "mh3-k128-word5-s1", 41)
    assert loaded is not None and np.array_equal(loaded.words, band_filter.words) and loaded.keys == 2200
    assert store.load("uuid-a", "mh3-k128-word5-s1", 42) is None  # another run's watermark
    assert store.load("uuid-b", "mh3-k128-word5-s1", 41) is None  # another index (recreated under the name)
    assert store.load("uuid-a", "mh3-k64-word5-s1", 41) is None
    store.discard("uuid-a", "mh3-k128-word5-s1")
    assert store.load("uuid-a", "mh3-k128-word5-s1", 41) is None and not list((tmp_path / "filters").iterdir())


def test_a_damaged_filter_file_is_ignored(tmp_path: Path) -> None:
    store = BandFilterStore(tmp_path)
    store.save(BandFilter.sized_for(10), "u", "t", 1)
    bits = next(tmp_path.glob("*.npy"))
    bits.write_bytes(b"not a numpy file")
    assert store.load("u", "t", 1) is None


def test_an_extension_saved_over_another_runs_filter_removes_both(tmp_path: Path) -> None:
    """Two incremental runs on one machine load the same filter; the second to save would drop the first's
    documents, so its save removes the file instead (the next full --assign writes a new one)."""
    store = BandFilterStore(tmp_path)
    store.save(BandFilter.sized_for(10), "u", "t", 1)
    first, second = store.load("u", "t", 1), store.load("u", "t", 1)
    assert first is not None and second is not None
    assert store.save(first, "u", "t", 2, replaces=1)
    assert not store.save(second, "u", "t", 3, replaces=1)
    assert store.load("u", "t", 2) is None and store.load("u", "t", 3) is None and not list(tmp_path.iterdir())
