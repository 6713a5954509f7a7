"""The local node launcher (neardup_devnode.node) against real nodes: the session fixtures' plain and secured
nodes. Background nodes (`neardup es start|stop|status`) are tested in tests/devnode."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from neardup_devnode.node import (
    ClusterHandle,
    NodeStartError,
    RunningNode,
    group_members,
    start_node,
)

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

pytestmark = pytest.mark.es


def _ca(node: ClusterHandle) -> str:
    assert node.ca_certs, "secured node without a CA file"
    return node.ca_certs


def _local(node: ClusterHandle) -> RunningNode:
    if not isinstance(node, RunningNode):
        pytest.skip("ES_URL points at an external cluster; no local process to inspect")
    return node


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains *text*."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def _uids(pid: int) -> set[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return {int(x) for x in line.split()[1:]}
    raise AssertionError(f"no Uid line for pid {pid}")


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


# ------------------------------------------------------------------------------------------------ plain node


def test_node_answers_health(es_node: ClusterHandle) -> None:
    status, body = es_node.request("GET", "/_cluster/health?wait_for_status=yellow&timeout=30s")
    assert status == 200, body
    assert body["status"] in ("green", "yellow")
    assert body["number_of_nodes"] >= 1


def test_local_node_process_and_settings(es_node: ClusterHandle) -> None:
    node = _local(es_node)
    assert node.url == f"http://127.0.0.1:{node.http_port}"
    assert node.is_running()
    assert node.data_dir.is_dir() and node.data_dir.parent == node.node_dir
    assert "started" in node.log_path.read_text(errors="replace")
    members = group_members(node.pid)
    assert members, "no live process in the node's process group"
    if os.geteuid() == 0:
        for pid in members:
            assert 0 not in _uids(pid), f"pid {pid} runs as root"

    status, body = node.request("GET", "/_nodes/_local/settings,jvm")
    assert status == 200, body
    (info,) = body["nodes"].values()
    settings = info["settings"]
    assert settings["network"]["host"] == "127.0.0.1"
    assert settings["discovery"]["type"] == "single-node"
    assert settings["cluster"]["routing"]["allocation"]["disk"]["threshold_enabled"] == "false"
    if node.engine == "elasticsearch":  # OpenSearch knows no xpack.* settings (and has no security plugin)
        assert settings["xpack"]["security"]["enabled"] == "false"
    else:
        assert "xpack" not in settings
    assert settings["path"]["data"] in (str(node.data_dir), [str(node.data_dir)])  # OpenSearch: a list
    heap = info["jvm"]["mem"]
    assert heap["heap_init_in_bytes"] == heap["heap_max_in_bytes"], heap
    # Only loopback: nothing listens on another address of this host.
    for addr in info.get("http", {}).get("bound_address", []):
        assert addr.startswith(("127.0.0.1:", "[::1]:")), addr


def test_cluster_health_via_client(es_client: Elasticsearch) -> None:
    health = es_client.cluster.health(wait_for_status="yellow", timeout="30s")
    assert health["status"] in ("green", "yellow")
    assert health["timed_out"] is False


def test_index_and_search_one_document(es_client: Elasticsearch) -> None:
    index = f"test-node-{uuid.uuid4().hex[:8]}"
    es_client.indices.create(
        index=index,
        settings={"number_of_shards": 1, "number_of_replicas": 0},
        mappings={"properties": {"sig": {"type": "keyword"}, "title": {"type": "text"}}},
    )
    try:
        es_client.index(index=index, id="doc-1", document={"sig": ["a1", "b2", "c3"], "title": "hello"}, refresh=True)
        es_client.index(index=index, id="doc-2", document={"sig": ["x9"], "title": "other"}, refresh=True)
        res = es_client.search(
            index=index,
            query={"bool": {"should": [{"term": {"sig": v}} for v in ("a1", "b2", "zz")], "minimum_should_match": 2}},
        )
        hits = res["hits"]["hits"]
        assert res["hits"]["total"]["value"] == 1
        assert hits[0]["_id"] == "doc-1"
        assert hits[0]["_source"]["title"] == "hello"
        assert es_client.count(index=index)["count"] == 2
    finally:
        es_client.indices.delete(index=index)


def test_failed_start_raises_with_log_tail() -> None:
    base = Path(tempfile.mkdtemp(prefix="neardup-es-test-", dir=tempfile.gettempdir()))
    try:
        with pytest.raises(NodeStartError) as info:
            start_node(base=base, settings={"neardup.no.such.setting": 1}, timeout=120)
        msg = str(info.value)
        assert "exited with code" in msg
        assert "neardup.no.such.setting" in msg  # from the tail of the node's log
        assert not _processes_mentioning(str(base)), "a process of the failed node survived"
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- secured node


def test_secure_node_is_https_with_password(secure_es_node: RunningNode) -> None:
    node = secure_es_node
    assert node.url.startswith("https://127.0.0.1:")
    assert node.username == "elastic" and node.password
    assert node.ca_certs and Path(node.ca_certs).is_file()
    status, body = node.request("GET", "/_security/_authenticate")
    assert status == 200, body
    assert body["username"] == "elastic"
    assert "superuser" in body["roles"]


def test_secure_node_refuses_anonymous(secure_es_node: RunningNode) -> None:
    status, body = secure_es_node.request("GET", "/_cluster/health", auth=None)
    assert status == 401, body
    assert body["error"]["type"] == "security_exception"


def test_secure_node_refuses_wrong_password(secure_es_node: RunningNode) -> None:
    status, _ = secure_es_node.request("GET", "/_cluster/health", auth=("elastic", "not-the-password"))
    assert status == 401
    status, _ = secure_es_node.request("GET", "/_cluster/health", auth=("nobody", secure_es_node.password or ""))
    assert status == 401


def test_secure_client_with_ca_and_password(secure_es_node: RunningNode) -> None:
    from elasticsearch import AuthenticationException, Elasticsearch

    with secure_es_node.client() as es:
        assert es.cluster.health(wait_for_status="yellow", timeout="30s")["status"] in ("green", "yellow")
        assert es.security.authenticate()["username"] == "elastic"
    with (
        Elasticsearch(secure_es_node.url, ca_certs=_ca(secure_es_node), basic_auth=("elastic", "bad")) as es,
        pytest.raises(AuthenticationException),
    ):
        es.cluster.health()


def test_secure_node_needs_the_ca_and_tls(secure_es_node: RunningNode) -> None:
    untrusted = ClusterHandle(
        url=secure_es_node.url, username=secure_es_node.username, password=secure_es_node.password
    )
    from elastic_transport import ConnectionError as TransportConnectionError
    from elastic_transport import TlsError

    with pytest.raises(TlsError):
        untrusted.request("GET", "/_cluster/health")
    plain = ClusterHandle(
        url=secure_es_node.url.replace("https://", "http://"),
        username=secure_es_node.username,
        password=secure_es_node.password,
    )
    try:
        status, _ = plain.request("GET", "/_cluster/health", timeout=10)
    except TransportConnectionError:
        pass  # connection closed: plaintext is not accepted on the TLS port
    else:
        assert status != 200


def test_api_key(secure_es_node: RunningNode) -> None:
    from elasticsearch import AuthenticationException, Elasticsearch

    key = secure_es_node.create_api_key(f"pytest-{uuid.uuid4().hex[:6]}", expiration="1h")
    assert {"id", "api_key", "encoded"} <= key.keys()
    with Elasticsearch(secure_es_node.url, ca_certs=_ca(secure_es_node), api_key=key["encoded"]) as es:
        me = es.security.authenticate()
        assert me["authentication_type"] == "api_key"
        assert me["api_key"]["id"] == key["id"]
        es.indices.create(index="api-key-test")
        es.index(index="api-key-test", document={"a": 1}, refresh=True)
        assert es.count(index="api-key-test")["count"] == 1
        es.indices.delete(index="api-key-test")
    with secure_es_node.client() as admin:
        assert admin.security.invalidate_api_key(ids=[key["id"]])["invalidated_api_keys"] == [key["id"]]
    with (
        Elasticsearch(secure_es_node.url, ca_certs=_ca(secure_es_node), api_key=key["encoded"]) as es,
        pytest.raises(AuthenticationException),
    ):
        es.security.authenticate()
