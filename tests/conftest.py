"""Shared pytest fixtures.

Elasticsearch fixtures (all session-scoped, started lazily, at most one plain and one secured node per run):

* ``es_node`` - a local single-node Elasticsearch (:class:`neardup_devnode.node.RunningNode`), or, when the
  environment variable ``ES_URL`` is set, a handle to that existing cluster
  (:class:`neardup_devnode.node.ClusterHandle`; credentials from ``ES_USERNAME``/``ES_PASSWORD``,
  ``ES_API_KEY``, ``ES_CA_CERTS``) and no node is started.
* ``es_url`` - its URL.
* ``es_client`` - an ``elasticsearch.Elasticsearch`` 8.x client for it.
* ``secure_es_node`` - a local node with security and HTTPS (``.url``, ``.username``, ``.password``,
  ``.ca_certs``, ``.create_api_key()``, ``.client()``).
* ``es_cluster`` - a local 3-node cluster (:class:`neardup_devnode.node.RunningCluster`: ``.urls``, ``.hosts``,
  ``.nodes``, ``.restart_node(name)``), each node with ``NEARDUP_ES_CLUSTER_HEAP`` (default 320m). Always local
  (``ES_URL`` does not replace it): its tests kill nodes.

If a node cannot be started the fixture raises (the tests error); they are never skipped. Tests using these
fixtures get the ``es`` marker automatically, so ``-m "not es"`` deselects them.

The nodes come from the local node launcher, ``neardup_devnode`` (the ``neardup-devnode`` distribution in
``devnode/``: ``pip install -e '.[test]' -e ./devnode``).

``NEARDUP_ENGINE=opensearch`` starts OpenSearch (default: the launcher's, the newest 3.x) instead, and
``es_client`` is then opensearch-py behind elasticsearch-py's API (:mod:`es_integration.opensearch_adapter`).
OpenSearch's integ-test distribution has no security plugin, so the tests that need ``secure_es_node`` are
deselected (not skipped) there, with the reason printed.

Environment knobs: ``NEARDUP_ES_VERSION`` (the server every local node runs; default the launcher's default,
the newest 9.x that the Java found runs; CI also runs ``8.19.x``), ``NEARDUP_ES_HEAP`` (default 512m),
``NEARDUP_ES_START_TIMEOUT`` (seconds, default 180),
``NEARDUP_ES_KEEP=1`` (keep node data and logs after the run).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

try:
    import es_integration  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
try:
    import neardup_devnode  # noqa: F401
except ImportError:  # the launcher's distribution (devnode/) not installed: its package from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "devnode"))

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch
    from neardup_devnode.node import ClusterHandle, RunningCluster, RunningNode

ES_FIXTURES = {"es_node", "es_url", "es_client", "secure_es_node", "es_cluster"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "es: needs a real Elasticsearch node (started by the session fixture, or ES_URL)"
    )
    # The accuracy corpora (tests/accuracy/corpora.py) stay in the user's cache, downloaded once across runs.
    user_cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    os.environ.setdefault("NEARDUP_CORPUS_DIR", str(Path(user_cache) / "scrapy-neardup" / "corpora"))
    # `neardup es groups` keeps band filters under $XDG_CACHE_HOME: the tests' go to a directory of their own
    # (commands run in subprocesses inherit it), not to the user's cache.
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="neardup-test-cache-")


def _engine() -> str:
    return os.environ.get("NEARDUP_ENGINE") or "elasticsearch"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if ES_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.es)
    if _engine() == "opensearch":
        # No security plugin in OpenSearch's integ-test zip: nothing to test TLS, users or API keys against.
        secure = [item for item in items if "secure_es_node" in getattr(item, "fixturenames", ())]
        if secure:
            config.hook.pytest_deselected(items=secure)
            items[:] = [item for item in items if item not in secure]
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(
                    f"NEARDUP_ENGINE=opensearch: {len(secure)} security test(s) deselected: OpenSearch's "
                    "integ-test distribution has no security plugin (no TLS, users or API keys)"
                )


def _node_options() -> dict[str, Any]:
    from neardup_devnode.java import default_version

    engine = _engine()
    return {
        "engine": engine,
        "version": os.environ.get("NEARDUP_ES_VERSION") or default_version(engine),
        "heap": os.environ.get("NEARDUP_ES_HEAP", "512m"),
        "timeout": float(os.environ.get("NEARDUP_ES_START_TIMEOUT", "180")),
        "keep_data": os.environ.get("NEARDUP_ES_KEEP", "") not in ("", "0"),
        # a killed test run (CI timeout, SIGKILL) must not leave a JVM behind
        "die_with_parent": True,
    }


@pytest.fixture(scope="session")
def es_node() -> Iterator[ClusterHandle]:
    """A plain local node (security off, http), or the cluster at ``ES_URL``."""
    from neardup_devnode.node import ClusterHandle, start_node

    if os.environ.get("ES_URL"):
        yield ClusterHandle.from_env()
        return
    node = start_node(name=f"pytest-{os.getpid()}", **_node_options())
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def es_url(es_node: ClusterHandle) -> str:
    return es_node.url


@pytest.fixture(scope="session")
def es_client(es_node: ClusterHandle) -> Iterator[Elasticsearch]:
    client = es_node.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def secure_es_node() -> Iterator[RunningNode]:
    """A local node with ``xpack.security`` on, HTTPS with a generated CA, and a known ``elastic`` password."""
    from neardup_devnode.node import start_node

    node = start_node(secure=True, name=f"pytest-secure-{os.getpid()}", **_node_options())
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def es_cluster() -> Iterator[RunningCluster]:
    """A local 3-node cluster on 127.0.0.1 (started on first use; tests that kill a node restart it)."""
    from neardup_devnode.node import start_cluster

    options = _node_options()
    options["heap"] = os.environ.get("NEARDUP_ES_CLUSTER_HEAP", "320m")
    options["timeout"] = max(options["timeout"], 240.0)
    cluster = start_cluster(3, name=f"pytest-cluster-{os.getpid()}", **options)
    try:
        yield cluster
    finally:
        cluster.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI a skipped test is a failure: a green run must have run everything, Elasticsearch included."""
    if not os.environ.get("CI"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    if skipped and exitstatus == 0:
        print(f"\nCI: {skipped} test(s) skipped; a skipped test counts as a failure here", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
