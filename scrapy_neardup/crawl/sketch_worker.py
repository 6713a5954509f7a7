"""Sketching in a child process, so that a crawl's reactor thread does not spend its time on it.

Design notes: docs/architecture.md#scrapy_neardupcrawlsketch_worker
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import signal
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from twisted.internet import process
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.protocol import ProcessProtocol

from ..core.host_template import HostTemplate
from ..core.sketch import SKETCHED, Content, Sketch, Sketcher
from ..core.text import looks_binary
from ..errors import BinaryContent, SketchWorkerError

try:  # POSIX only; elsewhere the pipes keep their size.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

_REQUEST = struct.Struct("<IBIIQ")
_ANSWER = struct.Struct("<IBQQBBIIII")
#: Templates both sides of the pipe keep (least recently used first out).
TEMPLATE_CACHE = 1024
_STR, _BYTES = 0, 1
_OK, _ERROR, _BINARY = 0, 1, 2
# Sketch.sketched travels as a byte (0: not known).
_SKETCHED_CODE = {name: code for code, name in enumerate(SKETCHED, start=1)}
_SKETCHED_BY_CODE = {code: name for name, code in _SKETCHED_CODE.items()}
# The block count of an answer whose sketch carries no block hashes (modes other than "auto").
_NO_BLOCKS = 0xFFFFFFFF
# The child reads stdin in chunks of this size; whatever complete requests a chunk holds form one batch.
_READ_SIZE = 1 << 20
# Bytes each pipe between the processes holds (Linux's default is 64 KiB; unprivileged processes may ask for up to
# /proc/sys/fs/pipe-max-size, 1 MiB by default). The reactor moves at most a pipe's worth of requests per turn, and
# a CPU-bound crawl turns its loop every few tens of milliseconds: with 64 KiB pipes, pages of 100 KB waited
# 1.4 s on average in the parent's buffer while the child sat idle.
_PIPE_SIZE = 1 << 20
# Seconds the parent waits for the child to exit after closing its stdin, before killing it.
_EXIT_GRACE = 5.0


def sketcher_parameters(sketcher: Sketcher) -> dict[str, Any]:
    """The constructor arguments that rebuild ``sketcher`` in the child."""
    return {
        "num_perm": sketcher.num_perm,
        "shingle": sketcher.shingle,
        "shingle_size": sketcher.shingle_size,
        "seed": sketcher.seed,
        "max_chars": sketcher.max_chars,
        "content": sketcher.content,
    }


# -- frames ----------------------------------------------------------------------------------------------------


class TemplateCache:
    """The host templates one side of the pipe holds, by number, least recently used first out.

    Both sides apply the same :meth:`use` and :meth:`put` calls in the same order (the parent as it writes each
    request, the child as it reads it), so their caches stay equal without a word about them on the pipe.
    """

    def __init__(self, size: int = TEMPLATE_CACHE) -> None:
        self._size = size
        self._items: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()

    def use(self, number: int) -> np.ndarray | None:
        """The template's hashes (now the most recently used), or ``None`` when not held."""
        hashes = self._items.get(number)
        if hashes is not None:
            self._items.move_to_end(number)
        return hashes

    def put(self, number: int, hashes: np.ndarray) -> int | None:
        """Hold a template; returns the number of the one that made room for it, if any."""
        self._items[number] = hashes
        if len(self._items) > self._size:
            return self._items.popitem(last=False)[0]
        return None


def encode_request(request_id: int, content: Content, template: int = 0, hashes: np.ndarray | None = None) -> bytes:
    """One request frame (``content`` as the Sketcher takes it: str, bytes, bytearray or memoryview), sketched under
    template number ``template`` (0: none), whose ``hashes`` are sent along when the child does not hold them."""
    if isinstance(content, str):
        # surrogatepass: a str with lone surrogates (hostile pages) reaches the child unchanged.
        kind, payload = _STR, content.encode("utf-8", "surrogatepass")
    else:
        kind, payload = _BYTES, bytes(content)
    sent = b"" if hashes is None else np.ascontiguousarray(hashes, dtype="<u8").tobytes()
    return _REQUEST.pack(request_id, kind, template, len(sent), len(sent) + len(payload)) + sent + payload


def encode_answer(request_id: int, result: Sketch | BaseException) -> bytes:
    """One answer frame: the sketch and its page's block hashes, or the error that sketching raised
    (:class:`BinaryContent`: not text)."""
    if isinstance(result, BinaryContent):
        return _ANSWER.pack(request_id, _BINARY, 0, 0, 0, 0, 0, 0, 0, 0)
    if isinstance(result, Sketch):
        signature = np.ascontiguousarray(result.signature, dtype="<u4").tobytes()
        blocks = b"" if result.blocks is None else np.ascontiguousarray(result.blocks, dtype="<u8").tobytes()
        head = _ANSWER.pack(request_id, _OK, result.fingerprint, result.num_shingles, result.truncated,
                            _SKETCHED_CODE.get(result.sketched, 0), result.words, result.page_words,
                            len(blocks) // 8 if result.blocks is not None else _NO_BLOCKS,
                            len(signature) + len(blocks))
        return head + signature + blocks
    message = f"{type(result).__name__}: {result}".encode("utf-8", "replace")
    return _ANSWER.pack(request_id, _ERROR, 0, 0, 0, 0, 0, 0, 0, len(message)) + message


class FrameReader:
    """Splits a byte stream into frames of a fixed header and a length-prefixed body."""

    def __init__(self, header: struct.Struct) -> None:
        self._header = header
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[tuple[Any, ...], bytes]]:
        """Append ``data``; return the ``(header fields, body)`` of every frame now complete."""
        self._buffer += data
        frames = []
        at, size = 0, self._header.size
        while len(self._buffer) - at >= size:
            fields = self._header.unpack_from(self._buffer, at)
            end = at + size + fields[-1]
            if end > len(self._buffer):
                break
            frames.append((fields, bytes(self._buffer[at + size : end])))
            at = end
        del self._buffer[:at]
        return frames


# -- the child -------------------------------------------------------------------------------------------------


def serve(sketcher: Sketcher, read: Callable[[int], bytes], write: Callable[[bytes], Any]) -> None:
    """Answer requests until ``read`` returns ``b""`` (the parent closed the pipe)."""
    reader = FrameReader(_REQUEST)
    templates = TemplateCache()
    while True:
        data = read(_READ_SIZE)
        if not data:
            return
        batch = reader.feed(data)
        if batch:
            write(b"".join(_answers(sketcher, templates, batch)))


def _answers(sketcher: Sketcher, templates: TemplateCache, batch: list[tuple[tuple[Any, ...], bytes]]) -> list[bytes]:
    results: dict[int, Sketch | BaseException] = {}
    ids: list[int] = []
    contents: list[Content] = []
    chosen: list[np.ndarray | None] = []
    for fields, body in batch:
        request_id, kind, number, sent = fields[0], fields[1], fields[2], fields[3]
        # The template first, for every frame: the parent's cache changed for each one.
        hashes = None
        if sent:
            hashes = np.frombuffer(body, dtype="<u8", count=sent // 8).astype(np.uint64)
            templates.put(number, hashes)
        elif number:
            hashes = templates.use(number)
            if hashes is None:
                results[request_id] = SketchWorkerError(f"template {number} is not held")
                continue
        raw = body[sent:]
        content: Content = raw.decode("utf-8", "surrogatepass") if kind == _STR else raw
        if looks_binary(content):
            results[request_id] = BinaryContent("binary content is not sketched")
        else:
            ids.append(request_id)
            contents.append(content)
            chosen.append(hashes)
    try:
        results.update(zip(ids, sketcher.sketch_many(contents, templates=chosen), strict=True))
    except Exception:  # noqa: BLE001 - one bad page must not fail its batch: retry each on its own
        for i, content, hashes in zip(ids, contents, chosen, strict=True):
            results[i] = _sketch_one(sketcher, content, hashes)
    return [encode_answer(fields[0], results[fields[0]]) for fields, _ in batch]


def _sketch_one(sketcher: Sketcher, content: Content, template: np.ndarray | None) -> Sketch | BaseException:
    try:
        return sketcher.sketch(content, template=template)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which passes the item through
        return exc


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child: ``python -m scrapy_neardup.crawl.sketch_worker '<parameters JSON>'``."""
    args = sys.argv[1:] if argv is None else argv
    # Ctrl-C in a terminal reaches the whole process group; the crawl decides when this child ends (by
    # closing its stdin), so it must not die mid-batch with a traceback while the crawl shuts down gracefully.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sketcher = Sketcher(**json.loads(args[0]))
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()

    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(stdout, view) :]

    serve(sketcher, lambda size: os.read(stdin, size), write)
    return 0


# -- the parent ------------------------------------------------------------------------------------------------


def _widen(fd: int) -> None:
    """Make the pipe ``fd`` hold :data:`_PIPE_SIZE` bytes where the system allows it (Linux); else leave it."""
    setting = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if setting is None:
        return
    try:
        fcntl.fcntl(fd, setting, _PIPE_SIZE)
    except OSError as exc:  # a lower pipe-max-size, or the user's pipe pages spent: the default size works
        logger.debug("could not widen the sketch worker's pipe: %s", exc)


def _ready(fd: int) -> bytes:
    """What the non-blocking ``fd`` holds now (at most a pipe's worth); ``b""`` when nothing, or at its end (the
    reactor's next read finds the end again and reports it)."""
    with contextlib.suppress(OSError):  # EAGAIN: nothing more now
        return os.read(fd, _PIPE_SIZE)
    return b""


class SketchWorker:
    """A child process sketching pages for the calling process's Twisted reactor.

    Args:
        sketcher: the parameters to sketch with (the child builds an equal :class:`Sketcher`).

    Use :meth:`start` (with the reactor running), then :meth:`sketch` for each page, then :meth:`stop`.
    """

    def __init__(self, sketcher: Sketcher) -> None:
        self.sketcher = sketcher
        self._protocol: _WorkerProtocol | None = None

    @property
    def alive(self) -> bool:
        """The child is running and has not failed."""
        return self._protocol is not None and self._protocol.failure is None

    def start(self) -> None:
        """Spawn the child (it imports numpy while the crawl starts; early requests wait in the pipe)."""
        # lazy: importing the reactor installs Twisted's default one; Scrapy installs the configured one first
        from twisted.internet import reactor as installed

        reactor: Any = installed  # zope interfaces confuse type checkers; this is the IReactorProcess
        package_root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        # The child must import this very package, also when it is used from a checkout without installing.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        args = [sys.executable, "-m", __name__, json.dumps(sketcher_parameters(self.sketcher))]
        protocol = _WorkerProtocol(self.sketcher)
        process = reactor.spawnProcess(protocol, sys.executable, args, env=env, childFDs={0: "w", 1: "r", 2: 2})
        pipes = getattr(process, "pipes", {})  # POSIX processes: the parent's ends, by the child's descriptor
        if 0 in pipes and 1 in pipes:
            _widen(pipes[0].fileno())
            _widen(pipes[1].fileno())
            protocol.answers_fd = pipes[1].fileno()
        self._protocol = protocol
        logger.debug("sketch worker started (pid %s)", process.pid)

    def sketch(self, content: Content, template: HostTemplate | None = None) -> Deferred[Sketch]:
        """A Deferred firing with the sketch of ``content`` (under its host's ``template``, ``"auto"`` mode), or
        failing with :class:`SketchWorkerError` (worker gone), :class:`BinaryContent` (not text), or
        :class:`ValueError` (the child could not sketch this content)."""
        if self._protocol is None:
            raise SketchWorkerError("the sketch worker was not started")
        return self._protocol.request(content, template)

    def stop(self) -> Deferred[None]:
        """Close the child's stdin and wait for it to exit (killed after a few seconds)."""
        protocol, self._protocol = self._protocol, None
        return succeed(None) if protocol is None else protocol.close()


class _WorkerProtocol(ProcessProtocol):
    """Parent side of the pipe: frames requests, matches answers to waiting Deferreds in order."""

    def __init__(self, sketcher: Sketcher) -> None:
        self.sketcher = sketcher
        self.failure: SketchWorkerError | None = None
        self._reader = FrameReader(_ANSWER)
        self._waiting: collections.deque[tuple[int, Deferred[Sketch]]] = collections.deque()
        self._next_id = 0
        # The templates the child holds (the same cache as the child's: see TemplateCache), and their numbers.
        self._templates = TemplateCache()
        self._numbers: dict[HostTemplate, int] = {}
        self._by_number: dict[int, HostTemplate] = {}
        self._next_number = 1
        self._closed: Deferred[None] | None = None
        self._killer: Any = None
        self._exited = False
        #: the parent's end of the child's stdout, read beyond what the reactor hands over (POSIX)
        self.answers_fd: int | None = None

    def request(self, content: Content, template: HostTemplate | None) -> Deferred[Sketch]:
        if self.failure is not None:
            return fail(self.failure)
        request_id = self._next_id
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        waiter: Deferred[Sketch] = Deferred()
        self._waiting.append((request_id, waiter))
        number, hashes = self._template_number(template)
        self._pipe.write(encode_request(request_id, content, number, hashes))
        return waiter

    def _template_number(self, template: HostTemplate | None) -> tuple[int, np.ndarray | None]:
        """The number ``template`` goes by in the child, and its hashes when the child must be sent them."""
        if template is None or template.empty:
            return 0, None
        number = self._numbers.get(template)
        if number is not None and self._templates.use(number) is not None:
            return number, None
        number, self._next_number = self._next_number, (self._next_number % 0xFFFFFFFE) + 1
        evicted = self._templates.put(number, template.hashes)
        if evicted is not None:
            del self._numbers[self._by_number.pop(evicted)]
        self._numbers[template] = number
        self._by_number[number] = template
        return number, template.hashes

    def outReceived(self, data: bytes) -> None:  # noqa: N802 - Twisted's name
        # Twisted reads 8 KiB per readable event; what else the child has written is read now, not a turn later.
        more = _ready(self.answers_fd) if self.answers_fd is not None else b""
        for fields, body in self._reader.feed(data + more):
            if not self._waiting or self._waiting[0][0] != fields[0]:
                self._fail(SketchWorkerError(f"sketch worker answered request {fields[0]} out of order"))
                self._pipe.signalProcess("KILL")
                return
            _, waiter = self._waiting.popleft()
            if fields[1] == _OK:
                waiter.callback(self._sketch(fields, body))
            elif fields[1] == _BINARY:
                waiter.errback(BinaryContent("binary content is not sketched"))
            else:
                waiter.errback(ValueError(body.decode("utf-8", "replace")))

    @property
    def _pipe(self) -> Any:
        """The process transport (typed loosely: Twisted's zope interfaces confuse type checkers)."""
        return self.transport

    def _sketch(self, fields: tuple[Any, ...], body: bytes) -> Sketch:
        _, _, fingerprint, shingles, truncated, sketched, words, page_words, blocks, _ = fields
        k = self.sketcher.num_perm
        signature = np.frombuffer(body, dtype="<u4", count=k).astype(np.uint32)
        hashes = None if blocks == _NO_BLOCKS else np.frombuffer(body, dtype="<u8", offset=4 * k).astype(np.uint64)
        return Sketch(signature=signature, fingerprint=fingerprint, tag=self.sketcher.tag,
                      num_shingles=shingles, truncated=bool(truncated), blocks=hashes,
                      sketched=_SKETCHED_BY_CODE.get(sketched, ""), words=words, page_words=page_words)

    def outConnectionLost(self) -> None:  # noqa: N802 - Twisted's name
        # The child's stdout closed: it exited (or is about to). Without the reactor's SIGCHLD handling
        # processEnded may never come, so this is where waiting requests learn that no answer will come.
        self._fail(SketchWorkerError("the sketch worker exited"))
        self._exit()

    def processEnded(self, reason: Any) -> None:  # noqa: N802 - Twisted's name
        self._fail(SketchWorkerError(f"the sketch worker ended: {reason.value}"))
        self._exit()

    def close(self) -> Deferred[None]:
        # lazy: importing the reactor installs Twisted's default one; Scrapy installs the configured one first
        from twisted.internet import reactor as installed

        reactor: Any = installed
        if self._exited:
            return succeed(None)
        if self._closed is None:
            self._closed = Deferred()
            self._pipe.closeStdin()
            self._killer = reactor.callLater(_EXIT_GRACE, self._kill)
        return self._closed

    def _kill(self) -> None:
        logger.warning("the sketch worker did not exit within %.0f s; killing it", _EXIT_GRACE)
        try:
            self._pipe.signalProcess("KILL")
        except Exception:  # noqa: BLE001 - already gone
            logger.debug("could not kill the sketch worker", exc_info=True)
        self._exit()

    def _fail(self, error: SketchWorkerError) -> None:
        if self.failure is None:
            self.failure = error
        while self._waiting:
            _, waiter = self._waiting.popleft()
            waiter.errback(error)

    def _exit(self) -> None:
        if self._exited:
            return
        self._exited = True
        process.reapAllProcesses()  # collect the child even when the reactor installed no SIGCHLD handler
        if self._killer is not None and self._killer.active():
            self._killer.cancel()
        if self._closed is not None and not self._closed.called:
            self._closed.callback(None)


if __name__ == "__main__":
    sys.exit(main())
