"""The crawler backend and group discovery on a real 3-node cluster (session ``es_cluster``).

Crawler processes share one backend index of ``SHARDS`` primary shards over the site of ``test_es_crawlers``
(``GROUPS`` groups, one light edit of each group's article under each crawler's start URL); every crawler knows
all three nodes (``NEARDUP_ES_URL`` = the comma-separated URLs).

* ``test_crawlers_and_groups_on_a_cluster``: four crawlers; the index the backend creates has ``SHARDS``
  primaries and, through ``auto_expand_replicas: 0-1``, a replica of each on another node, as has its
  sequencer index; health is green; the crawl loses nothing and keeps one page per group;
  ``neardup es groups --transitive`` (given the three URLs) finds exactly the clusters that the pages'
  signatures give when compared here, in memory.
* ``test_primary_killed_mid_crawl``: four crawlers; the node holding the sequencer's primary shard (and primaries
  of the pages' index) is SIGKILLed after a third of the pages; replicas are promoted and the crawl goes on.
* ``test_data_node_killed_while_eight_crawlers_write``: eight crawlers; a node that is neither the master nor
  the sequencer's, holding a primary of the pages' index, is SIGKILLed after a third of the pages.

After a kill: nothing is lost (every page kept, dropped naming a kept page, or passed through unchecked and
written to the index later), every kept page's document survived, at least 99% of groups end with exactly one
page in the output, and the unchecked pages are counted (goal 0). The node is restarted on its data afterwards,
so the session cluster is whole again.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import neardup_testkit
import pytest
from neardup_testkit import CrawlResult, Page, SiteServer, run_crawl_process
from reliability_kit import Ledger
from test_es_crawlers import CRAWLERS, GROUPS, shared_site

from es_integration.backend.sequencer import sequencer_index

pytestmark = pytest.mark.es

#: Primary shards of the pages' index: one per node of the cluster.
SHARDS = 3


class HookedSite(SiteServer):
    """:class:`SiteServer` calling ``hook(n)`` before answering the n-th group page (1-based), each after
    ``delay`` seconds, so that a fault lands in the middle of the crawl."""

    def __init__(self, pages: dict[str, Page], hook: Callable[[int], None], delay: float) -> None:
        super().__init__(pages)
        self.hook, self.delay = hook, delay
        self.served = 0
        self._guard = threading.Lock()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        site = self
        base = super()._handler_class()

        class Handler(base):  # type: ignore[valid-type, misc]
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if "/g" in urlsplit(self.path).path:
                    with site._guard:
                        site.served += 1
                        n = site.served
                    site.hook(n)
                    time.sleep(site.delay)
                super().do_GET()

        return Handler


def run_crawlers(site: SiteServer, hosts: str, index: str, workdir: Path,
                 crawlers: int = CRAWLERS) -> dict[int, CrawlResult]:
    """The crawls, started together (they also race to create the index), each at ``/c<i>/``."""
    results: dict[int, CrawlResult] = {}
    errors: dict[int, BaseException] = {}

    def crawl(c: int) -> None:
        try:
            results[c] = run_crawl_process(
                workdir,
                settings={"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": hosts, "NEARDUP_ES_INDEX": index,
                          "NEARDUP_ES_SHARDS": SHARDS, "CONCURRENT_REQUESTS": 4, "LOG_LEVEL": "INFO"},
                spider={"start_url": f"{site.url}/c{c}/"}, name=f"crawler{c}",
            )
        except BaseException as exc:  # reported below
            errors[c] = exc

    threads = [threading.Thread(target=crawl, args=(c,)) for c in range(crawlers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(neardup_testkit.CRAWL_TIMEOUT + 10)
    assert not errors, errors
    assert sorted(results) == list(range(crawlers))
    for c, result in results.items():
        # A crawl that passed pages through unchecked fails (NEARDUP_MAX_UNCHECKED = 0, the default); the pages
        # themselves are accounted for below (goal: none).
        failed = result.stat("neardup/unchecked") > 0
        if result.returncode != int(failed):
            pytest.fail(f"crawler {c} exited with {result.returncode}:\n{result.log[-3000:]}")
        assert result.data["finish_reason"] == ("neardup_unchecked" if failed else "finished"), c
        assert result.data["item_errors"] == [], c
    return results


def account(results: dict[int, CrawlResult], pages: dict[str, Page], group_of: dict[str, int],
            base: str) -> dict[str, Any]:
    """Every page of every crawl: kept (checked), unchecked (passed through), dropped naming a kept page of its
    own group; the rest is lost. ``per_group``: pages of each group in the crawls' output."""
    items = [item for r in results.values() for item in r.scraped]
    unchecked = {i["url"] for i in items if (i.get("neardup") or {}).get("unchecked")}
    kept = {i["url"] for i in items} - unchecked
    dropped = {d["item"]["url"]: d["duplicate_of"] for r in results.values() for d in r.dropped}
    bad_drops = {url: target for url, target in dropped.items()
                 if target not in kept or group_of.get(target[len(base):]) != group_of.get(url[len(base):])}
    lost = {base + path for path in pages} - kept - unchecked - set(dropped)
    per_group = [0] * GROUPS
    for url in kept | unchecked:
        g = group_of.get(url[len(base):])
        if g is not None:
            per_group[g] += 1
    return {"kept": kept, "unchecked": unchecked, "dropped": dropped, "bad_drops": bad_drops, "lost": lost,
            "per_group": per_group, "exactly_one": per_group.count(1) / GROUPS,
            "retries": sum(r.stat("neardup/backend_retries") for r in results.values()),
            "errors": sum(r.stat("neardup/backend_errors") for r in results.values()),
            "unchecked_indexed": sum(r.stat("neardup/unchecked_indexed") for r in results.values())}


def index_docs(client: Any, index: str) -> dict[str, dict[str, Any]]:
    """_id -> the ``neardup`` object (key, status) of every document of the index, after a refresh; a search that
    did not reach every shard copy it asked, or saw fewer hits than it counted, fails here rather than later."""
    client.indices.refresh(index=index)
    response = client.search(index=index, size=10_000, query={"match_all": {}}, track_total_hits=True,
                             source=["neardup.key", "neardup.status"])
    hits = response["hits"]["hits"]
    assert response["_shards"]["failed"] == 0 and not response.get("timed_out"), response["_shards"]
    assert len(hits) == response["hits"]["total"]["value"], response["hits"]["total"]
    return {hit["_id"]: hit["_source"]["neardup"] for hit in hits}


def shard_copies(client: Any, index: str) -> list[dict[str, Any]]:
    """The index's shard copies from ``_cat/shards``. A relocating copy's node column reads
    ``"source -> ip node-id target"``: ``node`` is the source (the node holding it now), ``relocating_to`` the
    target's name."""
    copies = list(client.cat.shards(index=index, format="json", h="shard,prirep,state,node"))
    for copy in copies:
        source, arrow, target = (copy.get("node") or "").partition(" -> ")
        copy["node"], copy["relocating_to"] = source, target.split()[-1] if arrow else None
    return copies


@pytest.fixture
def cluster_client(es_cluster: Any) -> Iterator[Any]:
    """A client knowing every node of the session cluster (it outlives any one of them), for the cluster's engine
    (opensearch-py behind elasticsearch-py's API on OpenSearch)."""
    from es_integration.client import ConnectionSettings, make_client

    client = make_client(ConnectionSettings.create(es_cluster.hosts, request_timeout=60), max_retries=5,
                         retry_on_timeout=True)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def cluster_index(cluster_client: Any) -> Iterator[str]:
    name = f"neardup-rel-cluster-{uuid.uuid4().hex[:8]}"
    yield name
    cluster_client.indices.delete(index=f"{name},{sequencer_index(name)}", ignore_unavailable=True)


@pytest.fixture
def crawl_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(neardup_testkit, "CRAWL_TIMEOUT", 170)
    return tmp_path


def test_crawlers_and_groups_on_a_cluster(es_cluster: Any, cluster_client: Any, cluster_index: str,
                                          crawl_dir: Path, capsys: pytest.CaptureFixture[str],
                                          ledger: Ledger) -> None:
    import json

    from scrapy_neardup.cli.main import main
    from scrapy_neardup.core.sketch import Sketcher
    from scrapy_neardup.core.stored_signature import stored_values
    from scrapy_neardup.core.theory import min_shared_for

    pages, group_of = shared_site()
    site = SiteServer(pages).start()
    started = time.monotonic()
    try:
        results = run_crawlers(site, es_cluster.hosts, cluster_index, crawl_dir)
    finally:
        site.stop()
    elapsed = time.monotonic() - started
    outcome = account(results, pages, group_of, site.url)
    assert outcome["lost"] == set() and outcome["bad_drops"] == {}
    assert outcome["unchecked"] == set() and outcome["errors"] == 0
    assert outcome["per_group"].count(0) == 0 and outcome["exactly_one"] >= 0.99, outcome["per_group"]

    # The index the backend created: SHARDS primaries, each with one replica (auto_expand_replicas 0-1 on 3
    # nodes) on another node; its sequencer: one primary and a replica; both green.
    settings = cluster_client.indices.get_settings(index=cluster_index)[cluster_index]["settings"]["index"]
    assert (settings["number_of_shards"], settings["auto_expand_replicas"]) == (str(SHARDS), "0-1")
    sequencer = sequencer_index(cluster_index)
    for index in (cluster_index, sequencer):
        health = cluster_client.cluster.health(index=index, wait_for_status="green", timeout="60s",
                                                wait_for_no_relocating_shards=True)
        assert health["status"] == "green" and health["number_of_nodes"] == 3 and not health["relocating_shards"]
    settings = cluster_client.indices.get_settings(index=cluster_index)[cluster_index]["settings"]["index"]
    assert settings["number_of_replicas"] == "1"
    copies = shard_copies(cluster_client, cluster_index)
    assert sorted(c["prirep"] for c in copies) == ["p"] * SHARDS + ["r"] * SHARDS
    assert {c["state"] for c in copies} == {"STARTED"}
    for shard in {c["shard"] for c in copies}:
        assert len({c["node"] for c in copies if c["shard"] == shard}) == 2
    assert sorted(c["prirep"] for c in shard_copies(cluster_client, sequencer)) == ["p", "r"]
    docs = index_docs(cluster_client, cluster_index)
    assert [d for d in docs.values() if d["status"] == "pending"] == []
    assert {d["key"] for d in docs.values() if d["status"] == "kept"} == outcome["kept"]

    # Group discovery through the three URLs equals the clusters of the pages' signatures compared here
    # (Broder's components: --transitive; the default linkage is checked against the literal rule elsewhere).
    capsys.readouterr()
    assert main(["es", "groups", "--es-url", es_cluster.hosts, "--index", cluster_index, "--json",
                 "--transitive"]) == 0
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    key_of = {doc_id: doc["key"] for doc_id, doc in docs.items()}
    found_groups = sorted(sorted(key_of[m] for m in g["members"]) for g in found)
    sketcher, t = Sketcher(), min_shared_for(0.9, 128)
    values = {key: stored_values(sketcher.sketch(pages[key[len(site.url):]].body).signature)
              for key in key_of.values()}
    parent = {key: key for key in values}

    def root(key: str) -> str:
        while parent[key] != key:
            key = parent[key]
        return key

    keys = sorted(values)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if int((values[a] == values[b]).sum()) >= t:
                parent[root(a)] = root(b)
    clusters: dict[str, list[str]] = {}
    for key in keys:
        clusters.setdefault(root(key), []).append(key)
    expected = sorted(sorted(members) for members in clusters.values() if len(members) > 1)
    statuses = Counter(doc.get("status") for doc in docs.values())
    assert found_groups == expected, statuses
    # A copy is written to the index only when the crawlers check it at the same time as its original (no kept
    # page found before it: es_integration.backend.rounds, step (a)); crawls that happen not to overlap leave
    # only the kept pages, and then no group to find. Otherwise groups must be found.
    if statuses != Counter({"kept": len(outcome["kept"])}):
        assert found_groups, f"no group found; documents by status: {dict(statuses)}"
    print(f"\ncluster, {CRAWLERS} crawlers: {len(pages)} pages, kept {len(outcome['kept'])}, dropped "
          f"{len(outcome['dropped'])}, {len(found_groups)} groups found in {len(docs)} documents; {elapsed:.1f}s")
    ledger.record(
        f"{len(pages)} pages, {CRAWLERS} crawlers on a 3-node cluster (index: 1 primary + 1 replica, green); "
        "neardup es groups over the three URLs", lost=len(outcome["lost"]), kept=len(outcome["kept"]),
        dropped=len(outcome["dropped"]), groups_found=len(found_groups), seconds=round(elapsed, 1),
    )


def crawl_with_a_kill(es_cluster: Any, cluster_client: Any, cluster_index: str, crawl_dir: Path,
                      choose: Callable[[str, str], str], crawlers: int,
                      changes: int = 3) -> tuple[dict[str, Any], dict[str, Any], float, int]:
    """The crawls, with the node ``choose(master, sequencer primary's node)`` names SIGKILLed after a third of
    the group pages; ``(fault, outcome, seconds, kill_at)``. ``fault``: the node, whether it was the master,
    seconds until every primary of both indices was started elsewhere and until both were green again."""
    indices = [cluster_index, sequencer_index(cluster_index)]
    kill_at = GROUPS * crawlers // 3
    fault: dict[str, Any] = {}
    recovered = threading.Event()

    def primaries_elsewhere() -> bool:
        copies = fault["copies"] = [c for index in indices for c in shard_copies(cluster_client, index)]
        primaries = [c for c in copies if c["prirep"] == "p"]
        return len(primaries) == SHARDS + 1 and all(
            c["state"] == "STARTED" and c["node"] != fault["node"] for c in primaries)

    def watch_recovery() -> None:
        # From the kill: until every primary is started on a live node, then until both indices are green again
        # (new replicas built on the survivors; node_left.delayed_timeout is 0 for these indices).
        try:
            while not primaries_elsewhere():
                time.sleep(0.05)
            fault["primary_s"] = time.monotonic() - fault["at"]
            for index in indices:
                cluster_client.cluster.health(index=index, wait_for_status="green", timeout="120s")
            fault["green_s"] = time.monotonic() - fault["at"]
        except BaseException as exc:  # reported by the test
            fault["watch_error"] = exc
        finally:
            recovered.set()

    def hook(n: int) -> None:
        if n != kill_at:
            return
        try:
            for index in indices:
                cluster_client.indices.put_settings(index=index,
                                                    settings={"index.unassigned.node_left.delayed_timeout": "0"})
                # The premise is a failover: replicas must be started (in sync) before their primary dies, or the
                # kill takes the only copy away. Usually done long before; on a loaded machine it may not be. No
                # copy may be relocating either (the cluster rebalances after an earlier test's node restart): the
                # victim is chosen by where each primary is, which must not change under the kill.
                health = cluster_client.cluster.health(index=index, wait_for_status="green", timeout="60s",
                                                        wait_for_no_relocating_shards=True)
                if health.get("status") != "green" or health.get("relocating_shards"):
                    raise RuntimeError(f"{index} was not green before the kill: {dict(health)}")
            (sequencer,) = [c["node"] for c in shard_copies(cluster_client, indices[1]) if c["prirep"] == "p"]
            master = cluster_client.cat.master(format="json")[0]["node"]
            victim = choose(master, sequencer)
            node = es_cluster.node_named(victim)
            fault.update(node=victim, was_master=victim == master, was_sequencer=victim == sequencer,
                         at=time.monotonic())
            node.kill()  # SIGKILL to the node's whole process group: no goodbye
            threading.Thread(target=watch_recovery, daemon=True).start()
        except BaseException as exc:  # reported by the test
            fault["error"] = exc
            recovered.set()

    pages, group_of = shared_site(crawlers, changes)
    group_pairs_near_duplicate(pages, group_of)  # the premise of "one kept page per group"
    site = HookedSite(pages, hook, delay=0.05)
    site.start()
    started = time.monotonic()
    try:
        results = run_crawlers(site, es_cluster.hosts, cluster_index, crawl_dir, crawlers)
        elapsed = time.monotonic() - started
        assert recovered.wait(150), f"the cluster did not recover; shard copies last seen: {fault.get('copies')}"
    finally:
        site.stop()
        if "node" in fault:  # make the session cluster whole again
            es_cluster.restart_node(fault["node"])
    assert "error" not in fault and "watch_error" not in fault, fault
    outcome = account(results, pages, group_of, site.url)
    # The kill landed mid-crawl: group pages were still served after it.
    assert site.served == GROUPS * crawlers and kill_at < site.served
    # What each crawler met, shown when a check below fails: its counts, then what it warned of (not the
    # transport's per-node lines), the crawlers that passed pages through unchecked first (a CI log keeps the head).
    unchecked_first = sorted(results, key=lambda c: (results[c].stat("neardup/unchecked") == 0, c))
    outcome["crawlers"] = [
        f"crawler {c}: {len(r.scraped)} scraped, {len(r.dropped)} dropped, {r.stat('neardup/unchecked')} unchecked, "
        f"{r.stat('neardup/backend_errors')} backend errors, {r.stat('neardup/backend_retries')} retries, "
        f"finish reason {r.data['finish_reason']}" for c in unchecked_first for r in [results[c]]]
    outcome["warnings"] = [f"crawler {c}: {line}" for c in unchecked_first for line in results[c].log.splitlines()
                           if any(mark in line for mark in ("WARNING:", "ERROR:", "EsError:"))
                           and "node_pool" not in line and "[opensearch]" not in line]
    outcome["kill"] = describe_kill(fault, outcome, elapsed, kill_at, crawlers)
    return fault, outcome, elapsed, kill_at


def group_pairs_near_duplicate(pages: dict[str, Page], group_of: dict[str, int]) -> None:
    """Every two pages of a group share ``>= t`` positions: then exactly one page per group is the outcome to
    expect (a pair below ``t`` would rightly be kept twice)."""
    from scrapy_neardup.core.sketch import Sketcher
    from scrapy_neardup.core.stored_signature import stored_values
    from scrapy_neardup.core.theory import min_shared_for

    sketcher, t = Sketcher(), min_shared_for(0.9, 128)
    members: dict[int, list[Any]] = {}
    for path, g in group_of.items():
        members.setdefault(g, []).append(stored_values(sketcher.sketch(pages[path].body).signature))
    for g, values in members.items():
        for i, a in enumerate(values):
            for b in values[i + 1:]:
                assert int((a == b).sum()) >= t, f"group {g} holds two pages sharing fewer than {t} positions"


def check_after_a_kill(cluster_client: Any, cluster_index: str, outcome: dict[str, Any]) -> None:
    """Nothing lost, drops name kept pages of their group, one page per group (>= 99%), unchecked pages (goal 0)
    all written to the index; every kept page's document survived the failover (acknowledged writes live on
    the promoted replicas), and nothing is left pending."""
    assert outcome["lost"] == set()
    assert outcome["bad_drops"] == {}
    assert outcome["per_group"].count(0) == 0, outcome["per_group"]
    if outcome["exactly_one"] < 0.99:
        twice = [g for g, n in enumerate(outcome["per_group"]) if n > 1]
        cluster_client.indices.refresh(index=cluster_index)
        found = cluster_client.search(index=cluster_index, size=10_000, query={"match_all": {}},
                                      source=["neardup.key", "neardup.status", "neardup.seq", "neardup.writer",
                                              "neardup.duplicate_of"], seq_no_primary_term=True)["hits"]["hits"]
        rows = sorted((h["_source"]["neardup"].get("seq", -1), h["_source"]["neardup"]["key"].rsplit("/", 2)[-2:],
                       h["_source"]["neardup"]["status"], h["_source"]["neardup"].get("writer"),
                       str(h["_source"]["neardup"].get("duplicate_of", "")).rsplit("/", 2)[-2:], h["_seq_no"])
                      for h in found if any(h["_source"]["neardup"]["key"].endswith(f"/g{g}") for g in twice))
        markers = cluster_client.search(index=sequencer_index(cluster_index), size=10_000,
                                        query={"match_all": {}}, seq_no_primary_term=True)["hits"]["hits"]
        # Most telling first: the kill, each crawler's counts, the crawlers' warnings, then the documents.
        pytest.fail("\n".join([
            f"{len(twice)} groups with more than one kept page: {twice}", outcome["kill"], *outcome["crawlers"],
            *outcome["warnings"][:60], "documents (seq, key, status, writer, duplicate of, _seq_no):",
            *map(str, rows[:60]), "markers: " + ", ".join(
                f"{m['_id']}={m['_seq_no']}" for m in sorted(markers, key=lambda m: m["_seq_no"]))]))
    assert outcome["unchecked_indexed"] == len(outcome["unchecked"])
    docs = index_docs(cluster_client, cluster_index)
    statuses = {d["key"]: d["status"] for d in docs.values()}
    assert [d for d in docs.values() if d["status"] == "pending"] == []
    assert {k for k, s in statuses.items() if s == "kept"} == outcome["kept"]
    assert outcome["unchecked"] <= set(statuses)


def describe_kill(fault: dict[str, Any], outcome: dict[str, Any], elapsed: float, kill_at: int,
                  crawlers: int) -> str:
    return (
        f"node {fault['node']} (master: {fault['was_master']}, sequencer primary: {fault['was_sequencer']}) "
        f"killed after {kill_at} of {GROUPS * crawlers} group pages, {crawlers} crawlers: kept "
        f"{len(outcome['kept'])}, dropped {len(outcome['dropped'])}, unchecked {len(outcome['unchecked'])}, lost "
        f"{len(outcome['lost'])}; retries {outcome['retries']}, backend errors {outcome['errors']}; primaries "
        f"elsewhere after {fault['primary_s']:.1f}s, green after {fault['green_s']:.1f}s; crawl {elapsed:.1f}s; "
        f"exactly one per group {outcome['exactly_one']:.1%}"
    )


def test_primary_killed_mid_crawl(es_cluster: Any, cluster_client: Any, cluster_index: str, crawl_dir: Path,
                                  ledger: Ledger) -> None:
    """The node holding the sequencer's primary (the fleet's order) dies mid-crawl."""
    fault, outcome, elapsed, kill_at = crawl_with_a_kill(
        es_cluster, cluster_client, cluster_index, crawl_dir, lambda master, sequencer: sequencer, CRAWLERS)
    print("\n" + outcome["kill"])
    check_after_a_kill(cluster_client, cluster_index, outcome)
    ledger.record(f"{SHARDS} primaries on a 3-node cluster; " + outcome["kill"],
                  lost=len(outcome["lost"]), kept=len(outcome["kept"]), unchecked=len(outcome["unchecked"]))


def test_data_node_killed_while_eight_crawlers_write(es_cluster: Any, cluster_client: Any, cluster_index: str,
                                                      crawl_dir: Path, ledger: Ledger) -> None:
    """A data node holding a primary of the pages' index, not the sequencer's (nor the master, when another
    such node exists), dies while eight crawlers write."""
    crawlers = 8

    def data_node(master: str, sequencer: str) -> str:
        holders = {c["node"] for c in shard_copies(cluster_client, cluster_index) if c["prirep"] == "p"}
        choices = sorted(holders - {sequencer}, key=lambda node: node == master)
        if not choices:
            raise RuntimeError(f"every primary of {cluster_index} is on the sequencer's node {sequencer}")
        return choices[0]

    # Light edits of 2 words (of 300): with 8 variants of a group, 3-word edits leave two pairs of the site
    # below the threshold, which are then rightly both kept.
    fault, outcome, elapsed, kill_at = crawl_with_a_kill(
        es_cluster, cluster_client, cluster_index, crawl_dir, data_node, crawlers, changes=2)
    print("\n" + outcome["kill"])
    assert not fault["was_sequencer"]
    check_after_a_kill(cluster_client, cluster_index, outcome)
    ledger.record(f"{SHARDS} primaries on a 3-node cluster; " + outcome["kill"],
                  lost=len(outcome["lost"]), kept=len(outcome["kept"]), unchecked=len(outcome["unchecked"]))
