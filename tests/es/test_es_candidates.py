"""Bulk indexing with sketches and candidate queries, checked against brute-force t-of-k counts."""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from es_integration.candidates import candidate_search, find_candidates, find_exact_duplicates, parse_candidates
from es_integration.indexing import index_records
from es_integration.mapping import signature_from_tokens
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.core.stored_signature import stored_values
from scrapy_neardup.core.theory import min_shared_for

pytestmark = pytest.mark.es

K = 128
T = min_shared_for(0.9, K)  # 107
EDITS = (0, 1, 2, 3, 4, 6, 8, 12, 20)  # word substitutions: resemblance from 1.0 down to about 0.55


def planted_corpus(seed: int, bases: int = 30, length: int = 250) -> dict[str, str]:
    """``bases`` random texts, each with variants after a known number of word substitutions."""
    rng = random.Random(seed)
    docs: dict[str, str] = {}
    for b in range(bases):
        words = [f"w{rng.randrange(50_000)}" for _ in range(length)]
        for edits in EDITS:
            variant = list(words)
            for position in rng.sample(range(length), edits):
                variant[position] = f"x{rng.randrange(10**9)}"
            docs[f"b{b}-e{edits}"] = " ".join(variant)
    return docs


@pytest.fixture(scope="module")
def corpus(es_client: Elasticsearch) -> Iterator[dict[str, Any]]:
    """One index: planted variants, exact duplicates differing in case/space, texts without shingles."""
    sketcher = Sketcher(num_perm=K)
    docs = planted_corpus(seed=11)
    docs["b0-upper"] = docs["b0-e0"].upper()  # normalizes to the same text as b0-e0
    docs["b0-spaced"] = "  " + docs["b0-e0"].replace(" ", "   ") + "\n"
    docs["empty-1"] = ""
    docs["empty-2"] = "   "
    records = [{"id": key, "text": text} for key, text in docs.items()]
    records.append({"id": "no-text", "title": "a record without its text field"})
    index = f"nd-cand-{uuid.uuid4().hex[:10]}"
    stats = index_records(es_client, index, records, sketcher, chunk_size=100)
    assert stats.errors == 0 and stats.indexed == len(records)
    assert stats.without_text == 3
    sketches = dict(zip(docs, sketcher.sketch_many(list(docs.values())), strict=True))
    yield {"index": index, "docs": docs, "sketcher": sketcher, "sketches": sketches}
    es_client.indices.delete(index=index, ignore_unavailable=True)


def test_documents_carry_their_sketches(es_client: Elasticsearch, corpus: dict[str, Any]) -> None:
    index, sketches = corpus["index"], corpus["sketches"]
    for key in ("b0-e0", "b3-e4", "empty-1"):
        source = es_client.get(index=index, id=key)["_source"]
        assert source["text"] == corpus["docs"][key]
        fields = source["neardup"]
        assert fields["tag"] == corpus["sketcher"].tag
        assert fields["fingerprint"] == f"{sketches[key].fingerprint:016x}"
        assert fields["group"] == key and fields["status"] == "kept"
        if key.startswith("empty"):
            assert fields["empty"] is True and "positions" not in fields
        else:
            assert np.array_equal(signature_from_tokens(fields["positions"], K), stored_values(sketches[key].signature))
    no_text = es_client.get(index=index, id="no-text")["_source"]
    assert no_text["neardup"]["empty"] is True and no_text["title"].startswith("a record")


@pytest.mark.parametrize("t", [T, 70])
def test_msm_query_equals_brute_force_t_of_k(es_client: Elasticsearch, corpus: dict[str, Any], t: int) -> None:
    """For every document as the query: the hits are exactly the documents sharing >= t positions, each with
    its exact shared count (counted, like the embedded index, on the low 16 bits of each position)."""
    keys = [k for k, s in corpus["sketches"].items() if not s.empty]
    matrix = stored_values(np.vstack([corpus["sketches"][k].signature for k in keys]))
    near_threshold = 0
    for start in range(0, len(keys), 100):  # the same query as find_candidates, batched with msearch
        batch = keys[start : start + 100]
        searches: list[dict[str, Any]] = []
        for key in batch:
            searches += [{}, candidate_search(corpus["sketches"][key], t, size=1000)]
        responses = es_client.msearch(index=corpus["index"], searches=searches)["responses"]
        for key, response in zip(batch, responses, strict=True):
            sketch = corpus["sketches"][key]
            shared = np.count_nonzero(matrix == stored_values(sketch.signature), axis=1)
            expected = {keys[i]: int(shared[i]) for i in np.flatnonzero(shared >= t)}
            near_threshold += int(np.count_nonzero(np.abs(shared - t) <= 3))
            got = {c.id: c.shared for c in parse_candidates(response, sketch)}
            assert got == expected, key
    assert near_threshold > 20  # the workload does test the boundary of the rule
    spot = corpus["sketches"]["b2-e3"]
    assert {c.id for c in find_candidates(es_client, corpus["index"], spot, t)} == {
        keys[i] for i in np.flatnonzero(np.count_nonzero(matrix == stored_values(spot.signature), axis=1) >= t)
    }


def test_candidates_estimate_known_resemblances(es_client: Elasticsearch, corpus: dict[str, Any]) -> None:
    sketcher, docs, sketches = corpus["sketcher"], corpus["docs"], corpus["sketches"]
    errors = []
    for b in range(30):
        base = f"b{b}-e0"
        found = {c.id: c for c in find_candidates(es_client, corpus["index"], sketches[base], 1, size=1000)}
        flagged = {c.id for c in find_candidates(es_client, corpus["index"], sketches[base], T)}
        for edits in EDITS[1:]:
            key = f"b{b}-e{edits}"
            jaccard = sketcher.jaccard(docs[base], docs[key])
            estimate = found[key].resemblance if key in found else 0.0
            sigma = math.sqrt(jaccard * (1 - jaccard) / K)
            errors.append(abs(estimate - jaccard) / max(sigma, 1 / K))
            assert found[key].shared / K == found[key].resemblance
            if jaccard >= 0.96:
                assert key in flagged
            if jaccard <= 0.7:
                assert key not in flagged
    # The estimate r_hat = shared / k is unbiased with sd sqrt(r (1 - r) / k).
    assert max(errors) < 4.5
    assert np.mean(np.square(errors)) < 2.0


def test_exact_duplicates_by_fingerprint(es_client: Elasticsearch, corpus: dict[str, Any]) -> None:
    sketch = corpus["sketches"]["b0-e0"]
    exact = find_exact_duplicates(es_client, corpus["index"], sketch)
    assert {c.id for c in exact} == {"b0-e0", "b0-upper", "b0-spaced"}
    assert all(c.exact and c.shared == K and c.resemblance == 1.0 for c in exact)
    ranked = find_candidates(es_client, corpus["index"], sketch, T)
    assert [c.exact for c in ranked[:3]] == [True, True, True]
    assert all(not c.exact for c in ranked[3:])
    assert ranked[0].id == "b0-e0"  # exact first, then most shared, then indexed first
    # Texts without shingles are nobody's near-duplicate, not even each other's.
    empty = corpus["sketches"]["empty-1"]
    assert find_candidates(es_client, corpus["index"], empty, T) == []
    assert find_exact_duplicates(es_client, corpus["index"], empty) == []


def test_tag_isolation(es_client: Elasticsearch, corpus: dict[str, Any]) -> None:
    """Sketches made with other parameters (another seed) are never compared, even for identical texts."""
    other = Sketcher(num_perm=K, seed=2)
    assert other.tag != corpus["sketcher"].tag
    index = f"nd-tags-{uuid.uuid4().hex[:10]}"
    text = corpus["docs"]["b1-e0"]
    try:
        index_records(es_client, index, [{"id": "seed1", "text": text}], corpus["sketcher"])
        index_records(es_client, index, [{"id": "seed2", "text": text}], other)
        mine = find_candidates(es_client, index, corpus["sketcher"].sketch(text), T)
        theirs = find_candidates(es_client, index, other.sketch(text), T)
        assert [c.id for c in mine] == ["seed1"] and [c.id for c in theirs] == ["seed2"]
        assert [c.id for c in find_exact_duplicates(es_client, index, other.sketch(text))] == ["seed2"]
    finally:
        es_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.mark.parametrize("t", [T, T + 9])
def test_band_query_equals_position_query_and_brute_force(
    es_client: Elasticsearch, corpus: dict[str, Any], t: int
) -> None:
    """Every document as the query: the band query (verified on the compact signatures) and the
    minimum_should_match position query return the same candidates, with the same counts and order, and they
    are exactly the brute-force t-of-k matches; over an index of several unmerged segments."""
    index = f"nd-bands-{uuid.uuid4().hex[:10]}"
    records = [{"id": key, "text": text} for key, text in corpus["docs"].items()]
    for lo in range(0, len(records), 60):  # a refresh per chunk: one segment each
        index_records(es_client, index, records[lo : lo + 60], corpus["sketcher"])
    segments = es_client.indices.segments(index=index)["indices"][index]["shards"]["0"][0]["num_search_segments"]
    assert segments >= 2
    keys = [k for k, s in corpus["sketches"].items() if not s.empty]
    matrix = stored_values(np.vstack([corpus["sketches"][k].signature for k in keys]))
    found = 0
    for key in keys:
        sketch = corpus["sketches"][key]
        bands = find_candidates(es_client, index, sketch, t, method="bands", size=1000)
        positions = find_candidates(es_client, index, sketch, t, method="positions", size=1000)
        assert [(c.id, c.shared, c.exact) for c in bands] == [(c.id, c.shared, c.exact) for c in positions], key
        shared = np.count_nonzero(matrix == stored_values(sketch.signature), axis=1)
        assert {c.id: c.shared for c in bands} == {keys[i]: int(shared[i]) for i in np.flatnonzero(shared >= t)}
        found += len(bands)
    assert found > len(keys) + 100  # queries do have near-duplicates beyond themselves
    with pytest.raises(ValueError, match="method='positions'"):
        find_candidates(es_client, index, corpus["sketches"]["b0-e0"], 70, method="bands")
    es_client.indices.delete(index=index)
