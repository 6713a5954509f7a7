"""The stored signature: its forms (tokens, compact encoding, band tokens), the one ranking, band clustering."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_neardup.core.clustering import broder_clusters, cluster_labels, components, union_find
from scrapy_neardup.core.match import best_first
from scrapy_neardup.core.sketch import Sketcher, parse_tag
from scrapy_neardup.core.stored_signature import (
    StoredSignature,
    band_keys,
    band_layout,
    band_tokens,
    decode_many,
    distinct_band_tokens,
    encode_many,
    values_from_token_lists,
)
from scrapy_neardup.errors import IncompatibleSketches


def test_forms_round_trip() -> None:
    sketcher = Sketcher()
    sketch = sketcher.sketch("the quick brown fox jumps over the lazy dog again and again")
    stored = StoredSignature.from_sketch(sketch)
    assert stored.values.dtype == np.uint16 and np.array_equal(stored.values, sketch.signature & 0xFFFF)
    assert StoredSignature.from_tokens(stored.tokens()[::-1], 128, sketch.tag).digest() == stored.digest()
    text = stored.encode()
    assert len(text) == 344 and "=" not in text  # padded to a multiple of 3 bytes: joinable encodings
    assert StoredSignature.decode(text, 128, sketch.tag).digest() == stored.digest()
    many = np.random.default_rng(1).integers(0, 1 << 16, size=(50, 128), dtype=np.uint16)
    texts = encode_many(many)
    assert texts[7] == StoredSignature(many[7], "t").encode()
    values, valid = decode_many([*texts, "short", None, "!" * 344], 128)
    assert valid.tolist() == [True] * 50 + [False] * 3 and np.array_equal(values[:50], many)
    parsed, ok = values_from_token_lists([StoredSignature(r, "t").tokens() for r in many], 128)
    assert ok.all() and np.array_equal(parsed, many)
    with pytest.raises(ValueError, match="empty"):
        StoredSignature.from_sketch(sketcher.sketch("   "))
    with pytest.raises(IncompatibleSketches):
        stored.shared_positions(StoredSignature(stored.values, "other"))


def test_band_tokens_find_every_pair_at_or_above_the_layout() -> None:
    """Pigeonhole: a pair sharing >= t0 positions shares a band token; below, often not."""
    k = 128
    t0 = band_layout(k)
    rng = np.random.default_rng(2)
    base = rng.integers(0, 1 << 16, size=k, dtype=np.uint16)
    for disagree in range(0, k - t0 + 1):
        other = base.copy()
        spots = rng.choice(k, size=disagree, replace=False)
        other[spots] ^= 1
        tokens = StoredSignature(base, "t").band_tokens(), StoredSignature(other, "t").band_tokens()
        assert len(tokens[0]) == k - t0 + 1 and set(tokens[0]) & set(tokens[1])
    assert band_keys(base[None, :], t0).shape == (1, k - t0 + 1)


def test_distinct_band_tokens_are_the_set_of_every_rows_band_tokens() -> None:
    """The batch form used by ``groups --new``: each token once, band by band, whatever the repeats."""
    rng = np.random.default_rng(4)
    many = rng.integers(0, 1 << 16, size=(300, 128), dtype=np.uint16)
    many[10] = many[3]  # an exact copy: all its tokens repeat
    many[20, :100] = many[4, :100]  # a partial copy: its first bands repeat
    tokens = distinct_band_tokens(many)
    assert len(tokens) == len(set(tokens)) == len({t for row in band_tokens(many) for t in row})
    assert set(tokens) == {t for row in band_tokens(many) for t in row}
    assert [int(t.split("_")[1]) for t in tokens] == sorted(int(t.split("_")[1]) for t in tokens)
    assert len(tokens) < 300 * (128 - band_layout(128) + 1)
    assert distinct_band_tokens(many[:0]) == []


def test_parse_tag_reads_make_tag() -> None:
    parts = parse_tag(Sketcher(num_perm=64, shingle="char", shingle_size=7, seed=5).tag)
    assert (parts.num_perm, parts.shingle, parts.width, parts.seed) == (64, "char", 7, 5)
    with pytest.raises(ValueError, match="not a sketch parameter tag"):
        parse_tag("k128")


def test_best_first_is_the_one_ranking() -> None:
    exact = [False, True, False, False, False]
    shared = [120, 100, 120, 126, 120]
    order = [3.0, 9.0, 1.0, 5.0, 1.0]
    assert best_first(exact, shared, order, ["a", "b", "c", "d", "e"]).tolist() == [1, 3, 2, 4, 0]
    assert best_first(exact, shared, order).tolist()[:2] == [1, 3]


@pytest.mark.parametrize("seed", range(6))
def test_cluster_labels_equal_broder_clusters(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(50, 400)), 24
    t = int(rng.integers(12, 23))
    bases = rng.integers(0, 5, size=(n // 6 + 1, k))
    values = bases[rng.integers(0, bases.shape[0], n)]
    noise = rng.random((n, k)) < rng.uniform(0.05, 0.3)
    values[noise] = rng.integers(0, 5, size=int(noise.sum()))
    values = values.astype(np.uint16)
    labels, stats = cluster_labels(values, t, chunk=29)
    clusters: dict[int, list[int]] = {}
    for row, label in enumerate(labels.tolist()):
        clusters.setdefault(label, []).append(row)
    got = sorted(sorted(c) for c in clusters.values() if len(c) > 1)
    assert got == broder_clusters(values.astype(np.uint32), t)
    assert stats.distinct + stats.twins == n and stats.links > 0


def test_cluster_labels_walk_little_of_a_run_of_near_identical_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """3,000 distinct rows a few positions off one template share most band keys, and every pair shares >= t.
    Joined at distance 1, a band's run of them is one cluster: it is dropped then, not walked to distance 3,000
    (4.5 million position pairs a band, over a minute), and the path its joins make is climbed by pointer
    doubling (every row found points at its root afterwards)."""
    rng = np.random.default_rng(5)
    values = np.tile(rng.integers(0, 1 << 16, size=128, dtype=np.uint16), (3000, 1))
    for row in values:
        row[rng.choice(128, size=4, replace=False)] = rng.integers(0, 1 << 16, size=4)
    calls = 0
    join_verified = components._join_verified

    def counting(*args: object, **kwargs: object) -> int:
        nonlocal calls
        calls += 1
        return join_verified(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(components, "_join_verified", counting)
    labels, _ = cluster_labels(values, 107)
    assert set(labels.tolist()) == {0}
    assert calls < 200  # one per distance walked, per band: was ~3,000 per band
    parent = np.concatenate(([0], np.arange(9_999)))  # the path 9999 -> 9998 -> ... -> 0
    items = np.arange(10_000)
    assert np.array_equal(union_find.find_roots(parent, items), np.zeros(10_000, dtype=np.int64))
    assert np.array_equal(parent, np.zeros(10_000, dtype=np.int64))
