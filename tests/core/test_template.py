"""Host templates: the learning rule, the codec, batch learning and the embedded store's template file."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scrapy_neardup.core.host_template import (
    MIN_BLOCK_PAGES,
    MIN_SAMPLE,
    TEMPLATE_SHARE,
    HostTemplate,
    TemplateLearner,
    learn_template,
)
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.errors import StateError, TemplateFormatError
from scrapy_neardup.store.embedded import TEMPLATES_FILE, EmbeddedBackend
from scrapy_neardup.store.template_log import TemplateLog


def pages_with(shared: list[int], pages: int, own: int = 5, seed: int = 0) -> list[np.ndarray]:
    """``pages`` hash sets: each holds ``shared`` plus ``own`` hashes of its own."""
    rng = np.random.default_rng(seed)
    return [np.unique(np.concatenate([np.array(shared, dtype=np.uint64),
                                      rng.integers(1 << 40, 1 << 63, own, dtype=np.uint64)])) for _ in range(pages)]


def test_a_block_on_enough_pages_is_template_and_one_on_few_is_not() -> None:
    pages = pages_with([1, 2, 3], 20)
    # Block 9 on exactly the share's number of pages (ceil(0.3 * 20) = 6), block 10 on one page fewer.
    for i in range(6):
        pages[i] = np.union1d(pages[i], [9]).astype(np.uint64)
    for i in range(5):
        pages[10 + i] = np.union1d(pages[10 + i], [10]).astype(np.uint64)
    template = learn_template(pages)
    assert template.hashes.tolist() == [1, 2, 3, 9]
    assert template.pages == 20


def test_small_samples_learn_nothing_and_need_min_block_pages() -> None:
    assert learn_template(pages_with([1], MIN_SAMPLE - 1)).empty
    # In a sample of MIN_SAMPLE pages the share alone would ask for 2 pages; MIN_BLOCK_PAGES asks for more.
    pages = pages_with([], MIN_SAMPLE)
    pages[0] = np.union1d(pages[0], [7]).astype(np.uint64)
    pages[1] = np.union1d(pages[1], [7]).astype(np.uint64)
    assert int(np.ceil(TEMPLATE_SHARE * MIN_SAMPLE)) < MIN_BLOCK_PAGES
    assert learn_template(pages).empty


def test_template_codec_round_trips_and_refuses_garbage() -> None:
    template = HostTemplate(np.array([3, 5, 2**63 + 1], dtype=np.uint64), 32)
    assert HostTemplate.from_bytes(template.to_bytes()) == template
    for bad in (b"", b"NDT1" + bytes(7), template.to_bytes()[:-1], b"XXXX" + template.to_bytes()[4:]):
        with pytest.raises(TemplateFormatError):
            HostTemplate.from_bytes(bad)
    unsorted = HostTemplate(np.array([5, 3], dtype=np.uint64), 1).to_bytes()
    with pytest.raises(TemplateFormatError):
        HostTemplate.from_bytes(unsorted)


def test_batch_learning_does_not_depend_on_input_order() -> None:
    pages = [(f"http://h/{i}", blocks) for i, blocks in enumerate(pages_with([1, 2], 50, seed=3))]
    learned = []
    for seed in range(3):
        random.Random(seed).shuffle(pages)
        learner = TemplateLearner(sample=20)  # fewer than the pages: a sample of them
        for key, blocks in pages:
            learner.add("http://h", key, blocks)
        learned.append(learner.learn("http://h"))
    assert learned[0] == learned[1] == learned[2]
    assert learned[0].pages == 20 and learned[0].hashes.tolist() == [1, 2]


def test_template_log_keeps_templates_across_opens_and_ignores_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / TEMPLATES_FILE
    log = TemplateLog(path, "tag-a")
    log.open_for_append()
    first = HostTemplate(np.array([1, 2], dtype=np.uint64), 8)
    log.append("http://a", first)
    log.append("http://b", HostTemplate(np.array([7], dtype=np.uint64), 9))
    log.close()
    with path.open("ab") as handle:
        handle.write(b"\x10\x00\x00")  # a record cut short by a crash
    templates, torn = TemplateLog(path, "tag-a").load()
    assert templates == {"http://a": first, "http://b": HostTemplate(np.array([7], dtype=np.uint64), 9)}
    assert torn == 3
    with pytest.raises(StateError, match="tag-a, but this run uses tag-b"):
        TemplateLog(path, "tag-b").load()
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF  # inside the first record, with another after it: damage
    path.write_bytes(bytes(data))
    with pytest.raises(StateError, match="damaged"):
        TemplateLog(path, "tag-a").load()


def test_embedded_store_keeps_the_first_template_of_a_host_across_crawls(tmp_path: Path) -> None:
    sketcher = Sketcher()

    async def crawl(template: HostTemplate, reset: bool = False) -> tuple[HostTemplate, dict[str, int]]:
        backend = EmbeddedBackend(sketcher.num_perm, 107, sketcher.tag, state_dir=tmp_path, reset=reset)
        await backend.open()
        saved = await backend.save_template("http://h", template)
        await backend.close()
        return saved, dict(backend.stats())

    one = HostTemplate(np.array([1], dtype=np.uint64), 32)
    two = HostTemplate(np.array([2], dtype=np.uint64), 32)
    assert asyncio.run(crawl(one))[0] == one
    assert asyncio.run(crawl(two))[0] == one  # the first saved wins, across crawls too
    assert asyncio.run(crawl(two, reset=True))[0] == two  # NEARDUP_RESET discards the templates with the rest


def test_a_store_of_whole_body_sketches_is_refused_with_the_way_out(tmp_path: Path) -> None:
    """A store written by an earlier version (whole-body sketches) meets the new default: one line saying why and
    what to do, and the store is left as it was."""

    async def crawl(sketcher: Sketcher) -> None:
        backend = EmbeddedBackend(sketcher.num_perm, 107, sketcher.tag, state_dir=tmp_path)
        await backend.open()
        await backend.check_and_add("a", sketcher.sketch("words of a page that says something of its own here"))
        await backend.close()

    asyncio.run(crawl(Sketcher(content="body")))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(StateError) as refused:
        asyncio.run(crawl(Sketcher()))
    message = str(refused.value)
    assert "\n" not in message
    assert "whole body (mh11-k128-word5-s1)" in message
    assert "own text (mh16-k128-word5-s1-auto)" in message
    assert "NEARDUP_RESET=True" in message and "NEARDUP_CONTENT='body'" in message
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_store_of_an_earlier_scheme_is_refused_without_a_mode_that_would_not_help(tmp_path: Path) -> None:
    """A store written before text folding (scheme 4) meets this version: one line naming the earlier version and
    the reset, and no NEARDUP_CONTENT suggestion (no mode of this version makes such sketches)."""
    sketch = Sketcher().sketch("words of a page that says something of its own here")
    earlier = sketch.tag.replace("mh16-", "mh4-")

    async def crawl(tag: str, page: Any) -> None:
        backend = EmbeddedBackend(128, 107, tag, state_dir=tmp_path)
        await backend.open()
        try:
            await backend.check_and_add("a", page)
        finally:
            await backend.close()

    asyncio.run(crawl(earlier, dataclasses.replace(sketch, tag=earlier)))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(StateError) as refused:
        asyncio.run(crawl(sketch.tag, sketch))
    message = str(refused.value)
    assert "\n" not in message
    assert f"made by an earlier version ({earlier})" in message and f"this run's by {sketch.tag}" in message
    assert "NEARDUP_RESET=True" in message and "NEARDUP_CONTENT" not in message
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
