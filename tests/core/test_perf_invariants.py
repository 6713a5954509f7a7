"""Invariants of the performance internals: vectorized shingling and MinHash against plain reference code, and
the embedded index's tiers (recent set, mid and main runs, bucket directories, large buckets, merges) against
brute force, with thresholds shrunk so that every code path runs on small inputs."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from scrapy_neardup import Sketch, SketchIndex
from scrapy_neardup.core import band_runs, page_keys
from scrapy_neardup.core import minhash as minhash_module
from scrapy_neardup.core import shingles as shingles_module
from scrapy_neardup.core.hashing import MASK64, fmix64, fmix64_int
from scrapy_neardup.core.minhash import EMPTY, OnePermutationHasher
from scrapy_neardup.core.shingles import shingle_hashes

# -- shingling ---------------------------------------------------------------------------------------------


def _word_hash(word: bytes) -> int:
    """The documented word hash, one word at a time with Python ints."""
    length = len(word)
    chunks = [int.from_bytes(word[i : i + 8].ljust(8, b"\0"), "little") for i in range(0, length, 8)]
    h = fmix64_int(chunks[0] ^ (length * int(shingles_module._LENGTH_SALT) & MASK64))
    for j, chunk in enumerate(chunks[1:], start=1):
        term = fmix64_int(chunk ^ int(shingles_module._CHUNK_SALT))
        h = (h + term * pow(shingles_module._CHUNK_BASE, j, 1 << 64)) & MASK64
    return h


def _reference(texts: list[bytes], kind: str, width: int) -> tuple[list[int], list[int]]:
    base = int(shingles_module._UNIT_BASE)
    hashes: list[int] = []
    counts: list[int] = []
    for text in texts:
        if kind == "word":
            units = [_word_hash(w) for w in re.split(rb"[\x00-\x20]+", text) if w]
        else:
            units = [ord(c) for c in text.decode("utf-8", errors="replace")]
        if len(units) >= width:
            windows = [units[i : i + width] for i in range(len(units) - width + 1)]
        else:
            windows = [units] if units else []
        for window in windows:
            h = 0
            for unit in window:
                h = (h * base + unit) & MASK64
            hashes.append(h ^ len(window))
        counts.append(len(windows))
    return hashes, counts


def _random_texts(rng: random.Random) -> list[bytes]:
    vocabulary = [
        bytes(rng.choice(b"abcdefgh\xc3\xa9_0") for _ in range(rng.choice([1, 2, 5, 7, 8, 9, 15, 16, 17, 31, 40])))
        for _ in range(200)
    ]
    texts = []
    for _ in range(rng.randint(0, 9)):
        words = [rng.choice(vocabulary) for _ in range(rng.choice([0, 1, 3, 4, 5, 6, 30, 400]))]
        texts.append((b" " if rng.random() < 0.9 else b" \t ").join(words))
    return texts


@pytest.mark.parametrize("group_bytes", [1, 64, 4096, 1 << 17])
def test_shingle_hashes_match_the_reference(monkeypatch: pytest.MonkeyPatch, group_bytes: int) -> None:
    monkeypatch.setattr(shingles_module, "GROUP_BYTES", group_bytes)
    rng = random.Random(group_bytes)
    for _ in range(40):
        texts = _random_texts(rng)
        for kind, width in [("word", 5), ("word", 1), ("word", 3), ("char", 9), ("char", 1)]:
            hashes, counts = shingle_hashes(texts, kind, width)  # type: ignore[arg-type]
            expected_hashes, expected_counts = _reference(texts, kind, width)
            assert counts.tolist() == expected_counts
            assert hashes.dtype == np.uint64 and hashes.tolist() == expected_hashes


def test_shingle_hashes_do_not_depend_on_the_batch() -> None:
    texts = [b"a b c d e f g", b"", b"x y", b"a b c d e f g h " * 50 + b"zz"]
    together, counts = shingle_hashes(texts)
    alone = [shingle_hashes([t])[0] for t in texts]
    assert together.tolist() == np.concatenate(alone).tolist()
    assert counts.tolist() == [a.size for a in alone]


def test_huge_token_costs_one_vectorized_pass() -> None:
    text = b"x" * 3_000_000 + b" a b c d e"
    hashes, counts = shingle_hashes([text])
    assert counts.tolist() == [2] and len(set(hashes.tolist())) == 2
    assert shingle_hashes([text])[0].tolist() == hashes.tolist()


# -- MinHash -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_perm", [1, 7, 64, 128, 100])
def test_blocked_signatures_match_a_direct_computation(monkeypatch: pytest.MonkeyPatch, num_perm: int) -> None:
    monkeypatch.setattr(minhash_module, "_BLOCK", 37)  # blocks cut documents in the middle
    rng = np.random.default_rng(num_perm)
    counts = rng.integers(0, 300, size=25)
    counts[3] = 0
    hashes = rng.integers(0, 2**64, size=int(counts.sum()), dtype=np.uint64)
    hasher = OnePermutationHasher(num_perm, seed=3)
    got = hasher.signatures(hashes, counts)
    g = fmix64(hashes ^ hasher._salt)
    bins = ((g >> np.uint64(32)) * np.uint64(num_perm) >> np.uint64(32)).astype(np.intp)
    values = np.minimum(g & np.uint64(0xFFFFFFFF), np.uint64(0xFFFFFFFE)).astype(np.uint32)
    doc = np.repeat(np.arange(counts.size), counts)
    table = np.full((counts.size, num_perm), EMPTY, dtype=np.uint32)
    np.minimum.at(table, (doc, bins), values)
    hasher._densify(table, counts)
    assert np.array_equal(got, table)


# -- the embedded index ------------------------------------------------------------------------------------

K, T, TAG = 64, 52, "perf-tag"


def _sketch(signature: np.ndarray, fingerprint: int = 0) -> Sketch:
    return Sketch(signature=signature.astype(np.uint32), fingerprint=fingerprint, tag=TAG, num_shingles=10)


def _workload(n: int, seed: int, hot_band: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    sigs = rng.integers(0, 2**32 - 1, size=(n, K), dtype=np.uint32)
    if hot_band:  # many pages share their first band: buckets larger than the lookup window
        sigs[:, :5] = rng.integers(0, 2, size=(n, 5))
    for i in range(1, n, 3):
        source = rng.integers(0, i)
        keep = rng.random(K) < rng.uniform(0.6, 1.0)
        sigs[i, keep] = sigs[source, keep]
    return sigs


@pytest.fixture
def small_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flush every few pages, a small lookup window, directories that grow with the index."""
    monkeypatch.setattr(band_runs, "_RECENT_MIN_PAGES", 8)
    monkeypatch.setattr(band_runs, "_RECENT_PAGES", 64)
    monkeypatch.setattr(band_runs, "_WINDOW", 3)
    monkeypatch.setattr(band_runs, "_bits_for", lambda entries: max(18, min(28, entries.bit_length() + 3)))


@pytest.mark.parametrize("hot_band", [False, True])
def test_index_agrees_with_brute_force_through_merges(small_tiers: None, hot_band: bool, tmp_path: Path) -> None:
    sigs = _workload(12_000, seed=11 + hot_band, hot_band=hot_band)
    index = SketchIndex(K, T, TAG)
    kept: list[int] = []
    bits_seen = set()
    for i in range(10_000):
        match = index.check_and_add(str(i), _sketch(sigs[i], i))
        if match is None:
            kept.append(i)
        bits_seen.add(index._runs._main_bits)
    assert len(bits_seen) >= 2  # main's directory was recounted with more bits
    assert index._runs._main and index._runs._used > index._runs._main  # both runs are in use
    if hot_band:
        assert index._runs._big
    # Every kept page is found again, by itself.
    for page in kept[::7]:
        best = index.best_match(_sketch(sigs[page], page))
        assert best is not None and best.shared == K and best.exact
    # New pages: exactly the brute-force t-of-k answer on the stored 16-bit values, before and after load.
    stored = sigs[kept] & 0xFFFF
    path = tmp_path / "index.bin"
    index.save(path)
    loaded = SketchIndex.load(path, K, T, TAG)
    for q in range(10_000, 10_600):
        shared = np.count_nonzero(stored == (sigs[q] & 0xFFFF), axis=1)
        expected = {str(kept[j]): int(shared[j]) for j in np.flatnonzero(shared >= T)}
        assert {m.key: m.shared for m in index.query(_sketch(sigs[q], q))} == expected
        assert {m.key: m.shared for m in loaded.query(_sketch(sigs[q], q))} == expected


def test_add_then_check_and_add_see_recent_pages_at_once() -> None:
    index = SketchIndex(K, T, TAG)
    sig = np.arange(K, dtype=np.uint32)
    index.add("a", _sketch(sig, 1))
    near = sig.copy()
    near[:5] += 1
    match = index.check_and_add("b", _sketch(near, 2))
    assert match is not None and match.key == "a" and match.shared == K - 5 and not match.exact
    assert len(index) == 1 and index.memory_bytes() > 0


def test_key_offsets_widen_when_the_keys_outgrow_uint32(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(page_keys, "_MAX_OFFSET32", 20)  # stands for 4 GB of keys
    index = SketchIndex(K, T, TAG)
    index.add("x" * 15, _sketch(np.arange(K)))
    assert index._page_keys._ends.dtype == np.uint32
    index.add("é" * 5, _sketch(np.arange(K) + 1000))
    assert index._page_keys._ends.dtype == np.int64 and index.key(0) == "x" * 15 and index.key(1) == "é" * 5
    index.save(tmp_path / "i.bin")
    loaded = SketchIndex.load(tmp_path / "i.bin", K, T, TAG)
    assert loaded._page_keys._ends.dtype == np.int64 and loaded.key(1) == "é" * 5


def _rewrite(path: Path, drop: tuple[str, ...], header_update: dict[str, object]) -> None:
    """Rewrite a saved index without some members and with header changes (checksums stay valid); a header
    entry updated to ``None`` is removed."""
    import json
    import zipfile

    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    header = json.loads(members.pop("header.json"))
    header.update(header_update)
    header = {key: value for key, value in header.items() if value is not None}
    for name in drop:
        members.pop(name + ".npy")
        header["sha256"].pop(name)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("header.json", json.dumps(header))
        for name, data in members.items():
            zf.writestr(name, data)


@pytest.mark.parametrize("variant", ["format1", "inconsistent"])
def test_load_rebuilds_runs_that_are_missing_or_inconsistent(small_tiers: None, tmp_path: Path, variant: str) -> None:
    sigs = _workload(3_000, seed=5, hot_band=False)
    index = SketchIndex(K, T, TAG)
    for i in range(2_500):
        index.check_and_add(str(i), _sketch(sigs[i], i))
    path = tmp_path / "index.bin"
    index.save(path)
    if variant == "format1":  # what the first file format held: no runs, they are rebuilt from the values
        runs = ("band_low", "band_pages", "directory")
        _rewrite(path, drop=runs, header_update={"format": 1, "runs": None})
    else:
        _rewrite(path, drop=(), header_update={"runs": {"main": 1, "used": 2, "main_bits": 18, "recent_first": 0}})
    loaded = SketchIndex.load(path, K, T, TAG)
    assert loaded._runs._main == loaded._runs._used == len(loaded) * loaded._runs.bands  # rebuilt: everything in main
    for q in range(2_500, 2_800):
        assert loaded.query(_sketch(sigs[q], q)) == index.query(_sketch(sigs[q], q))
