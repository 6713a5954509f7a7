"""Issue 6, item 1: Elasticsearch faults during a real crawl (NEARDUP_BACKEND="elasticsearch", subprocess).

The crawler reaches Elasticsearch through :class:`FaultProxy`, a TCP forwarder on a fixed port, so a test can
cut, stall or re-target the connection while the crawl runs without changing NEARDUP_ES_URL:

* ``test_node_killed_mid_crawl_and_restarted``: a node of our own (not the session one) is SIGKILLed after
  some pages, and a new node is started on the *same data directory* (``path.data`` of the first; node.py
  always picks fresh ports, so the proxy re-targets). Pages served while the node is down pass through marked
  ``{"unchecked": true}``; pages after the restart are checked again against the index kept before the kill.
  Before the kill, the same crawl meets a *stalled* node: the proxy accepts and never answers until one check
  has timed out on every attempt (NEARDUP_ES_TIMEOUT=0.5, 1 + 3 retries with backoff); it passes unchecked.
* ``test_unreachable_at_start_is_a_clear_error``: nothing listens: the crawl stops before fetching a page,
  with an error naming the URL and NEARDUP_ES_URL.

Every test counts every page: kept, dropped naming a kept page, or passed through unchecked; lost must be 0.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import neardup_testkit
import pytest
from neardup_testkit import CrawlResult, article_words, edit_words, html_page, run_crawl_process

pytestmark = pytest.mark.es

GROUPS = 20
PER_GROUP = 3


# -- a TCP proxy that can forward, refuse or stall ------------------------------------------------------------


class FaultProxy:
    """Listens on 127.0.0.1 (fixed port for its life) and forwards to ``target``; ``mode`` is ``forward``,
    ``refuse`` (accept and reset) or ``stall`` (accept, never answer). Changing the mode or the target cuts the
    live connections, as a dying node does."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.mode = "forward"
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self._live: set[socket.socket] = set()
        self._guard = threading.Lock()
        self._closed = False
        self.stalled = 0  # connections accepted in stall mode
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def set(self, mode: str | None = None, target: tuple[str, int] | None = None) -> None:
        if mode is not None:
            self.mode = mode
        if target is not None:
            self.target = target
        self._cut()

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        self._cut()

    def _cut(self) -> None:
        with self._guard:
            live, self._live = self._live, set()
        for conn in live:
            with contextlib.suppress(OSError):
                conn.close()

    def _track(self, conn: socket.socket) -> None:
        with self._guard:
            self._live.add(conn)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            mode = self.mode
            if mode == "refuse":
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                client.close()
            elif mode == "stall":
                self.stalled += 1
                self._track(client)
            else:
                threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        self._track(client)
        self._track(upstream)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)


# -- a site whose near-duplicates are spread over the crawl, with a hook per page request ------------------------


def group_pages() -> dict[str, tuple[str, int]]:
    """path -> (html, group): page ``i`` is in group ``i % GROUPS`` (a light edit of the group's article), so
    any run of consecutive pages holds members of many groups."""
    pages: dict[str, tuple[str, int]] = {}
    for i in range(GROUPS * PER_GROUP):
        group = i % GROUPS
        words = edit_words(article_words(1000 + group, 300), changes=3, seed=i)
        pages[f"/p/{i}"] = (html_page(f"Page {i}", words), group)
    return pages


class HookSite:
    """Serves ``/`` (links to every page) and the pages, each after ``delay`` s; ``hook(n)`` runs in the handler
    before the n-th page (1-based) is answered, and may block."""

    def __init__(self, pages: dict[str, tuple[str, int]], delay: float, hook: Callable[[int], None]) -> None:
        self.pages = pages
        self.served: list[str] = []
        guard = threading.Lock()
        links = "".join(f'<a href="{path}">{path}</a> ' for path in pages)
        index = f"<html><head><title>Index</title></head><body>{links}</body></html>"
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                path = urlsplit(self.path).path
                body = index if path == "/" else site.pages.get(path, ("", 0))[0]
                if path != "/" and body:
                    with guard:
                        site.served.append(path)
                        n = len(site.served)
                    hook(n)
                    time.sleep(delay)
                data = body.encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128

        self._server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# -- accounting ----------------------------------------------------------------------------------------------


def account(result: CrawlResult, site: HookSite) -> dict[str, Any]:
    """Classify every page: kept (checked), unchecked, dropped naming a kept page; the rest is lost."""
    base = site.url
    expected = {base + path for path in site.pages}
    kept = {i["url"] for i in result.scraped if i["url"] in expected and not (i.get("neardup") or {}).get("unchecked")}
    unchecked = {i["url"] for i in result.scraped if (i.get("neardup") or {}).get("unchecked")}
    dropped = {d["item"]["url"]: d["duplicate_of"] for d in result.dropped}
    bad_drops = {url: target for url, target in dropped.items() if target not in kept}
    lost = expected - kept - unchecked - set(dropped)
    return {"kept": kept, "unchecked": unchecked, "dropped": dropped, "bad_drops": bad_drops, "lost": lost}


def es_settings(url: str, index: str, **extra: Any) -> dict[str, Any]:
    return {
        "NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": url, "NEARDUP_ES_INDEX": index,
        "CONCURRENT_REQUESTS": 2, "LOG_LEVEL": "INFO", **extra,
    }


@pytest.fixture
def crawl_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(neardup_testkit, "CRAWL_TIMEOUT", 170)
    return tmp_path


def run_in_thread(workdir: Path, **kwargs: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = run_crawl_process(workdir, **kwargs)
        except BaseException as exc:  # reported by the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# -- tests ---------------------------------------------------------------------------------------------------


@pytest.fixture
def own_node() -> Iterator[dict[str, Any]]:
    """A node of this test's own (it gets killed), plus room for its successor; both removed afterwards."""
    from es_integration.node import start_node

    name = f"rel-kill-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    nodes: dict[str, Any] = {"name": name, "first": start_node(name=name, keep_data=True, die_with_parent=True)}
    try:
        yield nodes
    finally:
        second = nodes.get("second")
        if second is not None:
            second.stop()
        nodes["first"].stop(keep_data=False)


def test_node_killed_mid_crawl_and_restarted(own_node: dict[str, Any], crawl_dir: Path) -> None:
    from elasticsearch import Elasticsearch

    from es_integration.node import start_node

    first = own_node["first"]
    proxy = FaultProxy(("127.0.0.1", first.http_port))
    stall_at, kill_at, gate_at = 5, 15, 27
    stall_done, killed, resume = threading.Event(), threading.Event(), threading.Event()

    def end_stall() -> None:
        # Every attempt of one check (1 + ``retries``) hits the stalled node and times out; then it answers.
        deadline = time.monotonic() + 30
        while proxy.stalled < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        proxy.set(mode="forward")
        stall_done.set()

    def hook(n: int) -> None:
        if n == stall_at:
            proxy.set(mode="stall")  # accepts, never answers
            threading.Thread(target=end_stall, daemon=True).start()
            return
        if n > stall_at:
            stall_done.wait(60)
        if n == kill_at:
            os.killpg(first.pid, signal.SIGKILL)  # the whole node process group, no goodbye
            killed.set()
        elif n >= gate_at:
            resume.wait(150)

    pages = group_pages()
    site = HookSite(pages, delay=0.05, hook=hook)
    index = f"neardup-rel-kill-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    try:
        thread, box = run_in_thread(
            crawl_dir, settings=es_settings(proxy.url, index, NEARDUP_ES_TIMEOUT=0.5),
            spider={"start_url": site.url + "/"}, name="kill",
        )
        wait_for(killed.is_set, 60, "the kill")
        wait_for(lambda: len(site.served) >= gate_at, 60, "the pages served while the node is down")
        # Restart: a new node on the first one's data directory (same cluster name); new port, so re-target.
        second = own_node["second"] = start_node(
            name=own_node["name"] + "-restarted", die_with_parent=True,
            settings={"path.data": str(first.data_dir), "cluster.name": f"neardup-{own_node['name']}"},
        )
        client = Elasticsearch(second.url)
        try:
            client.cluster.health(index=index, wait_for_status="yellow", timeout="60s")
        finally:
            client.close()
        proxy.set(target=("127.0.0.1", second.http_port))
        resume.set()
        thread.join(170)
        assert not thread.is_alive(), "crawl did not finish"
    finally:
        resume.set()
        site.stop()
        proxy.close()
    assert "error" not in box, box.get("error")
    result: CrawlResult = box["result"]
    assert result.returncode == 0, result.log[-3000:]
    assert result.data["item_errors"] == []
    outcome = account(result, site)
    served_after = {site.url + path for path in site.served[gate_at:]}
    print(
        f"\nES kill: {len(pages)} pages, kept {len(outcome['kept'])}, dropped {len(outcome['dropped'])}, "
        f"unchecked {len(outcome['unchecked'])}, lost {len(outcome['lost'])}, "
        f"backend_errors {result.stat('neardup/backend_errors')}, retries {result.stat('neardup/backend_retries')}, "
        f"{time.monotonic() - started:.1f}s"
    )
    assert outcome["lost"] == set()
    assert outcome["bad_drops"] == {}
    # The stall: requests timed out (NEARDUP_ES_TIMEOUT=0.5), were retried, the item passed through unchecked.
    assert proxy.stalled >= 4
    assert "timed out" in result.log
    # The kill landed mid-crawl: some items could not be checked, and say so.
    assert outcome["unchecked"], "no item met the dead node"
    assert result.stat("neardup/unchecked") == result.stat("neardup/backend_errors") == len(outcome["unchecked"])
    assert result.stat("neardup/backend_retries") > 0
    # Reconnection: every page served after the restart was checked again (kept or dropped).
    assert served_after and not served_after & outcome["unchecked"]
    assert served_after & set(outcome["dropped"]), "no near-duplicate was caught after the restart"


def test_unreachable_at_start_is_a_clear_error(crawl_dir: Path) -> None:
    """Chosen behaviour: the crawl stops before fetching any page, with an error naming the URL and the setting
    (no silent fallback: a crawl that checks nothing would look like one that found no duplicates)."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    site = HookSite(group_pages(), delay=0, hook=lambda n: None)
    url = f"http://127.0.0.1:{port}"
    try:
        result = run_crawl_process(
            crawl_dir, settings=es_settings(url, "neardup-rel-unreachable", NEARDUP_ES_TIMEOUT=2),
            spider={"start_url": site.url + "/"}, name="unreachable",
        )
    finally:
        site.stop()
    assert result.returncode == 1
    error = result.data["crawl_error"]
    assert error is not None and error["type"] == "EsError", error
    assert url in error["message"] and "NEARDUP_ES_URL" in error["message"], error
    assert site.served == []
