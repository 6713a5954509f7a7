"""A crawl's items written to a search index as the crawl runs: :class:`ElasticsearchSearchSink`.

Design notes: docs/architecture.md#es_integrationsearch_index
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TransportError
from elasticsearch import ApiError
from elasticsearch.helpers import BULK_FLUSH

from scrapy_neardup.errors import EsError, NearDupSettingsError, TagMismatch
from scrapy_neardup.store.config import read_str, setting_int
from scrapy_neardup.store.search_sink import SearchPage, SearchSink, SinkEvents
from scrapy_neardup.store.settings_registry import default_of

from .backend.pages import doc_id_of
from .client import ConnectionSettings, connect_async, describe_error, transport_logs_at_debug
from .es_settings import ElasticsearchSettings
from .indexing import SeqClock
from .mapping import DUPLICATE, F_GROUP, ROOT, ensure_index_async, error_type, require_tag_async, sketch_fields
from .opensearch_adapter import async_streaming_bulk
from .retry import RETRY_STATUSES, is_retryable, retrying

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from elasticsearch import AsyncElasticsearch
    from tenacity import RetryCallState

    from scrapy_neardup.store.config import SettingsLike

__all__ = ["ElasticsearchSearchSink"]

logger = logging.getLogger(__name__)

#: Seconds at least for one bulk request: a batch of whole pages is megabytes.
BULK_TIMEOUT = 30.0
#: Retries (at most; fewer with a lower ``NEARDUP_SEARCH_RETRIES``) and first backoff (doubled per retry) of
#: connecting and preparing the index at start: those of the
#: crawler backend (:class:`es_integration.backend.ElasticsearchBackend`), 3.1 s of waits in all, so that a node
#: that is down stops the crawl as fast with either; bulk writes during the crawl use ``NEARDUP_SEARCH_RETRIES``
#: and :attr:`ElasticsearchSearchSink.backoff` (a busy node gets more time).
STARTUP_RETRIES = 5
STARTUP_BACKOFF = 0.1
#: Documents moved to a canonical page's group per round (a search, then one bulk of updates).
_REGROUP_BATCH = 1000


@dataclass(eq=False, slots=True)
class _Op:
    """One bulk action of :func:`~elasticsearch.helpers.async_streaming_bulk`: a page's ``index`` action
    (``page``), or the removal of a key's document."""

    key: str
    doc_id: str
    action: dict[str, Any]
    page: SearchPage | None = None
    #: requests of it that got no answer (a connection error, a timeout)
    tries: int = 0


class ElasticsearchSearchSink(SearchSink):
    """Writes a crawl's pages to an Elasticsearch or OpenSearch index (see the module doc).

    Args:
        connection: where and how to connect.
        index: the index to write to.
        tag: the sketch parameter tag of the crawl (an index with other tags is refused); ``None``: unchecked.
        batch_size: documents per bulk request.
        retries: retries of a failed request, or of documents refused with 429/5xx.
    """

    #: first backoff in seconds before a retry (doubled per retry)
    backoff = 0.5
    #: seconds a partial batch waits before it is sent
    flush_interval = 1.0

    def __init__(self, connection: ConnectionSettings, index: str, *, tag: str | None = None,
                 batch_size: int = default_of("NEARDUP_SEARCH_BATCH_SIZE"),
                 retries: int = default_of("NEARDUP_SEARCH_RETRIES")) -> None:
        self.connection = connection
        self.index = index
        self.tag = tag
        self.batch_size = batch_size
        self.retries = retries
        self._client: AsyncElasticsearch | None = None
        self._events: SinkEvents | None = None
        #: what write() and remove() queue for the writer: an op, a drain's future, or None (the end)
        self._queue: asyncio.Queue[_Op | asyncio.Future[None] | None] | None = None
        #: taken back from a request that got no answer: sent again before the queue
        self._again: deque[_Op | asyncio.Future[None]] = deque()
        #: doc id -> the ops handed to the bulk helper and not answered yet, in order
        self._handed: dict[str, deque[_Op]] = {}
        #: drains whose flush is in flight
        self._draining: list[asyncio.Future[None]] = []
        self._requests = 0
        self._ended = False
        self._writer: asyncio.Task[None] | None = None
        self._clock = SeqClock()
        #: group id -> the id of the group's representative when a canonical page took that role over
        self._regrouped: dict[str, str] = {}

    @classmethod
    def from_settings(cls, settings: SettingsLike, tag: str | None) -> ElasticsearchSearchSink:
        """The sink ``NEARDUP_SEARCH_*`` and the ``NEARDUP_ES_*`` connection settings describe.

        Raises:
            NearDupSettingsError: a setting is missing or wrong, or ``NEARDUP_SEARCH_INDEX`` is the crawler
                backend's ``NEARDUP_ES_INDEX`` (the message names it).
        """
        es = ElasticsearchSettings.from_settings(settings, index_setting="NEARDUP_SEARCH_INDEX",
                                                 needed_by="NEARDUP_SEARCH_INDEX")
        if read_str(settings, "NEARDUP_ES_INDEX") == es.index:
            raise NearDupSettingsError(
                f"NEARDUP_SEARCH_INDEX={es.index!r} is NEARDUP_ES_INDEX, the crawler backend's index of sketches: "
                "give the search index another name"
            )
        batch_size = setting_int(settings, "NEARDUP_SEARCH_BATCH_SIZE")
        retries = setting_int(settings, "NEARDUP_SEARCH_RETRIES")
        connection = ConnectionSettings.create(
            es.url, api_key=es.api_key, username=es.username, password=es.password, ca_certs=es.ca_certs,
            request_timeout=es.request_timeout,
        )
        return cls(connection, es.index, tag=tag, batch_size=batch_size, retries=retries)

    def __repr__(self) -> str:
        return f"ElasticsearchSearchSink(url={self.connection.url!r}, index={self.index!r})"

    @property
    def _es(self) -> AsyncElasticsearch:
        if self._client is None:
            raise RuntimeError("ElasticsearchSearchSink used before open() or after close()")
        return self._client

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def open(self, events: SinkEvents) -> None:
        """Connect, create the index or add the ``neardup`` mapping, refuse sketches of other parameters.

        Raises:
            NearDupSettingsError: no asyncio event loop runs (the crawl uses another Twisted reactor).
            EsError: unreachable, refused, or an index that cannot take the fields (the message says which).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise NearDupSettingsError(
                "NEARDUP_SEARCH_INDEX needs Scrapy's asyncio reactor (TWISTED_REACTOR = "
                "'twisted.internet.asyncioreactor.AsyncioSelectorReactor', the default)"
            ) from None
        self._events = events
        self._queue, self._ended = asyncio.Queue(maxsize=self.batch_size), False
        try:
            with transport_logs_at_debug():
                connect = functools.partial(connect_async, self.connection, max_retries=0, retry_on_timeout=False)
                # At start the crawler backend's policy (STARTUP_RETRIES, STARTUP_BACKOFF): a node that is down
                # stops the crawl as fast whichever of the two meets it first.
                self._client = await self._retried("connecting", connect, startup=True)
                await self._retried("preparing the index", self._prepare_index, startup=True)
        except TagMismatch:
            await self._release()
            raise
        except EsError as exc:
            await self._release()
            raise EsError(f"search index {self.index}: {exc} (check NEARDUP_ES_URL and that the node is up)") from None
        except BaseException:
            await self._release()
            raise
        self._writer = asyncio.ensure_future(self._write_all())
        logger.debug("%r open", self)

    async def _prepare_index(self) -> None:
        es = self._es
        await ensure_index_async(es, self.index, request_timeout=self.connection.request_timeout,
                                 cluster_settings=True)
        if self.tag is not None:
            await require_tag_async(es, self.index, self.tag)

    async def close(self) -> None:
        """Send what waits, wait for it, refresh the index (see the module doc), release the connections."""
        try:
            if self._writer is not None and self._queue is not None:
                await self._queue.put(None)  # the end: the writer sends what it holds, then returns
                await self._writer
                self._writer = None
                try:
                    with transport_logs_at_debug():
                        await self._retried("refreshing the index", self._es.indices.refresh, index=self.index)
                except EsError as exc:
                    logger.warning("search index %s was not refreshed: %s", self.index, exc)
        finally:
            if self._writer is not None:  # close() itself cancelled: stop the writer too
                self._writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._writer
                self._writer = None
            await self._release()

    async def _release(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    # -- writes ------------------------------------------------------------------------------------------------

    async def write(self, page: SearchPage) -> None:
        """Queue ``page``'s document (see the module doc); waits while a full batch waits for its turn.

        An item holding a field named ``neardup`` (the object of the near-duplicate fields) is not written: it
        is reported failed (``reserved_field``), never overwritten."""
        if page.fields.get(ROOT) is not None:
            self._fail(_Op(page.key, "", {}, page=page), "reserved_field",
                       f"the item has a field {ROOT!r}, where the search index keeps its near-duplicate fields")
            return
        doc_id = doc_id_of(page.key)
        fields = {name: value for name, value in page.fields.items() if name != ROOT}
        source = {**fields, ROOT: self._near_duplicate_fields(page, doc_id)}
        await self._add(_Op(page.key, doc_id, {"_index": self.index, "_id": doc_id, "_source": source}, page))
        if page.representative_of is not None:
            await self._regroup(doc_id_of(page.representative_of), doc_id)

    async def _regroup(self, former: str, representative: str) -> None:
        """Make ``representative`` the representative of ``former``'s group: every document of the group (the
        former representative becoming a duplicate of the new one) moves to the new group id, now and for the
        group's later duplicates. Rare (a canonical page met after its copy): the writes before it are sent and
        the index refreshed first, so that the search for the group sees them. (No ``update_by_query``: not every
        distribution has the module.)"""
        self._regrouped[former] = representative
        await self._drain()
        try:
            moved = 0
            while True:  # each round moves what the search found out of the group: repeat until none is left
                await self._retried("refreshing the search index", self._es.indices.refresh, index=self.index)
                answer = await self._retried("finding a canonical page's copies", self._es.search, index=self.index,
                                             query={"term": {F_GROUP: former}}, size=_REGROUP_BATCH, source=False)
                ids = [hit["_id"] for hit in answer["hits"]["hits"]]
                if not ids:
                    break
                operations: list[dict[str, Any]] = []
                for doc_id in ids:
                    change: dict[str, Any] = {"group": representative}
                    if doc_id == former:
                        change.update(status=DUPLICATE, duplicate_of=representative)
                    operations += [{"update": {"_index": self.index, "_id": doc_id}}, {"doc": {ROOT: change}}]
                result = await self._retried("regrouping a canonical page's copies", self._es.bulk,
                                             operations=operations)
                done = sum(1 for item in result["items"] if 200 <= int(item["update"].get("status", 500)) < 300)
                moved += done
                if done < len(ids):
                    raise EsError(f"{len(ids) - done} of {len(ids)} documents refused the new group")
            self._count("search_regrouped", moved)
        except EsError as exc:
            # The pages themselves are written; only their grouping under the canonical page is missing.
            logger.warning("could not make %s the representative of group %s in %s: %s", representative, former,
                           self.index, exc)
            self._count("search_regroup_failed")

    async def remove(self, key: str) -> None:
        """Queue the removal of ``key``'s document (none there is fine)."""
        doc_id = doc_id_of(key)
        await self._add(_Op(key, doc_id, {"_op_type": "delete", "_index": self.index, "_id": doc_id}))

    def _near_duplicate_fields(self, page: SearchPage, doc_id: str) -> dict[str, Any]:
        """The ``neardup`` object of a page's document: its sketch (when it has one), key, status and group."""
        duplicate_of = doc_id_of(page.duplicate_of) if page.status == DUPLICATE and page.duplicate_of else None
        if duplicate_of is not None:  # its kept page's group may have a canonical page for representative now
            duplicate_of = self._regrouped.get(duplicate_of, duplicate_of)
        fields: dict[str, Any] = {"key": page.key, "group": duplicate_of or doc_id, "status": page.status}
        if duplicate_of is not None:
            fields.update(duplicate_of=duplicate_of, shared=page.shared)
        if page.sketch is None:
            return {**fields, "empty": True, "seq": self._clock()}
        return sketch_fields(page.sketch, seq=self._clock(), **fields)

    async def _add(self, op: _Op) -> None:
        """Queue ``op``; waits while a batch's worth waits already (the crawl's back-pressure)."""
        assert self._queue is not None, "write before open"
        await self._queue.put(op)

    async def _drain(self) -> None:
        """Send every queued write and wait until each has its answer."""
        assert self._queue is not None, "write before open"
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put(done)
        await done

    async def _write_all(self) -> None:
        """The writer: the queue's ops through the bulk helper until the end; never raises.

        The helper batches (``chunk_size``), sends one request at a time in order, and retries the documents
        refused with 429/5xx, the whole request's 429/5xx included, ``max_retries`` times after ``backoff * 2**i``
        seconds. A request that gets no answer at all (a connection error, a timeout) ends the helper's run: its
        documents are sent again as many times after the same waits, then reported failed."""
        while True:
            try:
                es = self._es.options(request_timeout=max(self.connection.request_timeout, BULK_TIMEOUT))
                async for ok, info in async_streaming_bulk(
                    es, self._actions(), around_request=self._request, chunk_size=self.batch_size,
                    max_retries=self.retries, initial_backoff=self.backoff, retry_on_status=RETRY_STATUSES,
                    raise_on_error=False, raise_on_exception=False,
                ):
                    self._answered(ok, info)
                return
            except Exception as exc:  # noqa: BLE001 - every failure ends as a reported page, never as a lost one
                await self._unanswered(exc)

    async def _actions(self) -> AsyncIterator[Any]:
        """The helper's actions: the queue's ops, and a flush (``BULK_FLUSH``) when the first document of a partial
        batch has waited :attr:`flush_interval` seconds, or for a drain. The helper asks for the next action once
        the batch before it is answered."""
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        pending, deadline = 0, None  # documents in the helper's partial batch; when it is to be sent
        while True:
            self._requests = 0
            for done in self._draining:  # the flush before is answered
                if not done.done():
                    done.set_result(None)
            self._draining.clear()
            op: _Op | asyncio.Future[None] | None
            if self._again:
                op = self._again.popleft()
            elif self._ended:  # the end came, then a request failed: what it held is sent again, then no more
                return
            else:
                try:
                    op = await asyncio.wait_for(self._queue.get(),
                                                None if deadline is None else max(0.0, deadline - loop.time()))
                except TimeoutError:
                    pending, deadline = 0, None
                    yield BULK_FLUSH
                    continue
            if op is None:
                self._ended = True
                return
            if isinstance(op, asyncio.Future):
                self._draining.append(op)
                pending, deadline = 0, None
                yield BULK_FLUSH
                continue
            self._handed.setdefault(op.doc_id, deque()).append(op)
            pending += 1
            if pending == 1:
                deadline = loop.time() + self.flush_interval
            if pending >= self.batch_size:  # the helper sends this batch now
                pending, deadline = 0, None
            yield op.action

    def _answered(self, ok: bool, info: dict[str, Any]) -> None:
        """Count what landed, report what was refused (after the helper's retries)."""
        ((verb, result),) = info.items()
        waiting = self._handed.get(str(result.get("_id")))
        if not waiting:
            logger.warning("search index %s answered for a document not sent: %s", self.index, info)
            return
        op = waiting.popleft()
        if not waiting:
            del self._handed[op.doc_id]
        status = int(result.get("status", 500))
        if ok or (verb == "delete" and status == 404):
            # A removal counts only when a document was there: in a new index a duplicate has none to remove.
            if verb != "delete":
                self._count("search_indexed")
            elif status != 404:
                self._count("search_removed")
            return
        error = result.get("error")
        if isinstance(result.get("exception"), Exception):  # the whole request failed
            kind, reason = _describe(result["exception"], self.connection.url)
        elif isinstance(error, dict):
            kind, reason = str(error.get("type", f"http_{status}")), str(error.get("reason", ""))
        else:
            kind, reason = f"http_{status}", str(error or "")
        self._fail(op, kind, reason)

    async def _unanswered(self, exc: Exception) -> None:
        """A request without an answer: its documents go back to the head of the queue, or, past
        ``NEARDUP_SEARCH_RETRIES`` tries (or an error not worth retrying), are reported failed."""
        ops = [op for waiting in self._handed.values() for op in waiting]
        self._handed.clear()
        kind, reason = _describe(exc, self.connection.url)
        retry = is_retryable(exc)
        again: list[_Op] = []
        for op in ops:
            op.tries += 1
            if retry and op.tries <= self.retries:
                again.append(op)
            else:
                self._fail(op, kind, reason)
        self._again.extendleft(reversed([*again, *self._draining]))
        self._draining.clear()
        if again:
            self._count("search_retries")
            logger.debug("writing to search index %s failed (%s); retrying", self.index, reason)
            await asyncio.sleep(self.backoff * 2 ** (max(op.tries for op in again) - 1))

    # -- counts and failures -----------------------------------------------------------------------------------

    def _request(self) -> contextlib.AbstractContextManager[None]:
        """Around each bulk request of the helper: the second and later of one batch are retries; the transport's
        per-attempt logs are DEBUG ones (a final failure is reported per page)."""
        self._requests += 1
        if self._requests > 1:
            self._count("search_retries")
        return transport_logs_at_debug()

    def _on_retry(self, state: RetryCallState) -> None:
        self._count("search_retries")
        error = state.outcome.exception() if state.outcome is not None else None
        logger.debug("writing to search index %s failed (%s); retrying", self.index,
                     _describe(error, self.connection.url)[1] if error is not None else "?")

    def _count(self, name: str, value: int = 1) -> None:
        if self._events is not None:
            self._events.count(name, value)

    def _fail(self, op: _Op, kind: str, reason: str) -> None:
        self._count("search_failed")
        self._count(f"search_failed/{kind}")
        if self._events is not None:
            self._events.failed(op.key, op.page, kind, reason)

    async def _retried(self, what: str, func: Any, *args: Any, startup: bool = False, **kwargs: Any) -> Any:
        """``await func(...)`` under the retry policy (``startup``: the crawler backend's, see :meth:`open`); a
        final failure is one :class:`EsError` line."""
        retries, backoff = ((min(self.retries, STARTUP_RETRIES), STARTUP_BACKOFF) if startup
                            else (self.retries, self.backoff))
        try:
            async for attempt in retrying(retries, backoff, on_retry=self._on_retry):
                with attempt:
                    return await func(*args, **kwargs)
        except (ApiError, TransportError) as exc:
            raise EsError(f"{what}: {describe_error(exc, self.connection.url)}") from None
        raise AssertionError("unreachable")


def _describe(exc: BaseException, url: str) -> tuple[str, str]:
    """``(kind, reason)`` of a failed bulk request: ``timeout``, ``connection_error``, ``http_<status>`` (or the
    error's ``error.type``), else the exception's class name."""
    if isinstance(exc, ConnectionTimeout):
        kind = "timeout"
    elif isinstance(exc, TransportConnectionError):
        kind = "connection_error"
    elif isinstance(exc, ApiError):
        kind = error_type(exc) or f"http_{exc.meta.status}"
    else:
        kind = type(exc).__name__
    retryable = " (after retries)" if is_retryable(exc) else ""
    return kind, describe_error(exc, url) + retryable
