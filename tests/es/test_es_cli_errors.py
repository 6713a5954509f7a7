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


def test_index_names_records_without_an_id_by_their_url(
    es_client: Elasticsearch, es_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Records as the Scrapy pipeline exports them ({url, text}, no id): their URL is their _id, as the pipeline
    keys pages, and one line says so; an explicit --id-field, or records with an id, as before."""
    index = f"nd-ids-{uuid.uuid4().hex[:10]}"
    pages = [{"url": f"https://a.test/{i}", "text": f"{TEXT} page {i}"} for i in range(3)]
    source = write_lines(tmp_path / "pages.jsonl", pages)
    assert main(["es", "index", source, "--es-url", es_url, "--index", index]) == 0
    err = capsys.readouterr().err
    assert err.count("neardup es index: the records have no 'id' field; using 'url' as their id "
                     "(--id-field to choose)") == 1
    assert es_client.get(index=index, id="https://a.test/1")["_source"]["url"] == "https://a.test/1"
    assert es_client.count(index=index)["count"] == 3
    # Again: the same documents, overwritten (not a second, randomly named copy of each).
    assert main(["es", "index", source, "--es-url", es_url, "--index", index]) == 0
    assert es_client.count(index=index)["count"] == 3
    capsys.readouterr()
    # --id-field id, which these records lack: random ids, as asked, nothing said.
    assert main(["es", "index", source, "--es-url", es_url, "--index", index, "--id-field", "id"]) == 0
    assert "--id-field to choose" not in capsys.readouterr().err
    assert es_client.count(index=index)["count"] == 6
    with_ids = write_lines(tmp_path / "ids.jsonl", [{"id": f"p{i}", **page} for i, page in enumerate(pages)])
    assert main(["es", "index", with_ids, "--es-url", es_url, "--index", index]) == 0
    assert "--id-field to choose" not in capsys.readouterr().err
    assert es_client.get(index=index, id="p2")["_source"]["url"] == "https://a.test/2"
    es_client.indices.delete(index=index)


def test_es_index_folds_lookalikes_accents_and_invisible_characters(
    es_client: Elasticsearch, es_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`es index` sketches through the same Unicode folding: a copy typed with Latin lookalikes, stress marks, soft
    hyphens and zero-width spaces gets its original's signature and fingerprint; a different text does not."""
    index = f"nd-fold-{uuid.uuid4().hex[:10]}"
    words = [f"слово{i}" for i in range(200)]
    altered = [w.replace("о", "o", 1) + "\u0301" if i % 3 == 0 else w[:2] + "\u00ad\u200b" + w[2:]
               for i, w in enumerate(words)]
    records = [{"id": "original", "text": " ".join(words)}, {"id": "copy", "text": " ".join(altered)},
               {"id": "other", "text": " ".join(reversed(words))}]
    assert main(["es", "index", write_lines(tmp_path / "pages.jsonl", records), "--es-url", es_url,
                 "--index", index]) == 0
    capsys.readouterr()
    docs = {name: es_client.get(index=index, id=name)["_source"]["neardup"] for name in ("original", "copy", "other")}
    assert docs["copy"]["fingerprint"] == docs["original"]["fingerprint"] != docs["other"]["fingerprint"]
    assert docs["copy"]["tag"].startswith("mh16-")
    es_client.indices.delete(index=index)
