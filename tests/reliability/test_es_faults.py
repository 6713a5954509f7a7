"""Issue 6, item 1: Elasticsearch faults during a real crawl (NEARDUP_BACKEND="elasticsearch", subprocess).

The crawler reaches Elasticsearch through :class:`FaultProxy`, a forwarder on a fixed port, so a test can cut,
stall or re-target the connection while the crawl runs without changing NEARDUP_ES_URL; in HTTP mode it also
answers chosen requests with HTTP 429 (``es_rejected_execution_exception``), rejects chosen items inside a
``_bulk`` request with per-item 429s, delays every answer, or holds one request forever (:class:`Fault`):

* ``test_node_killed_mid_crawl_and_restarted``: a node of our own (not the session one) is SIGKILLed after
  some pages, and a new node is started on the *same data directory* (``path.data`` of the first; node.py
  always picks fresh ports, so the proxy re-targets). Pages served while the node is down pass through marked
  ``{"unchecked": true}``; pages after the restart are checked again against the index kept before the kill.
  The crawl then ends with close reason ``neardup_unchecked`` and exit status 1 (NEARDUP_MAX_UNCHECKED = 0, the
  default), its summary saying how many pages went unchecked and how many were written to the index.
  Before the kill, the same crawl meets a *stalled* node: the proxy accepts and never answers until one check
  has timed out on every attempt (NEARDUP_ES_TIMEOUT=0.5, 1 + 5 retries with backoff); it passes unchecked.
  Afterwards every unchecked page is in the index (status ``unchecked``) and a groups pass groups it with its
  near-duplicates.
* ``test_unreachable_at_start_is_a_clear_error``: nothing listens: the crawl stops before fetching a page,
  with an error naming the URL and NEARDUP_ES_URL.
* ``test_429_bursts_during_a_crawl``: bursts of HTTP 429 on any request, on the pending writes, ``_refresh`` and
  ``_search``: absorbed by the retries, except one burst longer than them (its page passes unchecked and is
  written to the index later, after a per-item 429 on that write).
* ``test_a_node_lost_mid_search_is_retried``: HTTP 500 "all shards failed" on ``_search``, for a node gone away
  (retried, absorbed) and for a fault of the node's own (final: its page passes unchecked).
* ``test_429_while_bulk_indexing``: ``index_records`` meeting whole-request and per-item 429s.
* ``test_slow_answers_below_the_timeout``: every answer 0.3 s late: nothing fails, every page is checked.
* ``test_crawler_killed_mid_check_then_recrawled``: a crawler SIGKILLed while its pending write or its decision
  is held by the proxy, then a second crawl of the site with the same index.
* ``test_unchecked_pages_are_written_when_the_node_answers_again``: the backend alone: the cap on remembered
  unchecked pages, their writing after the next successful check, and the warning when some cannot be written.
* ``test_an_index_another_crawler_just_created_is_waited_for``: the backend alone: a node that has not applied
  the index another crawler just created answers the mapping update 404; the crawler starts all the same.

Every test counts every page: kept, dropped naming a kept page, or passed through unchecked; lost must be 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import neardup_testkit
import pytest
from neardup_testkit import CrawlResult, article_words, edit_words, html_page, run_crawl_process
from reliability_kit import Ledger

from scrapy_neardup.core.params import SketchParams

pytestmark = pytest.mark.es

GROUPS = 20
PER_GROUP = 3


#: Substrings of a write request's body: a page written ``pending`` (a ``_create``, or a ``_bulk`` of pending
#: writes), a ``kept`` decision (a ``_doc`` PUT, or a ``_bulk`` of decisions), a page written ``unchecked``.
PENDING_WRITE = '"status":"pending"'
KEPT_DECISION = '"status":"kept"'
UNCHECKED_WRITE = '"status":"unchecked"'


# -- a proxy that can forward, refuse or stall connections, and reject, delay or stall HTTP requests --------------

#: The body of Elasticsearch's answer when its thread pools' queues are full (HTTP 429).
REJECTED = {
    "type": "es_rejected_execution_exception",
    "reason": "rejected execution of coordinating operation [coordinating_and_primary_bytes=0, "
              "replica_bytes=0, all_bytes=0, coordinating_operation_bytes=1, max_coordinating_and_primary_bytes=1]",
}


@dataclass
class Message:
    """One HTTP/1.1 request or response: start line, headers, body (de-chunked)."""

    start: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str:
        return next((v for k, v in self.headers if k.lower() == name), "")

    @property
    def method(self) -> str:
        return self.start.split(" ", 1)[0]

    @property
    def target(self) -> str:
        return self.start.split(" ", 2)[1]

    def encode(self, *, keep_length: bool = False) -> bytes:
        """Bytes on the wire: ``Content-Length`` framing (``keep_length``: headers as they are, for HEAD)."""
        headers = self.headers if keep_length else [
            (k, v) for k, v in self.headers if k.lower() not in ("content-length", "transfer-encoding")
        ] + [("Content-Length", str(len(self.body)))]
        head = self.start + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
        return head.encode("latin-1") + (b"" if keep_length else self.body)


def read_message(stream: Any, *, request_method: str | None = None) -> Message | None:
    """The next message on ``stream`` (a socket's binary file), None at a clean end of stream.

    ``request_method``: read a response to that request (no body for HEAD, 204, 304)."""
    start = stream.readline(65536)
    if not start:
        return None
    headers = []
    while (line := stream.readline(65536)) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers.append((name.strip(), value.strip()))
    message = Message(start.decode("latin-1").rstrip("\r\n"), headers, b"")
    if request_method == "HEAD" or (request_method and message.start.split(" ")[1] in ("204", "304")):
        return message
    if "chunked" in message.header("transfer-encoding").lower():
        chunks = []
        while size := int(stream.readline(65536).split(b";")[0], 16):
            chunks.append(stream.read(size))
            stream.readline(65536)
        while stream.readline(65536) not in (b"\r\n", b"\n", b""):  # trailers
            pass
        message.body = b"".join(chunks)
    elif length := message.header("content-length"):
        message.body = stream.read(int(length))
    elif request_method is not None:
        message.body = stream.read()
    return message


#: The root cause of a search whose shard copies were all on a node that just died (Elasticsearch and OpenSearch
#: answer "all shards failed", HTTP 500, until the replicas are promoted).
NODE_DISCONNECTED = {
    "type": "node_disconnected_exception",
    "reason": "[node-1][127.0.0.1:9301][indices:data/read/search[phase/query]] disconnected",
}
#: The root cause of an HTTP 500 that is a fault of the node's own, not of a node gone away.
NODE_BUG = {"type": "null_pointer_exception", "reason": "Cannot invoke \"Object.hashCode()\" because \"key\" is null"}


def error_response(status: int, reason: str, error: dict[str, Any], root: dict[str, Any] | None = None) -> Message:
    """An error answer: ``error`` is the root cause, and the error itself unless ``root`` wraps it."""
    body = json.dumps({"error": {"root_cause": [error], **(root or error)}, "status": status}).encode()
    headers = [("X-elastic-product", "Elasticsearch"), ("content-type", "application/json")]
    return Message(f"HTTP/1.1 {status} {reason}", headers, body)


def _hang_up(conn: socket.socket) -> None:
    """Close a connection now, as a dying node does. ``shutdown`` first: ``close`` alone leaves the connection
    open while a ``makefile`` file refers to it or another thread is blocked reading it, and the client would
    meet silence (a timeout) instead of a disconnect."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        conn.close()


@dataclass
class Fault:
    """What the HTTP relay does to the next ``count`` requests matching ``path`` (a substring of the request
    target), ``method`` and ``body`` (a substring of the body), all optional, from the proxy's ``start``-th
    request on and after letting ``after`` matching requests by.

    ``kind``: ``reject`` answers HTTP 429 without forwarding; ``node_lost`` answers HTTP 500 "all shards failed"
    for a node disconnected (as during a failover), ``node_bug`` the same for a fault of the node's own;
    ``not_found`` answers HTTP 404 ``index_not_found_exception`` for the index the target names, as a node that
    has not yet applied a new index does; ``stall`` never answers (the client times out, or is killed);
    ``drop_answer`` forwards the request, then hangs up instead of answering (the write is done, the client does
    not know); ``bulk_items`` forwards a ``_bulk`` request without every ``every``-th item and
    answers those items with a per-item 429, as a node whose write queue is full does."""

    kind: str
    count: int
    path: str = ""
    method: str = ""
    body: str = ""
    every: int = 3
    start: int = 0
    after: int = 0

    def ready(self, request: Message, number: int) -> bool:
        """Whether it would act on the proxy's ``number``-th request (counting it if it is one to let by)."""
        if self.count <= 0 or number < self.start or self.path not in request.target:
            return False
        if (self.method and request.method != self.method) or self.body.encode() not in request.body:
            return False
        if self.after > 0:
            self.after -= 1
            return False
        return True


class FaultProxy:
    """Listens on 127.0.0.1 (fixed port for its life) and forwards to ``target``; ``mode`` is ``forward``,
    ``refuse`` (accept and reset) or ``stall`` (answer nothing, as a hung node does: new connections are accepted
    and held, and so is whatever a live connection carries from then on). Changing the mode or the target cuts
    the live connections, as a dying node does; entering ``stall`` does not, so that a request already in flight
    or sent on a pooled connection meets the stall like any other (``stalled`` then counts every attempt that
    met it, one per connection, whichever connection it took).

    With ``http=True`` forwarding understands HTTP/1.1 (keep-alive, Content-Length or chunked bodies), so that
    :meth:`add` can inject a :class:`Fault` into chosen requests and ``delay`` holds every response that long.
    ``requests`` counts the requests seen, ``injected`` the faults injected by kind (``bulk_items`` counts
    items), ``held`` the requests held by a ``stall`` fault."""

    def __init__(self, target: tuple[str, int], *, http: bool = False) -> None:
        self.target = target
        self.mode = "forward"
        self.http = http
        self.delay = 0.0
        self.faults: list[Fault] = []
        self.requests = 0
        self.injected: dict[str, int] = {}
        self.held: list[Message] = []
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self._live: set[socket.socket] = set()
        self._guard = threading.Lock()
        self._closed = False
        self._cuts = 0  # cuts so far: a connection set up across a cut is hung up too (see _track)
        #: called once, with the first connection refused (``refuse`` mode): when the client first met the outage
        self.on_first_refusal: Callable[[], None] | None = None
        self.stalled = 0  # connections that met the stall: accepted in stall mode, or live ones held by it
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def set(self, mode: str | None = None, target: tuple[str, int] | None = None) -> None:
        with self._guard:  # the mode and the cut change together, as _accept reads them
            if mode is not None:
                self.mode = mode
            if target is not None:
                self.target = target
            live = self._cut_live() if mode != "stall" or target is not None else set()
        for conn in live:
            _hang_up(conn)

    def add(self, fault: Fault) -> Fault:
        """Inject ``fault`` into the next matching requests (HTTP mode)."""
        with self._guard:
            self.faults.append(fault)
        return fault

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        self._cut()

    def _cut(self) -> None:
        with self._guard:
            live = self._cut_live()
        for conn in live:
            _hang_up(conn)

    def _cut_live(self) -> set[socket.socket]:
        """The live connections, forgotten (under the guard): the caller hangs them up."""
        live, self._live = self._live, set()
        self._cuts += 1
        return live

    def _track(self, conn: socket.socket, cuts: int | None = None) -> bool:
        """Count ``conn`` among the live connections, unless a cut came since ``cuts`` was read (then hang it
        up: the cut was meant for it too; ``None``: track it whatever came). Without this a connection accepted
        just before a cut, or whose upstream was still connecting, would survive the cut and carry the client's
        requests to the node."""
        with self._guard:
            if cuts is None or self._cuts == cuts:
                self._live.add(conn)
                return True
        _hang_up(conn)
        return False

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            with self._guard:
                mode, cuts = self.mode, self._cuts
            if mode == "refuse":
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                client.close()
                first, self.on_first_refusal = self.on_first_refusal, None
                if first is not None:
                    first()
            elif mode == "stall":
                self.stalled += 1
                self._track(client, cuts)
            elif not self._track(client, cuts):  # before the relay starts, so that a cut from now on reaches it
                continue
            elif self.http:
                threading.Thread(target=self._relay_http, args=(client,), daemon=True).start()
            else:
                threading.Thread(target=self._forward, args=(client, cuts), daemon=True).start()

    def _forward(self, client: socket.socket, cuts: int) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _hang_up(client)
            return
        upstream.settimeout(None)
        if not self._track(upstream, cuts):  # cut while connecting: the client was hung up by the cut
            return
        held = [False]  # whether this connection has met a stall (it is counted once)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    if self.mode == "stall":
                        with self._guard:
                            self.stalled += not held[0]
                            held[0] = True
                        return  # never forwarded: the client times out, or the stall's end cuts both sockets
                    dst.sendall(data)
            except OSError:
                pass
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)

    # -- HTTP mode ---------------------------------------------------------------------------------------------

    def _fault_for(self, request: Message) -> Fault | None:
        with self._guard:
            self.requests += 1
            ready = [f for f in self.faults if f.ready(request, self.requests)]
            fault = ready[0] if ready else None  # the first acts; the others wait for their next request
            if fault is not None:
                fault.count -= 1
                if fault.kind == "stall":
                    self.held.append(request)
                if fault.kind != "bulk_items":
                    self.injected[fault.kind] = self.injected.get(fault.kind, 0) + 1
            return fault

    def _relay_http(self, client: socket.socket) -> None:
        upstream: list[socket.socket] = []  # opened at the first forwarded request
        streams: list[Any] = []
        held = False
        try:
            from_client = client.makefile("rb")
            while not held and (request := read_message(from_client)) is not None:
                held = not self._answer(client, request, upstream, streams)
        except (OSError, ValueError):
            pass
        finally:
            if not held:  # a held request's connection stays open until the client gives up or dies
                for conn in (client, *upstream):
                    _hang_up(conn)

    def _answer(self, client: socket.socket, request: Message, upstream: list[socket.socket],
                streams: list[Any]) -> bool:
        """Answer one request (forwarded, or a fault); False when it is held (``stall``)."""
        fault = self._fault_for(request)
        if fault is not None and fault.kind == "stall":
            return False
        if fault is not None and fault.kind == "reject":
            client.sendall(error_response(429, "Too Many Requests", REJECTED).encode())
            return True
        if fault is not None and fault.kind in ("node_lost", "node_bug"):
            cause = NODE_DISCONNECTED if fault.kind == "node_lost" else NODE_BUG
            client.sendall(error_response(500, "Internal Server Error", cause, {
                "type": "search_phase_execution_exception", "reason": "all shards failed", "phase": "query",
                "grouped": True, "failed_shards": [{"shard": 0, "index": "i", "node": "n", "reason": cause}],
            }).encode())
            return True
        if fault is not None and fault.kind == "not_found":
            index = urlsplit(request.target).path.split("/")[1]
            client.sendall(error_response(404, "Not Found", {
                "type": "index_not_found_exception", "reason": f"no such index [{index}]", "index": index,
            }).encode())
            return True
        if not upstream:
            upstream.append(socket.create_connection(self.target, timeout=30))
            self._track(upstream[0])
            streams.append(upstream[0].makefile("rb"))
        rejected: dict[int, dict[str, Any]] = {}
        if fault is not None and fault.kind == "bulk_items":
            request, rejected = self._without_items(request, fault.every)
        response = None
        if request.body or not rejected:  # a bulk whose every item is rejected is not forwarded
            response = self._exchange(upstream[0], streams[0], request)
            if response is None:
                raise ConnectionResetError("Elasticsearch closed the connection")
            if fault is not None and fault.kind == "drop_answer":
                raise ConnectionResetError("answer dropped")
        if rejected:
            response = self._with_rejected(response, rejected)
        assert response is not None
        if self.delay:
            time.sleep(self.delay)
        client.sendall(response.encode(keep_length=request.method == "HEAD"))
        return True

    @staticmethod
    def _exchange(upstream: socket.socket, stream: Any, request: Message) -> Message | None:
        upstream.sendall(request.encode())
        return read_message(stream, request_method=request.method)

    def _without_items(self, request: Message, every: int) -> tuple[Message, dict[int, dict[str, Any]]]:
        """The bulk request without every ``every``-th item, and those items' per-item 429 results by position."""
        lines = [line for line in request.body.split(b"\n") if line.strip()]
        kept: list[bytes] = []
        rejected: dict[int, dict[str, Any]] = {}
        position = i = 0
        while i < len(lines):
            ((op, meta),) = json.loads(lines[i]).items()
            size = 1 if op == "delete" else 2
            if (position + 1) % every == 0:
                rejected[position] = {op: {"_index": meta.get("_index", ""), "_id": meta.get("_id"), "status": 429,
                                           "error": REJECTED}}
            else:
                kept.extend(lines[i : i + size])
            position += 1
            i += size
        with self._guard:
            self.injected["bulk_items"] = self.injected.get("bulk_items", 0) + len(rejected)
        body = b"\n".join(kept) + b"\n" if kept else b""
        return Message(request.start, request.headers, body), rejected

    @staticmethod
    def _with_rejected(response: Message | None, rejected: dict[int, dict[str, Any]]) -> Message:
        """The bulk response with the rejected items put back in their places."""
        if response is not None and not response.start.split(" ")[1].startswith("2"):
            return response
        answered = json.loads(response.body)["items"] if response is not None else []
        items, it = [], iter(answered)
        for position in range(len(answered) + len(rejected)):
            items.append(rejected[position] if position in rejected else next(it))
        headers = response.headers if response is not None else [("X-elastic-product", "Elasticsearch"),
                                                                 ("content-type", "application/json")]
        body = json.dumps({"errors": True, "took": 1, "items": items}).encode()
        return Message("HTTP/1.1 200 OK", headers, body)


# -- a site whose near-duplicates are spread over the crawl, with a hook per page request ------------------------


def group_pages(groups: int = GROUPS, per_group: int = PER_GROUP, changes: int = 3) -> dict[str, tuple[str, int]]:
    """path -> (html, group): page ``i`` is in group ``i % groups`` (a light edit of the group's article), so
    any run of consecutive pages holds members of many groups.

    With 3 changed words of 300 two members share 103-112 of 128 positions (t = 107): most pairs, not all, are
    near-duplicates. With ``changes=1`` every pair is, by a wide margin, so each group must keep one page."""
    pages: dict[str, tuple[str, int]] = {}
    for i in range(groups * per_group):
        group = i % groups
        words = edit_words(article_words(1000 + group, 300), changes=changes, seed=i)
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
    """Classify every page: kept (checked), unchecked, dropped naming a kept page of its own group; the rest is
    lost (``bad_drops``: drops naming anything else)."""
    base = site.url
    expected = {base + path for path in site.pages}
    kept = {i["url"] for i in result.scraped if i["url"] in expected and not (i.get("neardup") or {}).get("unchecked")}
    unchecked = {i["url"] for i in result.scraped if (i.get("neardup") or {}).get("unchecked")}
    dropped = {d["item"]["url"]: d["duplicate_of"] for d in result.dropped}
    bad_drops = {url: target for url, target in dropped.items()
                 if target not in kept or group_of(site, target) != group_of(site, url)}
    lost = expected - kept - unchecked - set(dropped)
    return {"kept": kept, "unchecked": unchecked, "dropped": dropped, "bad_drops": bad_drops, "lost": lost}


def group_of(site: HookSite, url: str) -> int | None:
    page = site.pages.get(url[len(site.url):]) if url.startswith(site.url) else None
    return None if page is None else page[1]


def index_docs(client: Any, index: str) -> dict[str, dict[str, Any]]:
    """_id -> the ``neardup`` object (key, status) of every document of the backend's index, after a refresh."""
    client.indices.refresh(index=index)
    response = client.search(index=index, size=10_000, query={"match_all": {}},
                             source=["neardup.key", "neardup.status"])
    return {hit["_id"]: hit["_source"]["neardup"] for hit in response["hits"]["hits"]}


def by_status(docs: dict[str, dict[str, Any]], status: str) -> set[str]:
    """The keys (URLs) of the documents with ``status``."""
    return {doc["key"] for doc in docs.values() if doc.get("status") == status}


def target_of(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 9200


def es_settings(url: str, index: str, **extra: Any) -> dict[str, Any]:
    return {
        "NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": url, "NEARDUP_ES_INDEX": index,
        "CONCURRENT_REQUESTS": 2, "LOG_LEVEL": "INFO", **extra,
    }


@pytest.fixture
def crawl_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(neardup_testkit, "CRAWL_TIMEOUT", 170)
    return tmp_path


@pytest.fixture
def es_index(es_client: Any) -> Iterator[str]:
    """A fresh index name on the session node, deleted afterwards."""
    name = f"neardup-rel-faults-{uuid.uuid4().hex[:8]}"
    yield name
    es_client.indices.delete(index=name, ignore_unavailable=True)


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


def restart_on_data(own_node: dict[str, Any], index: str, *, die_with_parent: bool = True) -> Any:
    """Start :func:`own_node`'s successor on the first node's data directory (same cluster name; a new port) and
    wait until ``index`` is yellow there; the successor is stopped by the fixture."""
    from neardup_devnode.node import start_node

    first = own_node["first"]
    second = own_node["second"] = start_node(
        name=own_node["name"] + "-restarted", die_with_parent=die_with_parent, version=own_node["version"],
        engine=own_node["engine"],
        settings={"path.data": str(first.data_dir), "cluster.name": f"neardup-{own_node['name']}"},
    )
    client = second.client()
    try:
        client.cluster.health(index=index, wait_for_status="yellow", timeout="60s")
    finally:
        client.close()
    return second


@pytest.fixture
def own_node() -> Iterator[dict[str, Any]]:
    """A node of this test's own (it gets killed), plus room for its successor; both removed afterwards."""
    from neardup_devnode.node import start_node

    name = f"rel-kill-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    from neardup_devnode.java import default_version

    # the server the rest of the run uses
    engine = os.environ.get("NEARDUP_ENGINE") or "elasticsearch"
    version = os.environ.get("NEARDUP_ES_VERSION") or default_version(engine)
    nodes: dict[str, Any] = {"name": name, "version": version, "engine": engine,
                             "first": start_node(name=name, keep_data=True, die_with_parent=True, version=version,
                                                 engine=engine)}
    try:
        yield nodes
    finally:
        second = nodes.get("second")
        if second is not None:
            second.stop()
        nodes["first"].stop(keep_data=False)


def test_node_killed_mid_crawl_and_restarted(own_node: dict[str, Any], crawl_dir: Path, ledger: Ledger) -> None:

    first = own_node["first"]
    proxy = FaultProxy(("127.0.0.1", first.http_port))
    stall_at, kill_at, gate_at = 5, 15, 27
    stall_done, killed, resume = threading.Event(), threading.Event(), threading.Event()

    def end_stall() -> None:
        # Every attempt of one check (1 + ``retries``) meets the stalled node and times out, on a pooled connection
        # or a new one; the node answers again once the 4th held one has timed out.
        deadline = time.monotonic() + 30
        while proxy.stalled < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.7)  # > NEARDUP_ES_TIMEOUT
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
        second = restart_on_data(own_node, index)
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
    # Pages went unchecked and NEARDUP_MAX_UNCHECKED is 0 (the default): the crawl ran to its end, but it is no
    # success: close reason neardup_unchecked, exit status 1, and the summary says how many.
    assert result.returncode == 1, result.log[-3000:]
    assert result.data["finish_reason"] == "neardup_unchecked"
    assert result.data["item_errors"] == []
    outcome = account(result, site)
    checked, unchecked = result.stat("neardup/checked"), len(outcome["unchecked"])
    assert (f"{unchecked} of {checked} checked pages ({unchecked / checked:.1%}) passed through unchecked "
            f"({unchecked} written to the index afterwards, 0 not)") in result.log
    assert (f"the crawl ends with a non-zero exit status: {unchecked} of {checked} checked pages "
            f"({unchecked / checked:.1%}) passed through unchecked (NEARDUP_MAX_UNCHECKED=0)") in result.log
    served_after = {site.url + path for path in site.served[gate_at:]}
    print(
        f"\nES kill: {len(pages)} pages, kept {len(outcome['kept'])}, dropped {len(outcome['dropped'])}, "
        f"unchecked {len(outcome['unchecked'])}, lost {len(outcome['lost'])}, "
        f"backend_errors {result.stat('neardup/backend_errors')}, retries {result.stat('neardup/backend_retries')}, "
        f"{time.monotonic() - started:.1f}s"
    )
    assert outcome["lost"] == set()
    assert outcome["bad_drops"] == {}
    # The stall: requests (the host's template lookups, or checks) timed out (NEARDUP_ES_TIMEOUT=0.5) and were
    # retried (asserted below with the kill's retries).
    assert proxy.stalled >= 4
    # The kill landed mid-crawl: some items could not be checked, and say so.
    assert outcome["unchecked"], "no item met the dead node"
    assert result.stat("neardup/unchecked") == result.stat("neardup/backend_errors") == len(outcome["unchecked"])
    assert result.stat("neardup/backend_retries") > 0
    # Reconnection: every page served after the restart was checked again (kept or dropped).
    assert served_after and not served_after & outcome["unchecked"], result.log[-6000:]
    assert served_after & set(outcome["dropped"]), "no near-duplicate was caught after the restart"

    # The unchecked pages were written to the index once the node answered again; a groups pass covers them.
    assert result.stat("neardup/unchecked_indexed") == len(outcome["unchecked"])
    assert result.stat("neardup/unchecked_unindexed") == 0
    client = own_node["second"].client()
    try:
        grouping = check_unchecked_grouped(client, index, site, outcome)
    finally:
        client.close()
    print(f"groups pass: {grouping}")
    ledger.record(
        f"{len(pages)} pages ({GROUPS} groups of {PER_GROUP}); the node stalled ({proxy.stalled} connections "
        "held), then SIGKILLed mid-crawl and restarted on its data",
        lost=len(outcome["lost"]), kept=len(outcome["kept"]), dropped=len(outcome["dropped"]),
        unchecked=len(outcome["unchecked"]), unchecked_indexed=result.stat("neardup/unchecked_indexed"),
        backend_errors=result.stat("neardup/backend_errors"), retries=result.stat("neardup/backend_retries"),
        groups_found=grouping["groups"], unchecked_grouped=grouping["unchecked_grouped"],
    )


def check_unchecked_grouped(client: Any, index: str, site: HookSite, outcome: dict[str, Any]) -> dict[str, int]:
    """Every page passed through unchecked is in the index (status ``unchecked``, or the decision its lost answer
    had written) and nothing is left ``pending``; a transitive groups pass puts each unchecked page in one group
    with every document of the index it near-duplicates (shares >= t stored positions with); the default
    (representative) pass puts it in a group whose representative it near-duplicates, or makes it one; groups
    never mix site groups, a group holding a checked kept page is represented by one, and ``assign_groups``
    leaves no page unchecked.

    Returns how many groups were found and how many unchecked pages were grouped."""
    from es_integration.groups import assign_groups, find_groups
    from scrapy_neardup.core.sketch import Sketcher
    from scrapy_neardup.core.stored_signature import stored_values
    from scrapy_neardup.core.theory import min_shared_for

    sketcher, min_shared = Sketcher(), min_shared_for(0.9, 128)
    docs = index_docs(client, index)
    id_of = {doc["key"]: doc_id for doc_id, doc in docs.items()}
    assert len(id_of) == len(docs), "a page is in the index twice"
    assert outcome["unchecked"] <= set(id_of), f"unchecked pages missing: {outcome['unchecked'] - set(id_of)}"
    assert by_status(docs, "unchecked") <= outcome["unchecked"]
    assert by_status(docs, "pending") == set()
    values = {site.url + path: stored_values(sketcher.sketch(html).signature) for path, (html, _) in site.pages.items()}

    def near_duplicates(a: str, b: str) -> bool:
        return a in values and b in values and int((values[a] == values[b]).sum()) >= min_shared

    params = SketchParams.from_tag(sketcher.tag, min_shared=min_shared)
    transitive = find_groups(client, index, params, linkage="transitive")
    report = find_groups(client, index, params)
    for found_groups in (transitive, report):
        for group in found_groups.groups:
            keys = [docs[member]["key"] for member in group.members]
            assert len({group_of(site, key) for key in keys}) == 1, keys
            if any(docs[member]["status"] == "kept" for member in group.members):
                assert docs[group.representative]["status"] == "kept", keys
    group_by_id = {member: group for group in transitive.groups for member in group.members}
    leader_of = {member: group.representative for group in report.groups for member in group.members}
    leaders = {group.representative for group in report.groups}
    key_of = {doc_id: doc["key"] for doc_id, doc in docs.items()}
    grouped = 0
    for url in outcome["unchecked"]:
        twins = [id_of[key] for key in id_of if key != url and near_duplicates(url, key)]
        found = group_by_id.get(id_of[url])
        assert all(found is not None and twin in found.members for twin in twins), (url, twins, found)
        leader = leader_of.get(id_of[url], id_of[url])
        if leader != id_of[url]:
            assert near_duplicates(url, key_of[leader]), (url, leader)
        else:
            assert not any(near_duplicates(url, key_of[other]) for other in leaders - {leader}), url
        grouped += found is not None
    assign_groups(client, index, report)
    after = index_docs(client, index)
    assert by_status(after, "unchecked") == set()
    for group in report.groups:
        assert [after[m]["status"] for m in group.members].count("kept") == 1, group
    return {"groups": len(report.groups), "unchecked_grouped": grouped}


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


# -- HTTP 429 (rejected execution), slow answers, a crawler killed mid-check -------------------------------------


def crawl_through(proxy: FaultProxy, crawl_dir: Path, es_index: str, name: str) -> tuple[CrawlResult, HookSite]:
    """A crawl of the group pages through ``proxy`` (closed after it), and its site. Pages 0.1 s apart (two at a
    time): batches of one to a few pages, so the crawl makes enough rounds for each fault to meet a different one."""
    site = HookSite(group_pages(changes=1), delay=0.1, hook=lambda n: None)
    try:
        result = run_crawl_process(crawl_dir, settings=es_settings(proxy.url, es_index, NEARDUP_ES_TIMEOUT=5),
                                   spider={"start_url": site.url + "/"}, name=name)
    finally:
        site.stop()
        proxy.close()
    return result, site


def test_429_bursts_during_a_crawl(es_url: str, es_client: Any, es_index: str, crawl_dir: Path,
                                   ledger: Ledger) -> None:
    """Bursts of HTTP 429 while the crawl checks pages in batches (about 100 requests): bursts of up to
    ``retries`` (``ElasticsearchBackend.retries``) answers, on any request, on the pending writes (a ``_create``
    or a ``_bulk``), on the refresh and on the search, are absorbed by the backend's retries; a burst of one more
    makes one check fail: the pages of that batch (one or more) pass through unchecked and are written to the
    index once the node accepts requests again (the first bulk request writing them meets a per-item 429 on
    every item, so a later one writes them)."""
    from es_integration.backend import ElasticsearchBackend

    retries = ElasticsearchBackend.retries
    proxy = FaultProxy(target_of(es_url), http=True)
    faults = [proxy.add(fault) for fault in (
        Fault("reject", retries, start=8),  # whatever request comes: absorbed by the retries of one call
        Fault("reject", retries, body=PENDING_WRITE, start=16),  # a `_create` or a bulk of pending writes
        Fault("reject", retries, path="/_refresh", start=24),
        Fault("reject", 2, path="/_search", start=32),
        # One more than the retries, on a request sent alone (one per attempt): one check (a batch) fails.
        Fault("reject", retries + 1, path="/_search", start=40),
        Fault("bulk_items", 1, path="/_bulk", body=UNCHECKED_WRITE, every=1),  # the first write of its pages
    )]
    # Retries that succeed, and those of the failed check. The burst on whatever request comes may meet the
    # refresh and the sequencer's checkpoint read, sent together, and so take as few as half its retries.
    absorbed = (retries + 1) // 2 + 2 * retries + 2 + retries

    started = time.monotonic()
    result, site = crawl_through(proxy, crawl_dir, es_index, "rejected")
    # The over-long burst passes pages through unchecked: the crawl fails (NEARDUP_MAX_UNCHECKED = 0, the default).
    assert result.returncode == 1, result.log[-3000:]
    assert result.data["finish_reason"] == "neardup_unchecked"
    assert result.data["item_errors"] == []
    outcome = account(result, site)
    print(f"\nES 429: {len(site.pages)} pages, {proxy.requests} requests, injected {proxy.injected}, kept "
          f"{len(outcome['kept'])}, dropped {len(outcome['dropped'])}, unchecked {len(outcome['unchecked'])}, "
          f"lost {len(outcome['lost'])}, retries {result.stat('neardup/backend_retries')}, "
          f"{time.monotonic() - started:.1f}s")
    assert outcome["lost"] == set() and outcome["bad_drops"] == {}
    assert all(fault.count == 0 for fault in faults), "a burst was not injected"
    # One failed check: its batch passed through unchecked (every page of it), each page counted once.
    unchecked = len(outcome["unchecked"])
    assert proxy.injected == {"reject": 4 * retries + 3, "bulk_items": unchecked}
    assert result.stat("neardup/backend_retries") >= absorbed
    assert unchecked >= 1
    assert unchecked == result.stat("neardup/unchecked") == result.stat("neardup/backend_errors")
    assert result.stat("neardup/unchecked_indexed") == unchecked and result.stat("neardup/unchecked_unindexed") == 0
    docs = index_docs(es_client, es_index)
    assert by_status(docs, "kept") - {site.url + "/"} == outcome["kept"]  # (the start page is kept too)
    assert by_status(docs, "unchecked") == outcome["unchecked"]
    assert by_status(docs, "pending") == set()
    ledger.record(
        f"a crawl of {len(site.pages)} pages meeting 5 bursts of HTTP 429 ({proxy.injected['reject']} answers, one "
        f"burst longer than the retries) and per-item 429s on the first write of the unchecked pages "
        f"({proxy.requests} requests)", lost=len(outcome["lost"]),
        kept=len(outcome["kept"]), dropped=len(outcome["dropped"]), unchecked=len(outcome["unchecked"]),
        retries=result.stat("neardup/backend_retries"), unchecked_indexed=result.stat("neardup/unchecked_indexed"),
    )


def test_a_node_lost_mid_search_is_retried(es_url: str, es_index: str, crawl_dir: Path, ledger: Ledger) -> None:
    """A search answered HTTP 500 "all shards failed" because a node went away (as a search meets while a dead
    node's replicas are promoted) is retried like a 503, past the retry count within the failover wait: a burst
    of ``retries + 3`` such answers is absorbed. The same answer for a fault of the node's own (a null pointer)
    is final at once: one check fails, and its pages pass through unchecked (and are written to the index
    later)."""
    from es_integration.backend import ElasticsearchBackend

    retries = ElasticsearchBackend.retries
    proxy = FaultProxy(target_of(es_url), http=True)
    faults = [proxy.add(Fault("node_bug", 1, path="/_search", start=8)),
              proxy.add(Fault("node_lost", retries + 3, path="/_search", start=16))]
    result, site = crawl_through(proxy, crawl_dir, es_index, "node-lost")
    outcome = account(result, site)
    print(f"\nES 500s: {len(site.pages)} pages, {proxy.requests} requests, injected {proxy.injected}, kept "
          f"{len(outcome['kept'])}, dropped {len(outcome['dropped'])}, unchecked {len(outcome['unchecked'])}, "
          f"retries {result.stat('neardup/backend_retries')}")
    assert all(fault.count == 0 for fault in faults), "a burst was not injected"
    assert proxy.injected == {"node_lost": retries + 3, "node_bug": 1}
    assert outcome["lost"] == set() and outcome["bad_drops"] == {}
    # Each node-lost answer was retried, more of them in a row than the retry count (the failover wait); the
    # node's own fault was not: its check, and only it, failed.
    assert result.stat("neardup/backend_retries") >= retries + 3
    final = [line for line in result.log.splitlines() if "EsError:" in line]
    assert final and all("null_pointer_exception" in line for line in final), final
    assert len(outcome["unchecked"]) >= 1 and result.data["finish_reason"] == "neardup_unchecked"
    assert result.stat("neardup/unchecked_indexed") == len(outcome["unchecked"])
    ledger.record(f"a crawl of {len(site.pages)} pages meeting {retries + 3} HTTP 500s of a lost node in a row "
                  "(retried past the retry count, within the failover wait) and one "
                  "of a node's own fault (final)", lost=len(outcome["lost"]), kept=len(outcome["kept"]),
                  unchecked=len(outcome["unchecked"]), retries=result.stat("neardup/backend_retries"))


def test_429_while_bulk_indexing(es_url: str, es_client: Any, es_index: str, ledger: Ledger) -> None:
    """``index_records`` (what ``neardup es index`` runs) meeting whole-request 429s (the index check, a bulk,
    the final refresh) and per-item 429s inside bulk responses: every document ends up indexed, counted once."""
    from es_integration.client import ConnectionSettings, make_client
    from es_integration.indexing import index_records
    from scrapy_neardup.core.sketch import Sketcher

    records = [{"id": f"doc-{i}", "text": " ".join(edit_words(article_words(5000 + i % 40, 120), 2, seed=i))}
               for i in range(1200)]
    proxy = FaultProxy(target_of(es_url), http=True)
    faults = [
        proxy.add(Fault("reject", 1, method="HEAD")),
        proxy.add(Fault("reject", 3, path="/_bulk", body='"_id":"doc-0"')),  # chunk 1, whole request
        proxy.add(Fault("bulk_items", 1, path="/_bulk", body='"_id":"doc-600"')),  # chunk 2, a third of its items
        proxy.add(Fault("bulk_items", 2, path="/_bulk", body='"_id":"doc-1002"')),  # chunk 3, twice
        proxy.add(Fault("reject", 2, path="/_refresh")),
    ]
    client = make_client(ConnectionSettings.create(proxy.url, request_timeout=30))
    try:
        stats = index_records(client, es_index, records, Sketcher(), id_field="id", text_field="text",
                              chunk_size=500)
    finally:
        client.close()
        proxy.close()
    print(f"\nES bulk 429: {len(records)} records, {proxy.requests} requests, injected {proxy.injected}; "
          f"{stats.summary()}")
    assert all(fault.count == 0 for fault in faults), "a fault was not injected"
    # A third of chunk 2's 500 items, then a third of chunk 3 twice: how many that is depends on how small the writer
    # keeps its chunks after a rejection (es_integration.bulk), so only chunk 2's share is fixed.
    assert proxy.injected["reject"] == 6 and proxy.injected["bulk_items"] > 166
    assert (stats.indexed, stats.errors) == (len(records), 0), stats.summary()
    es_client.indices.refresh(index=es_index)
    assert es_client.count(index=es_index)["count"] == len(records)
    found = es_client.mget(index=es_index, ids=[r["id"] for r in records], source=["neardup.tag"])["docs"]
    missing = [doc["_id"] for doc in found if not doc.get("found") or "neardup" not in doc["_source"]]
    assert missing == []
    ledger.record(
        f"bulk indexing of {len(records)} records meeting {proxy.injected['reject']} whole-request 429s and "
        f"{proxy.injected['bulk_items']} per-item 429s", lost=len(records) - stats.indexed + len(missing),
        indexed=stats.indexed,
    )


def test_slow_answers_below_the_timeout(es_url: str, es_index: str, crawl_dir: Path, ledger: Ledger) -> None:
    """Every answer of Elasticsearch delayed 0.3 s (NEARDUP_ES_TIMEOUT=5): slow is not failed; every page is
    checked, nothing times out or is retried, and each group keeps exactly one page."""
    groups, per_group = 6, 3
    proxy = FaultProxy(target_of(es_url), http=True)
    proxy.delay = 0.3
    site = HookSite(group_pages(groups, per_group, changes=1), delay=0, hook=lambda n: None)
    started = time.monotonic()
    try:
        result = run_crawl_process(crawl_dir, settings=es_settings(proxy.url, es_index, NEARDUP_ES_TIMEOUT=5),
                                   spider={"start_url": site.url + "/"}, name="slow")
    finally:
        site.stop()
        proxy.close()
    assert result.returncode == 0, result.log[-3000:]
    outcome = account(result, site)
    seconds = time.monotonic() - started
    print(f"\nES slow: {len(site.pages)} pages, {proxy.requests} requests each delayed {proxy.delay}s, kept "
          f"{len(outcome['kept'])}, dropped {len(outcome['dropped'])}, unchecked {len(outcome['unchecked'])}, "
          f"lost {len(outcome['lost'])}, {seconds:.1f}s")
    assert outcome["lost"] == set() and outcome["bad_drops"] == {} and outcome["unchecked"] == set()
    for name in ("unchecked", "backend_errors", "backend_retries"):
        assert result.stat(f"neardup/{name}") == 0, name
    assert sorted(group_of(site, url) or 0 for url in outcome["kept"]) == list(range(groups))
    assert len(outcome["dropped"]) == groups * (per_group - 1)
    ledger.record(f"a crawl of {len(site.pages)} pages with every Elasticsearch answer delayed {proxy.delay}s "
                  f"({proxy.requests} requests, timeout 5s)", lost=len(outcome["lost"]), kept=len(outcome["kept"]),
                  dropped=len(outcome["dropped"]), unchecked=0, crawl_seconds=round(seconds, 1))


def written_keys(request: Message) -> set[str]:
    """The page keys a write request carries (a ``_create``/``_doc`` body, or each source line of a ``_bulk``)."""
    lines = [json.loads(line) for line in request.body.split(b"\n") if line.strip()]
    return {line["neardup"]["key"] for line in lines if "key" in line.get("neardup", {})}


@pytest.mark.parametrize("stage", ["create", "decision"])
def test_crawler_killed_mid_check_then_recrawled(es_url: str, es_client: Any, es_index: str, tmp_path: Path,
                                                 stage: str, ledger: Ledger) -> None:
    """A crawler process SIGKILLed while it checks a batch of pages: the proxy holds that check's ``pending``
    writes (``create``: a ``_create`` or a ``_bulk``; the pages are not in the index) or its decisions
    (``decision``: a ``_doc`` PUT or a ``_bulk`` holding a ``kept`` decision; the pages stay ``pending``), and
    the process is killed with the request in the air. A second crawl of the site with the same index runs to
    completion (its backend waits 3 s, not 30, for the abandoned ``pending`` pages; see ShortPendingPipeline).

    Recrawl semantics (issue 11): every page the first crawl passed on is found kept and emitted again as an
    unchanged revisit, never dropped as a duplicate of itself; the pages the killed process left ``pending``
    are decided by the recrawl (their documents overwritten), so none stays ``pending``; every drop names a page
    kept in the index, of its own group; nothing is lost and every group ends with a kept page."""
    from reliability_kit import run_crawl

    groups = 12
    # The 3rd request carrying that step's writes (pages that are the first of their group: pages to keep);
    # pages 0.1 s apart, so that the first crawl makes several batches before it.
    proxy = FaultProxy(target_of(es_url), http=True)
    fault = proxy.add(Fault("stall", 1, body=PENDING_WRITE if stage == "create" else KEPT_DECISION, after=2))
    site = HookSite(group_pages(groups, changes=1), delay=0.1, hook=lambda n: None)
    stalled_since: list[float] = []

    def mid_check() -> bool:
        if proxy.held and not stalled_since:
            stalled_since.append(time.monotonic())
        return bool(stalled_since) and time.monotonic() - stalled_since[0] > 0.5  # let items queue behind it

    pipelines = {
        "ITEM_PIPELINES": {"reliability_kit.ShortPendingPipeline": 300, "reliability_kit.WitnessPipeline": 400},
        "NEARDUP_TEST_PENDING_TIMEOUT": 3, "CONCURRENT_REQUESTS": 2,
        # Batches of 4 at most: on a loaded machine the default (100) could put every kept page of this small
        # site in two batches, and the 3rd request carrying kept pages would never come.
        "NEARDUP_ES_BATCH_SIZE": 4,
    }
    try:
        first = run_crawl(tmp_path, start_url=site.url + "/", name="killed", kill_when=mid_check, settings={
            **pipelines, "NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": proxy.url,
            "NEARDUP_ES_INDEX": es_index, "NEARDUP_ES_TIMEOUT": 30})
        served_first = len(site.served)
        before = index_docs(es_client, es_index)
        second = run_crawl(tmp_path, start_url=site.url + "/", name="recrawl", settings={
            **pipelines, "NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": es_url, "NEARDUP_ES_INDEX": es_index})
    finally:
        site.stop()
        proxy.close()
    assert fault.count == 0 and len(proxy.held) == 1
    assert first.returncode == -9, f"the first crawl was not killed: {first.returncode}\n{first.log[-3000:]}"
    assert second.returncode == 0, second.log[-3000:]
    base = site.url
    all_pages = {base + p for p in site.pages}
    in_check = written_keys(proxy.held[0])
    assert in_check and in_check <= all_pages, in_check
    after = index_docs(es_client, es_index)
    kept_before, kept_after = by_status(before, "kept"), by_status(after, "kept")
    passed_on = set(first.witnessed)
    emitted = set(second.kept_urls)
    drops = second.drops_by_url()

    # The first crawl: everything it passed on is recorded as kept; the pages in the check are not passed on,
    # and are in the index as the held step left them (absent, or `pending`).
    assert passed_on <= kept_before
    assert not in_check & passed_on
    assert by_status(before, "pending") == (in_check if stage == "decision" else set())
    if stage == "create":
        assert not in_check & {doc["key"] for doc in before.values()}
    unrecorded = served_first - len(passed_on) - len(kept_before - passed_on)  # in flight or dropped
    # The recrawl: each page kept before is emitted again as an unchanged revisit, never dropped (as itself or
    # as a copy of another page); it decides every page.
    assert {url: drops[url].get("duplicate_of") for url in passed_on if url in drops} == {}
    assert passed_on <= emitted
    assert second.stat("neardup/revisited") == len(kept_before)  # (the start page is an item too)
    assert second.stat("neardup/changed") == 0
    assert second.stat("neardup/unchecked") == second.stat("neardup/backend_errors") == 0
    assert {url: d["duplicate_of"] for url, d in drops.items() if d["duplicate_of"] == url} == {}
    assert {url: d["duplicate_of"] for url, d in drops.items() if d["duplicate_of"] not in kept_after} == {}
    assert {u: d["duplicate_of"] for u, d in drops.items() if u in all_pages
            and group_of(site, d["duplicate_of"]) != group_of(site, u)} == {}
    # The pages of the abandoned check: decided by the recrawl (kept, or dropped naming a kept page); the
    # `pending` documents the killed process left are overwritten, none stays.
    assert {url for url in in_check if url not in emitted and url not in drops} == set()
    stale = by_status(after, "pending")
    assert stale == set()
    assert in_check & emitted <= kept_after  # (a drop answered before any write leaves no document)
    # One document per key; nothing lost: each page passed on by one crawl, or dropped naming a kept page.
    keys = [doc["key"] for doc in after.values()]
    assert len(keys) == len(set(keys))
    lost = all_pages - passed_on - emitted - set(drops)
    assert lost == set()
    kept_per_group = [sum(1 for url in kept_after if group_of(site, url) == g) for g in range(groups)]
    assert 0 not in kept_per_group, kept_per_group
    print(f"\ncrawler killed mid-{stage}: {len(site.pages)} pages, first crawl passed on {len(passed_on)} of "
          f"{served_first} fetched ({unrecorded} in flight or dropped, unrecorded), {len(in_check)} page(s) in the "
          f"held check {sorted(url[len(base):] for url in in_check)}; recrawl emitted {len(emitted)} "
          f"({second.stat('neardup/revisited')} revisits), dropped {len(drops)}; kept pages per group "
          f"{kept_per_group}; pending left {len(stale)}; lost {len(lost)}; "
          f"{first.seconds:.1f}s + {second.seconds:.1f}s")
    ledger.record(
        f"a crawler SIGKILLed mid-check (its {stage} write held), then a recrawl of {len(site.pages)} pages with "
        "the same index", lost=len(lost), passed_on_before_kill=len(passed_on), fetched_before_kill=served_first,
        pages_in_held_check=len(in_check), left_pending=len(by_status(before, "pending")),
        recrawl_emitted=len(emitted), recrawl_revisited=second.stat("neardup/revisited"),
        recrawl_dropped=len(drops), groups_without_kept=kept_per_group.count(0), stale_pending=len(stale),
    )


def test_unchecked_pages_are_written_when_the_node_answers_again(
    es_url: str, es_client: Any, es_index: str, ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    """The backend on its own. Pages whose check failed are remembered up to ``max_unchecked`` and written as
    ``unchecked`` after the next successful check: one whose decision write was refused (its document left
    ``pending``: overwritten), one whose decision was written but its answers lost (left ``kept``), two refused
    at once (created). The ones over the cap, and one failing while the node is down again at close, are counted
    and named in one warning."""
    import asyncio

    from es_integration.backend import ElasticsearchBackend
    from scrapy_neardup.core.sketch import Sketcher
    from scrapy_neardup.errors import EsError

    sketcher = Sketcher()
    texts = {f"https://example.test/{i}": " ".join(article_words(7000 + i, 200)) for i in range(9)}
    sketches = {key: sketcher.sketch(text) for key, text in texts.items()}
    keys = list(texts)
    proxy = FaultProxy(target_of(es_url), http=True)

    async def fails(key: str) -> None:
        with pytest.raises(EsError):
            await backend.check_and_add(key, sketches[key])

    params = SketchParams.from_tag(sketcher.tag, min_shared=107)
    backend = ElasticsearchBackend(url=proxy.url, index=es_index, params=params, request_timeout=5)
    backend.max_unchecked, backend.backoff = 4, 0.01

    async def scenario() -> None:
        await backend.open()
        assert await backend.check_and_add(keys[0], sketches[keys[0]]) is None
        proxy.add(Fault("reject", ElasticsearchBackend.retries + 1, path="/_doc/", method="PUT"))  # keys[1]'s decision
        await fails(keys[1])
        # keys[2]'s decision lands, unanswered (aiohttp itself retries an idempotent request once on a reused
        # connection, so the fault lasts until the check has failed).
        dropping = proxy.add(Fault("drop_answer", 100, path="/_doc/", method="PUT"))
        await fails(keys[2])
        dropping.count = 0
        proxy.set(mode="refuse")
        for key in keys[3:7]:  # two more remembered, two over the cap
            await fails(key)
        proxy.set(mode="forward")
        assert await backend.check_and_add(keys[7], sketches[keys[7]]) is None  # ... then the four are written
        assert backend.unchecked_indexed == 4
        proxy.set(mode="refuse")
        await fails(keys[8])
        await backend.close()  # the node is down: the last one cannot be written

    try:
        with caplog.at_level("WARNING", logger="es_integration.backend"):
            asyncio.run(scenario())
    finally:
        proxy.close()
    assert proxy.injected["reject"] == ElasticsearchBackend.retries + 1 and proxy.injected["drop_answer"] >= 4
    assert backend.close_stats == {"unchecked_indexed": 4, "unchecked_unindexed": 3, "unchecked_overflow": 2}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("over 4 pages could not be checked" in m for m in warnings), warnings
    assert any(m.startswith(f"3 page(s) passed through unchecked could not be written to {es_index}") and
               "2 over the limit of 4 remembered" in m for m in warnings), warnings
    docs = index_docs(es_client, es_index)
    assert sorted(doc["key"] for doc in docs.values()) == sorted([keys[0], *keys[1:5], keys[7]])  # each once
    assert by_status(docs, "unchecked") == {keys[1], keys[3], keys[4]}
    assert by_status(docs, "kept") == {keys[0], keys[2], keys[7]}
    ledger.record("9 checks, 7 failing (decision refused, decision unanswered, connections reset), 4 remembered "
                  "at most", lost=0, notes="pages over the cap or failing at a dead close are counted and named in a "
                  "warning", **backend.close_stats)


@pytest.mark.parametrize("stage", ["pending", "decisions"])
def test_node_killed_mid_batch_bulk_write(own_node: dict[str, Any], stage: str, ledger: Ledger) -> None:
    """Issue 13: a batch of 24 pages (12 new, 12 near-duplicates of them) whose bulk write (the ``pending``
    writes, or the decisions) is applied in part (every second item refused with a per-item 429), and the node
    SIGKILLed before the retry. The call fails: every page passes through unchecked. A node restarted on the
    same data answers again: the next check writes each of them (status ``unchecked``, the ``pending`` ones it
    left overwritten), nothing stays pending, nothing is lost; a recrawl of the batch then decides every page."""
    import asyncio

    from es_integration.backend import ElasticsearchBackend, doc_id_of
    from scrapy_neardup.core.sketch import Sketcher
    from scrapy_neardup.errors import EsError

    sketcher = Sketcher()
    bases = [article_words(9100 + g, 200) for g in range(12)]
    texts = {f"https://example.test/{stage}/{g}": " ".join(words) for g, words in enumerate(bases)}
    texts |= {f"https://example.test/{stage}/{g}-copy": " ".join(edit_words(words, 1, seed=g))
              for g, words in enumerate(bases)}
    batch = [(key, sketcher.sketch(text)) for key, text in texts.items()]
    first = own_node["first"]
    proxy = FaultProxy(("127.0.0.1", first.http_port), http=True)
    index = f"neardup-rel-bulk-{uuid.uuid4().hex[:8]}"
    # The stage's bulk is the first (pending writes) or the second (decisions) bulk of the batch.
    fault = Fault("bulk_items", 1, path="/_bulk", every=2, after=0 if stage == "pending" else 1)
    params = SketchParams.from_tag(sketcher.tag, min_shared=107)
    backend = ElasticsearchBackend(url=proxy.url, index=index, params=params, request_timeout=5)
    backend.backoff = 0.5  # the kill lands before the first retry
    killed = threading.Event()

    def kill_when_partly_applied() -> None:
        while not proxy.injected.get("bulk_items"):
            time.sleep(0.005)
        os.killpg(first.pid, signal.SIGKILL)
        proxy.set(mode="refuse")
        killed.set()

    async def crawl_batch() -> None:
        await backend.open()
        proxy.add(fault)
        threading.Thread(target=kill_when_partly_applied, daemon=True).start()
        with pytest.raises(EsError):
            await backend.check_and_add_many(batch)
        assert killed.is_set()

    async def after_restart() -> list[Any]:
        # The next successful check writes the remembered pages; then the batch is checked again.
        await backend.check_and_add_many([("https://example.test/other", sketcher.sketch(" ".join(
            article_words(9999, 200))))])
        assert backend.unchecked_indexed == len(batch)
        return await backend.check_and_add_many(batch)

    def restart() -> Any:
        # Started from a worker thread: die_with_parent would tie the node to that thread's life (the fixture
        # stops it).
        second = restart_on_data(own_node, index, die_with_parent=False)
        client = second.client()
        proxy.set(mode="forward", target=("127.0.0.1", second.http_port))
        return client

    async def scenario() -> tuple[Any, list[Any]]:  # one event loop: the backend's client lives in it
        await crawl_batch()
        client = await asyncio.to_thread(restart)
        decisions = await after_restart()
        await backend.close()
        return client, decisions

    try:
        client, decisions = asyncio.run(scenario())
        applied = proxy.injected["bulk_items"]
        docs = index_docs(client, index)
        client.close()
    finally:
        proxy.close()
    # Nothing lost: each page of the failed batch is in the index once, none left pending.
    keys = [key for key, _ in batch]
    assert {doc_id_of(key) for key in keys} <= set(docs)
    assert by_status(docs, "pending") == set()
    assert backend.close_stats == {"unchecked_indexed": len(batch), "unchecked_unindexed": 0}
    # The recrawl decides every page: unchecked documents are not candidates, so the first of each group is kept
    # and its copy names it.
    kept = {key for key, d in zip(keys, decisions, strict=True) if d.outcome in ("kept", "revisit")}
    assert all(d.match is None or d.match.key in kept for d in decisions)
    assert len(kept) == 12 and all(not key.endswith("-copy") for key in kept)
    print(f"\nnode killed mid-{stage} bulk: {len(batch)} pages, {applied} items refused, the rest applied; "
          f"unchecked written {backend.unchecked_indexed}; recrawl kept {len(kept)}")
    ledger.record(f"a batch of {len(batch)} pages whose {stage} bulk write was applied in part when the node was "
                  "SIGKILLed, then a node restarted on the same data", lost=0,
                  unchecked_indexed=backend.unchecked_indexed, recrawl_kept=len(kept))


# -- NEARDUP_ON_BACKEND_DOWN: pause until the node is back, or stop --------------------------------------------------

#: Spidermon with the near-duplicate suite (its report is read from the crawl's log).
SPIDERMON = {
    "SPIDERMON_ENABLED": True,
    "EXTENSIONS": {"spidermon.contrib.scrapy.extensions.Spidermon": 500},
    "SPIDERMON_SPIDER_CLOSE_MONITORS": ["scrapy_neardup.crawl.monitors.NearDupMonitorSuite"],
}


def spidermon_results(log: str) -> dict[str, str]:
    """Monitor name -> OK / FAIL / ..., from Spidermon's report in a crawl's log."""
    import re

    return dict(re.findall(r"\[Spidermon\] (Near-duplicate [^.]+)\.\.\. (\w+)", log))


def test_node_killed_mid_crawl_pause_waits_for_the_restart(own_node: dict[str, Any], crawl_dir: Path,
                                                           ledger: Ledger) -> None:
    """NEARDUP_ON_BACKEND_DOWN='pause': the node is SIGKILLed after 10 pages; the crawl pauses (once the requests
    in flight are answered, no page is fetched while the node is down) and tries the node every second; a node
    restarted on
    the same data answers, the crawl resumes and finishes with status 0: every page decided (kept, or dropped
    naming a kept page of its group), none unchecked, no document left ``unchecked`` or ``pending`` in the index."""

    first = own_node["first"]
    proxy = FaultProxy(("127.0.0.1", first.http_port))
    kill_at = 10
    killed = threading.Event()

    def hook(n: int) -> None:
        if n == kill_at:
            os.killpg(first.pid, signal.SIGKILL)
            killed.set()
        elif n > kill_at:
            time.sleep(0.5)  # pages come slower than they are checked: the crawl is not paused by chance

    def served_settles(quiet: float = 5.0) -> int:
        """Wait until no page has been served for ``quiet`` seconds (the crawl paused); the pages served."""
        count, since = len(site.served), time.monotonic()
        deadline = since + 90
        while time.monotonic() - since < quiet:
            assert time.monotonic() < deadline, "the crawl did not pause: pages kept being fetched"
            time.sleep(0.1)
            if len(site.served) != count:
                count, since = len(site.served), time.monotonic()
        return count

    pages = group_pages()
    site = HookSite(pages, delay=0.05, hook=hook)
    index = f"neardup-rel-pause-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    try:
        thread, box = run_in_thread(
            crawl_dir, settings=es_settings(proxy.url, index, NEARDUP_ON_BACKEND_DOWN="pause",
                                            NEARDUP_BACKEND_RETRY_INTERVAL=1, NEARDUP_BACKEND_DOWN_MAX_WAIT=300,
                                            **SPIDERMON),
            spider={"start_url": site.url + "/"}, name="pause",
        )
        wait_for(killed.is_set, 60, "the kill")
        paused_at = served_settles()
        restart_began = time.monotonic()
        second = restart_on_data(own_node, index)
        served_while_restarting = len(site.served) - paused_at
        restart_took = time.monotonic() - restart_began
        proxy.set(target=("127.0.0.1", second.http_port))
        thread.join(170)
        assert not thread.is_alive(), "crawl did not finish"
    finally:
        site.stop()
        proxy.close()
    assert "error" not in box, box.get("error")
    result: CrawlResult = box["result"]
    assert result.returncode == 0, result.log[-3000:]
    assert result.data["finish_reason"] == "finished"
    assert result.data["item_errors"] == []
    outcome = account(result, site)
    print(f"\nES kill, pause: {len(pages)} pages, kept {len(outcome['kept'])}, dropped {len(outcome['dropped'])}, "
          f"unchecked {len(outcome['unchecked'])}, lost {len(outcome['lost'])}, paused after {paused_at} pages "
          f"served, {served_while_restarting} served during the restart ({restart_took:.0f} s), backend_errors "
          f"{result.stat('neardup/backend_errors')}, paused "
          f"{result.stat('neardup/backend_paused_seconds')} s, {time.monotonic() - started:.1f}s")
    assert outcome["lost"] == set() and outcome["bad_drops"] == {}
    assert outcome["unchecked"] == set() and result.stat("neardup/unchecked") == 0
    assert len(outcome["kept"]) + len(outcome["dropped"]) == len(pages)
    assert result.stat("neardup/backend_errors") >= 1 and result.stat("neardup/backend_pauses") == 1
    # The crawl paused: once the requests in flight were answered, no page was fetched while the node was down
    # (the restart takes tens of seconds).
    assert served_while_restarting == 0, served_while_restarting
    assert result.stat("neardup/backend_paused_seconds") >= restart_took
    assert "pausing the crawl" in result.log and "answers again after" in result.log
    # Spidermon: the backend failed (the monitor says so), yet nothing went unchecked.
    assert spidermon_results(result.log) == {
        "Near-duplicate backend/Backend errors at most NEARDUP_MONITOR_MAX_BACKEND_ERRORS": "FAIL",
        "Near-duplicate backend/Crawl not stopped by a backend outage": "OK",
        "Near-duplicate unchecked pages/Unchecked share at most NEARDUP_MONITOR_MAX_UNCHECKED": "OK",
        "Near-duplicate drop rate/Drop rate at most NEARDUP_MONITOR_MAX_DROP_RATE": "OK",
    }, result.log[-5000:]
    # The index: every page decided once; the pages tried during the outage were forgotten as unchecked.
    client = own_node["second"].client()
    try:
        docs = index_docs(client, index)
    finally:
        client.close()
    assert by_status(docs, "unchecked") == set() and by_status(docs, "pending") == set()
    assert by_status(docs, "kept") - {site.url + "/"} == outcome["kept"]  # (the start page is an item too)
    assert result.stat("neardup/unchecked_indexed") == result.stat("neardup/unchecked_unindexed") == 0
    ledger.record(
        f"{len(pages)} pages; NEARDUP_ON_BACKEND_DOWN='pause'; the node SIGKILLed after {kill_at} pages and "
        "restarted on its data", lost=len(outcome["lost"]), kept=len(outcome["kept"]),
        dropped=len(outcome["dropped"]), unchecked=len(outcome["unchecked"]), paused_after_pages=paused_at,
        served_while_restarting=served_while_restarting,
        paused_seconds=result.stat("neardup/backend_paused_seconds"),
        backend_errors=result.stat("neardup/backend_errors"),
    )


def test_node_unreachable_mid_crawl_stop_closes_the_spider(es_url: str, es_index: str, crawl_dir: Path,
                                                          ledger: Ledger) -> None:
    """NEARDUP_ON_BACKEND_DOWN='stop': the node becomes unreachable (the proxy resets every connection) after 10
    pages; the spider closes with reason ``neardup_backend_down`` and exit status 1, the items in flight pass
    through unchecked, the rest of the site is not fetched, and Spidermon's suite reports the outage."""
    proxy = FaultProxy(target_of(es_url))
    down_at = 10

    def hook(n: int) -> None:
        if n == down_at:
            proxy.set(mode="refuse")
        elif n > down_at:
            time.sleep(1)  # pages come slower than they are checked: the crawl is not stopped late by chance

    pages = group_pages()
    site = HookSite(pages, delay=0.05, hook=hook)
    met: dict[str, int] = {}  # pages served when the crawl first met the outage (its first refused connection)
    proxy.on_first_refusal = lambda: met.setdefault("served", len(site.served))
    try:
        result = run_crawl_process(crawl_dir, settings=es_settings(
            proxy.url, es_index, NEARDUP_ON_BACKEND_DOWN="stop", **SPIDERMON,
        ), spider={"start_url": site.url + "/"}, name="stop")
    finally:
        site.stop()
        proxy.close()
    assert result.returncode == 1, result.log[-3000:]
    assert result.data["finish_reason"] == "neardup_backend_down"
    outcome = account(result, site)
    assert outcome["bad_drops"] == {}
    unchecked = result.stat("neardup/unchecked")
    # The pages in the pipeline when the check failed, and the requests in flight then, pass through unchecked.
    assert 1 <= unchecked == len(outcome["unchecked"]) <= len(site.served) + 1  # (+ the start page)
    # The crawl stopped: once it met the outage, pages come 2 at a time, 1 s each, while the backend retries
    # (3.1 s) and the spider closes; a crawl that went on would fetch all 60. Counted from the first refused
    # connection, not from the cut: the first check after the cut waits for the sketch worker to start, which
    # takes seconds more on a loaded machine (38 pages served in one CI run, 16 on a quiet one).
    assert "served" in met, result.log[-3000:]
    assert len(site.served) - met["served"] <= 12 and len(site.served) < len(pages), (
        met, site.served, result.log[-8000:])
    assert "stopping the crawl (close reason neardup_backend_down)" in result.log
    results = spidermon_results(result.log)
    assert results["Near-duplicate backend/Crawl not stopped by a backend outage"] == "FAIL", result.log[-5000:]
    assert results["Near-duplicate unchecked pages/Unchecked share at most NEARDUP_MONITOR_MAX_UNCHECKED"] == "FAIL"
    lost = outcome["lost"] & {site.url + path for path in site.served}  # (pages never fetched are not lost)
    assert lost == set()
    ledger.record(f"{len(pages)} pages; NEARDUP_ON_BACKEND_DOWN='stop'; the node unreachable after {down_at} pages",
                  lost=len(lost), served=len(site.served), served_when_met=met["served"], unchecked=unchecked)


def test_an_index_another_crawler_just_created_is_waited_for(es_url: str, es_index: str) -> None:
    """The crawler that loses the race to create the index updates its mapping next; the node it reaches may not
    have applied the new index yet and answers 404 ``index_not_found_exception`` for a few ms (seen on a 3-node
    cluster, where a crawler of four then failed to start). The crawler waits for the index instead."""
    import asyncio

    from es_integration.backend import ElasticsearchBackend
    from scrapy_neardup.core.sketch import Sketcher

    sketcher = Sketcher()
    params = SketchParams.from_tag(sketcher.tag, min_shared=107)
    first = ElasticsearchBackend(url=es_url, index=es_index, params=params, request_timeout=5)
    proxy = FaultProxy(target_of(es_url), http=True)
    second = ElasticsearchBackend(url=proxy.url, index=es_index, params=params, request_timeout=5)
    not_applied = proxy.add(Fault("not_found", 2, path="/_mapping", method="PUT"))

    async def scenario() -> None:
        await first.open()  # the winner of the race
        try:
            await second.open()
            page = " ".join(article_words(4200, 200))
            assert await second.check_and_add("https://example.test/a", sketcher.sketch(page)) is None
        finally:
            await second.close()
            await first.close()

    try:
        asyncio.run(scenario())
    finally:
        proxy.close()
    assert proxy.injected == {"not_found": 2} and not_applied.count == 0
