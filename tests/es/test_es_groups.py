"""Duplicate groups across an index: representative groups (the default) against the literal rule, Broder's
transitive clustering (``--transitive``), keep-best rules, --assign, --new, the CLI."""

from __future__ import annotations

import json
import random
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from es_integration.candidates import find_candidates
from es_integration.groups import KeepRule, Linkage, RowStates, assign_groups, find_groups
from es_integration.indexing import index_records
from scrapy_neardup.cli.main import main
from scrapy_neardup.core.clustering import broder_clusters, leader_clusters
from scrapy_neardup.core.evidence import evidence
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.core.stored_signature import stored_values
from scrapy_neardup.core.theory import min_shared_for

pytestmark = pytest.mark.es

K = 128
T = min_shared_for(0.9, K)


def params_of(tag: str, min_shared: int = T) -> SketchParams:
    """The sketch parameters a groups run takes: those ``tag`` names, with ``t``."""
    return SketchParams.from_tag(tag, min_shared=min_shared)


def _edit(words: list[str], rng: random.Random, edits: int) -> list[str]:
    out = list(words)
    for position in rng.sample(range(len(out)), edits):
        out[position] = f"x{rng.randrange(10**9)}"
    return out


def grouped_records(seed: int) -> list[dict[str, Any]]:
    """Chains (each link 2 word edits: the ends are not near-duplicates), clusters, exact copies, singletons."""
    rng = random.Random(seed)

    def words() -> list[str]:
        return [f"w{rng.randrange(50_000)}" for _ in range(220)]

    texts: list[tuple[str, str]] = []
    for c in range(12):
        current = words()
        for link in range(5):
            texts.append((f"chain{c}-{link}", " ".join(current)))
            current = _edit(current, rng, 2)
    for c in range(12):
        base = words()
        texts.append((f"cluster{c}-0", " ".join(base)))
        for v in range(1, 4):
            texts.append((f"cluster{c}-{v}", " ".join(_edit(base, rng, 1))))
    for c in range(6):
        text = " ".join(words())
        texts += [(f"copy{c}-a", text), (f"copy{c}-b", text.upper()), (f"copy{c}-c", text)]
    texts += [(f"single{i}", " ".join(words())) for i in range(50)]
    texts += [("empty-a", ""), ("empty-b", "")]
    rng.shuffle(texts)
    records = []
    for i, (key, text) in enumerate(texts):
        url = f"https://example.org/{key}/" + "p" * rng.randrange(40)
        record: dict[str, Any] = {"id": key, "text": text, "url": url}
        if i % 7:
            record["popularity"] = rng.choice([1, 2, 3, 5, 8, 13, 21, 34, 55])
        records.append(record)
    return records


@pytest.fixture(scope="module")
def grouped(es_client: Elasticsearch) -> Iterator[dict[str, Any]]:
    sketcher = Sketcher(num_perm=K)
    records = grouped_records(seed=7)
    index = f"nd-groups-{uuid.uuid4().hex[:10]}"
    assert index_records(es_client, index, records, sketcher).errors == 0
    # A document with other sketch parameters is ignored by the sweep.
    index_records(es_client, index, [{"id": "other-tag", "text": records[0]["text"]}], Sketcher(num_perm=K, seed=9))
    yield {"index": index, "records": records, "sketcher": sketcher}
    es_client.indices.delete(index=index, ignore_unavailable=True)


def _signatures(grouped: dict[str, Any]) -> tuple[list[dict[str, Any]], np.ndarray]:
    """The sketched records, in indexing order, and their stored signatures (the values Elasticsearch compares)."""
    records = [r for r in grouped["records"] if r["text"].strip()]
    sketches = grouped["sketcher"].sketch_many([r["text"] for r in records])
    return records, stored_values(np.vstack([s.signature for s in sketches]))


def _expected_clusters(grouped: dict[str, Any]) -> list[set[str]]:
    records, signatures = _signatures(grouped)
    return [{records[i]["id"] for i in cluster} for cluster in broder_clusters(signatures, T)]


def _expected_groups(grouped: dict[str, Any], rank: Any = None) -> list[list[str]]:
    """The literal representative rule over the records in ``rank`` order (default: indexing order):
    ``[representative, *members in rank order]`` per group."""
    records, signatures = _signatures(grouped)
    position = None
    if rank is not None:
        position = np.empty(len(records), dtype=np.int64)
        position[sorted(range(len(records)), key=lambda i: rank(records[i]))] = np.arange(len(records))
    return [[records[i]["id"] for i in group] for group in leader_clusters(signatures, T, position)]


def _shared(grouped: dict[str, Any], a: str, b: str) -> int:
    sketcher = grouped["sketcher"]
    texts = {r["id"]: r["text"] for r in grouped["records"]}
    return int(np.count_nonzero(stored_values(sketcher.sketch(texts[a]).signature)
                                == stored_values(sketcher.sketch(texts[b]).signature)))


def test_groups_are_stars_around_their_representatives(es_client: Elasticsearch, grouped: dict[str, Any]) -> None:
    """The default: every member shares >= t positions with its group's representative (the first indexed page
    of the group: members follow it in indexing order), no two representatives do, and the groups are those of
    the rule applied literally in indexing order. The planted chains are cut where Broder's clusters join them."""
    report = find_groups(es_client, grouped["index"], params_of(grouped["sketcher"].tag), page_size=64)
    assert report.linkage == "representative"
    got = [g.members for g in report.groups]
    assert got == _expected_groups(grouped)
    for group in report.groups:
        assert group.id == group.representative == group.members[0]
        assert all(_shared(grouped, group.representative, m) >= T for m in group.members[1:])
    representatives = [g.representative for g in report.groups]
    assert all(_shared(grouped, a, b) < T for i, a in enumerate(representatives) for b in representatives[i + 1 :])
    transitive = _expected_clusters(grouped)
    assert len(got) > len(transitive)
    assert all(any(set(g) <= cluster for cluster in transitive) for g in got)
    chains = [c for c in transitive if any(m.startswith("chain") for m in c)]
    assert sum(1 for g in got if g[0].startswith("chain")) > len(chains)  # chains split into several groups


def test_groups_equal_broder_clusters(es_client: Elasticsearch, grouped: dict[str, Any]) -> None:
    report = find_groups(es_client, grouped["index"], params_of(grouped["sketcher"].tag), page_size=64,
                         linkage="transitive")
    assert report.linkage == "transitive"
    expected = _expected_clusters(grouped)
    got = [set(g.members) for g in report.groups]
    assert sorted(map(sorted, got)) == sorted(map(sorted, expected))
    assert report.documents == sum(1 for r in grouped["records"] if r["text"].strip())
    # Identical signatures are joined without querying each copy.
    assert report.queries < report.documents
    # The workload has real chains: members of one group that are not near-duplicates of each other.
    sketcher = grouped["sketcher"]
    texts = {r["id"]: r["text"] for r in grouped["records"]}
    chains = 0
    for group in report.groups:
        sigs = [stored_values(sketcher.sketch(texts[m]).signature) for m in group.members]
        shared = [int(np.count_nonzero(a == b)) for i, a in enumerate(sigs) for b in sigs[i + 1 :]]
        chains += min(shared) < T
    assert chains >= 5
    # Group sizes as planted: clusters of 4, triples of copies.
    assert sum(1 for g in got if {m.split("-")[0] for m in g} == {"cluster0"}) == 1


def _canonical(groups: Any) -> list[tuple[str, list[str]]]:
    return sorted((g[0], sorted(g[1:])) for g in groups)


def test_keep_rules_order_the_representative_groups(es_client: Elasticsearch, grouped: dict[str, Any]) -> None:
    """With representative linkage the keep rule is also the order pages are taken in: the groups are the
    literal rule's in that order (the rule's value, ties to the earlier indexed page)."""
    order = {r["id"]: i for i, r in enumerate(grouped["records"])}
    tag, index = grouped["sketcher"].tag, grouped["index"]
    rules = [
        (KeepRule("shortest-url", "url"), lambda r: (len(r["url"]), order[r["id"]])),
        (KeepRule("highest", "popularity"), lambda r: (-r.get("popularity", -np.inf), order[r["id"]])),
    ]
    first = _canonical(g.members for g in find_groups(es_client, index, params_of(tag)).groups)
    # A tag string is not parameters: refused, naming how to read one.
    with pytest.raises(TypeError, match=r"SketchParams\.from_tag"):
        find_groups(es_client, index, tag)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        find_groups(es_client, index, params_of(tag), T)  # type: ignore[misc]
    for keep, rank in rules:
        report = find_groups(es_client, index, params_of(tag), keep=keep)
        got = _canonical(g.members for g in report.groups)
        assert got == _canonical(_expected_groups(grouped, rank))
        assert got != first  # another order, other representatives and stars


def test_keep_rules(es_client: Elasticsearch, grouped: dict[str, Any]) -> None:
    """With transitive linkage the rule only picks each cluster's representative: the groups stay the same."""
    records = {r["id"]: r for r in grouped["records"]}
    order = {r["id"]: i for i, r in enumerate(grouped["records"])}
    tag, index = grouped["sketcher"].tag, grouped["index"]

    first = find_groups(es_client, index, params_of(tag), linkage="transitive")
    for group in first.groups:
        assert group.id == group.representative == group.members[0]
        assert [order[m] for m in group.members] == sorted(order[m] for m in group.members)

    shortest = find_groups(es_client, index, params_of(tag), keep=KeepRule("shortest-url", "url"),
                           linkage="transitive")
    for group in shortest.groups:
        lengths = {m: len(records[m]["url"]) for m in group.members}
        best = min(lengths.values())
        winners = [m for m in group.members if lengths[m] == best]
        assert group.representative == min(winners, key=order.__getitem__)
        assert group.members[0] == group.representative

    highest = find_groups(es_client, index, params_of(tag), keep=KeepRule("highest", "popularity"),
                          linkage="transitive")
    moved = 0
    for group in highest.groups:
        values = {m: records[m].get("popularity") for m in group.members}
        best = max(v for v in values.values() if v is not None)
        winners = [m for m in group.members if values[m] == best]
        assert group.representative == min(winners, key=order.__getitem__)
        moved += group.representative != min(group.members, key=order.__getitem__)
    assert moved > 0  # the rule does pick other pages than "first indexed"
    assert sorted(sorted(g.members) for g in highest.groups) == sorted(sorted(g.members) for g in first.groups)


SIDES = {"sketched", "words", "removed", "kept_sketched", "kept_words", "kept_removed"}


def _side(es_client: Elasticsearch, index: str, doc_id: str, prefix: str) -> dict[str, Any]:
    """What a document's stored fields say was sketched, as evidence fields named after ``prefix``."""
    neardup = es_client.get(index=index, id=doc_id)["_source"]["neardup"]
    words, whole = neardup["words"], neardup.get("page_words", 0)
    return {prefix + "sketched": neardup["sketched"], prefix + "words": words,
            **({prefix + "removed": round(1 - words / whole, 2)} if whole else {})}


def _es_args(es_url: str, index: str) -> list[str]:
    # The fixture's index holds one document with other sketch parameters on purpose.
    return ["--es-url", es_url, "--index", index, "--ignore-other-tags"]


def test_cli_json_and_assign(
    es_client: Elasticsearch, es_url: str, grouped: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    index = grouped["index"]
    assert main(["es", "groups", *_es_args(es_url, index), "--json", "--assign"]) == 0
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines and all(set(obj) == {"group", "representative", "members", "pages"} for obj in lines)
    for obj in lines:
        assert obj["group"] == obj["representative"] == obj["members"][0]
        assert [page["id"] for page in obj["pages"]] == obj["members"]  # each with its URL and title (or None)
        assert len(obj["members"]) >= 2 and len(set(obj["members"])) == len(obj["members"])
    assert [o["members"] for o in lines] == _expected_groups(grouped)
    assert "representative linkage" in err and "Traceback" not in err
    # Every member says why it is in the group: its positions shared with the representative, counted anew here.
    for obj in lines:
        assert obj["pages"][0]["evidence"] is None and obj["pages"][0]["resemblance"] is None
        for page in obj["pages"][1:]:
            shared = _shared(grouped, obj["representative"], page["id"])
            sides = {k: v for k, v in page["evidence"].items() if k in SIDES}
            assert {k: v for k, v in page["evidence"].items() if k not in SIDES} == evidence(
                shared, K, "near_duplicate") and shared >= T
            # What of the member and of the representative was sketched, from their documents' stored fields.
            assert sides == {**_side(es_client, index, page["id"], ""),
                             **_side(es_client, index, obj["representative"], "kept_")}
            assert sides["sketched"] == sides["kept_sketched"] == "own text" and sides["words"] > 0
            assert page["resemblance"] == pytest.approx(shared / K, abs=1e-4)
            low, high = page["evidence"]["interval"]
            assert low <= page["resemblance"] <= high
    # --assign kept the index's band filter where --new looks for it by default (the tests' $XDG_CACHE_HOME).
    from es_integration.band_filter import default_directory
    from es_integration.groups import index_uuid

    assert len(list(default_directory().glob(f"{index_uuid(es_client, index)}-*.json"))) == 1

    # --assign wrote group, status and duplicate_of on every member; others are their own group.
    in_group = {m: obj for obj in lines for m in obj["members"]}
    hits = es_client.search(index=index, size=1000, source_includes=[
        "neardup.group", "neardup.status", "neardup.duplicate_of"])["hits"]["hits"]
    assert len(hits) == len(grouped["records"]) + 1
    for hit in hits:
        fields = hit["_source"]["neardup"]
        obj = in_group.get(hit["_id"])
        if obj is None:
            assert (fields["group"], fields["status"], fields.get("duplicate_of")) == (hit["_id"], "kept", None)
        elif hit["_id"] == obj["representative"]:
            assert (fields["group"], fields["status"], fields.get("duplicate_of")) == (obj["group"], "kept", None)
        else:
            assert (fields["group"], fields["status"], fields["duplicate_of"]) == (
                obj["group"], "duplicate", obj["representative"]
            )
            # Every duplicate names a page it near-duplicates, as a drop of the crawl pipeline does.
            assert _shared(grouped, hit["_id"], fields["duplicate_of"]) >= T
    # Nothing changes on a second run; a different rule rewrites only the documents whose fields change.
    report = find_groups(es_client, index, params_of(grouped["sketcher"].tag))
    assert assign_groups(es_client, index, report) == 0
    moved = find_groups(es_client, index, params_of(grouped["sketcher"].tag), keep=KeepRule("shortest-url", "url"))
    ids = [h["_id"] for h in hits]
    expected = sum(_fields(report, i) != _fields(moved, i) for i in ids)
    assert expected > 0
    assert assign_groups(es_client, index, moved) == expected
    back = find_groups(es_client, index, params_of(grouped["sketcher"].tag))  # a fresh sweep sees the moved fields
    assert assign_groups(es_client, index, back) == expected


def _fields(report: Any, doc_id: str) -> tuple[str, str, str | None]:
    """The (group, status, duplicate_of) ``assign_groups`` gives ``doc_id`` from ``report``."""
    for group in report.groups:
        if doc_id in group.members:
            is_rep = doc_id == group.representative
            return group.id, "kept" if is_rep else "duplicate", None if is_rep else group.representative
    return doc_id, "kept", None


def test_cli_transitive(es_url: str, grouped: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """``--transitive``: Broder's components, chains and all; the default cuts them."""
    assert main(["es", "groups", *_es_args(es_url, grouped["index"]), "--json", "--transitive"]) == 0
    out, err = capsys.readouterr()
    transitive = [json.loads(line)["members"] for line in out.splitlines()]
    assert sorted(map(sorted, transitive)) == sorted(map(sorted, _expected_clusters(grouped)))
    assert "transitive linkage" in err
    # A member linked through others says so: it shares fewer than t positions with the representative.
    rules = Counter()
    for obj in map(json.loads, out.splitlines()):
        for page in obj["pages"][1:]:
            shared = _shared(grouped, obj["representative"], page["id"])
            rule = "near_duplicate" if shared >= T else "transitive"
            assert {k: v for k, v in page["evidence"].items() if k not in SIDES} == evidence(shared, K, rule)
            assert page["evidence"]["sketched"] == page["evidence"]["kept_sketched"] == "own text"
            rules[rule] += 1
    assert rules["transitive"] > 0 and rules["near_duplicate"] > 0
    assert main(["es", "groups", *_es_args(es_url, grouped["index"]), "--json"]) == 0
    default = [json.loads(line)["members"] for line in capsys.readouterr().out.splitlines()]
    assert default == _expected_groups(grouped) and len(default) > len(transitive)


def test_cli_text_output_and_errors(
    es_url: str, grouped: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["es", "groups", *_es_args(es_url, grouped["index"])]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("group ") and "keep " in out
    duplicates = [line for line in out.splitlines() if line.startswith("  duplicate ")]
    # Each with its evidence and both pages' sides (plain text records: their words, nothing removed).
    evidence_line = (r"\(near_duplicate: \d+ of 128 positions shared, r in \[0\.\d+, [01]\.\d+\]; "
                     r"sketched: own text, \d+ words, 0% removed; kept: own text, \d+ words, 0% removed\)$")
    assert duplicates and all(re.search(evidence_line, line) for line in duplicates)
    assert main(["es", "groups", *_es_args(es_url, grouped["index"]), "--keep", "highest"]) == 1
    assert "--value-field" in capsys.readouterr().err
    assert main(["es", "groups", *_es_args(es_url, "Bad*Index")]) == 1
    err = capsys.readouterr().err
    assert "index name" in err and "Traceback" not in err
    assert main(["es", "groups", *_es_args(es_url, "no-such-index-" + uuid.uuid4().hex[:6])]) == 1
    err = capsys.readouterr().err
    assert "index_not_found_exception" in err and err.count("\n") == 1


def test_groups_hold_every_pair_the_candidate_query_finds(es_client: Elasticsearch, grouped: dict[str, Any]) -> None:
    """The pairs found in memory are the ones Elasticsearch's t-of-k query returns. Transitive: every document's
    hits lie in its group, and a document in a group has at least one hit. Representative: a member's hits
    hold its representative; a representative's (or a page's in no group) hold no other representative."""
    report = find_groups(es_client, grouped["index"], params_of(grouped["sketcher"].tag), linkage="transitive")
    group_of = {m: g.id for g in report.groups for m in g.members}
    stars = find_groups(es_client, grouped["index"], params_of(grouped["sketcher"].tag))
    leader_of = {m: g.representative for g in stars.groups for m in g.members}
    leaders = set(leader_of.values())
    sketcher = grouped["sketcher"]
    checked = 0
    for record in grouped["records"]:
        if not record["text"].strip():
            continue
        hits = find_candidates(es_client, grouped["index"], sketcher.sketch(record["text"]), T,
                               exclude_ids=[record["id"]], size=1000)
        assert {group_of.get(h.id) for h in hits} <= {group_of.get(record["id"])}
        assert bool(hits) == (record["id"] in group_of)
        leader = leader_of.get(record["id"], record["id"])
        if leader != record["id"]:
            assert leader in {h.id for h in hits}
        else:
            assert not {h.id for h in hits} & leaders
        checked += 1
    assert checked == report.documents == stars.documents


def test_groups_equal_the_position_token_method(es_client: Elasticsearch, grouped: dict[str, Any]) -> None:
    """The compact-signature sweep gives the groups of the method it replaces: position tokens read from
    _source, fed page by page to the in-memory GroupBuilder."""
    from es_integration.mapping import F_POSITIONS, F_TAG, signatures_from_token_lists
    from es_integration.sweep import point_in_time, sweep
    from scrapy_neardup.core.clustering import GroupBuilder
    from scrapy_neardup.core.stored_signature import StoredSignature

    index, tag = grouped["index"], grouped["sketcher"].tag
    builder = GroupBuilder(K, T, tag, linkage="transitive")
    query = {"bool": {"filter": [{"term": {F_TAG: tag}}, {"exists": {"field": F_POSITIONS}}]}}
    with point_in_time(es_client, index) as pit:
        for hits in sweep(es_client, pit, query=query, source=[F_POSITIONS], page_size=50):
            lists = [hit["_source"]["neardup"]["positions"] for hit in hits]
            values, valid = signatures_from_token_lists(lists, K)
            assert valid.all()
            for hit, row in zip(hits, values, strict=True):
                builder.add_stored(hit["_id"], StoredSignature(row, tag))
    for slices in (1, 3):
        report = find_groups(es_client, index, params_of(tag), slices=slices, page_size=40, linkage="transitive")
        assert sorted(sorted(g.members) for g in report.groups) == sorted(map(sorted, builder.groups()))


def test_index_without_compact_signatures_is_refused_until_backfilled(
    es_client: Elasticsearch, grouped: dict[str, Any]
) -> None:
    """Documents indexed before neardup.sig existed (positions only): group discovery names the fix, and
    backfill writes the new fields from the positions, without the text."""
    from es_integration.indexing import backfill
    from scrapy_neardup.errors import EsError

    sketcher = grouped["sketcher"]
    index = f"nd-groups-old-{uuid.uuid4().hex[:8]}"
    records = grouped["records"][:60]
    index_records(es_client, index, records, sketcher)
    ids = [r["id"] for r in records if r["text"].strip()][:25]
    for doc_id in ids:  # as an older version wrote them
        es_client.index(index=index, id=doc_id, document=_without_new_fields(es_client, index, doc_id))
    es_client.indices.refresh(index=index)
    with pytest.raises(EsError, match="neardup es backfill"):
        find_groups(es_client, index, params_of(sketcher.tag))
    stats = backfill(es_client, index, sketcher, text_field="missing-field")
    assert stats.upgraded == len(ids) and stats.indexed == 0  # nothing re-sketched: every document had a tag
    full = find_groups(es_client, index, params_of(sketcher.tag), linkage="transitive")
    texts = [r["text"] for r in records if r["text"].strip()]
    expected = broder_clusters(stored_values(np.vstack([s.signature for s in sketcher.sketch_many(texts)])), T)
    ids_all = [r["id"] for r in records if r["text"].strip()]
    assert sorted(sorted(g.members) for g in full.groups) == sorted(sorted(ids_all[i] for i in c) for c in expected)
    es_client.indices.delete(index=index)


def _without_new_fields(es: Elasticsearch, index: str, doc_id: str) -> dict[str, Any]:
    source = es.get(index=index, id=doc_id)["_source"]
    source["neardup"].pop("sig")
    source["neardup"].pop("bands")
    return dict(source)


@pytest.mark.parametrize(("filtered", "linkage"), [
    pytest.param(False, "representative", id="every-token"),
    pytest.param(True, "representative", id="band-filter"),
    pytest.param(True, "transitive", id="transitive"),
])
def test_new_equals_a_full_run_and_assign_writes_only_changes(
    es_client: Elasticsearch, es_url: str, grouped: dict[str, Any], filtered: bool, linkage: Linkage,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Index a first part, group it (--assign), index the rest (joining, merging and starting groups), then
    --new --assign: every document's group fields are those of a full run (default keep rule), which then has
    nothing to write. With a band filter (written by the first --assign) --new queries fewer tokens and gives
    the same groups. With representative linkage new pages join older groups through their representatives
    only; --new refuses another linkage than the last assigned run's."""
    from es_integration.band_filter import BandFilterStore
    from es_integration.groups import find_new_groups, groups_watermark, index_uuid
    from scrapy_neardup.errors import EsError

    store = BandFilterStore(tmp_path) if filtered else None

    sketcher, tag = grouped["sketcher"], grouped["sketcher"].tag
    records = list(grouped["records"])
    random.Random(5).shuffle(records)
    index = f"nd-groups-new-{uuid.uuid4().hex[:8]}"
    first, rest = records[: len(records) * 2 // 3], records[len(records) * 2 // 3 :]
    index_records(es_client, index, first, sketcher)
    with pytest.raises(EsError, match="--assign"):
        find_new_groups(es_client, index, params_of(tag))
    before = find_groups(es_client, index, params_of(tag), linkage=linkage)
    written = assign_groups(es_client, index, before, band_filter=store)
    assert written == sum(len(g.members) - 1 for g in before.groups)  # only members change: reps stay "kept"
    assert groups_watermark(es_client, index, params_of(tag))["linkage"] == linkage
    other: Linkage = "transitive" if linkage == "representative" else "representative"
    with pytest.raises(EsError, match=f"made {linkage} groups, this one {other}"):
        find_new_groups(es_client, index, params_of(tag), linkage=other)
    cli = ["es", "groups", "--es-url", es_url, "--index", index, "--new", "--no-band-filter"]
    assert main(cli + ([] if linkage == "transitive" else ["--transitive"])) == 1
    err = capsys.readouterr().err
    assert "linkage" in err and err.count("\n") == 1
    index_records(es_client, index, rest, sketcher)
    # A result window of 30 hits: the band and group queries of --new (one request each while their hits fit
    # the window) are then paged like the sweep, as they are on an index with more matches than the window.
    es_client.indices.put_settings(index=index, settings={"index.max_result_window": 30})
    new = find_new_groups(es_client, index, params_of(tag), page_size=30, band_filter=store, linkage=linkage)
    es_client.indices.put_settings(index=index, settings={"index.max_result_window": None})
    assert new.documents == sum(1 for r in rest if r["text"].strip())
    if store is not None:  # used, and it spared the tokens no older document holds
        assert new.band_filter is not None and 0 < new.band_tokens < new.band_tokens_total
    else:
        assert new.band_filter is None and new.band_tokens == new.band_tokens_total > 0
    assign_groups(es_client, index, new, band_filter=store)
    if store is not None:  # extended with the new documents, for the new watermark
        mark = groups_watermark(es_client, index, params_of(tag))["seq"]
        extended = store.load(index_uuid(es_client, index), tag, mark)
        assert extended is not None and extended.keys == new.band_filter.keys
    fields_after_new = _group_fields(es_client, index)
    full = find_groups(es_client, index, params_of(tag), linkage=linkage)
    assert assign_groups(es_client, index, full) == 0  # --new left exactly the fields of a full run
    assert _group_fields(es_client, index) == fields_after_new
    rest_ids = {r["id"] for r in rest}
    touched = [g for g in full.groups if rest_ids & set(g.members)]
    assert sorted(sorted(g.members) for g in new.groups) == sorted(sorted(g.members) for g in touched)
    assert [g.representative for g in new.groups] == [g.representative for g in touched]
    # New documents did join older groups, and an older group's representative is kept.
    assert any(set(g.members) - rest_ids and set(g.members) & rest_ids for g in touched)
    # Each member's evidence, older members of a joined group included, counts its positions shared with the
    # representative.
    for group in new.groups:
        for at, member in enumerate(group.members[1:], start=1):
            fields = group.evidence_of(at)
            assert fields is not None and fields["shared"] == _shared(grouped, group.representative, member)
    if linkage == "representative":
        for group in new.groups:
            assert all(_shared(grouped, group.representative, m) >= T for m in group.members[1:])
        # Somewhere a chain of the full run's clusters was not followed through an older member.
        assert len(full.groups) > len(find_groups(es_client, index, params_of(tag), linkage="transitive").groups)
    # A second --new finds no new document.
    assert find_new_groups(es_client, index, params_of(tag), linkage=linkage).documents == 0
    with pytest.raises(EsError, match="t="):
        find_new_groups(es_client, index, params_of(tag, T + 1), linkage=linkage)
    es_client.indices.delete(index=index)


@pytest.mark.parametrize("linkage", ["representative", "transitive"])
def test_new_leaves_the_older_pages_it_only_compared_with_as_they_were(
    es_client: Elasticsearch, linkage: Linkage
) -> None:
    """--new reads the older pages sharing a band token with a new one; one that shares fewer than t positions
    with it (here a duplicate in an older group), or a duplicate with representative linkage, is compared,
    not regrouped: its fields stay. (Its --assign used to write "kept, own group" over such a duplicate.)"""
    from es_integration.groups import find_new_groups
    from es_integration.mapping import DUPLICATE, KEPT, ensure_index, stored_fields
    from scrapy_neardup.core.stored_signature import StoredSignature, band_bounds

    tag = Sketcher(num_perm=K).tag
    rng = np.random.default_rng(9)
    kept = rng.integers(0, 1 << 16, size=K, dtype=np.uint16)
    duplicate = kept.copy()
    duplicate[rng.choice(np.arange(10, K), size=8, replace=False)] ^= 1  # 120 of 128 shared with kept
    fresh = rng.integers(0, 1 << 16, size=K, dtype=np.uint16)
    first_band = slice(0, int(band_bounds(K, T)[1]))
    fresh[first_band] = duplicate[first_band]  # one band token in common, a few positions: not a near-duplicate
    index = f"nd-groups-compared-{uuid.uuid4().hex[:8]}"
    ensure_index(es_client, index)

    def write(doc_id: str, values: np.ndarray, seq: int) -> None:
        fields = {**stored_fields(StoredSignature(values, tag)), "fingerprint": f"{seq:016x}", "tag": tag,
                  "empty": False, "seq": seq, "group": doc_id, "status": KEPT}
        es_client.index(index=index, id=doc_id, document={"neardup": fields}, refresh=True)

    write("kept", kept, 1)
    write("duplicate", duplicate, 2)
    full = find_groups(es_client, index, params_of(tag), linkage=linkage)
    assert [g.members for g in full.groups] == [["kept", "duplicate"]]
    assert assign_groups(es_client, index, full) == 1
    write("fresh", fresh, 3)
    new = find_new_groups(es_client, index, params_of(tag), linkage=linkage)
    assert new.documents == 1 and new.queries == 2 and new.groups == []  # both older pages read, and compared
    assert assign_groups(es_client, index, new) == 0
    assert _group_fields(es_client, index)["duplicate"] == ("kept", DUPLICATE, "kept")
    es_client.indices.delete(index=index)


def test_pages_a_crawler_is_deciding_are_left_out_never_overwritten_and_taken_by_new(
    es_client: Elasticsearch,
) -> None:
    """A document the crawler backend wrote ``pending`` (being decided: other crawlers wait for it to settle) is
    neither grouped nor written by a full run with --assign, even when it copies a grouped page exactly: its
    status stays ``pending`` until its crawler writes the decision. That decision carries ``seq`` = the pending
    write's ``_seq_no``, below the highest ``seq`` the run saw; the recorded watermark stays below it, so the next
    --new takes the settled page, and leaves what a full run gives."""
    from es_integration.groups import find_new_groups, groups_watermark

    sketcher = Sketcher(num_perm=K)
    records = [r for r in grouped_records(seed=11) if r["id"].startswith(("cluster0-", "single1"))]
    index = f"nd-groups-pending-{uuid.uuid4().hex[:8]}"
    assert index_records(es_client, index, records, sketcher).errors == 0
    source = es_client.get(index=index, id="cluster0-1")["_source"]
    fields = source["neardup"]
    fields.update(status="pending", group="pending-copy", writer="crawler-a:1", key="pending-copy")
    fields.pop("seq", None)
    pending_seq_no = es_client.index(index=index, id="pending-copy", document=source, refresh=True)["_seq_no"]
    before = dict(es_client.get(index=index, id="pending-copy")["_source"]["neardup"])

    report = find_groups(es_client, index, params_of(sketcher.tag))
    assert report.documents == len(records)
    assert not any("pending-copy" in g.members for g in report.groups)
    assert any("cluster0-1" in g.members for g in report.groups)
    assert assign_groups(es_client, index, report) > 0
    assert es_client.get(index=index, id="pending-copy")["_source"]["neardup"] == before
    assert report.watermark is not None and report.watermark < pending_seq_no
    assert groups_watermark(es_client, index, params_of(sketcher.tag))["seq"] < pending_seq_no

    settled = {**before, "status": "kept", "seq": pending_seq_no}  # its crawler's decision, as the backend writes it
    es_client.index(index=index, id="pending-copy", document={"neardup": settled}, refresh=True)
    new = find_new_groups(es_client, index, params_of(sketcher.tag))
    assert any({"cluster0-1", "pending-copy"} <= set(g.members) for g in new.groups)
    assign_groups(es_client, index, new)
    assert assign_groups(es_client, index, find_groups(es_client, index, params_of(sketcher.tag))) == 0
    es_client.indices.delete(index=index)


def _group_fields(es: Elasticsearch, index: str) -> dict[str, tuple[Any, ...]]:
    hits = es.search(index=index, size=1000, source_includes=["neardup.group", "neardup.status",
                                                              "neardup.duplicate_of"])["hits"]["hits"]
    return {h["_id"]: (h["_source"]["neardup"].get("group"), h["_source"]["neardup"].get("status"),
                       h["_source"]["neardup"].get("duplicate_of")) for h in hits}


def test_row_states_give_back_what_was_added_and_the_default_elsewhere() -> None:
    """The compact per-row (group, status, duplicate_of) store of a sweep: every field round-trips (None, empty
    and non-ASCII strings, statuses it has not seen before), rows it does not hold give the default."""
    rng = random.Random(5)
    states = RowStates()
    added: dict[int, tuple[str | None, str | None, str | None]] = {}
    row = 0
    for _ in range(2000):
        row += rng.randint(1, 5)
        state = (rng.choice([None, "", f"g{rng.randrange(100)}", "grüppe-é"]),
                 rng.choice([None, "kept", "duplicate", "unchecked", f"odd{rng.randrange(3)}"]),
                 rng.choice([None, "", f"d{rng.randrange(10**6)}", "ü\udcff"]))
        states.add(row, state)
        added[row] = state
    default = ("mine", "kept", None)
    assert list(states.rows()) == sorted(added) and len(states) == len(added)
    for r in range(row + 3):
        assert states.get(r, default) == added.get(r, default), r
    assert 0 < states.memory_bytes() < 60 * len(added)
    with pytest.raises(ValueError):
        states.add(row, default)


def test_swept_docs_give_the_seq_of_some_rows_before_and_after_joining_their_pages() -> None:
    """``seq_of`` reads the rows it needs from the sweep's pages (the rank keys of representative linkage, during
    the pair finding) and gives what the joined array gives afterwards; documents without seq sort last."""
    from es_integration.groups import SweptDocs
    from es_integration.mapping import F_SEQ, F_SIG
    from scrapy_neardup.core.stored_signature import encode_many

    rng = np.random.default_rng(3)
    docs = SweptDocs(K, KeepRule())
    row = 0
    for size in (5, 1, 17, 3, 9):
        texts = encode_many(rng.integers(0, 1 << 16, size=(size, K), dtype=np.uint16))
        hits = []
        for text in texts:
            fields: dict[str, Any] = {F_SIG: [text]}
            if row % 4:
                fields[F_SEQ] = [int(rng.integers(1, 10**18))]
            hits.append({"_id": f"d{row}", "fields": fields})
            row += 1
        docs.add_page(hits)
    rows = np.sort(rng.choice(docs.size, size=20, replace=False))
    before = docs.seq_of(rows)
    assert np.array_equal(before, docs.seq[rows])  # docs.seq joins the pages
    assert np.array_equal(docs.seq_of(rows), before)
    assert (before[rows % 4 == 0] == np.iinfo(np.int64).max).all()
    docs.close()
