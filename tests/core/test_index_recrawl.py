"""The index's key operations for recurring crawls: the recrawl rule, replacements, removals, compaction, and
stores written by the previous formats."""

from __future__ import annotations

import json
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from scrapy_neardup import Sketcher
from scrapy_neardup.core.evidence import match_evidence
from scrapy_neardup.core.index import SketchIndex
from scrapy_neardup.core.match import Sketched
from scrapy_neardup.core.theory import min_shared_for
from scrapy_neardup.store.embedded import JOURNAL_FILE, STATE_FILE, EmbeddedBackend
from scrapy_neardup.store.journal import JOURNAL_FORMAT

SKETCHER = Sketcher()
K, T = SKETCHER.num_perm, min_shared_for(0.9, SKETCHER.num_perm)


def article_words(seed: int, n: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"w{v}" for v in rng.integers(0, 100_000, size=n)]


def edit_words(words: list[str], changes: int, seed: int) -> list[str]:
    """``changes`` words replaced, spread over the text (each alters at most 5 word 5-shingles)."""
    out, step = list(words), len(words) // (changes + 1)
    for i in range(1, changes + 1):
        out[i * step] = f"edit{seed}x{i}"
    return out


def text(seed: int, edits: int = 0) -> str:
    words = article_words(seed, 300)
    return " ".join(edit_words(words, edits, seed=seed + 1) if edits else words)


def sketch(seed: int, edits: int = 0):  # noqa: ANN201 - a Sketch
    return SKETCHER.sketch(text(seed, edits))


def new_index() -> SketchIndex:
    return SketchIndex(K, T, SKETCHER.tag)


def test_the_recrawl_rule() -> None:
    index = new_index()
    assert index.check_key("a", sketch(1)).outcome == "kept"
    assert index.check_key("b", sketch(2)).outcome == "kept"
    copy = index.check_key("c", sketch(1, edits=1))
    assert copy.outcome == "duplicate" and copy.match is not None and copy.match.key == "a" and not copy.removed
    # Met again in the same crawl, unchanged: a repeat, never a duplicate of itself; nothing stored twice.
    assert index.seen("a") and index.seen_count == 2
    again = index.check_key("a", sketch(1))
    assert (again.outcome, again.changed, len(index)) == ("repeat", False, 2)
    # The next crawl meets it unchanged: a revisit, once; then a repeat in that crawl too.
    index.forget_seen()
    assert not index.seen("a") and index.seen_count == 0
    again = index.check_key("a", sketch(1))
    assert (again.outcome, again.changed, len(index)) == ("revisit", False, 2)
    assert index.check_key("a", sketch(1)).outcome == "repeat"
    # Lightly edited: its own version is its best match; replaced.
    edited = index.check_key("a", sketch(1, edits=2))
    assert (edited.outcome, edited.changed, len(index)) == ("revisit", True, 2)
    doc = index.find("a")
    assert doc is not None and int(index._fingerprints[doc]) == sketch(1, edits=2).fingerprint
    # Completely new content: a changed revisit too.
    rewritten = index.check_key("a", sketch(3))
    assert (rewritten.outcome, rewritten.changed, len(index)) == ("revisit", True, 2)
    assert index.best_match(sketch(1)) is None  # the old content is gone: its copies are judged afresh
    # Turned into a copy of b: dropped naming b, its stale entry removed.
    turned = index.check_key("a", sketch(2, edits=1))
    assert turned.outcome == "duplicate" and turned.removed and turned.match is not None and turned.match.key == "b"
    assert index.find("a") is None and len(index) == 1
    assert index.best_match(sketch(3)) is None
    # Seen again with its old content: a new key as far as the store knows, kept.
    assert index.check_key("a", sketch(1)).outcome == "kept"


def test_same_key_with_own_version_and_another_page_matching_equally_is_a_revisit() -> None:
    base = article_words(50, 300)
    index = new_index()
    assert index.check_key("a", SKETCHER.sketch(" ".join(base))).outcome == "kept"
    # The same content under another key is a duplicate; the key's own version wins a tie.
    dup = index.check_key("b", SKETCHER.sketch(" ".join(base)))
    assert dup.outcome == "duplicate"
    assert index.check_key("a", SKETCHER.sketch(" ".join(base))).outcome == "repeat"
    index.forget_seen()
    assert index.check_key("a", SKETCHER.sketch(" ".join(base))).outcome == "revisit"


def test_a_changed_page_met_again_in_the_same_crawl_is_a_changed_revisit_then_a_repeat() -> None:
    index = new_index()
    assert index.check_key("a", sketch(1)).outcome == "kept"
    changed = index.check_key("a", sketch(1, edits=2))
    assert (changed.outcome, changed.changed) == ("revisit", True)  # new content: emitted again, replaced
    assert index.check_key("a", sketch(1, edits=2)).outcome == "repeat"
    # The flags follow compaction and a save/load round trip.
    index.check_key("b", sketch(2))
    index.forget_seen()
    assert index.check_key("b", sketch(2)).outcome == "revisit"
    index.compact()
    assert index.seen("b") and not index.seen("a")


def test_the_flags_of_the_crawl_are_saved_with_the_index(tmp_path: Path) -> None:
    index = new_index()
    for i in range(30):
        index.check_key(f"k{i}", sketch(300 + i))
    index.forget_seen()
    for i in range(0, 30, 3):
        assert index.check_key(f"k{i}", sketch(300 + i)).outcome == "revisit"
    index.save(tmp_path / "x.bin")
    loaded = SketchIndex.load(tmp_path / "x.bin", K, T, SKETCHER.tag)
    assert [loaded.seen(f"k{i}") for i in range(30)] == [i % 3 == 0 for i in range(30)]
    assert loaded.check_key("k3", sketch(303)).outcome == "repeat"
    assert loaded.check_key("k4", sketch(304)).outcome == "revisit"
    # An index saved without the flags (an earlier version) loads with none.
    with zipfile.ZipFile(tmp_path / "x.bin") as zf:
        members = {name: zf.read(name) for name in zf.namelist() if name != "seen.npy"}
    with zipfile.ZipFile(tmp_path / "old.bin", "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    old = SketchIndex.load(tmp_path / "old.bin", K, T, SKETCHER.tag)
    assert old.seen_count == 0 and len(old) == 30


def test_replacements_and_removals_are_compacted_on_save(tmp_path: Path) -> None:
    index = new_index()
    for i in range(50):
        index.check_key(f"k{i}", sketch(100 + i))
    sizes = []
    for crawl in range(5):
        for i in range(50):  # every page changed every crawl
            assert index.check_key(f"k{i}", sketch(100 + i, edits=1 + crawl % 3)).outcome == "revisit"
        index.save(tmp_path / "x.bin")
        sizes.append((tmp_path / "x.bin").stat().st_size)
        index = SketchIndex.load(tmp_path / "x.bin", K, T, SKETCHER.tag)
        assert len(index) == 50 and index._size == 50
    assert max(sizes) - min(sizes) < 100, sizes  # flat: only the latest version of each key is saved
    for i in range(50):
        doc = index.find(f"k{i}")
        assert doc is not None and index.key(doc) == f"k{i}"
        assert index.best_match(sketch(100 + i, edits=2)) is not None


def test_find_after_many_keys_and_merges() -> None:
    index = new_index()
    rng = np.random.default_rng(3)
    for i in range(40):
        signature = rng.integers(0, 2**32, size=K, dtype=np.uint64).astype(np.uint32)
        index.add(f"https://x.test/{i}", type(sketch(1))(signature, i, SKETCHER.tag, num_shingles=1))
    assert index.find("https://x.test/7") == 7
    index._page_keys._merge_recent()
    assert index.find("https://x.test/39") == 39 and index.find("https://x.test/40") is None
    index.remove(39)
    assert index.find("https://x.test/39") is None and len(index) == 39


def _legacy_store(state: Path) -> list[tuple[str, object]]:
    """A state directory as the previous version wrote it: a format-2 snapshot (no identity) of 3 pages and a
    format-1 journal (records without a kind byte) of 2 more."""
    pages = [(f"https://old.test/{i}", sketch(200 + i)) for i in range(5)]
    index = new_index()
    for key, s in pages[:3]:
        index.add(key, s)
    index.save(state / STATE_FILE)
    with zipfile.ZipFile(state / STATE_FILE) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    header = json.loads(members["header.json"])
    header["format"] = 2
    del header["meta"]
    del members["sketched.npy"], header["sha256"]["sketched"]  # no kept side recorded then
    members["header.json"] = json.dumps(header).encode()
    with zipfile.ZipFile(state / STATE_FILE, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    params = json.dumps({"tag": SKETCHER.tag, "num_perm": K, "min_shared": T, "base": 3}).encode()
    journal = struct.pack("<8sIII", b"NDUPJRNL", 1, len(params), zlib.crc32(params)) + params
    for key, s in pages[3:]:
        payload = struct.pack("<Q", s.fingerprint) + np.asarray(s.signature, dtype="<u4").tobytes() + key.encode()
        size = struct.pack("<I", len(payload))
        journal += size + struct.pack("<II", zlib.crc32(size), zlib.crc32(payload)) + payload
    (state / JOURNAL_FILE).write_bytes(journal)
    return pages  # type: ignore[return-value]


def test_a_store_of_the_previous_formats_loads_and_is_rewritten(tmp_path: Path) -> None:
    import asyncio

    pages = _legacy_store(tmp_path)
    store = EmbeddedBackend(K, T, SKETCHER.tag, state_dir=tmp_path)
    asyncio.run(store.open())
    assert store.open_stats == {"state_loaded": 3, "journal_replayed": 2}
    assert len(store.index) == 5 and all(store.index.find(key) is not None for key, _ in pages)
    # Rewritten in the current formats: a snapshot with an identity, a journal of the current format continuing it.
    assert store.index.meta.get("id")
    assert int.from_bytes((tmp_path / JOURNAL_FILE).read_bytes()[8:12], "little") == JOURNAL_FORMAT == 4
    decision = asyncio.run(store.check_and_add_many([(pages[0][0], pages[0][1])]))  # type: ignore[list-item]
    assert decision[0].outcome == "revisit"
    # What was sketched of those pages was not recorded: a copy of one names no kept side in its evidence.
    (copy,) = asyncio.run(store.check_and_add_many([("https://new.test/copy", pages[1][1])]))  # type: ignore[list-item]
    assert copy.match is not None and copy.match.kept is None
    assert not any(k.startswith("kept_") for k in match_evidence(copy.match, K, sketch=pages[1][1]))  # type: ignore[arg-type]
    asyncio.run(store.close())


def test_the_kept_side_survives_a_kill_and_a_graceful_close(tmp_path: Path) -> None:
    """What was sketched of a kept page comes back from the journal (a crawl killed: no snapshot) and from the
    snapshot (closed gracefully)."""
    import asyncio

    page = SKETCHER.sketch("<html><body><ul>" + "".join(f'<li><a href="/{i}">see page {i}</a></li>'
                                                      for i in range(20)) + f"</ul><p>{text(7)}</p></body></html>")
    assert (page.sketched, page.words, page.page_words) == ("own text", 300, 360)
    import shutil

    store = EmbeddedBackend(K, T, SKETCHER.tag, state_dir=tmp_path / "state")
    asyncio.run(store.open())
    asyncio.run(store.check_and_add_many([("https://x.test/kept", page)]))
    # Killed: the files as they are on disk while the crawl runs (the journal only).
    shutil.copytree(tmp_path / "state", tmp_path / "killed", ignore=shutil.ignore_patterns("*.lock"))
    asyncio.run(store.close())
    for state in ("killed", "state"):
        again = EmbeddedBackend(K, T, SKETCHER.tag, state_dir=tmp_path / state)
        asyncio.run(again.open())
        (copy,) = asyncio.run(again.check_and_add_many([("https://x.test/copy", sketch(7))]))
        assert copy.match is not None and copy.match.key == "https://x.test/kept"
        assert copy.match.kept == Sketched("own text", 300, 360)
        assert match_evidence(copy.match, K)["kept_removed"] == round(1 - 300 / 360, 2) == 0.17
        assert again.open_stats.get("journal_replayed") == (1 if state == "killed" else None)
        asyncio.run(again.close())
