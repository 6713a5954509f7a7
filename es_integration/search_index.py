"""A crawl's items written to a search index as the crawl runs: :class:`ElasticsearchSearchSink`.

Design notes: docs/architecture.md#es_integrationsearch_index
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TransportError
from elasticsearch import ApiError

from scrapy_neardup.errors import EsError, NearDupSettingsError, TagMismatch
from scrapy_neardup.store.config import read_str, setting_int
from scrapy_neardup.store.search_sink import SearchPage, SearchSink, SinkEvents
from scrapy_neardup.store.settings_registry import default_of

from .backend.pages import doc_id_of
from .client import ConnectionSettings, connect_async, describe_error, transport_logs_at_debug
from .es_settings import ElasticsearchSettings
from .indexing import SeqClock
from .mapping import DUPLICATE, F_GROUP, ROOT, ensure_index_async, error_type, require_tag_async, sketch_fields
from .retry import RETRY_STATUSES, ShardsUnavailable, is_retryable, retrying

if TYPE_CHECKING:
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
    """One bulk action: the page's index action (``page``), or the removal of a key's document."""

    key: str
    action: dict[str, Any]
    source: dict[str, Any] | None = None
    page: SearchPage | None = None
    #: the last per-item refusal (``error.type``, reason) of a document being retried
    refused: tuple[str, str] | None = None


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
        self._buffer: list[_Op] = []
        self._lock: asyncio.Lock | None = None
        self._sending: asyncio.Future[None] | None = None
        self._ticker: asyncio.Task[None] | None = None
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
        self._lock = asyncio.Lock()
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
        self._ticker = asyncio.ensure_future(self._tick())
        logger.debug("%r open", self)

    async def _prepare_index(self) -> None:
        es = self._es
        await ensure_index_async(es, self.index, request_timeout=self.connection.request_timeout,
                                 cluster_settings=True)
        if self.tag is not None:
            await require_tag_async(es, self.index, self.tag)

    async def close(self) -> None:
        """Send what waits, wait for it, refresh the index (see the module doc), release the connections."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        try:
            if self._client is not None and self._lock is not None:
                await self._drain()
                try:
                    with transport_logs_at_debug():
                        await self._retried("refreshing the index", self._es.indices.refresh, index=self.index)
                except EsError as exc:
                    logger.warning("search index %s was not refreshed: %s", self.index, exc)
        finally:
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
            self._fail(_Op(page.key, {}, page=page), "reserved_field",
                       f"the item has a field {ROOT!r}, where the search index keeps its near-duplicate fields")
            return
        doc_id = doc_id_of(page.key)
        fields = {name: value for name, value in page.fields.items() if name != ROOT}
        await self._add(_Op(page.key, {"index": {"_index": self.index, "_id": doc_id}},
                            {**fields, ROOT: self._near_duplicate_fields(page, doc_id)}, page))
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
        await self._add(_Op(key, {"delete": {"_index": self.index, "_id": doc_id_of(key)}}))

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
        self._buffer.append(op)
        if len(self._buffer) >= self.batch_size:
            await self._flush()

    async def _flush(self) -> None:
        """Start sending the next batch once the request before it is done: one request at a time, in order."""
        assert self._lock is not None, "write before open"
        async with self._lock:
            if self._sending is not None:
                await self._sending
                self._sending = None
            batch, self._buffer = self._buffer[: self.batch_size], self._buffer[self.batch_size :]
            if batch:
                self._sending = asyncio.ensure_future(self._send(batch))

    async def _drain(self) -> None:
        """Send every queued write and wait until the last request is done."""
        assert self._lock is not None, "write before open"
        while self._buffer:
            await self._flush()
        async with self._lock:
            if self._sending is not None:
                await self._sending
                self._sending = None

    async def _tick(self) -> None:
        """Send a partial batch every :attr:`flush_interval` seconds while nothing else is sent."""
        while True:
            await asyncio.sleep(self.flush_interval)
            idle = self._sending is None or self._sending.done()
            if self._buffer and idle and self._lock is not None and not self._lock.locked():
                await self._flush()

    async def _send(self, batch: list[_Op]) -> None:
        """One batch, retried (whole, or its refused documents) under the policy of :mod:`es_integration.retry`;
        whatever is still unwritten in the end is reported failed. Never raises."""
        todo = batch
        try:
            with transport_logs_at_debug():
                async for attempt in retrying(self.retries, self.backoff, on_retry=self._on_retry):
                    with attempt:
                        todo = await self._bulk(todo)
                        if todo:
                            raise ShardsUnavailable(f"{len(todo)} document(s) refused for now")
        except Exception as exc:  # noqa: BLE001 - every failure ends as a reported page, never as a lost one
            kind, reason = _describe(exc, self.connection.url)
            for op in todo:
                if isinstance(exc, ShardsUnavailable) and op.refused is not None:
                    self._fail(op, *op.refused)
                else:
                    self._fail(op, kind, reason)

    async def _bulk(self, todo: list[_Op]) -> list[_Op]:
        """Send ``todo`` in one bulk request; count what landed, report what was refused for good, and return
        what was refused for now (HTTP 429/5xx per item)."""
        operations: list[dict[str, Any]] = []
        for op in todo:
            operations.append(op.action)
            if op.source is not None:
                operations.append(op.source)
        es = self._es.options(request_timeout=max(self.connection.request_timeout, BULK_TIMEOUT))
        response = await es.bulk(operations=operations)
        again: list[_Op] = []
        for op, item in zip(todo, response["items"], strict=True):
            ((verb, result),) = item.items()
            status = int(result.get("status", 500))
            if 200 <= status < 300 or (verb == "delete" and status == 404):
                # A removal counts only when a document was there: in a new index a duplicate has none to remove.
                if verb != "delete":
                    self._count("search_indexed")
                elif status != 404:
                    self._count("search_removed")
                continue
            error = result.get("error")
            kind = str(error.get("type", f"http_{status}")) if isinstance(error, dict) else f"http_{status}"
            reason = str(error.get("reason", "")) if isinstance(error, dict) else str(error or "")
            if status in RETRY_STATUSES:
                op.refused = (kind, reason)
                again.append(op)
            else:
                self._fail(op, kind, reason)
        return again

    # -- counts and failures -----------------------------------------------------------------------------------

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
