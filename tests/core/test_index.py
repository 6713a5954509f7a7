"""The embedded index: exact t-of-k retrieval (agreement with brute force), first-seen semantics, persistence."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from scrapy_neardup import Sketch, Sketcher, SketchIndex
from scrapy_neardup.core.clustering import GroupBuilder, broder_clusters, leader_clusters
from scrapy_neardup.core.stored_signature import StoredSignature, StoredSketch, band_bounds
from scrapy_neardup.errors import IncompatibleSketches, StateError

K, T, TAG = 64, 52, "test-tag"


def _sketch(signature: np.ndarray, fingerprint: int = 0, tag: str = TAG) -> Sketch:
    return Sketch(signature=signature.astype(np.uint32), fingerprint=fingerprint, tag=tag, num_shingles=10)


def _planted_workload(n: int, seed: int) -> np.ndarray:
    """Random signatures where every third one copies an earlier one with a random share of positions."""
    rng = np.random.default_rng(seed)
    sigs = rng.integers(0, 2**32 - 1, size=(n, K), dtype=np.uint32)
    for i in range(1, n, 3):
        source = rng.integers(0, i)
        keep = rng.random(K) < rng.uniform(0.6, 1.0)  # shared share spread around the threshold
        sigs[i, keep] = sigs[source, keep]
    return sigs


def test_band_bounds_are_pigeonhole_bands() -> None:
    starts = band_bounds(128, 107)
    assert starts.size == 22 and starts[0] == 0
    sizes = np.diff(np.append(starts, 128))
    assert sizes.min() >= 5 and sizes.max() <= 6 and sizes.sum() == 128


def test_query_agrees_with_brute_force_t_of_k() -> None:
    """Every kept page sharing >= t positions is found, with the right count, and nothing else."""
    sigs = _planted_workload(3000, seed=1)
    index = SketchIndex(K, T, TAG)
    for i in range(2000):
        index.add(str(i), _sketch(sigs[i], i))
    stored = sigs[:2000] & 0xFFFF  # the index compares 16-bit truncations (b-bit minwise hashing)
    disagreements = 0
    for q in range(2000, 3000):
        shared = np.count_nonzero(stored == (sigs[q] & 0xFFFF), axis=1)
        expected = {str(i): int(shared[i]) for i in np.flatnonzero(shared >= T)}
        got = {m.key: m.shared for m in index.query(_sketch(sigs[q], q))}
        disagreements += expected != got
    assert disagreements == 0
    # The workload does exercise the rule: some queries have matches, some fall just short.
    planted = sum(1 for q in range(2000, 3000) if index.query(_sketch(sigs[q], q)))
    assert 50 < planted < 400


def test_group_builder_equals_broder_clusters() -> None:
    """Pairs found through the index, one page at a time, give Broder's clusters over the stored values."""
    sigs = _planted_workload(1500, seed=3)
    sigs[100] = sigs[99]  # an exact twin, joined without a lookup
    sigs[101] = sigs[99] ^ 0x10000  # differs only above the 16 stored bits: also a twin
    builder = GroupBuilder(K, T, TAG, linkage="transitive")
    for i, sig in enumerate(sigs):
        builder.add(str(i), _sketch(sig, i))
    expected = broder_clusters(sigs & 0xFFFF, T)
    assert sorted(sorted(int(m) for m in group) for group in builder.groups()) == expected
    distinct = np.unique(sigs & 0xFFFF, axis=0).shape[0]
    assert builder.pages == 1500 and builder.queried == distinct < 1499 and builder.truncated == 0
    assert len(expected) > 100  # the workload has groups to find
    # Chains: Broder's clusters are transitive closures, so some members share < t positions.
    assert any(
        np.count_nonzero((sigs[a] & 0xFFFF) == (sigs[b] & 0xFFFF)) < T
        for group in expected for a in group for b in group if a < b
    )


def test_group_builder_by_default_equals_leader_clusters() -> None:
    """The default (representative) linkage, page by page: the literal rule in order of addition; every member
    shares >= t positions with its representative, no two representatives do."""
    sigs = _planted_workload(1500, seed=3)
    sigs[100] = sigs[99]  # an exact twin, joined to its twin's representative without a lookup
    sigs[101] = sigs[99] ^ 0x10000  # differs only above the 16 stored bits: also a twin
    builder = GroupBuilder(K, T, TAG)
    for i, sig in enumerate(sigs):
        builder.add(str(i), _sketch(sig, i))
    stored = sigs & 0xFFFF
    expected = leader_clusters(stored, T)
    got = [[int(m) for m in group] for group in builder.groups()]
    assert got == expected and len(expected) > 100
    assert builder.queried == np.unique(stored, axis=0).shape[0]
    for rep, *members in got:
        assert all(np.count_nonzero(stored[rep] == stored[m]) >= T for m in members)
        assert all(builder.representative(str(m)) == str(rep) for m in members)
    reps = [group[0] for group in got]
    assert all(np.count_nonzero(stored[a] == stored[b]) < T for a in reps for b in reps if a < b)
    # Where Broder's clusters chain distinct pages, representative groups cut them.
    assert len(got) > len(broder_clusters(stored, T))


def test_group_builder_by_default_groups_pages_as_the_pipeline_drops_them() -> None:
    """Representative groups are the pipeline's decisions made into groups: each kept page with the pages dropped
    naming it (first seen is kept, a drop names the kept page it shares most with)."""
    from scrapy_neardup import Deduper

    sigs = _planted_workload(1200, seed=5)
    sigs[50] = sigs[49]
    deduper = Deduper(Sketcher(num_perm=K), min_shared=T, index=SketchIndex(K, T, TAG))
    builder = GroupBuilder(K, T, TAG)
    dropped: dict[str, list[str]] = {}
    for i, sig in enumerate(sigs):
        sketch = _sketch(sig, i)
        builder.add(str(i), sketch)
        match = deduper.check_sketch(str(i), sketch).match
        dropped.setdefault(str(i) if match is None else match.key, []).append(str(i))
    assert builder.groups() == [[kept, *drops] for kept, (_, *drops) in dropped.items() if drops]


@pytest.mark.parametrize("linkage", ["representative", "transitive"])
def test_group_builder_chain(linkage: str) -> None:
    """a ~ b, b ~ c, a !~ c (added in that order): two groups by default ({a, b} and {c} alone), one transitive."""
    rng = np.random.default_rng(9)
    a = rng.integers(0, 2**32 - 1, size=K, dtype=np.uint32)
    step = K - T  # each link changes k - t positions: shares exactly t
    b = a.copy()
    b[:step] ^= 1
    c = b.copy()
    c[step : 2 * step] ^= 1
    builder = GroupBuilder(K, T, TAG, linkage=linkage)
    for key, sig in zip("abc", (a, b, c), strict=True):
        builder.add(key, _sketch(sig))
    assert builder.groups() == ([["a", "b"]] if linkage == "representative" else [["a", "b", "c"]])
    if linkage == "representative":
        assert builder.representative("c") == "c"
    else:
        with pytest.raises(ValueError, match="representative"):
            builder.representative("c")
    with pytest.raises(ValueError, match="linkage"):
        GroupBuilder(K, T, TAG, linkage="single")


def test_group_builder_caps_links_per_page() -> None:
    rng = np.random.default_rng(4)
    base = rng.integers(0, 2**32 - 1, size=K, dtype=np.uint32)
    builder = GroupBuilder(K, T, TAG, max_links=3, linkage="transitive")
    for i in range(8):  # near-identical pages: each differs from the base in one position
        sig = base.copy()
        sig[i] ^= 1
        builder.add(str(i), _sketch(sig))
    assert builder.truncated == 4  # pages 4..7 each had more than 3 earlier matches
    assert builder.groups() == [[str(i) for i in range(8)]]  # the cap does not split this group
    with pytest.raises(ValueError, match="max_links"):
        GroupBuilder(K, T, TAG, max_links=0)


def test_first_seen_is_kept_and_exact_duplicates_are_marked() -> None:
    sketcher = Sketcher(num_perm=K)
    index = SketchIndex(K, T, sketcher.tag)
    text = " ".join(f"word{i}" for i in range(200))
    edited = text.replace("word100 ", "changed ")
    a, b, c, d = sketcher.sketch_many([text, text.upper(), edited, "something else entirely " * 5])
    assert index.check_and_add("a", a) is None
    exact = index.check_and_add("b", b)
    assert exact is not None and exact.key == "a" and exact.exact and exact.shared == K
    near = index.check_and_add("c", c)
    assert near is not None and near.key == "a" and not near.exact and T <= near.shared < K
    assert near.resemblance == near.shared / K
    assert index.check_and_add("d", d) is None
    assert len(index) == 2 and index.key(1) == "d"


def test_wrong_tag_and_empty_sketches_are_refused() -> None:
    index = SketchIndex(K, T, TAG)
    with pytest.raises(IncompatibleSketches):
        index.add("x", _sketch(np.zeros(K), tag="other"))
    with pytest.raises(ValueError, match="empty"):
        index.add("x", Sketch(np.zeros(K, dtype=np.uint32), 0, TAG, num_shingles=0))


def test_a_stored_sketch_is_taken_wherever_a_sketch_is() -> None:
    """A page read back from a journal or an index (its stored signature and fingerprint) gives the same
    answers as the sketch it came from, and is checked the same way."""
    sigs = _planted_workload(400, seed=4)
    with_sketches, with_stored = SketchIndex(K, T, TAG), SketchIndex(K, T, TAG)
    for i, sig in enumerate(sigs):
        sketch = _sketch(sig, i % 50)
        stored = StoredSketch(StoredSignature.from_sketch(sketch), sketch.fingerprint)
        assert with_sketches.query(sketch) == with_stored.query(stored)
        assert with_sketches.check_and_add(str(i), sketch) == with_stored.check_and_add(str(i), stored)
        assert with_sketches.put(str(i % 7), sketch) == with_stored.put(str(i % 7), stored)
    assert len(with_sketches) == len(with_stored) and with_stored.put("0", stored) is False  # idempotent
    with pytest.raises(IncompatibleSketches):
        with_stored.add("x", StoredSketch(StoredSignature(np.zeros(K), "other"), 0))
    with pytest.raises(ValueError, match="positions"):
        with_stored.query(StoredSketch(StoredSignature(np.zeros(K + 1), TAG), 0))


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    sigs = _planted_workload(500, seed=2)
    index = SketchIndex(K, T, TAG)
    for i in range(300):
        index.check_and_add(f"https://example.com/{i}/é", _sketch(sigs[i], i))
    path = tmp_path / "state" / "index.bin"
    index.save(path)
    loaded = SketchIndex.load(path, K, T, TAG)
    assert len(loaded) == len(index)
    for q in range(300, 500):
        assert index.query(_sketch(sigs[q], q)) == loaded.query(_sketch(sigs[q], q))
    assert loaded.key(len(loaded) - 1) == index.key(len(index) - 1)
    assert not list(path.parent.glob("*.tmp"))


def test_load_refuses_other_parameters(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    SketchIndex(K, T, TAG).save(path)
    with pytest.raises(StateError, match="min_shared=52.*min_shared=50"):
        SketchIndex.load(path, K, 50, TAG)
    with pytest.raises(StateError, match="tag=other"):
        SketchIndex.load(path, K, T, "other")


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_state_gives_a_clear_error(tmp_path: Path, damage: str) -> None:
    sigs = _planted_workload(200, seed=3)
    index = SketchIndex(K, T, TAG)
    for i in range(200):
        index.add(str(i), _sketch(sigs[i], i))
    path = tmp_path / "index.bin"
    index.save(path)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo("values.npy")
        data[info.header_offset + 200] ^= 0xFF  # inside the stored signature values
    elif damage == "garbage":
        data = bytearray(b"not an index at all" * 10)
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(StateError, match="damaged|not a scrapy-neardup"):
        SketchIndex.load(path, K, T, TAG)
