"""The other engine: OpenSearch 2.x and 3.x behind the elasticsearch-py 8 API that the rest of ``es_integration``
speaks.

Design notes: docs/architecture.md#es_integrationopensearch_adapter
"""

from __future__ import annotations

import base64
import contextlib
import functools
import inspect
import logging
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:
    from .connection import ConnectionSettings


logger = logging.getLogger(__name__)

EngineName = Literal["elasticsearch", "opensearch"]
ELASTICSEARCH: EngineName = "elasticsearch"
OPENSEARCH: EngineName = "opensearch"

#: Request headers of the probe: plain JSON, no vendor media type (elasticsearch-py 9 asks for ``compatible-with=9``,
#: which OpenSearch does not know).
PROBE_HEADERS = {"accept": "application/json"}


def engine_from_root(status: int, body: Any) -> EngineName:
    """The engine behind an answer to ``GET /``: OpenSearch says so in ``version.distribution``; anything else
    (Elasticsearch's answer, its 405 without the root module, 401/403 without the privilege) is Elasticsearch."""
    version = body.get("version") if isinstance(body, dict) else None
    if 200 <= status < 300 and isinstance(version, dict) and version.get("distribution") == OPENSEARCH:
        return OPENSEARCH
    return ELASTICSEARCH


def engine_of(client: Any) -> EngineName:
    """The engine a client built by :mod:`es_integration.client` talks to."""
    return OPENSEARCH if isinstance(client, _Facade) else ELASTICSEARCH


def missing_opensearch_py(url: str) -> str:
    """The one line for an OpenSearch server when opensearch-py is not installed."""
    return (
        f"the server at {url} is OpenSearch, which needs opensearch-py: pip install 'scrapy-neardup[opensearch]'"
    )


# -- requests: elasticsearch-py 8 keyword arguments -> opensearch-py body and params ----------------------------

_SEARCH_BODY = frozenset({
    "query", "size", "from_", "sort", "source", "_source", "collapse", "pit", "search_after", "slice",
    "track_total_hits", "aggs", "aggregations", "fields", "docvalue_fields", "stored_fields", "highlight",
    "min_score", "post_filter", "rescore", "suggest", "explain", "version", "seq_no_primary_term",
    "script_fields", "track_scores", "terminate_after", "indices_boost", "profile", "ext", "timeout",
})
#: Per method (dotted for namespaces): the keyword arguments that elasticsearch-py 8 sends in the body.
_BODY_FIELDS: dict[str, frozenset[str]] = {
    "search": _SEARCH_BODY,
    "count": frozenset({"query"}),
    "delete_by_query": frozenset({"query", "slice", "max_docs"}),
    "update_by_query": frozenset({"query", "slice", "max_docs", "script"}),
    "update": frozenset({"doc", "script", "upsert", "doc_as_upsert", "scripted_upsert", "detect_noop", "source",
                         "_source"}),
    "mget": frozenset({"docs", "ids"}),
    "indices.create": frozenset({"mappings", "settings", "aliases"}),
    "indices.put_mapping": frozenset({"properties", "dynamic", "_meta", "meta", "_source", "runtime",
                                      "dynamic_templates", "date_detection", "numeric_detection"}),
    "indices.put_index_template": frozenset({"index_patterns", "template", "priority", "composed_of", "_meta", "meta",
                                             "version", "data_stream"}),
    "cluster.put_component_template": frozenset({"template", "_meta", "meta", "version"}),
}
#: Arguments that are the whole body in elasticsearch-py 8.
_WHOLE_BODY = {"document": None, "operations": None, "searches": None, "indices.put_settings": "settings"}
_RENAMED = {"from_": "from", "source": "_source", "meta": "_meta", "source_includes": "_source_includes",
            "source_excludes": "_source_excludes"}


#: OpenSearch 2.x has no ``_shard_doc``; under a point in time ``_doc`` alone loses hits whose Lucene doc ids tie
#: across shards at a page boundary, so ``_id`` breaks the ties (fielddata on ``_id``: deprecated, still allowed in
#: 2.19 and 3.4, which the tests run against).
_SHARD_DOC = [{"_doc": "asc"}, {"_id": "asc"}]


def _opensearch_sort(sort: Any) -> Any:
    """``sort`` with Elasticsearch's ``_shard_doc`` tiebreaker replaced by :data:`_SHARD_DOC`."""
    if not isinstance(sort, list):
        sort = [sort]
    out: list[Any] = []
    for entry in sort:
        name = entry if isinstance(entry, str) else next(iter(entry), None) if isinstance(entry, dict) else None
        out.extend(_SHARD_DOC if name == "_shard_doc" else [entry])
    return out


def _param(value: Any) -> Any:
    """A query-string value as opensearch-py's own decorator escapes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return value


def _transport_timeout(func: Callable[..., Any]) -> Any:
    """The request timeout the opensearch-py client (or namespace) behind the bound method ``func`` was built
    with."""
    transport = getattr(getattr(func, "__self__", None), "transport", None)
    return getattr(transport, "kwargs", {}).get("timeout") or 10


def _translate_args(path: str, func: Callable[..., Any], kwargs: dict[str, Any],
                    defaults: dict[str, Any]) -> dict[str, Any]:
    """opensearch-py keyword arguments for an elasticsearch-py 8 style call of ``path``."""
    accepted = set(inspect.signature(func).parameters)
    body_fields = _BODY_FIELDS.get(path, frozenset())
    whole = _WHOLE_BODY.get(path)
    out: dict[str, Any] = {}
    body: dict[str, Any] = {}
    params: dict[str, Any] = dict(defaults)
    for key, value in kwargs.items():
        if value is None:
            continue
        if key in ("document", "operations", "searches") or key == whole or key == "body":
            out["body"] = value
        elif key in body_fields:
            body[_RENAMED.get(key, key)] = value
        elif key in accepted and key not in ("params", "headers", "body"):
            out[key] = value
        elif key == "headers":
            out["headers"] = value
        else:
            name = _RENAMED.get(key, key)
            params[name] = value if name in ("ignore", "request_timeout") else _param(value)
    if "timeout" in params and "request_timeout" not in params:
        # opensearch-py's transport takes a ``timeout`` query parameter (the server's wait, "30s") for the request
        # timeout when no ``request_timeout`` is given, and urllib3 then refuses "30s": give the client's own.
        params["request_timeout"] = _transport_timeout(func)
    if "sort" in body:
        body["sort"] = _opensearch_sort(body["sort"])
    if body:
        out["body"] = {**out.get("body", {}), **body}
    if params:
        out["params"] = params
    return out


# -- responses and errors -----------------------------------------------------------------------------------------


class _Response(dict[str, Any]):
    """An opensearch-py answer with elasticsearch-py's ``.body`` (the answer itself)."""

    @property
    def body(self) -> dict[str, Any]:
        return self


def _response(value: Any) -> Any:
    return _Response(value) if isinstance(value, dict) else value


def translated_error(exc: Exception) -> Exception:
    """elasticsearch-py's exception for an opensearch-py one (same status, same body), so callers catch one kind."""
    # lazy: opensearch-py is optional; elasticsearch-py takes ~0.6 s to import (every `neardup` start-up)
    import opensearchpy
    from elastic_transport import ApiResponseMeta, ConnectionTimeout, HttpHeaders, NodeConfig, TlsError
    from elastic_transport import ConnectionError as TransportConnectionError
    from elasticsearch import ApiError
    from elasticsearch.exceptions import HTTP_EXCEPTIONS

    if isinstance(exc, opensearchpy.ConnectionTimeout):
        return ConnectionTimeout(str(exc.info or exc.error))
    if isinstance(exc, opensearchpy.SSLError):
        return TlsError(str(exc.info or exc.error))
    if isinstance(exc, opensearchpy.ConnectionError):
        return TransportConnectionError(str(exc.info or exc.error))
    if isinstance(exc, opensearchpy.TransportError) and isinstance(exc.status_code, int):
        meta = ApiResponseMeta(
            status=exc.status_code, http_version="1.1", headers=HttpHeaders(), duration=0.0,
            node=NodeConfig("http", "opensearch", 0),
        )
        body = exc.info if exc.info is not None else exc.error
        cls = HTTP_EXCEPTIONS.get(exc.status_code, ApiError)
        return cls(message=str(exc.error), meta=meta, body=body)
    return exc


def _rethrow(exc: Exception) -> None:
    # lazy: opensearch-py is optional (the "opensearch" extra)
    import opensearchpy

    if isinstance(exc, opensearchpy.TransportError | opensearchpy.ImproperlyConfigured):
        raise translated_error(exc) from None
    raise exc


#: elasticsearch-py API names that OpenSearch 2.x and 3.x serve under another name (the old one answers with a
#: deprecation warning): the last part of the path, renamed.
_RENAMED_APIS = {"cat.master": "cluster_manager"}


# -- the clients ----------------------------------------------------------------------------------------------------


class _Facade:
    """Shared by the sync and async wrappers: attribute access builds translated calls."""

    _namespaces = ("indices", "cluster", "nodes", "cat", "tasks", "snapshot", "ingest")

    def __init__(self, raw: Any, path: str = "", defaults: dict[str, Any] | None = None) -> None:
        self._raw = raw
        self._path = path
        self._defaults = defaults or {}

    @property
    def raw(self) -> Any:
        """The opensearch-py client (or namespace) underneath."""
        return self._raw

    def options(self, **options: Any) -> Any:
        """elasticsearch-py's ``options()``: ``ignore_status`` and ``request_timeout`` apply per request; retry
        options are the client's (opensearch-py has no per-request retries)."""
        defaults = dict(self._defaults)
        if options.get("ignore_status") is not None:
            status = options["ignore_status"]
            defaults["ignore"] = tuple(status) if isinstance(status, list | tuple) else (status,)
        if options.get("request_timeout") is not None:
            defaults["request_timeout"] = options["request_timeout"]
        return type(self)(self._raw, self._path, defaults)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        path = f"{self._path}.{name}" if self._path else name
        target = getattr(self._raw, _RENAMED_APIS.get(path, name))
        if name in self._namespaces:
            return type(self)(target, path, self._defaults)
        return self._call(path, target)

    def _call(self, path: str, func: Callable[..., Any]) -> Callable[..., Any]:
        raise NotImplementedError


class OpenSearchClient(_Facade):
    """An ``opensearchpy.OpenSearch`` that takes elasticsearch-py 8 arguments and raises its exceptions."""

    def _call(self, path: str, func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def call(**kwargs: Any) -> Any:
            try:
                return _response(func(**_translate_args(path, func, kwargs, self._defaults)))
            except Exception as exc:  # noqa: BLE001 - translated or re-raised as is
                _rethrow(exc)
                raise

        return call

    def open_point_in_time(self, *, index: str, keep_alive: str, **kwargs: Any) -> dict[str, Any]:
        """``{"id": ...}`` as from Elasticsearch (OpenSearch answers ``pit_id``)."""
        answer = self._call("create_pit", self._raw.create_pit)(index=index, keep_alive=keep_alive, **kwargs)
        return _Response(answer, id=answer["pit_id"])

    def close_point_in_time(self, *, id: str, **kwargs: Any) -> Any:  # noqa: A002 - elasticsearch-py's name
        return self._call("delete_pit", self._raw.delete_pit)(body={"pit_id": [id]}, **kwargs)

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> OpenSearchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncOpenSearchClient(_Facade):
    """An ``opensearchpy.AsyncOpenSearch`` (aiohttp) that takes elasticsearch-py 8 arguments."""

    def _call(self, path: str, func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        async def call(**kwargs: Any) -> Any:
            try:
                return _response(await func(**_translate_args(path, func, kwargs, self._defaults)))
            except Exception as exc:  # noqa: BLE001
                _rethrow(exc)
                raise

        return call

    async def open_point_in_time(self, *, index: str, keep_alive: str, **kwargs: Any) -> dict[str, Any]:
        answer = await self._call("create_pit", self._raw.create_pit)(index=index, keep_alive=keep_alive, **kwargs)
        return _Response(answer, id=answer["pit_id"])

    async def close_point_in_time(self, *, id: str, **kwargs: Any) -> Any:  # noqa: A002
        return await self._call("delete_pit", self._raw.delete_pit)(body={"pit_id": [id]}, **kwargs)

    async def close(self) -> None:
        await self._raw.close()


#: elastic-transport's default ``retry_on_status``.
_TRANSPORT_RETRY_STATUSES = (429, 502, 503, 504)


def _client_options(settings: ConnectionSettings, overrides: dict[str, Any]) -> dict[str, Any]:
    """opensearch-py constructor options equivalent to elasticsearch-py's ``settings.client_options()``."""
    # elasticsearch-py's transport retries 429 as well as 502/503/504 (opensearch-py's default leaves 429 out):
    # the same rule on both engines, so a whole-request 429 (an index check, a refresh) is retried here too.
    options: dict[str, Any] = {"timeout": settings.request_timeout, "retry_on_status": _TRANSPORT_RETRY_STATUSES}
    if settings.api_key:
        key = settings.api_key
        encoded = base64.b64encode(key.encode()).decode() if ":" in key else key
        options["headers"] = {"authorization": f"ApiKey {encoded}"}
    elif settings.username is not None:
        options["http_auth"] = (settings.username, settings.password or "")
    if settings.url.startswith("https://"):
        options["verify_certs"] = True
        if settings.ca_certs:
            options["ca_certs"] = settings.ca_certs
    for key, value in overrides.items():
        if key == "request_timeout":
            options["timeout"] = value
        elif key in ("max_retries", "retry_on_timeout", "retry_on_status"):
            options[key] = value
        else:
            logger.debug("option %s has no opensearch-py equivalent; ignored", key)
    return options


def _quiet_id_fielddata() -> None:
    """The ``_id`` tiebreaker (see :data:`_SHARD_DOC`) makes OpenSearch send a deprecation header on every sweep
    page, which opensearch-py turns into a warning; that one is expected here."""
    # lazy: opensearch-py is optional (the "opensearch" extra)
    from opensearchpy.exceptions import OpenSearchWarning

    warnings.filterwarnings("ignore", message="Loading the fielddata on the _id field", category=OpenSearchWarning)


def opensearch_client(settings: ConnectionSettings, **overrides: Any) -> OpenSearchClient:
    """A synchronous OpenSearch client (``opensearchpy`` must be importable)."""
    # lazy: opensearch-py is optional (the "opensearch" extra)
    from opensearchpy import OpenSearch

    _quiet_id_fielddata()
    return OpenSearchClient(OpenSearch(settings.urls, **_client_options(settings, overrides)))


def async_opensearch_client(settings: ConnectionSettings, **overrides: Any) -> AsyncOpenSearchClient:
    """An asyncio OpenSearch client on aiohttp."""
    # lazy: opensearch-py is optional (the "opensearch" extra)
    from opensearchpy import AsyncOpenSearch

    _quiet_id_fielddata()
    return AsyncOpenSearchClient(AsyncOpenSearch(settings.urls, **_client_options(settings, overrides)))


# -- bulk helpers ---------------------------------------------------------------------------------------------------


def _translated_bulk_error(exc: Exception) -> Exception:
    # lazy: opensearch-py is optional; elasticsearch-py takes ~0.6 s to import (every `neardup` start-up)
    from elasticsearch.helpers import BulkIndexError
    from opensearchpy.helpers import BulkIndexError as OsBulkIndexError

    if isinstance(exc, OsBulkIndexError):
        return BulkIndexError(str(exc.args[0]) if exc.args else "bulk failed", list(exc.errors))
    return translated_error(exc)


def _guarded(results: Iterable[Any]) -> Iterator[Any]:
    try:
        yield from results
    except Exception as exc:  # noqa: BLE001
        translated = _translated_bulk_error(exc)
        if translated is exc:
            raise
        raise translated from None


def bulk_helpers(client: Any) -> Any:
    """``streaming_bulk``, ``parallel_bulk`` and ``bulk`` for ``client``'s engine, same arguments and results;
    on OpenSearch their ``BulkIndexError`` and transport errors come out as elasticsearch-py's."""
    if not isinstance(client, OpenSearchClient):
        # lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up
        from elasticsearch import helpers

        return helpers
    # lazy: opensearch-py is optional (the "opensearch" extra)
    from opensearchpy import helpers as os_helpers

    def streaming_bulk(_client: Any, actions: Iterable[Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
        return _guarded(os_helpers.streaming_bulk(_client.raw, actions, *args, **kwargs))

    def parallel_bulk(_client: Any, actions: Iterable[Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
        return _guarded(os_helpers.parallel_bulk(_client.raw, actions, *args, **kwargs))

    def bulk(_client: Any, actions: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return os_helpers.bulk(_client.raw, actions, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            translated = _translated_bulk_error(exc)
            if translated is exc:
                raise
            raise translated from None

    return SimpleNamespace(streaming_bulk=streaming_bulk, parallel_bulk=parallel_bulk, bulk=bulk)


class _AsyncBulkTarget:
    """What elasticsearch-py's ``async_streaming_bulk`` uses of a client (``options``, the JSON serializer,
    ``bulk``), over either engine's asynchronous client; each bulk request runs within ``around_request()``."""

    def __init__(self, client: Any, around_request: Callable[[], AbstractContextManager[Any]] | None) -> None:
        self._client = client
        self._around = around_request or contextlib.nullcontext
        self._client_meta: tuple[tuple[str, str], ...] = ()

    def options(self, **options: Any) -> _AsyncBulkTarget:
        return _AsyncBulkTarget(self._client.options(**options), self._around) if options else self

    @property
    def transport(self) -> Any:
        if not isinstance(self._client, AsyncOpenSearchClient):
            return self._client.transport
        # lazy: only a crawl writing a search index pays for it
        from elastic_transport import JsonSerializer

        serializer = JsonSerializer()
        return SimpleNamespace(serializers=SimpleNamespace(get_serializer=lambda _mimetype: serializer))

    async def bulk(self, *, operations: list[bytes], **kwargs: Any) -> Any:
        with self._around():
            if isinstance(self._client, AsyncOpenSearchClient):  # opensearch-py takes one body, not a list of lines
                return await self._client.bulk(operations=b"\n".join(operations) + b"\n", **kwargs)
            return await self._client.bulk(operations=operations, **kwargs)


def async_streaming_bulk(client: Any, actions: Any, *,
                         around_request: Callable[[], AbstractContextManager[Any]] | None = None,
                         **kwargs: Any) -> AsyncIterator[tuple[bool, Any]]:
    """elasticsearch-py's ``async_streaming_bulk`` (same arguments and results, ``BULK_FLUSH`` and
    ``retry_on_status`` included) over either engine's asynchronous client, each bulk request (a retry included)
    made within ``around_request()``; on OpenSearch its errors come out as elasticsearch-py's."""
    # lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up
    from elasticsearch.helpers import async_streaming_bulk as helper

    return cast("AsyncIterator[tuple[bool, Any]]", helper(cast(Any, _AsyncBulkTarget(client, around_request)),
                                                        actions, **kwargs))
