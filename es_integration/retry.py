"""The one retry policy for Elasticsearch requests, built on tenacity.

A request failing with a connection error, a timeout, or HTTP 429/502/503/504 is retried up to ``retries``
times with exponential backoff: ``backoff``, ``2 backoff``, ``4 backoff``, ... (0.1 s, 0.2 s, 0.4 s by
default). So is an HTTP 500 whose every root cause is a node or shard copy gone away
(:data:`NODE_LOSS_CAUSES`): a search whose shard copies were all on a node that just died answers "all shards
failed" with the status of its shard failures, 500, until the replicas are promoted. Any other failure (wrong
credentials, missing privileges, a bad request, a TLS failure, any other 500) is final at once: retrying it
would only delay the error.

A failover can outlast the retries: a dead node's shards move once the master has removed it from the cluster,
which a loaded cluster may take seconds to publish. With ``failover`` seconds, a failure that says so
(:func:`is_failover`: HTTP 503, the 500 of a node gone away, a shard copy that did not answer) is retried past
``retries``, every ``backoff * 2**(retries - 1)`` seconds, until ``failover`` seconds after the first attempt.
A node that cannot be reached (the client tries the next one), a timeout and an HTTP 429 (a node overloaded,
which waiting longer would only add to) keep the bound of ``retries``.

The synchronous jobs (``neardup es index`` etc.) use the client's and ``elasticsearch.helpers``' own retry
options, which implement the same rule by status alone (the 500s of a failover are final there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TlsError
from elasticsearch import ApiError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from scrapy_neardup.errors import NearDupError

#: HTTP statuses worth retrying: too many requests, and a gateway or node briefly unavailable.
RETRY_STATUSES = frozenset({429, 502, 503, 504})


#: Root causes (``error.root_cause[].type``) of an HTTP 500 that mean a node or a shard copy went away, not that
#: the request is wrong: a search or read relayed to a node that died answers with these until the cluster has
#: moved the node's shards (Elasticsearch and OpenSearch name them alike).
NODE_LOSS_CAUSES = frozenset({
    "node_disconnected_exception", "node_not_connected_exception", "connect_transport_exception",
    "node_closed_exception", "send_request_transport_exception", "receive_timeout_transport_exception",
    "no_shard_available_action_exception", "primary_missing_action_exception", "unavailable_shards_exception",
    "illegal_index_shard_state_exception", "index_shard_closed_exception", "shard_not_in_primary_mode_exception",
})


class ShardsUnavailable(NearDupError):
    """An answer with HTTP 200 that covers no (or not every) copy of a shard, as during a primary failover:
    retried like a 503."""


class ItemsRefused(ShardsUnavailable):
    """Items of a bulk request refused (a per-item 429 of a node whose write queue is full, or a 503), or a search
    of a multi-search refused with 429: retried, within the retry count only (a refusal is no sign of a
    failover)."""


def is_retryable(exc: BaseException) -> bool:
    """Whether a client or transport error is transient (see the module doc)."""
    if isinstance(exc, ShardsUnavailable) or is_failover(exc):
        return True
    if isinstance(exc, ApiError):
        return exc.meta.status in RETRY_STATUSES
    return isinstance(exc, TransportConnectionError | ConnectionTimeout) and not isinstance(exc, TlsError)


def is_failover(exc: BaseException) -> bool:
    """Whether a retryable failure is one a failover answers (see the module doc): retried up to ``failover``
    seconds rather than ``retries`` times."""
    if isinstance(exc, ShardsUnavailable):
        return not isinstance(exc, ItemsRefused)
    if isinstance(exc, ApiError):
        return exc.meta.status == 503 or (exc.meta.status == 500 and _lost_a_node(exc.body))
    return False


def _lost_a_node(body: Any) -> bool:
    """Whether an error body's root causes are all in :data:`NODE_LOSS_CAUSES` (its own type when it names no
    root cause)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return False
    roots = [cause.get("type") for cause in error.get("root_cause") or [] if isinstance(cause, dict)]
    return all(kind in NODE_LOSS_CAUSES for kind in roots or [error.get("type")])


def retrying(
    retries: int,
    backoff: float,
    *,
    on_retry: Callable[[RetryCallState], Any] | None = None,
    when: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    failover: float = 0.0,
) -> AsyncRetrying:
    """An ``async for attempt in retrying(...): with attempt: ...`` loop: ``1 + retries`` attempts at most,
    sleeping ``backoff * 2**i`` before retry ``i + 1``, retrying what :func:`is_retryable` accepts (or, with
    ``when``, exceptions of those types). With ``failover`` > 0, a failure :func:`is_failover` accepts is retried
    past that count, every ``backoff * 2**(retries - 1)`` seconds, until ``failover`` seconds after the first
    attempt. ``on_retry`` runs before each sleep (e.g. to count retries). The last failure is re-raised as it
    was."""
    counted = stop_after_attempt(1 + retries)

    def stop(state: RetryCallState) -> bool:
        if not counted(state):
            return False
        error = state.outcome.exception() if state.outcome is not None else None
        return not (error is not None and is_failover(error) and (state.seconds_since_start or 0.0) < failover)

    return AsyncRetrying(
        stop=stop,
        wait=wait_exponential(multiplier=backoff, min=backoff, max=backoff * 2 ** max(retries - 1, 0)),
        retry=retry_if_exception_type(when) if when is not None else retry_if_exception(is_retryable),
        before_sleep=on_retry,
        reraise=True,
    )
