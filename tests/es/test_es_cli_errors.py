"""What `neardup es` says when the index and the command disagree: parameter tags, refused documents."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from scrapy_neardup.cli.main import main

pytestmark = pytest.mark.es

TEXT = " ".join(f"word{i}" for i in range(300))


def write_lines(path: Path, records: list[dict[str, object]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_other_sketch_parameters_are_refused_naming_both_tags(
    es_client: Elasticsearch, es_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = f"nd-tags-{uuid.uuid4().hex[:10]}"
    pages = write_lines(tmp_path / "pages.jsonl", [{"id": f"p{i}", "text": f"{TEXT} page {i}"} for i in range(5)])
    base = ["es", "index", pages, "--es-url", es_url, "--index", index]
    assert main(base) == 0
    capsys.readouterr()
    before = es_client.get(index=index, id="p0")["_source"]["neardup"]["tag"]

    assert main([*base, "--num-perm", "64"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    assert before in err and before.replace("-k128-", "-k64-") in err
    assert es_client.get(index=index, id="p0")["_source"]["neardup"]["tag"] == before  # nothing overwritten

    assert main(["es", "groups", "--es-url", es_url, "--index", index, "--num-perm", "64"]) == 1
    err = capsys.readouterr().err
    assert before in err and before.replace("-k128-", "-k64-") in err
    assert main(["es", "groups", "--es-url", es_url, "--index", index]) == 0  # its own parameters still work
    es_client.indices.delete(index=index)


def test_refused_documents_are_summarized_by_kind_not_quoted(
    es_client: Elasticsearch, es_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = f"nd-refused-{uuid.uuid4().hex[:10]}"
    es_client.indices.create(index=index, mappings={"properties": {"size": {"type": "long"}}})
    page = "<html><body>" + "<p>a long page that Elasticsearch would quote back</p>" * 2000 + "</body></html>"
    records = [{"id": f"ok{i}", "text": f"{TEXT} {i}", "size": i} for i in range(3)]
    records += [{"id": f"bad{i}", "text": f"{TEXT} bad {i}", "size": page} for i in range(4)]
    # Refused documents make the run fail (exit 1) after writing the others.
    assert main(["es", "index", write_lines(tmp_path / "mixed.jsonl", records), "--es-url", es_url,
                 "--index", index]) == 1
    err = capsys.readouterr().err
    assert len(err) < 1000, err  # the 100 KB page is not printed
    assert "3 documents written" in err and "4 errors" in err
    (kind,) = [line.strip() for line in err.splitlines() if "document(s), first" in line]
    assert kind.startswith("document_parsing_exception: 4 document(s), first bad0: ") or kind.startswith(
        "mapper_parsing_exception: 4 document(s), first bad0: "), kind
    es_client.indices.delete(index=index)
