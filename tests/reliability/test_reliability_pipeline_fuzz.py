"""Hostile items through ``NearDuplicatePipeline.process_item``, driven directly (no crawl): dicts, scrapy.Items
and dataclasses with arbitrary values in the text and URL fields, or without them.

For every generated sequence of items: nothing raises but :class:`NearDuplicateDropped` (and
:class:`RepeatDropped`, a URL met again unchanged in this one crawl, naming itself); every item comes back
unchanged or is dropped; every drop (and every mark) names a key kept earlier; items without usable text are
never dropped; and the counters add up: ``checked + skipped == seen`` and ``kept + dropped == checked``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import pytest
from fuzzing import EXAMPLES, field_values, hostile_text
from hypothesis import given, settings
from hypothesis import strategies as st
from neardup_testkit import PageItem, PageRecord, article_words, edit_words
from reliability_kit import Ledger
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from scrapy_neardup import NearDuplicatePipeline
from scrapy_neardup.core.sketch import Sketch, Sketcher
from scrapy_neardup.core.text import looks_binary
from scrapy_neardup.crawl.context import CrawlContext
from scrapy_neardup.crawl.drops import NearDuplicateDropped, RepeatDropped
from scrapy_neardup.crawl.settings import NearDupSettings
from scrapy_neardup.store.backend import Backend, Decision
from scrapy_neardup.store.embedded import EmbeddedBackend

_TALLY: dict[str, int] = {"examples": 0, "items": 0, "dropped": 0, "marked": 0, "skipped": 0, "kept": 0}

# Near-duplicate material, so that drops happen: three articles and lightly edited copies of them.
_BASES = [article_words(900 + i, 200) for i in range(3)]
NEAR_COPIES = [" ".join(edit_words(words, changes, seed)) for words in _BASES for changes, seed in
               [(0, 0), (1, 1), (1, 2), (2, 3)]]
near_copies = st.one_of(
    st.sampled_from(NEAR_COPIES),
    st.sampled_from(NEAR_COPIES).map(lambda t: f"<html><body><p>{t}</p></body></html>"),
    st.sampled_from(NEAR_COPIES).map(str.encode),
    st.sampled_from(NEAR_COPIES).map(lambda t: t.upper() + " \x00\ud800"),
)
# About half near-duplicate material (so that drops happen), half anything at all.
texts = st.booleans().flatmap(lambda near: near_copies if near else field_values)
urls = st.one_of(st.none(), st.just(""), st.sampled_from([f"https://site.test/{i}" for i in range(6)]), hostile_text,
                 st.integers(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=2))
MISSING = object()


@st.composite
def items(draw: st.DrawFn) -> tuple[Any, Any]:
    """``(item, text value or MISSING)``: a dict, scrapy.Item or dataclass, with or without each field."""
    kind = draw(st.sampled_from(["dict", "item", "dataclass"]))
    fields: dict[str, Any] = {}
    if draw(st.booleans()) or kind == "dataclass":
        fields["url"] = draw(urls)
    if draw(st.integers(0, 9)):  # one in ten has no text field at all
        fields["text"] = draw(texts)
    if kind == "dict":
        if draw(st.booleans()):
            fields[draw(st.sampled_from(["extra", "title"]))] = draw(field_values)
        item: Any = dict(fields)
    elif kind == "item":
        item = PageItem()
        for name, value in fields.items():
            item[name] = value
    else:
        item = PageRecord(**fields)
    text = fields.get("text", MISSING)
    if kind == "dataclass" and text is MISSING:
        text = None  # a dataclass field is never missing; its default is None
    return item, text


class RecordingPipeline(NearDuplicatePipeline):
    """The real pipeline; its backend also records, in order, the pages it kept."""

    kept_keys: list[str]
    kept: list[tuple[str, Sketch]]

    def make_backend(self) -> Backend:
        backend = super().make_backend()
        self.kept_keys, self.kept = [], []
        check_and_add_many = backend.check_and_add_many

        async def recording(pages: Sequence[tuple[str, Sketch]]) -> list[Decision]:
            decisions = await check_and_add_many(pages)
            for (key, sketch), decision in zip(pages, decisions, strict=True):
                if decision.outcome == "kept":
                    self.kept_keys.append(key)
                    self.kept.append((key, sketch))
            return decisions

        backend.check_and_add_many = recording  # type: ignore[method-assign]
        return backend


class ReusedSketcherSettings(NearDupSettings):
    """The parsed settings, handing out one shared Sketcher: parsing and building one take ~0.2 s, which
    would be most of each example's time."""

    def sketcher(self) -> Sketcher:
        return _SKETCHER


_SKETCHER = Sketcher()
CRAWLERS = {action: get_crawler(settings_dict={"NEARDUP_ACTION": action}) for action in ("drop", "mark")}
CONFIGS = {action: NearDupSettings.from_settings(crawler.settings) for action, crawler in CRAWLERS.items()}
assert all(config.sketcher().tag == _SKETCHER.tag for config in CONFIGS.values())


def make_pipeline(action: str, state_dir: str | None = None) -> RecordingPipeline:
    """The pipeline as ``from_crawler`` builds it from ``get_crawler``'s crawler, with fresh stats."""
    crawler = CRAWLERS[action]
    fields = {f.name: getattr(CONFIGS[action], f.name) for f in dataclasses.fields(NearDupSettings)}
    config = ReusedSketcherSettings(**fields)
    # The store NEARDUP_STATE_DIR=state_dir would give (EmbeddedBackend.from_settings), without a new crawler.
    backend = EmbeddedBackend(config.num_perm, config.min_shared, _SKETCHER.tag, state_dir=state_dir)
    context = CrawlContext(crawler, config=config, stats=MemoryStatsCollector(crawler))
    return RecordingPipeline(context, backend=backend)


def neardup_stats(pipeline: NearDuplicatePipeline) -> dict[str, int]:
    assert pipeline.stats is not None
    return {k.removeprefix("neardup/"): v for k, v in pipeline.stats.get_stats().items() if k.startswith("neardup/")}


def expected_skip(text: Any) -> str | None:
    if text is MISSING or text is None:
        return "skipped_no_text"
    if not isinstance(text, str | bytes | bytearray | memoryview) or looks_binary(text):
        return "skipped_bad_text"
    return None


async def feed(pipeline: RecordingPipeline, batch: list[tuple[Any, Any]]) -> dict[str, int]:
    """Process ``batch`` in order, checking every outcome; returns the expected skip counts."""
    skips: dict[str, int] = {}
    kept_so_far: list[str] = []
    for item, text in batch:
        reason = expected_skip(text)
        if reason:
            skips[reason] = skips.get(reason, 0) + 1
        try:
            out = await pipeline.process_item(item)
        except NearDuplicateDropped as drop:
            _TALLY["dropped"] += 1
            assert reason is None, f"an item without usable text ({type(text).__name__}) was dropped"
            assert drop.match.key in pipeline.kept_keys, "a drop names a page that was never kept"
            assert drop.match.key in kept_so_far or drop.match.key.startswith("no-url:")
            assert drop.match.shared >= pipeline.config.min_shared
            continue
        except RepeatDropped as repeat:  # a URL this crawl passed on already, unchanged: never out twice
            _TALLY["dropped"] += 1
            assert reason is None and repeat.url in kept_so_far, repeat.url
            continue
        assert out is item
        mark = getattr(out, "get", lambda *_: None)("neardup") if not isinstance(out, PageRecord) else out.neardup
        if pipeline.config.action == "mark" and isinstance(mark, dict) and "duplicate_of" in mark:
            _TALLY["marked"] += 1
            assert mark["duplicate_of"] in pipeline.kept_keys
        url = getattr(out, "url", None) if isinstance(out, PageRecord) else out.get("url")
        kept_so_far.append("" if url is None else str(url))
    return skips


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(items(), min_size=1, max_size=25), st.sampled_from(["drop", "mark"]))
def test_fuzz_pipeline_never_raises_never_drops_wrongly_and_counts_everything(
    batch: list[tuple[Any, Any]], action: str
) -> None:
    pipeline = make_pipeline(action)

    async def scenario() -> dict[str, int]:
        await pipeline.open_spider()
        try:
            return await feed(pipeline, batch)
        finally:
            await pipeline.close_spider()

    skips = asyncio.run(scenario())
    counts = neardup_stats(pipeline)
    c = counts.get
    skipped = c("skipped_no_text", 0) + c("skipped_bad_text", 0) + c("skipped_empty", 0)
    assert c("checked", 0) + skipped == len(batch), counts
    verdicts = c("marked", 0) if action == "mark" else c("dropped", 0)
    # A URL seen twice in this one crawl is a repeat (unchanged) or a changed revisit, neither kept again nor a
    # duplicate of itself (an unchanged revisit needs a later crawl).
    assert c("revisited", 0) == 0, counts
    assert c("kept", 0) + verdicts + c("repeats", 0) + c("changed", 0) == c("checked", 0), counts
    assert c("backend_errors", 0) == 0
    assert c("kept", 0) == len(pipeline.kept_keys)
    for name in ("skipped_no_text", "skipped_bad_text"):
        assert c(name, 0) == skips.get(name, 0), (name, counts)
    _TALLY["examples"] += 1
    _TALLY["items"] += len(batch)
    _TALLY["skipped"] += skipped
    _TALLY["kept"] += c("kept", 0)


@settings(max_examples=max(20, EXAMPLES // 5), deadline=None)
@given(st.lists(items(), min_size=1, max_size=15))
def test_fuzz_hostile_keys_survive_the_journal(batch: list[tuple[Any, Any]]) -> None:
    """Keys of every shape (lone surrogates, huge, numbers turned into text) written to the journal and read
    back after a simulated kill: every kept key is known again, under the same key."""
    state_dir = tempfile.mkdtemp(prefix="neardup-fuzz-")
    try:
        pipeline = make_pipeline("drop", state_dir)

        async def scenario() -> None:
            await pipeline.open_spider()
            await feed(pipeline, batch)

        asyncio.run(scenario())
        backend = pipeline.backend
        assert isinstance(backend, EmbeddedBackend)
        backend._release()  # killed: no close_spider, no snapshot
        reopened = EmbeddedBackend(backend.num_perm, backend.min_shared, backend.tag, state_dir=state_dir)
        asyncio.run(reopened.open())
        # The same live pages as before the kill (a key kept, then replaced or removed on a revisit, as it
        # ended up), each found by its own content.
        assert len(reopened.index) == len(backend.index)
        for key in set(pipeline.kept_keys):
            before, after = backend.index.find(key), reopened.index.find(key)
            assert (before is None) == (after is None), key
            if after is not None:
                assert before is not None
                assert reopened.index.key(after) == key
                assert reopened.index._fingerprints[after] == backend.index._fingerprints[before]
        asyncio.run(reopened.close())
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def test_pipeline_fuzz_tally(ledger: Ledger) -> None:
    t = _TALLY
    if not t["examples"]:
        pytest.skip("the fuzz tests did not run")
    ledger.record(
        f"{t['examples']} generated item sequences, {t['items']} items (dict / scrapy.Item / dataclass; "
        f"{t['skipped']} without usable text, {t['kept']} kept, {t['dropped']} dropped, {t['marked']} marked)",
        lost=0, notes="every drop and mark named a kept key; counters added up",
    )


def test_binary_and_fieldless_items_pass_through_counted() -> None:
    """The example the fuzzing generalizes: a PDF body, a PNG body, no text field, None, a number, a list."""
    rng = random.Random(0)
    pdf = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n" + rng.randbytes(5000)
    png = b"\x89PNG\r\n\x1a\n" + rng.randbytes(5000)
    batch = [({"url": "a", "text": pdf}, pdf), ({"url": "b", "text": pdf}, pdf), ({"url": "c", "text": png}, png),
             ({"url": "d"}, MISSING), ({"url": "e", "text": None}, None), ({"url": "f", "text": 3}, 3),
             ({"url": "g", "text": ["x"]}, ["x"]), ({"url": "h", "text": NEAR_COPIES[0]}, NEAR_COPIES[0]),
             ({"url": "i", "text": NEAR_COPIES[0].encode()}, NEAR_COPIES[0])]
    pipeline = make_pipeline("drop")

    async def scenario() -> None:
        await pipeline.open_spider()
        await feed(pipeline, batch)

    asyncio.run(scenario())
    assert neardup_stats(pipeline) == {"skipped_bad_text": 5, "skipped_no_text": 2, "checked": 2, "kept": 1,
                                       "dropped": 1, "exact_duplicates": 1}

