"""The evidence of an index's decisions: ``neardup es report`` (HTML) and ``neardup es explain`` on a real node."""

from __future__ import annotations

import html
import json
import random
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from es_integration.indexing import index_records
from scrapy_neardup.cli.main import main
from scrapy_neardup.core.evidence import describe_evidence, evidence
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.core.stored_signature import stored_values
from scrapy_neardup.core.theory import min_shared_for

pytestmark = pytest.mark.es

K = 128
T = min_shared_for(0.9, K)


def _records() -> list[dict[str, Any]]:
    """Four topics, each an original and copies with one or two words changed, on two hosts; five pages alone."""
    rng = random.Random(3)
    records = []
    for topic in range(4):
        words = [f"w{rng.randrange(40_000)}" for _ in range(250)]
        for copy in range(3):
            changed = list(words)
            for position in rng.sample(range(len(changed)), copy):
                changed[position] = f"x{rng.randrange(10**9)}"
            host = "a.test" if copy == 0 else "b.test"
            records.append({"id": f"t{topic}-{copy}", "url": f"https://{host}/t{topic}/{copy}",
                            "text": " ".join(changed)})
    records += [{"id": f"alone{i}", "url": f"https://a.test/alone/{i}",
                 "text": " ".join(f"z{rng.randrange(40_000)}" for _ in range(250))} for i in range(5)]
    return records


@pytest.fixture(scope="module")
def assigned(es_client: Elasticsearch, es_url: str) -> Iterator[dict[str, Any]]:
    sketcher = Sketcher(num_perm=K)
    records = _records()
    index = f"nd-report-{uuid.uuid4().hex[:10]}"
    assert index_records(es_client, index, records, sketcher).errors == 0
    assert main(["es", "groups", "--es-url", es_url, "--index", index, "--assign"]) == 0
    yield {"index": index, "records": {r["id"]: r for r in records}, "sketcher": sketcher}
    es_client.indices.delete(index=index, ignore_unavailable=True)


def _shared(assigned: dict[str, Any], a: str, b: str) -> int:
    sketch = assigned["sketcher"].sketch
    texts = assigned["records"]
    return int(np.count_nonzero(stored_values(sketch(texts[a]["text"]).signature)
                                == stored_values(sketch(texts[b]["text"]).signature)))


def test_report_of_an_index(es_url: str, assigned: dict[str, Any], tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "index.html"
    index = assigned["index"]
    assert main(["es", "report", "--es-url", es_url, "--index", index, "-o", str(out)]) == 0
    page = out.read_text()
    assert "<script" not in page and " src=" not in page and "<polyline" in page
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>(.*?)</td></tr>",
                      page.split("<h2>Every duplicate", 1)[1])
    by_url = {r["url"]: r["id"] for r in assigned["records"].values()}
    # Every copy is a duplicate of its topic's original, with the evidence counted here on the texts.
    assert sorted(html.unescape(u) for u, _, _, _ in rows) == sorted(
        r["url"] for r in assigned["records"].values() if r["id"].startswith("t") and not r["id"].endswith("-0"))
    for url, of, resemblance, ev in rows:
        page_id, of_id = by_url[html.unescape(url)], by_url[html.unescape(of)]
        assert of_id == page_id.rsplit("-", 1)[0] + "-0"
        shared = _shared(assigned, of_id, page_id)
        assert float(resemblance) == pytest.approx(shared / K, abs=5e-4)
        assert html.unescape(ev).startswith(describe_evidence(evidence(shared, K, "near_duplicate")))
        # Both pages' sides, from their documents (plain text records: their words, nothing removed).
        words = [len(assigned["records"][i]["text"].split()) for i in (page_id, of_id)]
        assert (f"; sketched: own text, {words[0]} words, 0% removed; kept: own text, {words[1]} words, 0% removed"
                in html.unescape(ev))
        assert f"neardup es explain --index {index} " in ev
    assert '<div class="card"><b>17</b>pages</div>' in page and '<div class="card"><b>8</b>duplicates</div>' in page
    # Per host: b.test holds only copies.
    assert re.search(r"<tr><td>https://b\.test:443</td><td>8</td><td>8</td>", page)
    # The same page from `neardup report --es-url ... --index ...`; an input besides --index is refused.
    again = tmp_path / "again.html"
    assert main(["report", "--es-url", es_url, "--index", index, "-o", str(again)]) == 0
    assert again.read_text() == page
    with pytest.raises(SystemExit) as stopped:
        main(["report", str(out), "--es-url", es_url, "--index", index, "-o", str(again)])
    assert stopped.value.code == 2 and "either an input" in capsys.readouterr().err
    # Sketched with other parameters: refused in one line naming both.
    assert main(["es", "report", "--es-url", es_url, "--index", index, "-o", str(out), "--num-perm", "64"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("neardup es report: error:") and err.count("\n") == 1


def test_explain_two_documents(es_url: str, assigned: dict[str, Any], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    args = ["es", "explain", "--es-url", es_url, "--index", assigned["index"]]
    shared = _shared(assigned, "t1-0", "t1-2")
    # With their text: side by side as sketched, the differences shown.
    assert main([*args, "t1-0", "t1-2", "--json", "--html", str(tmp_path / "why.html")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["shared"] == shared and result["decision"] == "near_duplicate"
    assert [p["name"] for p in result["pages"]] == ["https://a.test/t1/0", "https://b.test/t1/2"]
    assert sum(1 for d in result["diff"] if d[0] != "equal") == 2
    assert "<del>" in (tmp_path / "why.html").read_text()
    # Without text (another field named): the stored signatures, with the same count.
    assert main([*args, "t1-0", "t1-2", "--text-field", "body", "--json"]) == 0
    stored = json.loads(capsys.readouterr().out)
    assert stored["shared"] == shared and stored["evidence"] == evidence(shared, K, "near_duplicate")
    assert main([*args, "t1-0", "alone3", "--text-field", "body"]) == 0
    assert "both are kept" in capsys.readouterr().out
    # The core command takes the same options.
    assert main(["explain", *args[2:], "t1-0", "t1-2", "--text-field", "body", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == stored
    assert main([*args, "t1-0", "no-such-doc"]) == 1
    err = capsys.readouterr().err
    assert "no document with _id or page key no-such-doc" in err and err.count("\n") == 1
