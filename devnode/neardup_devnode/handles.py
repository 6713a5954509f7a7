"""Handles on a cluster: :class:`ClusterHandle` (connection details, requests through elasticsearch-py) and
:class:`RunningNode` (a node this launcher started: its process group, directories and state)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import NodeError
from .process import group_members, reap, start_time, terminate_group

if TYPE_CHECKING:  # pragma: no cover
    from elasticsearch import Elasticsearch

logger = logging.getLogger(__name__)

#: elasticsearch-py 9 asks for ``compatible-with=9`` answers, which an 8.x server refuses; a media type that
#: already names a vendor type is left as is by both clients, so requests to an 8.x node name version 8.
_V8_MEDIA_TYPE = "application/vnd.elasticsearch+json; compatible-with=8"


@dataclass
class ClusterHandle:
    """Connection details of an Elasticsearch cluster (a local node or an existing cluster from ``ES_URL``)."""

    url: str
    username: str | None = None
    password: str | None = None
    ca_certs: str | None = None
    api_key: str | None = None
    version: str = ""
    #: ``"elasticsearch"`` or ``"opensearch"`` (``NEARDUP_ENGINE`` for a cluster from ``ES_URL``).
    engine: str = "elasticsearch"

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        username: str | None = None,
        password: str | None = None,
        ca_certs: str | None = None,
        api_key: str | None = None,
    ) -> ClusterHandle:
        """A handle for an existing cluster; ``user:password@`` in *url* is honoured."""
        parts = urllib.parse.urlsplit(url)
        if parts.username and username is None:
            username = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
        netloc = parts.hostname or ""
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if parts.port:
            netloc += f":{parts.port}"
        clean = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        return cls(url=clean, username=username, password=password, ca_certs=ca_certs, api_key=api_key)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClusterHandle:
        """A handle from ``ES_URL`` plus optional ``ES_USERNAME``, ``ES_PASSWORD``, ``ES_CA_CERTS``,
        ``ES_API_KEY``."""
        env = os.environ if env is None else env
        url = env.get("ES_URL")
        if not url:
            raise NodeError("ES_URL is not set")
        handle = cls.from_url(
            url,
            username=env.get("ES_USERNAME") or None,
            password=env.get("ES_PASSWORD") or None,
            ca_certs=env.get("ES_CA_CERTS") or None,
            api_key=env.get("ES_API_KEY") or None,
        )
        handle.engine = env.get("NEARDUP_ENGINE") or "elasticsearch"
        return handle

    @property
    def secure(self) -> bool:
        return self.url.startswith("https://")

    def stop(self, keep_data: bool | None = None) -> None:  # noqa: B027 - deliberately a no-op here
        """Nothing to stop for an existing cluster."""

    def client(self, *, auth: tuple[str, str] | None | bool = True, **kwargs: Any) -> Elasticsearch:
        """An ``elasticsearch.Elasticsearch`` client for this cluster; *kwargs* override the defaults.

        *auth*: ``True`` uses this handle's credentials, ``None``/``False`` none, a tuple is basic auth.
        For OpenSearch: opensearch-py behind the same API (:class:`es_integration.opensearch_adapter.OpenSearchClient`).
        """
        from elasticsearch import Elasticsearch

        if self.engine == "opensearch":
            return self._opensearch_client(auth, kwargs)

        opts: dict[str, Any] = {"request_timeout": 60}
        if self.ca_certs:
            opts["ca_certs"] = self.ca_certs
        if auth is True:
            if self.api_key:
                opts["api_key"] = self.api_key
            elif self.username:
                opts["basic_auth"] = (self.username, self.password or "")
        elif isinstance(auth, tuple):
            opts["basic_auth"] = auth
        if self.version.startswith("8."):
            opts["headers"] = {"accept": _V8_MEDIA_TYPE, "content-type": _V8_MEDIA_TYPE}
        opts.update(kwargs)
        return Elasticsearch(self.url, **opts)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        auth: tuple[str, str] | None | bool = True,
        timeout: float = 30.0,
    ) -> tuple[int, Any]:
        """One REST call through elasticsearch-py; returns ``(status, body)``.

        HTTP errors are returned, not raised; connection and TLS failures raise elastic-transport's
        ``ConnectionError`` / ``TlsError``. *auth* as in :meth:`client`.
        """
        from elasticsearch import ApiError

        if self.engine == "opensearch":  # elasticsearch-py's product check refuses OpenSearch's answers
            import json

            from es_integration.opensearch_adapter import translated_error

            with self._opensearch_client(auth, {"request_timeout": timeout, "max_retries": 0}) as es:
                # one connection, every status returned (the transport would raise or retry); connection and
                # TLS failures raised as elastic-transport's, as on Elasticsearch
                try:
                    status, _, raw = es.raw.transport.get_connection().perform_request(
                        method, "/" + path.lstrip("/"), body=None if body is None else json.dumps(body).encode(),
                        ignore=tuple(range(300, 600)), headers={"content-type": "application/json"},
                    )
                except Exception as exc:
                    raise translated_error(exc) from None
            try:
                return int(status), json.loads(raw) if raw else None
            except ValueError:
                return int(status), raw

        media = _V8_MEDIA_TYPE if self.version.startswith("8.") else "application/json"
        headers = {"accept": media}
        if body is not None:
            headers["content-type"] = media
        with self.client(auth=auth, request_timeout=timeout, max_retries=0) as es:
            try:
                resp = es.perform_request(method, "/" + path.lstrip("/"), headers=headers, body=body)
            except ApiError as exc:
                return int(exc.meta.status), exc.body
            return int(resp.meta.status), resp.body

    def _opensearch_client(self, auth: tuple[str, str] | None | bool, kwargs: dict[str, Any]) -> Any:
        from es_integration.client import ConnectionSettings
        from es_integration.opensearch_adapter import opensearch_client

        user, password = (self.username, self.password) if auth is True else auth if auth else (None, None)
        settings = ConnectionSettings.create(
            self.url, username=user, password=password if user is not None else None, ca_certs=self.ca_certs,
            api_key=self.api_key if auth is True else None, request_timeout=float(kwargs.pop("request_timeout", 60)),
        )
        return opensearch_client(settings, **kwargs)

    def create_api_key(
        self,
        name: str = "neardup-test",
        *,
        role_descriptors: Mapping[str, Any] | None = None,
        expiration: str | None = None,
    ) -> dict[str, Any]:
        """Create an API key (``POST /_security/api_key``) with this handle's credentials.

        Returns Elasticsearch's answer: ``id``, ``name``, ``api_key`` and ``encoded`` (the value for
        ``Authorization: ApiKey <encoded>`` or ``Elasticsearch(api_key=encoded)``).
        """
        body: dict[str, Any] = {"name": name}
        if role_descriptors is not None:
            body["role_descriptors"] = dict(role_descriptors)
        if expiration is not None:
            body["expiration"] = expiration
        status, answer = self.request("POST", "/_security/api_key", body)
        if status != 200 or not isinstance(answer, dict):
            raise NodeError(f"creating API key failed: HTTP {status}: {answer}")
        return dict(answer)

    def __enter__(self) -> ClusterHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class RunningNode(ClusterHandle):
    """A node started by :func:`neardup_devnode.node.start_node`; stop it with :meth:`stop` or a ``with`` block.
    (A background node's handle rebuilt from its record also describes it after it stopped: see
    :attr:`stopped_on_purpose`.)

    Besides the connection details of :class:`ClusterHandle`: ``pid`` is the launcher's pid, which is also the
    process group of the node's processes; ``node_dir`` holds ``config/``, ``data/`` (= ``data_dir``), ``logs/``
    (= ``logs_dir``) and ``tmp/``; ``log_path`` is the node's stdout/stderr; ports are on 127.0.0.1;
    ``name`` is the node's name (and, for background nodes, the name ``neardup es start --name`` recorded).
    """

    pid: int = 0
    name: str = ""
    node_dir: Path = field(default_factory=Path)
    data_dir: Path = field(default_factory=Path)
    logs_dir: Path = field(default_factory=Path)
    log_path: Path = field(default_factory=Path)
    http_port: int = 0
    transport_port: int = 0
    keep_data: bool = False
    background: bool = False
    start_time: int | None = None
    #: JVM heap (``-Xms`` = ``-Xmx``) it was started with.
    heap: str = ""
    #: Set in the state of a background node stopped by ``neardup es stop`` (a recorded node whose processes are
    #: gone without it died).
    stopped_on_purpose: bool = False
    _popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    _stopped: bool = field(default=False, repr=False, compare=False)

    def is_running(self) -> bool:
        """True while any process of the node's process group is alive (and it is still the same node)."""
        if self._stopped or not self.pid:
            return False
        if self._popen is not None:
            self._popen.poll()
        else:
            reap(self.pid)
            if self.start_time is not None and start_time(self.pid) not in (None, self.start_time):
                return False  # pid reused by an unrelated process; the group is gone
        return bool(group_members(self.pid))

    def kill(self) -> None:
        """SIGKILL the node's process group at once (fault tests: a node that dies without a goodbye)."""
        import signal

        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        terminate_group(self.pid, 15, self._popen)

    def stop(self, keep_data: bool | None = None, timeout: float = 30.0) -> None:
        """SIGTERM the node, wait up to *timeout* s, then SIGKILL; remove the node dir unless *keep_data*."""
        if self._stopped:
            return
        if self.pid and self.is_running():
            logger.info("stopping %s node pid %d", "OpenSearch" if self.engine == "opensearch" else "Elasticsearch",
                        self.pid)
            terminate_group(self.pid, timeout, self._popen)
        elif self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=1)
        self._stopped = True
        _FOREGROUND[:] = [n for n in _FOREGROUND if n is not self]
        keep = self.keep_data if keep_data is None else keep_data
        if not keep and self.node_dir.name and self.node_dir.is_dir():
            shutil.rmtree(self.node_dir, ignore_errors=True)

    def to_state(self) -> dict[str, Any]:
        """JSON-serialisable description (written to the state file of background nodes)."""
        return {
            "name": self.name,
            "url": self.url,
            "username": self.username,
            "password": self.password,
            "ca_certs": self.ca_certs,
            "pid": self.pid,
            "start_time": self.start_time,
            "version": self.version,
            "engine": self.engine,
            "node_dir": str(self.node_dir),
            "data_dir": str(self.data_dir),
            "logs_dir": str(self.logs_dir),
            "log_path": str(self.log_path),
            "http_port": self.http_port,
            "transport_port": self.transport_port,
            "keep_data": self.keep_data,
            "heap": self.heap,
            "stopped_on_purpose": self.stopped_on_purpose,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RunningNode:
        """Rebuild a handle (e.g. in another process) from :meth:`to_state` output."""
        return cls(
            url=state["url"],
            username=state.get("username"),
            password=state.get("password"),
            ca_certs=state.get("ca_certs"),
            pid=int(state["pid"]),
            name=str(state.get("name", "")),
            start_time=state.get("start_time"),
            version=str(state.get("version", "")),
            engine=str(state.get("engine", "elasticsearch")),
            node_dir=Path(state["node_dir"]),
            data_dir=Path(state["data_dir"]),
            logs_dir=Path(state["logs_dir"]),
            log_path=Path(state["log_path"]),
            http_port=int(state.get("http_port", 0)),
            transport_port=int(state.get("transport_port", 0)),
            keep_data=bool(state.get("keep_data", False)),
            background=True,
            heap=str(state.get("heap", "")),
            stopped_on_purpose=bool(state.get("stopped_on_purpose", False)),
        )

    def __enter__(self) -> RunningNode:
        return self


@dataclass
class RunningCluster(ClusterHandle):
    """Several local nodes forming one cluster (:func:`neardup_devnode.node.start_cluster`); ``url`` is the
    first node's (so :meth:`client` talks to it alone), :attr:`urls` / :attr:`hosts` every node's: give those to
    a client that must outlive one node (``Elasticsearch(cluster.urls)``). Stopping it stops every node."""

    nodes: list[RunningNode] = field(default_factory=list)
    _relaunch: Callable[[RunningNode], RunningNode] | None = field(default=None, repr=False, compare=False)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def hosts(self) -> str:
        """Every node's URL, comma-separated (the form ``NEARDUP_ES_URL`` and ``--es-url`` accept)."""
        return ",".join(self.urls)

    def restart_node(self, name: str) -> RunningNode:
        """Start a killed (or stopped with ``keep_data=True``) node again on its data dir and ports; wait until
        it has rejoined (all nodes in the cluster). Returns the new handle, which replaces the old in
        :attr:`nodes`."""
        if self._relaunch is None:
            raise NodeError("this cluster handle cannot restart nodes (not started by start_cluster here)")
        old = self.node_named(name)
        new = self._relaunch(old)
        self.nodes[self.nodes.index(old)] = new
        return new

    def node_named(self, name: str) -> RunningNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def stop(self, keep_data: bool | None = None, timeout: float = 30.0) -> None:
        for node in self.nodes:
            node.stop(keep_data=keep_data, timeout=timeout)


#: Foreground nodes still running; stopped at interpreter exit so a crashed test run leaves nothing behind.
_FOREGROUND: list[RunningNode] = []
