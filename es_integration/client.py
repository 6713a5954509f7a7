"""The one place that builds Elasticsearch clients, and turns their failures into clear one-line errors.

Design notes: docs/architecture.md#es_integrationclient
"""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from scrapy_neardup.errors import EsError

from .connection import ConnectionSettings, safe_url
from .opensearch_adapter import (
    PROBE_HEADERS,
    async_opensearch_client,
    engine_from_root,
    missing_opensearch_py,
    opensearch_client,
)

if TYPE_CHECKING:
    from elasticsearch import AsyncElasticsearch, Elasticsearch

__all__ = [
    "ConnectionSettings",
    "connect_async",
    "describe_error",
    "make_async_client",
    "client_major",
    "make_client",
    "transport_logs_at_debug",
    "translate_errors",
]

logger = logging.getLogger(__name__)


#: The loggers of both engines' transports (elastic_transport's are not children of one that logs itself).
TRANSPORT_LOGGERS = ("elastic_transport.node", "elastic_transport.node_pool", "elastic_transport.transport",
                     "opensearch")


class _AtDebug(logging.Filter):
    """Logs records below ERROR at DEBUG; drops them unless the root logger lets DEBUG through (``neardup -v``;
    Scrapy leaves the root logger at NOTSET and filters in its handler, at ``LOG_LEVEL``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().getEffectiveLevel() <= logging.DEBUG


@contextlib.contextmanager
def transport_logs_at_debug() -> Iterator[None]:
    """Within the block, the transports' per-attempt WARNING and INFO records are DEBUG ones (see the module
    doc); the error the caller raises in the end is the one line to show."""
    quiet = _AtDebug()
    loggers = [logging.getLogger(name) for name in TRANSPORT_LOGGERS]
    for log in loggers:
        log.addFilter(quiet)
    try:
        yield
    finally:
        for log in loggers:
            log.removeFilter(quiet)


def client_major() -> int:
    """The major version of the installed elasticsearch-py (8 or 9).

    The two majors differ, for this project, in one way that matters: a 9.x client asks every server for
    ``compatible-with=9`` answers, which Elasticsearch 8 refuses (HTTP 400, ``media_type_header_exception``), so
    client 9 needs server 9, while client 8 talks to 8.x and 9.x servers. The APIs used here (keyword-argument
    requests, ``options()``, ``open_point_in_time``/``close_point_in_time``, helpers) are the same in both.
    """
    # lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up
    from elasticsearch import __versionstr__

    return int(__versionstr__.split(".")[0])


def make_client(settings: ConnectionSettings, *, unreachable_hint: str = "", **overrides: Any) -> Elasticsearch:
    """A synchronous client for the engine at ``settings.url`` (``overrides``: e.g. ``max_retries``,
    ``retry_on_timeout``): elasticsearch-py for Elasticsearch, opensearch-py behind the same API for OpenSearch
    (see :mod:`es_integration.opensearch_adapter`; one ``GET /`` tells them apart). ``unreachable_hint`` ends the
    message when no node answers (what to check: ``"check --es-url and that the node is up"``).

    Raises:
        EsError: the server cannot be reached, or it is OpenSearch and opensearch-py is not installed.
    """
    # lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up
    from elasticsearch import Elasticsearch

    logger.debug("connecting to %s", settings.url)
    client = Elasticsearch(settings.urls, **settings.client_options(**overrides))
    with translate_errors(settings.url, unreachable_hint=unreachable_hint):
        response = client.transport.perform_request(
            "GET", "/", headers=_probe_headers(settings), **_probe_retries(overrides)
        )
    return _for_engine(client, settings, int(response.meta.status), response.body, overrides)


def make_async_client(settings: ConnectionSettings, **overrides: Any) -> AsyncElasticsearch:
    """An asyncio elasticsearch-py client (aiohttp); same options as :func:`make_client`. Elasticsearch only:
    :func:`connect_async` picks the engine."""
    # lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up
    from elasticsearch import AsyncElasticsearch

    logger.debug("connecting (async) to %s", settings.url)
    return AsyncElasticsearch(settings.urls, **settings.client_options(**overrides))


async def connect_async(settings: ConnectionSettings, **overrides: Any) -> AsyncElasticsearch:
    """An asyncio client for the engine at ``settings.url`` (see :func:`make_client`).

    Transport errors of the probe propagate as elasticsearch-py's (callers retry them).

    Raises:
        EsError: the server is OpenSearch and opensearch-py is not installed.
    """
    client = make_async_client(settings, **overrides)
    try:
        response = await client.transport.perform_request(
            "GET", "/", headers=_probe_headers(settings), **_probe_retries(overrides)
        )
        if engine_from_root(int(response.meta.status), response.body) == "elasticsearch":
            return client
    except BaseException:
        await client.close()
        raise
    await client.close()
    try:
        return async_opensearch_client(settings, **overrides)  # type: ignore[return-value]
    except ImportError:
        raise EsError(missing_opensearch_py(safe_url(settings.url))) from None


def _probe_retries(overrides: dict[str, Any]) -> dict[str, Any]:
    """The caller's retry options for the probe too: the transport's own defaults (3 retries, each logged with a
    traceback) would otherwise apply, as a raw transport request does not see the client's options."""
    return {name: overrides[name] for name in ("max_retries", "retry_on_timeout") if name in overrides}


def _probe_headers(settings: ConnectionSettings) -> dict[str, str]:
    """Headers of the engine probe: plain JSON and the credentials (the transport alone adds none)."""
    headers = dict(PROBE_HEADERS)
    if settings.api_key:
        key = settings.api_key
        headers["authorization"] = "ApiKey " + (base64.b64encode(key.encode()).decode() if ":" in key else key)
    elif settings.username is not None:
        pair = f"{settings.username}:{settings.password or ''}".encode()
        headers["authorization"] = "Basic " + base64.b64encode(pair).decode()
    return headers


def _for_engine(
    client: Elasticsearch, settings: ConnectionSettings, status: int, body: Any, overrides: dict[str, Any]
) -> Elasticsearch:
    if engine_from_root(status, body) == "elasticsearch":
        return client
    client.close()
    try:
        return opensearch_client(settings, **overrides)  # type: ignore[return-value]
    except ImportError:
        raise EsError(missing_opensearch_py(safe_url(settings.url))) from None


def describe_error(exc: BaseException, url: str, unreachable_hint: str = "") -> str:
    """One line saying what went wrong with a request to ``url`` and what to check; never holds secrets.
    ``unreachable_hint`` is added when no node answered (connection refused, timeout)."""
    # lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up
    from elastic_transport import ConnectionError as TransportConnectionError
    from elastic_transport import ConnectionTimeout, TlsError
    from elasticsearch import ApiError, AuthenticationException, AuthorizationException

    where = safe_url(url)
    if isinstance(exc, AuthenticationException):
        return f"authentication failed at {where} (HTTP 401): check the username and password, or the API key"
    if isinstance(exc, AuthorizationException):
        return f"permission denied at {where} (HTTP 403): {_reason(exc)}"
    if isinstance(exc, ApiError) and "media_type_header_exception" in _reason(exc) and client_major() >= 9:
        return (
            f"Elasticsearch at {where} refuses elasticsearch-py {client_major()}.x requests (an 8.x server?): "
            "use elasticsearch-py 8 with Elasticsearch 8 (pip install 'elasticsearch>=8.12,<9')"
        )
    if isinstance(exc, ApiError):
        return f"Elasticsearch at {where} answered HTTP {exc.meta.status}: {_reason(exc)}"
    if isinstance(exc, TlsError):
        return (
            f"TLS connection to {where} failed ({_short(exc)}); give the CA certificate that signed the cluster's "
            "certificate with --ca-certs"
        )
    hint = f"; {unreachable_hint}" if unreachable_hint else ""
    if isinstance(exc, ConnectionTimeout):
        return f"request to {where} timed out ({_short(exc)}){hint}"
    if isinstance(exc, TransportConnectionError):
        return f"cannot connect to Elasticsearch at {where} ({_short(exc)}){hint}"
    return f"request to {where} failed: {type(exc).__name__}: {_short(exc)}"


@contextlib.contextmanager
def translate_errors(url: str, what: str = "", *, unreachable_hint: str = "") -> Iterator[None]:
    """Re-raise client and transport errors as :class:`EsError` with :func:`describe_error`'s message.

    Works around ``await`` calls too. ``what`` prefixes the message (e.g. ``"creating index pages"``);
    ``unreachable_hint``: see :func:`describe_error`.
    """
    # lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up
    from elastic_transport import TransportError
    from elasticsearch import ApiError

    try:
        yield
    except (ApiError, TransportError) as exc:
        message = describe_error(exc, url, unreachable_hint)
        raise EsError(f"{what}: {message}" if what else message) from None


def _reason(exc: Any) -> str:
    """``type: reason`` of an API error body (root cause first), else the status text."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        causes = error.get("root_cause") or []
        first = causes[0] if causes and isinstance(causes[0], dict) else error
        kind, reason = first.get("type", "error"), first.get("reason", "")
        return f"{kind}: {reason}" if reason else str(kind)
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])[:300]
    return str(getattr(exc, "message", "") or type(exc).__name__)[:300]


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "message", "") or exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
