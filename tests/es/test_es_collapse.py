"""Serve-time collapse: search collapsed on group ids with omitted counts, and the hit-list helper."""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from es_integration.collapse import collapse_hits, hit_signature, search_collapsed, search_with_collapse
from es_integration.groups import assign_groups, find_groups
from es_integration.indexing import index_records
from scrapy_neardup.cli.main import main
from scrapy_neardup.core.evidence import evidence
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.core.stored_signature import stored_values
from scrapy_neardup.core.theory import min_shared_for

pytestmark = pytest.mark.es
SIDES = ("sketched", "words", "removed", "kept_sketched", "kept_words", "kept_removed")

K = 128
T = min_shared_for(0.9, K)


def collapse_records(seed: int) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Pages about "apple" in groups of near-duplicates (sizes 1-6), plus pages without the word.

    In every group of three or more, the last copy says "pear" instead of "apple": a near-duplicate that does
    not match the query, so it is not counted as omitted.
    """
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    planted: dict[str, list[str]] = {}
    for g in range(24):
        words = [f"w{rng.randrange(50_000)}" for _ in range(250)]
        words[10] = "apple"
        size = 1 + g % 6
        planted[f"t{g}"] = []
        for c in range(size):
            copy = list(words)
            copy[rng.randrange(20, 250)] = f"x{rng.randrange(10**9)}"
            if c == size - 1 and size >= 3:
                copy[10] = "pear"
            key = f"t{g}-c{c}"
            planted[f"t{g}"].append(key)
            records.append({"id": key, "title": f"topic {g} copy {c}", "text": " ".join(copy)})
    for i in range(30):
        records.append({"id": f"other{i}", "text": " ".join(f"v{rng.randrange(50_000)}" for _ in range(200))})
    rng.shuffle(records)
    return records, planted


@pytest.fixture(scope="module")
def collapsed(es_client: Elasticsearch) -> Iterator[dict[str, Any]]:
    sketcher = Sketcher()
    records, planted = collapse_records(seed=21)
    index = f"nd-collapse-{uuid.uuid4().hex[:10]}"
    assert index_records(es_client, index, records, sketcher).errors == 0
    report = find_groups(es_client, index, SketchParams.from_tag(sketcher.tag, min_shared=T))
    assign_groups(es_client, index, report)
    # A page without a sketch (indexed by other means): shown, and never collapsed with anything.
    es_client.index(index=index, id="unsketched", refresh=True,
                    document={"text": "apple", "neardup": {"group": "unsketched", "status": "kept"}})
    groups = {m: g.id for g in report.groups for m in g.members}
    yield {"index": index, "records": {r["id"]: r for r in records}, "planted": planted, "groups": groups,
           "sketcher": sketcher}
    es_client.indices.delete(index=index, ignore_unavailable=True)


def test_planted_groups_were_found(collapsed: dict[str, Any]) -> None:
    for members in collapsed["planted"].values():
        if len(members) > 1:
            assert len({collapsed["groups"][m] for m in members}) == 1
        else:
            assert members[0] not in collapsed["groups"]


def test_search_collapsed_counts_omitted(es_client: Elasticsearch, collapsed: dict[str, Any]) -> None:
    index, records = collapsed["index"], collapsed["records"]
    hits = search_collapsed(es_client, index, "apple", size=100, fields=["text"])
    matching = {k for k, r in records.items() if " apple " in f" {r['text']} "} | {"unsketched"}
    shown_groups = [h.group for h in hits]
    assert len(shown_groups) == len(set(shown_groups))  # one hit per group
    assert len(hits) == len(collapsed["planted"]) + 1  # every topic once, plus the unsketched page
    for hit in hits:
        members = [k for k in matching if collapsed["groups"].get(k, k) == hit.group]
        assert hit.id in members
        assert hit.omitted == len(members) - 1
        assert hit.source is not None and "positions" not in hit.source.get("neardup", {})
    assert sorted(h.omitted for h in hits) == sorted(
        [max(0, len(m) - 1 - (len(m) >= 3)) for m in collapsed["planted"].values()] + [0]
    )
    # By default every text field is searched, never the near-duplicate keyword fields.
    assert [h.id for h in search_collapsed(es_client, index, "apple", size=100)] == [h.id for h in hits]
    assert search_collapsed(es_client, index, "kept") == []
    # Paging goes on with the next groups.
    first, second = (search_collapsed(es_client, index, "apple", size=5, from_=f, fields=["text"]) for f in (0, 5))
    assert not {h.group for h in first} & {h.group for h in second}
    assert [h.id for h in first] == [h.id for h in hits[:5]]


def test_search_cli_json_and_text(es_url: str, collapsed: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    args = ["es", "search", "--es-url", es_url, "--index", collapsed["index"], "apple", "--field", "text"]
    assert main([*args, "--size", "7", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload) == {"hits"} and len(payload["hits"]) == 7
    for hit in payload["hits"]:
        # No _source unless asked for: only what identifies and ranks the hit.
        assert set(hit) == {"id", "score", "omitted", "index", "group"} and isinstance(hit["omitted"], int)
        assert isinstance(hit["score"], float) and hit["group"] == collapsed["groups"].get(hit["id"], hit["id"])
    assert main([*args, "--size", "7", "--json", "--fields", "title,id", "--fields", "missing.field"]) == 0
    with_fields = json.loads(capsys.readouterr().out)["hits"]
    assert [h["id"] for h in with_fields] == [h["id"] for h in payload["hits"]]
    for hit in with_fields:
        record = collapsed["records"].get(hit["id"], {})  # "unsketched" was indexed apart, without title or id
        assert hit["fields"] == {"title": record.get("title"), "id": record.get("id"), "missing.field": None}
        assert "source" not in hit
    assert main([*args, "--size", "2", "--json", "--source"]) == 0
    for hit in json.loads(capsys.readouterr().out)["hits"]:
        assert hit["source"]["text"] == collapsed["records"].get(hit["id"], {"text": "apple"})["text"]
        assert "positions" not in hit["source"]["neardup"]
    assert main([*args, "--size", "30"]) == 0
    out = capsys.readouterr().out
    assert "similar pages omitted" in out and "1 similar page omitted" in out


def test_collapse_hits_helper(es_client: Elasticsearch, collapsed: dict[str, Any], es_url: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """Without group ids: near-duplicates removed from a ranked list by comparing the hits' sketches."""
    raw = es_client.search(index=collapsed["index"], query={"match": {"text": "apple"}}, size=200)["hits"]["hits"]
    kept = collapse_hits(raw, T)
    assert sum(1 + h.omitted for h in kept) == len(raw)
    rank = {h["_id"]: i for i, h in enumerate(raw)}
    assert [h.id for h in kept] == sorted((h.id for h in kept), key=rank.__getitem__)  # order preserved
    sigs = {h["_id"]: s[1] for h in raw if (s := hit_signature(h)) is not None}
    assert "unsketched" in {h.id for h in kept} and "unsketched" not in sigs
    kept_sigs = [sigs[h.id] for h in kept if h.id in sigs]
    for i, a in enumerate(kept_sigs):  # kept hits never near-duplicate each other
        for b in kept_sigs[i + 1 :]:
            assert np.count_nonzero(a == b) < T
    for h in kept:
        for hidden in h.hidden:
            assert np.count_nonzero(sigs[hidden] == sigs[h.id]) >= T and rank[hidden] > rank[h.id]
            # Why it is hidden: the positions it shares with the hit shown, and the estimate's interval.
            shared = int(np.count_nonzero(sigs[hidden] == sigs[h.id]))
            assert {k: v for k, v in h.evidence[hidden].items() if k not in SIDES} == {
                "resemblance": round(shared / K, 4), **evidence(shared, K, "near_duplicate")}
            assert h.evidence[hidden]["sketched"] == h.evidence[hidden]["kept_sketched"] == "own text"
    assert sum(len(h.evidence) for h in kept) == sum(h.omitted for h in kept) > 0
    # Same outcome as the groups here (every group is a clique of near-duplicates).
    assert {h.id for h in kept if h.id in sigs} == {
        min((k for k in sigs if collapsed["groups"].get(k, k) == g), key=rank.__getitem__)
        for g in {collapsed["groups"].get(k, k) for k in sigs}
    }
    args = ["es", "search", "--es-url", es_url, "--index", collapsed["index"], "apple", "--by-sketch", "--json"]
    assert main([*args, "--size", "100", "--field", "text"]) == 0
    by_sketch = json.loads(capsys.readouterr().out)["hits"]
    assert [h["id"] for h in by_sketch] == [h.id for h in kept] and [h["omitted"] for h in by_sketch] == [
        h.omitted for h in kept
    ]
    for shown, h in zip(by_sketch, kept, strict=True):
        assert [p["id"] for p in shown.get("hidden_pages", [])] == h.hidden
        for page in shown.get("hidden_pages", []):
            fields = h.evidence[page["id"]]
            assert page["resemblance"] == fields["resemblance"] and page["evidence"]["shared"] == fields["shared"]
            assert page["evidence"]["rule"] == "near_duplicate" and page["evidence"]["k"] == K


def chain_texts(sketcher: Sketcher) -> list[str]:
    """Three pages about "harbor", A ~ B and B ~ C (>= t shared positions) but A !~ C: each a few word edits from
    the last (the first seed whose sketches give that, so the test does not rest on luck)."""
    for seed in range(100):
        rng = random.Random(seed)
        words = [f"w{rng.randrange(50_000)}" for _ in range(300)]
        words[5] = "harbor"
        pages = [list(words)]
        for _ in range(2):
            page = list(pages[-1])
            for spot in rng.sample(range(20, 300), 4):
                page[spot] = f"x{rng.randrange(10**9)}"
            pages.append(page)
        texts = [" ".join(p) for p in pages]
        a, b, c = (stored_values(s.signature) for s in sketcher.sketch_many(texts))
        if min(np.count_nonzero(a == b), np.count_nonzero(b == c)) >= T > np.count_nonzero(a == c):
            return texts
    raise AssertionError("no seed gives a chain")


def test_a_chain_stays_visible_unless_transitive(
    es_client: Elasticsearch, es_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`neardup es groups --assign`, then a collapsed search. A, B, C form a chain (A ~ B ~ C, A !~ C): Broder's
    components (--transitive) collapse all three into one hit, hiding C behind a page it does not
    near-duplicate; the default shows A (hiding B, which near-duplicates it) and C."""
    sketcher = Sketcher()
    texts = chain_texts(sketcher)
    index = f"nd-collapse-chain-{uuid.uuid4().hex[:8]}"
    records = [{"id": key, "text": text} for key, text in zip("ABC", texts, strict=True)]
    assert index_records(es_client, index, records, sketcher).errors == 0
    groups = ["es", "groups", "--es-url", es_url, "--index", index, "--assign", "--no-band-filter"]

    assert main([*groups, "--transitive"]) == 0
    hits = search_collapsed(es_client, index, "harbor", size=10, fields=["text"])
    assert [(h.id, h.omitted) for h in hits] == [("A", 2)]

    assert main(groups) == 0
    assert "group fields updated on 1 documents" in capsys.readouterr().err  # C leaves A's group
    hits = search_collapsed(es_client, index, "harbor", size=10, fields=["text"])
    assert sorted((h.id, h.omitted, h.group) for h in hits) == [("A", 1, "A"), ("C", 0, "C")]
    fields = {r["id"]: es_client.get(index=index, id=r["id"])["_source"]["neardup"] for r in records}
    assert (fields["B"]["status"], fields["B"]["duplicate_of"]) == ("duplicate", "A")
    assert (fields["C"]["status"], fields["C"]["group"], fields["C"].get("duplicate_of")) == ("kept", "C", None)
    es_client.indices.delete(index=index)


def test_search_with_collapse_takes_a_body_of_ones_own(es_client: Elasticsearch, collapsed: dict[str, Any]) -> None:
    """The body's query, paging and post_filter apply (to the counts too); the page shown for a group is its kept
    page (the representative, whose _id is the group id) whenever that matches; a body's own collapse is refused."""
    index, records = collapsed["index"], collapsed["records"]
    body = {"query": {"match": {"text": "apple"}}, "size": 100}
    found = search_with_collapse(es_client, index, body)
    assert found.total == sum(" apple " in f" {r['text']} " for r in records.values()) + 1  # + "unsketched"
    matching = {k for k, r in records.items() if " apple " in f" {r['text']} "} | {"unsketched"}
    shown_kept = 0
    for hit in found.hits:
        assert hit.hit is not None and hit.source is not None and "sig" not in hit.source.get("neardup", {})
        if hit.group in matching:  # the representative matches: it is the one shown
            assert hit.id == hit.group
            shown_kept += 1
    assert shown_kept >= len(collapsed["planted"]) // 2  # the control: most representatives match
    big = next(h for h in found.hits if h.omitted == 4)  # a topic of 6 copies, one of them saying "pear"
    hidden = next(k for k in matching if collapsed["groups"].get(k, k) == big.group and k != big.id)
    filtered = search_with_collapse(es_client, index, {**body, "post_filter": {"bool": {"must_not": [
        {"ids": {"values": [hidden]}}]}}})
    assert next(h for h in filtered.hits if h.group == big.group).omitted == 3
    paged = search_with_collapse(es_client, index, {**body, "size": 3, "from": 3})
    assert [h.group for h in paged.hits] == [h.group for h in found.hits[3:6]]
    with pytest.raises(ValueError, match="collapses on its own"):
        search_with_collapse(es_client, index, {**body, "collapse": {"field": "title.keyword"}})


def test_hidden_pages_are_named_with_their_evidence(
    es_client: Elasticsearch, es_url: str, collapsed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """``hidden=N``: each hit names up to N of the matching pages it hides, each with its evidence against the
    group's representative, counted here on the records' own signatures (a representative that does not match
    the query, the "pear" copy, is read apart)."""
    index, records, sketcher = collapsed["index"], collapsed["records"], collapsed["sketcher"]

    def shared(a: str, b: str) -> int:
        return int(np.count_nonzero(stored_values(sketcher.sketch(records[a]["text"]).signature)
                                    == stored_values(sketcher.sketch(records[b]["text"]).signature)))

    hits = search_collapsed(es_client, index, "apple", size=100, fields=["text"], hidden=2)
    named = 0
    for hit in hits:
        assert len(hit.hidden) == min(hit.omitted, 2) and hit.id not in hit.hidden
        for doc_id in hit.hidden:
            assert collapsed["groups"][doc_id] == hit.group and "apple" in records[doc_id]["text"].split()
            count = shared(hit.group, doc_id)  # the group id is its representative's _id
            rule = "near_duplicate" if count >= T else "transitive"
            fields = dict(hit.evidence[doc_id])
            sides = {k: fields.pop(k) for k in SIDES if k in fields}
            assert fields == {"resemblance": round(count / K, 4), **evidence(count, K, rule)}
            # Both pages' sides, from their documents' stored fields (plain text records: nothing removed).
            assert sides == {"sketched": "own text", "words": len(records[doc_id]["text"].split()), "removed": 0.0,
                             "kept_sketched": "own text", "kept_words": len(records[hit.group]["text"].split()),
                             "kept_removed": 0.0}
            named += 1
    representatives_not_matching = {g for g in (h.group for h in hits if h.hidden)
                                    if "pear" in records[g]["text"].split()}
    assert named > 0 and representatives_not_matching  # both paths to the representative were taken
    assert all(not h.hidden for h in search_collapsed(es_client, index, "apple", size=100, fields=["text"]))

    args = ["es", "search", "--es-url", es_url, "--index", index, "apple", "--field", "text", "--size", "100"]
    assert main([*args, "--hidden", "2", "--json"]) == 0
    shown = {h["id"]: h for h in json.loads(capsys.readouterr().out)["hits"]}
    for hit in hits:
        pages = shown[hit.id].get("hidden_pages", [])
        assert [p["id"] for p in pages] == hit.hidden
        assert all(p["evidence"]["shared"] == hit.evidence[p["id"]]["shared"] for p in pages)
    assert main([*args, "--hidden", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("hides ")]
    assert len(lines) == sum(1 for h in hits if h.hidden)
    assert all(re.search(r"\((near_duplicate|transitive|exact): \d+ of 128 positions shared, r in ", line)
               for line in lines)
    assert main([*args, "--hidden", "-1"]) == 1
    assert "--hidden must be >= 0" in capsys.readouterr().err
