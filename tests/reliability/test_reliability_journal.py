"""The embedded store's crash safety, driven directly: journal replay, torn tails, damage, the crash windows of
a checkpoint, foreign parameters, a second writer, a full disk; and random faults injected into the files.

A process death is simulated by :func:`die`: the file descriptors are closed as the kernel would close them,
nothing else runs (no snapshot, no journal reset). The crawl-level ``kill -9`` is in test_reliability_crawls.py.
"""

from __future__ import annotations

import asyncio
import errno
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_kit import Ledger

from scrapy_neardup import Sketcher
from scrapy_neardup.core.sketch import Sketch
from scrapy_neardup.core.theory import min_shared_for
from scrapy_neardup.errors import StateError
from scrapy_neardup.store.embedded import JOURNAL_FILE, STATE_FILE, TEMPLATES_FILE, EmbeddedBackend

SKETCHER = Sketcher()
K, T = SKETCHER.num_perm, min_shared_for(0.9, SKETCHER.num_perm)


def _pages(n: int, seed: int) -> list[tuple[str, Sketch]]:
    rng = random.Random(seed)
    texts = [" ".join(f"w{rng.randrange(1_000_000)}" for _ in range(120)) for _ in range(n)]
    # Keys with what URLs can hold, and what they should not but might: non-ASCII and a lone surrogate.
    keys = [f"https://example.test/{seed}/{i}/é" + ("\ud800" if i % 5 == 4 else "") for i in range(n)]
    return list(zip(keys, SKETCHER.sketch_many(texts), strict=True))


PAGES = _pages(40, seed=1)


def backend(state_dir: Path, *, num_perm: int = K, min_shared: int = T, tag: str | None = None,
            reset: bool = False) -> EmbeddedBackend:
    return EmbeddedBackend(num_perm, min_shared, tag or SKETCHER.tag, state_dir=state_dir, reset=reset)


def opened(state_dir: Path, **kwargs: Any) -> EmbeddedBackend:
    store = backend(state_dir, **kwargs)
    asyncio.run(store.open())
    return store


def keep(store: EmbeddedBackend, pages: list[tuple[str, Sketch]]) -> None:
    async def run() -> None:
        for key, sketch in pages:
            assert await store.check_and_add(key, sketch) is None, key

    asyncio.run(run())


def die(store: EmbeddedBackend) -> None:
    """What ``kill -9`` leaves: the kernel closes the descriptors (and drops the lock); nothing is saved."""
    store._release()


def known(store: EmbeddedBackend, pages: list[tuple[str, Sketch]]) -> list[bool]:
    """Per page: is it in the store (its own sketch finds it, under its key)?"""
    return [any(m.key == key for m in store.index.query(sketch)) for key, sketch in pages]


def files(state_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(state_dir.iterdir())}


# -- recovery ------------------------------------------------------------------------------------------------------


def test_kill_before_any_graceful_close_loses_nothing(tmp_path: Path, ledger: Ledger) -> None:
    store = opened(tmp_path)
    keep(store, PAGES[:25])
    die(store)
    assert not (tmp_path / STATE_FILE).exists()  # only the journal holds them

    again = opened(tmp_path)
    assert all(known(again, PAGES[:25])) and len(again.index) == 25
    assert again.open_stats == {"journal_replayed": 25}
    # Compacted: the snapshot now holds them and the journal starts empty after it.
    assert (tmp_path / STATE_FILE).exists()
    keep(again, PAGES[25:30])
    asyncio.run(again.close())
    final = opened(tmp_path)
    assert all(known(final, PAGES[:30])) and len(final.index) == 30
    assert final.open_stats == {"state_loaded": 30}
    ledger.record("25 pages kept, kill, reopen; 5 more, graceful close, reopen",
                  lost=30 - sum(known(final, PAGES[:30])))


def test_kill_after_a_graceful_close_replays_only_the_new_pages(tmp_path: Path, ledger: Ledger) -> None:
    first = opened(tmp_path)
    keep(first, PAGES[:10])
    asyncio.run(first.close())
    second = opened(tmp_path)
    keep(second, PAGES[10:20])
    die(second)
    third = opened(tmp_path)
    assert third.open_stats == {"state_loaded": 10, "journal_replayed": 10}
    lost = 20 - sum(known(third, PAGES[:20]))
    assert lost == 0 and len(third.index) == 20
    ledger.record("10 pages closed gracefully + 10 kept then killed", lost=lost)


def test_kill_during_a_recrawl_replays_replacements_and_removals(tmp_path: Path, ledger: Ledger) -> None:
    """A recrawl journals *put* records (changed pages) and *delete* records (a kept page turned into a copy of
    another); killed, the store comes back exactly as it was, and a graceful close compacts it."""
    first = opened(tmp_path)
    keep(first, PAGES[:10])
    asyncio.run(first.close())
    second = opened(tmp_path)
    changed = _pages(3, seed=9)  # new content for keys 0-2
    recrawl = [(PAGES[i][0], changed[i][1]) for i in range(3)] + [(PAGES[3][0], PAGES[4][1])] + PAGES[5:10]
    decisions = asyncio.run(second.check_and_add_many(recrawl))
    assert [d.outcome for d in decisions] == ["revisit"] * 3 + ["duplicate"] + ["revisit"] * 5
    assert [d.changed for d in decisions[:3]] == [True] * 3 and decisions[3].match is not None
    assert decisions[3].match.key == PAGES[4][0]
    expected = {PAGES[i][0]: changed[i][1].fingerprint for i in range(3)} | {
        PAGES[i][0]: PAGES[i][1].fingerprint for i in (4, 5, 6, 7, 8, 9)}
    die(second)

    def stored(store: EmbeddedBackend) -> dict[str, int]:
        return {store.index.key(d): int(store.index._fingerprints[d]) for k in expected | {PAGES[3][0]: 0}
                if (d := store.index.find(k)) is not None}

    third = opened(tmp_path)
    assert third.open_stats == {"state_loaded": 10, "journal_replayed": 4}  # 3 puts, 1 delete
    assert stored(third) == expected and len(third.index) == 9
    asyncio.run(third.close())
    final = opened(tmp_path)
    assert stored(final) == expected and final.index._size == 9  # compacted: no dead version saved
    lost = sum(stored(final).get(k) != v for k, v in expected.items())
    ledger.record("recrawl of 10 kept pages (3 changed, 1 turned into a copy), killed, reopened", lost=lost)


def test_torn_last_record_is_ignored_and_counted(tmp_path: Path, ledger: Ledger) -> None:
    store = opened(tmp_path)
    keep(store, PAGES[:8])
    die(store)
    journal = tmp_path / JOURNAL_FILE
    data = journal.read_bytes()
    record = len(data) - record_ends(data)[6]
    journal.write_bytes(data[: len(data) - record // 2])  # the 8th record half written

    again = opened(tmp_path)
    assert known(again, PAGES[:8]) == [True] * 7 + [False]
    assert again.open_stats["journal_torn"] == 1 and again.open_stats["journal_replayed"] == 7
    assert again.open_stats["journal_torn_bytes"] == record - record // 2
    # New pages follow intact records only: a later kill and reopen reads everything back.
    keep(again, PAGES[8:12])
    die(again)
    last = opened(tmp_path)
    assert known(last, PAGES[:12]) == [True] * 7 + [False] + [True] * 4
    ledger.record("a journal cut in the middle of its last record", lost=0, notes="the torn in-flight record is "
                  "not counted as lost: its item never left the pipeline")


@pytest.mark.parametrize("into", [0, 5, 100])  # zeros from inside record 4's header, or its payload
def test_unwritten_zero_tail_is_a_torn_tail(tmp_path: Path, into: int) -> None:
    store = opened(tmp_path)
    keep(store, PAGES[:6])
    die(store)
    journal = tmp_path / JOURNAL_FILE
    data = journal.read_bytes()
    start = record_ends(data)[3] + into
    # A power loss can leave the last blocks allocated but never written: zeros from inside record 4 on.
    journal.write_bytes(data[:start] + bytes(len(data) - start))
    again = opened(tmp_path)
    assert known(again, PAGES[:6]) == [True] * 4 + [False] * 2
    assert again.open_stats["journal_torn"] == 1


def test_damage_followed_by_zeros_and_data_is_refused(tmp_path: Path) -> None:
    store = opened(tmp_path)
    keep(store, PAGES[:6])
    die(store)
    journal = tmp_path / JOURNAL_FILE
    data = bytearray(journal.read_bytes())
    ends = record_ends(bytes(data))
    data[ends[2] + 40 : ends[3]] = bytes(ends[3] - ends[2] - 40)  # record 4 zeroed, records 5 and 6 intact
    journal.write_bytes(bytes(data))
    with pytest.raises(StateError, match=r"damaged at byte \d+ \(record 3, not the last one\)"):
        opened(tmp_path)


def test_crash_between_snapshot_and_new_journal_counts_nothing_twice(tmp_path: Path) -> None:
    store = opened(tmp_path)
    keep(store, PAGES[:10])
    # The first half of a checkpoint (the snapshot), then death before the journal is replaced.
    store._write_snapshot()
    die(store)
    again = opened(tmp_path)
    assert len(again.index) == 10 and all(known(again, PAGES[:10]))
    assert again.open_stats == {"state_loaded": 10}  # the journal's records were checked, not replayed


def test_journal_continuing_another_snapshot_is_refused(tmp_path: Path) -> None:
    store = opened(tmp_path)
    keep(store, PAGES[:10])
    asyncio.run(store.close())
    store = opened(tmp_path)
    keep(store, PAGES[10:15])
    die(store)

    # The snapshot deleted: the journal continues a snapshot of 10 pages that is gone.
    deleted = tmp_path / "deleted"
    shutil.copytree(tmp_path, deleted, ignore=shutil.ignore_patterns("deleted"))
    (deleted / STATE_FILE).unlink()
    before = files(deleted)
    with pytest.raises(StateError, match="continues a snapshot of 10 sketches.*no snapshot"):
        opened(deleted)
    assert files(deleted) == before  # left untouched

    # The snapshot swapped for one of other pages, as large: the journal's pages are not in it.
    swapped = tmp_path / "swapped"
    other = opened(swapped)
    keep(other, _pages(15, seed=2))
    asyncio.run(other.close())
    shutil.copy(tmp_path / JOURNAL_FILE, swapped / JOURNAL_FILE)
    with pytest.raises(StateError, match="does not belong to the snapshot"):
        opened(swapped)


@pytest.mark.parametrize("change", ["num_perm", "min_shared", "tag"])
def test_journal_from_other_parameters_is_refused_and_left_untouched(tmp_path: Path, change: str) -> None:
    store = opened(tmp_path)
    keep(store, PAGES[:5])
    die(store)  # journal only: the snapshot's own check cannot catch it
    before = files(tmp_path)
    options: dict[str, dict[str, Any]] = {
        "num_perm": {"num_perm": 64, "min_shared": 54, "tag": Sketcher(num_perm=64).tag},
        "min_shared": {"min_shared": T - 10},
        "tag": {"tag": Sketcher(seed=2).tag},
    }
    other = options[change]
    with pytest.raises(StateError, match=f"made with tag={SKETCHER.tag} num_perm={K} min_shared={T}, but this run"):
        opened(tmp_path, **other)
    assert files(tmp_path) == before


def test_damaged_header_and_foreign_file_are_refused(tmp_path: Path) -> None:
    store = opened(tmp_path)
    keep(store, PAGES[:3])
    die(store)
    journal = tmp_path / JOURNAL_FILE
    data = bytearray(journal.read_bytes())
    data[30] ^= 0x01  # inside the JSON parameters
    journal.write_bytes(bytes(data))
    with pytest.raises(StateError, match="header checksum mismatch"):
        opened(tmp_path)
    journal.write_bytes(b"not a journal at all, but long enough to have a header")
    with pytest.raises(StateError, match="is not a scrapy-neardup journal"):
        opened(tmp_path)
    journal.write_bytes(b"")
    with pytest.raises(StateError, match="shorter than its header"):
        opened(tmp_path)


def test_reset_discards_snapshot_and_journal(tmp_path: Path) -> None:
    store = opened(tmp_path)
    keep(store, PAGES[:5])
    asyncio.run(store.close())
    store = opened(tmp_path)
    keep(store, PAGES[5:8])
    die(store)
    fresh = opened(tmp_path, reset=True)
    assert len(fresh.index) == 0 and not (tmp_path / STATE_FILE).exists()
    asyncio.run(fresh.close())
    assert len(opened(tmp_path).index) == 0


def test_second_writer_is_refused_and_the_lock_dies_with_the_first(tmp_path: Path) -> None:
    first = opened(tmp_path)
    with pytest.raises(StateError, match="in use by another crawl"):
        opened(tmp_path)
    die(first)
    second = opened(tmp_path)  # a killed process holds no lock
    asyncio.run(second.close())
    asyncio.run(opened(tmp_path).close())


def test_leftover_temporary_files_are_removed(tmp_path: Path) -> None:
    tmp_path.joinpath(f"{STATE_FILE}.abc123.tmp").write_bytes(b"half a snapshot")
    tmp_path.joinpath(f"{JOURNAL_FILE}.xyz.tmp").write_bytes(b"half a header")
    asyncio.run(opened(tmp_path).close())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([JOURNAL_FILE, STATE_FILE, TEMPLATES_FILE])


def test_full_disk_keeps_the_journal_consistent(tmp_path: Path, ledger: Ledger) -> None:
    store = opened(tmp_path)
    keep(store, PAGES[:3])
    journal = store.journal._file if store.journal is not None else None  # the open file of the journal
    assert journal is not None
    size = (tmp_path / JOURNAL_FILE).stat().st_size
    real_write = journal.write

    def half_then_enospc(data: Any) -> int:
        real_write(bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    journal.write = half_then_enospc  # type: ignore[method-assign]
    with pytest.raises(StateError, match="could not append.*No space left"):
        asyncio.run(store.check_and_add(*PAGES[3]))
    assert (tmp_path / JOURNAL_FILE).stat().st_size == size  # the partial record was cut off
    journal.write = real_write  # type: ignore[method-assign]
    keep(store, PAGES[4:6])
    die(store)
    again = opened(tmp_path)
    # The page whose record failed is the only one unrecorded (the pipeline counts it in backend_errors).
    assert known(again, PAGES[:6]) == [True, True, True, False, True, True]
    ledger.record("a write failing half-way (ENOSPC)", lost=0, notes="1 page reported unrecorded by the error")


# -- random faults -------------------------------------------------------------------------------------------------

FAULTS = ("truncate", "flip", "zero_tail", "garbage_tail")
_FAULT_TALLY: dict[str, int] = {"injected": 0, "refused": 0, "recovered": 0, "records": 0, "lost": 0}


def record_ends(journal: bytes) -> list[int]:
    """Where each record of an intact journal ends (read from the format: see scrapy_neardup.store.journal)."""
    offset = 20 + int.from_bytes(journal[12:16], "little")
    ends = []
    while offset < len(journal):
        offset += 12 + int.from_bytes(journal[offset : offset + 4], "little")
        ends.append(offset)
    assert offset == len(journal)
    return ends


@pytest.fixture(scope="module")
def damaged_base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A state directory with a snapshot of 5 pages and a journal of 12 more (killed after them)."""
    state = tmp_path_factory.mktemp("base")
    store = opened(state)
    keep(store, PAGES[:5])
    asyncio.run(store.close())
    store = opened(state)
    keep(store, PAGES[5:17])
    die(store)
    journal = (state / JOURNAL_FILE).read_bytes()
    ends = record_ends(journal)
    assert len(ends) == 12
    return {"state": state, "journal": journal, "header": 20 + int.from_bytes(journal[12:16], "little"),
            "ends": ends}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fault=st.sampled_from(FAULTS), where=st.floats(0, 1, exclude_max=True), mask=st.integers(1, 255),
       garbage=st.binary(min_size=1, max_size=700))
def test_random_faults_give_a_clear_error_or_exactly_the_intact_records(
    damaged_base: dict[str, Any], tmp_path_factory: pytest.TempPathFactory,
    fault: str, where: float, mask: int, garbage: bytes,
) -> None:
    """One fault per example in the journal: a cut or an unwritten (zero) tail, as a crash leaves them; a
    flipped byte or garbage after the end, as a damaged disk or a foreign writer would.

    Either the open fails with StateError, leaving the files as found, or the store holds the snapshot's pages
    and exactly the journal records that end before the fault. Crash-like faults after the header must be
    recovered; damage may be recovered only when it can have cost nothing but the last record."""
    journal: bytes = damaged_base["journal"]
    header, ends = damaged_base["header"], damaged_base["ends"]
    position = int(where * len(journal))
    if fault == "truncate":
        damaged = journal[:position]
    elif fault == "flip":
        damaged = journal[:position] + bytes([journal[position] ^ mask]) + journal[position + 1 :]
    elif fault == "zero_tail":
        damaged = journal[:position] + bytes(len(journal) - position)
    else:
        position = len(journal)
        damaged = journal + garbage
    state = tmp_path_factory.mktemp("fault")
    shutil.copy(damaged_base["state"] / STATE_FILE, state / STATE_FILE)
    (state / JOURNAL_FILE).write_bytes(damaged)
    before = files(state)
    intact = sum(end <= position for end in ends)  # records entirely before the fault
    crash_like = fault in ("truncate", "zero_tail")
    _FAULT_TALLY["injected"] += 1
    try:
        store = opened(state)
    except StateError:
        _FAULT_TALLY["refused"] += 1
        assert files(state) == before
        assert position < header or not crash_like, (fault, position)
        return
    _FAULT_TALLY["recovered"] += 1
    try:
        assert position >= header or fault == "garbage_tail", "a damaged header must be refused"
        if fault == "flip":
            assert intact == 11, "a flipped byte before the last record must be refused"
        if fault == "garbage_tail":
            # Less than a record header (12 bytes) before zeros is what a torn header looks like.
            assert len(garbage.rstrip(b"\0")) < 12, "garbage after the last record must be refused"
        present = known(store, PAGES[:17])
        expected = [True] * 5 + [i < intact for i in range(12)]
        _FAULT_TALLY["records"] += 17
        lost = sum(e and not p for e, p in zip(expected, present, strict=True))
        _FAULT_TALLY["lost"] += lost
        assert present == expected, (fault, position, intact)
        assert len(store.index) == 5 + intact  # nothing else: no half record, nothing twice
        tail = len(damaged) - (ends[intact - 1] if intact else header)
        assert store.open_stats.get("journal_torn", 0) == (1 if tail > 0 else 0)
    finally:
        die(store)


def test_random_fault_tally(ledger: Ledger) -> None:
    """Runs after the property test (file order): writes its totals into the ledger."""
    tally = _FAULT_TALLY
    if not tally["injected"]:
        pytest.skip("the fault injection test did not run")
    ledger.record(f"{tally['injected']} random journal faults ({', '.join(FAULTS)}): {tally['refused']} refused "
                  f"with StateError, {tally['recovered']} recovered, {tally['records']} pages checked after "
                  "recovery", lost=tally["lost"])
    assert tally["lost"] == 0
