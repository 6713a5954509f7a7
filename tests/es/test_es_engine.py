"""Engine detection and the OpenSearch adapter's translations (no server: the pure parts of
es_integration.opensearch_adapter); the same commands against a real OpenSearch node run in CI with
NEARDUP_ENGINE=opensearch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from es_integration.opensearch_adapter import (
    OPENSEARCH,
    _opensearch_sort,
    _translate_args,
    engine_from_root,
    missing_opensearch_py,
    translated_error,
)


def _search(*, body: object = None, index: object = None, params: object = None, headers: object = None) -> None:
    """Stands in for opensearch-py's ``search`` signature (only its parameter names are read)."""


def test_engine_from_root_answers() -> None:
    opensearch = {"version": {"distribution": "opensearch", "number": "2.19.1"}}
    assert engine_from_root(200, opensearch) == OPENSEARCH
    assert engine_from_root(200, {"version": {"number": "9.2.0", "build_flavor": "default"}}) == "elasticsearch"
    # the integ-test Elasticsearch without its root module answers 405; no privilege gives 403
    assert engine_from_root(405, {"error": "Incorrect HTTP method"}) == "elasticsearch"
    assert engine_from_root(403, opensearch) == "elasticsearch"
    assert engine_from_root(200, "not json") == "elasticsearch"


def test_search_arguments_become_body_and_params() -> None:
    out = _translate_args(
        "search", _search,
        {"index": "pages", "query": {"match_all": {}}, "size": 3, "from_": 2, "source": False,
         "sort": ["_shard_doc"], "pit": {"id": "p", "keep_alive": "1m"}, "request_cache": True,
         "search_after": None},
        {"ignore": (404,)},
    )
    assert out["index"] == "pages"
    assert out["body"] == {
        "query": {"match_all": {}}, "size": 3, "from": 2, "_source": False,
        "sort": [{"_doc": "asc"}, {"_id": "asc"}], "pit": {"id": "p", "keep_alive": "1m"},
    }
    assert out["params"] == {"ignore": (404,), "request_cache": "true"}


def test_shard_doc_is_replaced_only_where_it_is() -> None:
    assert _opensearch_sort(["_shard_doc"]) == [{"_doc": "asc"}, {"_id": "asc"}]
    assert _opensearch_sort([{"seq": "asc"}, {"_shard_doc": "asc"}]) == [{"seq": "asc"}, {"_doc": "asc"},
                                                                         {"_id": "asc"}]
    assert _opensearch_sort("_score") == ["_score"]


def test_opensearch_errors_become_elasticsearch_py_errors() -> None:
    import opensearchpy
    from elastic_transport import ConnectionError as TransportConnectionError
    from elasticsearch import BadRequestError, ConflictError

    body = {"error": {"type": "resource_already_exists_exception", "reason": "index [x] exists"}, "status": 400}
    err = translated_error(opensearchpy.RequestError(400, "resource_already_exists_exception", body))
    assert isinstance(err, BadRequestError) and err.meta.status == 400 and err.body == body
    assert isinstance(translated_error(opensearchpy.ConflictError(409, "conflict", {})), ConflictError)
    assert isinstance(translated_error(opensearchpy.ConnectionError("N/A", "refused", None)), TransportConnectionError)


def test_missing_opensearch_py_is_one_line() -> None:
    line = missing_opensearch_py("http://127.0.0.1:9200")
    assert "\n" not in line and "OpenSearch" in line and "scrapy-neardup[opensearch]" in line


def test_start_refuses_secure_opensearch() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy_neardup", "es", "start", "--engine", "opensearch", "--secure", "--name", "x"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "no security plugin" in proc.stderr


@pytest.mark.parametrize("version", ["9.2.0", "1.3.20", "2.x", "3.0"])
def test_opensearch_versions_checked(version: str) -> None:
    from neardup_devnode.errors import NodeError
    from neardup_devnode.versions import check_version, required_java

    with pytest.raises(NodeError, match="OpenSearch version must be 2.x.y or 3.x.y"):
        check_version(version, "opensearch")
    assert check_version("2.19.1", "opensearch") == "2.19.1"
    assert check_version("3.4.0", "opensearch") == "3.4.0"
    assert required_java("2.19.1", "opensearch") == 17 and required_java("3.4.0", "opensearch") == 21
    assert required_java("8.19.21") == 17 and required_java("9.2.0") == 21
