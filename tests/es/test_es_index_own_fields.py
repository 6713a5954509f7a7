"""`neardup es index` never overwrites a field a record has: a record with its own `neardup` field (the mark of a
mark-mode crawl's export, under its default name) is refused in one line naming the field and the option that
stores it elsewhere; with that option the value is kept under the other name."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapy_neardup.cli.main import main

pytestmark = pytest.mark.es


@pytest.fixture
def index(es_client: Any) -> Iterator[str]:
    name = f"nd-own-fields-{uuid.uuid4().hex[:10]}"
    yield name
    for each in (name, f"{name}-templates"):  # the hosts' templates of "auto" sketches live in the sibling index
        es_client.indices.delete(index=each, ignore_unavailable=True)


def mark_mode_export(path: Path) -> Path:
    """Lines as a mark-mode crawl exports them: kept pages marked null, a duplicate marked with its kept page."""
    words = " ".join(f"w{i}" for i in range(300))
    records = [
        {"url": "http://a.test/1", "text": words, "neardup": None},
        {"url": "http://b.test/1", "text": words + " more",
         "neardup": {"duplicate_of": "http://a.test/1", "resemblance": 0.97, "exact": False}},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_record_with_its_own_neardup_field_is_refused(
    es_url: str, es_client: Any, index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    pages = mark_mode_export(tmp_path / "pages.jsonl")
    assert main(["es", "index", str(pages), "--es-url", es_url, "--index", index, "--id-field", "url"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "neardup es index: error: record 1 has a field 'neardup', which this command would overwrite with the "
        "near-duplicate fields: give --move-neardup-to FIELD to keep its value under another name (e.g. the mark "
        "of a mark-mode crawl: --move-neardup-to mark)"
    ]
    es_client.indices.refresh(index=index)
    assert es_client.count(index=index)["count"] == 0  # nothing written
    # The other name must be free too.
    assert main(["es", "index", str(pages), "--es-url", es_url, "--index", index, "--id-field", "url",
                 "--move-neardup-to", "text"]) == 1
    assert "record 1 has a field 'text' already (--move-neardup-to text)" in capsys.readouterr().err


def test_the_record_s_own_field_is_kept_under_another_name(
    es_url: str, es_client: Any, index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    pages = mark_mode_export(tmp_path / "pages.jsonl")
    assert main(["es", "index", str(pages), "--es-url", es_url, "--index", index, "--id-field", "url",
                 "--move-neardup-to", "mark"]) == 0
    capsys.readouterr()
    es_client.indices.refresh(index=index)
    docs = {h["_id"]: h["_source"] for h in es_client.search(index=index, size=10)["hits"]["hits"]}
    assert docs["http://a.test/1"]["mark"] is None
    assert docs["http://b.test/1"]["mark"]["duplicate_of"] == "http://a.test/1"
    for source in docs.values():
        assert source["neardup"]["status"] == "kept" and len(source["neardup"]["positions"]) == 128
