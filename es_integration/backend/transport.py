"""The transport of the crawler backend: :class:`Transport` holds the client of one index and sends every request
under bounded retries (:meth:`Transport.call`); the raw bulk and multi-get calls the other parts share.

Errors
------
Requests failing with a connection error, a timeout, HTTP 429/502/503/504, or an HTTP 500 from a node or shard
copy gone away (a failover) are retried up to ``retries`` times with exponential backoff (0.1 s, 0.2 s, ...; the
policy of :mod:`es_integration.retry`), and those a failover answers (a 503, a node gone away, a shard copy that
did not answer) until ``failover`` seconds after the first attempt. Then, or at once for any other failure
(wrong credentials, missing privileges, bad index), :class:`~scrapy_neardup.errors.EsError` (a
:class:`~scrapy_neardup.errors.BackendError`) is raised with a one-line message holding no secret. ``errors``
counts failed requests, ``retried`` the retries (``neardup/backend_retries`` in the crawl's stats).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from elastic_transport import TransportError
from elasticsearch import ApiError

from scrapy_neardup.errors import EsError

from ..client import describe_error
from ..mapping import F_FINGERPRINT, F_KEY, F_SEQ, F_STATUS, F_WRITER
from ..retry import ShardsUnavailable, is_retryable, retrying

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from elasticsearch import AsyncElasticsearch
    from tenacity import RetryCallState

    from ..client import ConnectionSettings

#: One logger for the package, under the name it had as one module: log filters and tests select it.
logger = logging.getLogger("es_integration.backend")

#: Polling of a state another request changes (a checkpoint, a pending page, a new index's shard): first
#: delay and the most it doubles to, in seconds.
_POLL_FIRST, _POLL_MAX = 0.002, 0.1


class Transport:
    """The requests of one index, under one retry rule.

    Args:
        settings: where and how to connect (the client itself is set by the owner once connected: ``client``).
        index: the index the requests are about (named in error messages; the default of :meth:`mget`).
        retries: attempts after the first for a retryable failure.
        backoff: first wait in seconds, doubled per retry: ``backoff * (2**retries - 1)`` of waits in all.
        failover: seconds from a request's first attempt during which a failure a failover answers is retried
            past ``retries`` (:func:`es_integration.retry.is_failover`); 0: never.
    """

    def __init__(self, settings: ConnectionSettings, index: str, *, retries: int, backoff: float,
                 failover: float = 0.0) -> None:
        self.settings = settings
        self.index = index
        self.retries = retries
        self.backoff = backoff
        self.failover = failover
        #: the connected client; ``None`` before the owner connects and after it closes
        self.client: AsyncElasticsearch | None = None
        #: failed requests, retries (``neardup/backend_retries``), and calls made (each under the retry rule)
        self.errors = 0
        self.retried = 0
        self.calls = 0

    @property
    def es(self) -> AsyncElasticsearch:
        """The client; :class:`RuntimeError` when not connected."""
        if self.client is None:
            raise RuntimeError("ElasticsearchBackend used before open() or after close()")
        return self.client

    async def bulk(self, operations: list[dict[str, Any]]) -> dict[str, Any]:
        response = await self.es.bulk(operations=operations)
        body: dict[str, Any] = response.body
        return body

    async def mget(self, ids: list[str], source: list[str] | None = None) -> list[dict[str, Any]]:
        response = await self.es.mget(
            index=self.index, ids=ids, realtime=True, source=source or [F_KEY, F_STATUS, F_SEQ, F_FINGERPRINT, F_WRITER]
        )
        docs: list[dict[str, Any]] = response["docs"]
        return docs

    async def call(
        self, what: str, func: Callable[..., Awaitable[Any]], *args: Any, retries: int | None = None
    ) -> Any:
        """``await func(*args)`` under the retry policy of :mod:`es_integration.retry` (``retries``, default
        :attr:`retries` and :attr:`failover`, with :attr:`backoff`; ``retries`` given: no failover wait);
        failures become :class:`EsError` naming ``what`` failed."""
        self.calls += 1
        attempts = 0
        try:
            async for attempt in retrying(self.retries if retries is None else retries, self.backoff,
                                          on_retry=self._retrying(what),
                                          failover=self.failover if retries is None else 0.0):
                with attempt:
                    attempts += 1
                    try:
                        return await func(*args)
                    except (ApiError, TransportError, ShardsUnavailable):
                        self.errors += 1
                        raise
        except (ApiError, TransportError, ShardsUnavailable) as exc:
            message = str(exc) if isinstance(exc, ShardsUnavailable) else describe_error(exc, self.settings.url)
            if not is_retryable(exc):
                raise EsError(f"{what} in {self.index}: {message}") from None
            raise EsError(f"{what} in {self.index}: {message} (after {attempts} attempts)") from None
        raise AssertionError("unreachable")

    def _retrying(self, what: str) -> Callable[[RetryCallState], None]:
        """Count a retry (``retried``, ``neardup/backend_retries``) and say why, before the backoff sleep."""

        def count(state: RetryCallState) -> None:
            self.retried += 1
            error = state.outcome.exception() if state.outcome is not None else None
            delay = state.next_action.sleep if state.next_action is not None else 0.0
            logger.debug("%s failed (%s); retrying in %.2fs", what, describe_error(error, self.settings.url)
                         if error is not None else "?", delay)

        return count
