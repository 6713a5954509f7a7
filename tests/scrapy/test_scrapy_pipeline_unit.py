"""The pipeline driven directly (no crawl): edge cases that a crawl makes slow or awkward to reach."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest
from neardup_testkit import article_words
from scrapy.utils.test import get_crawler

from scrapy_neardup import NearDuplicatePipeline, Sketcher
from scrapy_neardup.core.match import Match
from scrapy_neardup.core.sketch import Sketch
from scrapy_neardup.core.theory import resemblance_interval
from scrapy_neardup.crawl.drops import NearDuplicateDropped
from scrapy_neardup.errors import BackendError, MarkFieldError, StateError
from scrapy_neardup.store.backend import Backend
from scrapy_neardup.store.embedded import STATE_FILE

ARTICLE = " ".join(article_words(5, 300))


def make_pipeline(**settings: Any) -> NearDuplicatePipeline:
    return NearDuplicatePipeline.from_crawler(get_crawler(settings_dict=settings))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def process_all(pipeline: NearDuplicatePipeline, items: list[Any]) -> list[Any]:
    """Each item's result, or the exception it raised."""
    out = []
    for item in items:
        try:
            out.append(await pipeline.process_item(item))
        except Exception as exc:
            out.append(exc)
    return out


def stats(pipeline: NearDuplicatePipeline) -> dict[str, Any]:
    assert pipeline.stats is not None
    return {k: v for k, v in pipeline.stats.get_stats().items() if k.startswith("neardup/")}


def test_drop_names_kept_page_with_debug_log_level() -> None:
    pipeline = make_pipeline()

    async def scenario() -> list[Any]:
        await pipeline.open_spider()
        return await process_all(pipeline, [{"url": "a", "text": ARTICLE}, {"url": "b", "text": ARTICLE + " end"}])

    kept, dropped = run(scenario())
    assert kept == {"url": "a", "text": ARTICLE}
    assert isinstance(dropped, NearDuplicateDropped)
    assert dropped.log_level == "DEBUG"
    assert (dropped.url, dropped.match.key) == ("b", "a")
    assert dropped.match.shared >= pipeline.config.min_shared and not dropped.match.exact
    assert "near-duplicate of a (resemblance 0.9" in str(dropped)


def test_bytes_text_is_sketched_like_str() -> None:
    pipeline = make_pipeline()

    async def scenario() -> list[Any]:
        await pipeline.open_spider()
        return await process_all(pipeline, [{"url": "a", "text": ARTICLE}, {"url": "b", "text": ARTICLE.encode()},
                                            {"url": "c", "text": bytearray(ARTICLE.encode())}])

    _, b, c = run(scenario())
    assert isinstance(b, NearDuplicateDropped) and b.match.exact
    assert isinstance(c, NearDuplicateDropped) and c.match.key == "a"


def test_items_without_url_get_a_stable_fallback_key() -> None:
    keys = []
    for _ in range(2):  # two independent pipelines: the key does not depend on the run
        pipeline = make_pipeline()

        async def scenario(p: NearDuplicatePipeline = pipeline) -> list[Any]:
            await p.open_spider()
            return await process_all(p, [{"text": ARTICLE}, {"text": ARTICLE, "url": None}])

        kept, dropped = run(scenario())
        assert kept == {"text": ARTICLE}
        assert isinstance(dropped, NearDuplicateDropped)
        keys.append(dropped.match.key)
        assert stats(pipeline)["neardup/missing_url"] == 2
    assert keys[0] == keys[1] and keys[0].startswith("no-url:")


def test_truncated_text_is_counted() -> None:
    pipeline = make_pipeline()
    pipeline.sketcher = Sketcher(max_chars=500)  # the tag is unchanged: max_chars is not a sketch parameter

    async def scenario() -> list[Any]:
        await pipeline.open_spider()
        return await process_all(pipeline, [{"url": "long", "text": ARTICLE}, {"url": "short", "text": "a b"}])

    run(scenario())
    assert stats(pipeline) == {"neardup/truncated": 1, "neardup/checked": 2, "neardup/kept": 2}


@pytest.mark.parametrize(("debug", "level"), [(False, logging.DEBUG), (True, logging.INFO)])
def test_debug_setting_logs_each_drop_at_info(
    debug: bool, level: int, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = make_pipeline(NEARDUP_DEBUG=debug)
    caplog.set_level(logging.DEBUG, logger="scrapy_neardup")

    async def scenario() -> list[Any]:
        await pipeline.open_spider()
        out = await process_all(pipeline, [{"url": "a", "text": ARTICLE}, {"url": "b", "text": ARTICLE}])
        await pipeline.close_spider()
        return out

    _, dropped = run(scenario())
    # Scrapy logs the drop ("Dropped: <message>") at the exception's log_level; the pipeline adds no line of its
    # own, so each drop is logged once.
    assert isinstance(dropped, NearDuplicateDropped) and logging.getLevelName(dropped.log_level) == level
    assert "near-duplicate of a (resemblance 1.000" in str(dropped)
    assert not [r for r in caplog.records if r.getMessage().startswith("Dropped")]
    summary = [r for r in caplog.records if r.getMessage().startswith("Near-duplicates: checked 2 items")]
    assert len(summary) == 1 and summary[0].levelno == logging.INFO
    assert "kept 1, dropped 1 (1 exact)" in summary[0].getMessage()


class FailingBackend(Backend):
    @classmethod
    def from_settings(cls, settings: Any, params: Any) -> FailingBackend:
        return cls()

    async def open(self) -> None:
        pass

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        raise BackendError("store unreachable")

    async def close(self) -> None:
        pass


def test_backend_errors_pass_items_through_and_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    pipeline = make_pipeline()
    pipeline.make_backend = FailingBackend  # type: ignore[method-assign]
    items = [{"url": "a", "text": ARTICLE}, {"url": "b", "text": ARTICLE}]

    async def scenario() -> list[Any]:
        await pipeline.open_spider()
        return await process_all(pipeline, items)

    with caplog.at_level(logging.DEBUG, logger="scrapy_neardup"):
        assert run(scenario()) == items  # never dropped without an answer from the store
    assert stats(pipeline)["neardup/backend_errors"] == 2
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "store unreachable" in caplog.text  # the first one, with its traceback


class FlakyBackend(Backend):
    """Fails its first ``failures`` calls, then decides as the embedded store does."""

    def __init__(self, failures: int) -> None:
        from scrapy_neardup.core.index import SketchIndex

        self.failures = failures
        self.calls = 0
        self.index = SketchIndex(128, 107, Sketcher().tag)

    @classmethod
    def from_settings(cls, settings: Any, params: Any) -> FlakyBackend:
        return cls(0)

    async def open(self) -> None:
        pass

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        self.calls += 1
        if self.calls <= self.failures:
            raise BackendError("store unreachable")
        return self.index.check_key(key, sketch).match

    async def close(self) -> None:
        pass


def test_pause_tries_the_backend_again_until_it_answers() -> None:
    """NEARDUP_ON_BACKEND_DOWN='pause' outside a crawl (nothing to pause): the items wait and are checked once
    the backend answers; none passes unchecked, each page that met the outage is counted once."""
    pipeline = make_pipeline(NEARDUP_ON_BACKEND_DOWN="pause", NEARDUP_BACKEND_RETRY_INTERVAL=0.02)
    backend = FlakyBackend(failures=2)
    pipeline.make_backend = lambda: backend  # type: ignore[method-assign]
    items = [{"url": "a", "text": ARTICLE}, {"url": "b", "text": ARTICLE + " end"}]

    async def scenario() -> list[Any]:
        await pipeline.open_spider()
        out = await asyncio.gather(*(pipeline.process_item(item) for item in items), return_exceptions=True)
        await pipeline.close_spider()
        return list(out)

    kept, dropped = run(scenario())
    assert kept == items[0] and isinstance(dropped, NearDuplicateDropped) and dropped.match.key == "a"
    counts = stats(pipeline)
    assert counts["neardup/backend_errors"] == 2 and "neardup/unchecked" not in counts
    assert counts["neardup/backend_pauses"] == 1 and backend.calls == 4
    assert not pipeline.too_many_unchecked()


def test_pause_gives_up_after_the_longest_wait(caplog: pytest.LogCaptureFixture) -> None:
    pipeline = make_pipeline(NEARDUP_ON_BACKEND_DOWN="pause", NEARDUP_BACKEND_RETRY_INTERVAL=0.02,
                             NEARDUP_BACKEND_DOWN_MAX_WAIT=0.1)
    pipeline.make_backend = lambda: FlakyBackend(failures=10**6)  # type: ignore[method-assign]
    item = {"url": "a", "text": ARTICLE}

    async def scenario() -> Any:
        await pipeline.open_spider()
        return await pipeline.process_item(item)

    with caplog.at_level(logging.WARNING, logger="scrapy_neardup"):
        assert run(scenario()) == {**item, "neardup": {"unchecked": True}}
    assert stats(pipeline)["neardup/unchecked"] == 1 and pipeline.too_many_unchecked()
    assert "it did not answer for 0 s (NEARDUP_BACKEND_DOWN_MAX_WAIT=0.1)" in caplog.text


@pytest.mark.parametrize(("policy", "max_unchecked", "too_many"), [("stop", 0, True), ("pass", 0.5, True),
                                                                   ("pass", 1, False)])
def test_unchecked_share(policy: str, max_unchecked: float, too_many: bool) -> None:
    pipeline = make_pipeline(NEARDUP_ON_BACKEND_DOWN=policy, NEARDUP_MAX_UNCHECKED=max_unchecked)
    pipeline.make_backend = lambda: FlakyBackend(failures=10**6)  # type: ignore[method-assign]

    async def scenario() -> list[Any]:
        await pipeline.open_spider()
        return await process_all(pipeline, [{"url": "a", "text": ARTICLE}, {"url": "b", "text": ARTICLE}])

    assert all(out["neardup"] == {"unchecked": True} for out in run(scenario()))
    assert pipeline.too_many_unchecked() is too_many
    assert "2 of 2 checked pages (100.0%) passed through unchecked" in pipeline.summary()


def test_state_from_other_parameters_is_refused_and_left_untouched(tmp_path: Path) -> None:
    first = make_pipeline(NEARDUP_STATE_DIR=str(tmp_path))

    async def fill() -> None:
        await first.open_spider()
        await process_all(first, [{"url": "a", "text": ARTICLE}])
        await first.close_spider()

    run(fill())
    state = tmp_path / STATE_FILE
    saved = state.read_bytes()
    other = make_pipeline(NEARDUP_STATE_DIR=str(tmp_path), NEARDUP_THRESHOLD=0.8)

    async def reopen() -> None:
        try:
            await other.open_spider()
        finally:
            await other.close_spider()  # Scrapy closes the pipelines even when opening failed

    with pytest.raises(StateError) as info:
        run(reopen())
    assert "min_shared=107" in str(info.value) and f"min_shared={other.config.min_shared}" in str(info.value)
    assert state.read_bytes() == saved


def test_state_round_trip_and_reset(tmp_path: Path) -> None:
    async def crawl(items: list[Any], **settings: Any) -> list[Any]:
        pipeline = make_pipeline(NEARDUP_STATE_DIR=str(tmp_path), **settings)
        await pipeline.open_spider()
        try:
            return await process_all(pipeline, items)
        finally:
            await pipeline.close_spider()

    run(crawl([{"url": "a", "text": ARTICLE}]))
    (again,) = run(crawl([{"url": "b", "text": ARTICLE}]))
    assert isinstance(again, NearDuplicateDropped) and again.match.key == "a"
    (after_reset,) = run(crawl([{"url": "c", "text": ARTICLE}], NEARDUP_RESET=True))
    assert after_reset == {"url": "c", "text": ARTICLE}


@dataclasses.dataclass
class RecordWithoutMark:
    url: str
    text: str


def test_mark_needs_a_declared_field_on_dataclass_items(caplog: pytest.LogCaptureFixture) -> None:
    pipeline = make_pipeline(NEARDUP_ACTION="mark")
    items = [RecordWithoutMark("a", ARTICLE), RecordWithoutMark("b", ARTICLE)]

    async def scenario() -> list[Any]:
        await pipeline.open_spider()
        return await process_all(pipeline, items)

    # Passed through unmarked and unchecked (never lost, never dropped), the error said once.
    assert run(scenario()) == items
    assert stats(pipeline) == {"neardup/mark_field_missing": 2}
    (message,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "NEARDUP_MARK_FIELD='neardup'" in message and "RecordWithoutMark" in message
    with pytest.raises(MarkFieldError, match="RecordWithoutMark does not declare"):
        NearDuplicatePipeline.check_mark_field(RecordWithoutMark, "neardup")


def test_mark_dict_items_get_the_field() -> None:
    pipeline = make_pipeline(NEARDUP_ACTION="mark", NEARDUP_MARK_FIELD="dup")

    async def scenario() -> list[Any]:
        await pipeline.open_spider()
        return await process_all(pipeline, [{"url": "a", "text": ARTICLE}, {"url": "b", "text": ARTICLE}])

    first, second = run(scenario())
    assert first["dup"] is None  # kept items carry the field too: feed exports get a stable schema
    # The evidence: the rule that decided, shared positions of k, the 95% interval of the resemblance.
    k = pipeline.config.num_perm
    # And what of the page was sketched: plain text, its own text (no template is known, it has no link list).
    assert second["dup"] == {"duplicate_of": "a", "resemblance": 1.0, "exact": True, "rule": "exact", "shared": k,
                             "k": k, "interval": [round(resemblance_interval(k, k)[0], 3), 1.0],
                             "sketched": "own text", "words": len(ARTICLE.split()), "removed": 0.0,
                             # the kept page's side, as the store remembers it: plain text, nothing removed
                             "kept_sketched": "own text", "kept_words": len(ARTICLE.split()), "kept_removed": 0.0}
    assert stats(pipeline) == {"neardup/checked": 2, "neardup/kept": 1, "neardup/exact_duplicates": 1,
                               "neardup/marked": 1}


def test_decided_items_are_found_by_their_object_then_by_url_and_never_by_an_item_without_text() -> None:
    """The search writer's hand-over: an item by its own object; a copy a pipeline in between made, by its URL; an
    item of the same URL the pipeline passed on undecided (no text) never takes another item's decision."""
    from scrapy_neardup.crawl.search_writer import Decided, DecidedItems

    sketch = Sketcher(num_perm=16).sketch("one two three four five six seven")
    decided = DecidedItems("url", "text")
    page = {"url": "http://a/1", "text": "one two three four five six seven"}
    entry = Decided(page, "http://a/1", sketch, None)
    decided.park(entry)
    assert decided.take({"url": "http://a/1"}) is None  # no text: passed on undecided, not this page's copy
    assert decided.take({"url": "http://a/1", "text": ""}) is None
    assert len(decided) == 1
    assert decided.take(dict(page)) is entry and len(decided) == 0  # a copy: found by its URL
    assert decided.take(page) is None  # taken once
    decided.park(entry)
    assert decided.take(page) is entry and decided.take(dict(page)) is None  # by the object itself
    other = Decided({"url": "http://a/2", "text": "x"}, "http://a/2", sketch, None)
    decided.park(other)
    assert decided.take({"url": "http://a/3", "text": "x"}) is None and len(decided) == 1  # another URL
    assert decided.take(object()) is None  # not an item
