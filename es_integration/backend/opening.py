"""The opening of the crawler backend's index: :func:`open_index` creates the index and its sequencer (or checks
the existing ones) and decides whether candidates may come from the band query (see :mod:`.searches`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from elasticsearch import ApiError

from scrapy_neardup.core.stored_signature import band_layout
from scrapy_neardup.errors import EsError

from ..mapping import (
    F_POSITIONS,
    F_SIG,
    F_STATUS,
    F_TAG,
    INDEX_NOT_FOUND,
    KEPT,
    PENDING,
    ensure_index_async,
    error_type,
    require_tag_async,
)
from .sequencer import Sequencer
from .transport import _POLL_FIRST, _POLL_MAX

if TYPE_CHECKING:
    from scrapy_neardup.core.params import SketchParams

    from .transport import Transport

#: One logger for the package, under the name it had as one module: log filters and tests select it.
logger = logging.getLogger("es_integration.backend")

T = TypeVar("T")


class _NoShardYet(EsError):
    """A just-created index still has no active shard after a few seconds."""


async def open_index(
    transport: Transport, params: SketchParams, *, shards: int, pending_timeout: float
) -> tuple[bool, Sequencer]:
    """Create ``transport.index`` (``shards`` primary shards) unless it exists, refuse one holding sketches of
    another tag, and open its sequencer.

    Returns:
        whether candidates may come from the band query (:func:`bands_usable`), and the open sequencer.

    Raises:
        TagMismatch: the index holds sketches of another tag.
        EsError: the index holds pages the threshold ``params.min_shared`` cannot search (the message says what
            to do).
        ApiError, TransportError: a request failed (the caller retries: :meth:`.Transport.call`).
    """
    es, index = transport.es, transport.index
    # best_compression: the stored fields are a page's largest part (~15% smaller pages, measured). Settling:
    # a crawler that lost the race to create the index updates its mapping next, maybe on a node that has not
    # applied the new index yet.
    await _settling(index, lambda: ensure_index_async(es, index, shards=shards, settings={"codec": "best_compression"},
                                                      request_timeout=transport.settings.request_timeout))
    # A store of other sketches: one clear line, no silent mix.
    await _settling(index, lambda: require_tag_async(es, index, params.tag))
    bands = await bands_usable(transport, params)
    sequencer = Sequencer(es, index, pending_timeout=pending_timeout)
    await sequencer.open()
    return bands, sequencer


async def bands_usable(transport: Transport, params: SketchParams) -> bool:
    """Whether candidates can come from the band query: ``t >= t0`` (the stored band layout's), and no kept
    or pending document lacks the band fields (written by an older version: then positions are used for
    the whole run, so that such documents stay candidates; ``neardup es backfill`` adds the fields).

    Raises:
        EsError: ``t < t0`` and the index holds pages without position tokens (:func:`_require_positions`).
    """
    if params.min_shared < band_layout(params.num_perm):
        await _require_positions(transport, params)
        return False
    query = {"bool": {
        "filter": [{"term": {F_TAG: params.tag}}, {"terms": {F_STATUS: [KEPT, PENDING]}},
                   {"exists": {"field": F_POSITIONS}}],
        "must_not": [{"exists": {"field": F_SIG}}],
    }}
    old = await _count_settling(transport, query)
    if old is None:
        logger.warning("cannot count the pages of %s without band fields yet; using the position query",
                       transport.index)
        return False
    if old:
        logger.warning(
            "%d kept pages of %s have no band fields (indexed by an older version): candidates come from the "
            "slower position query; `neardup es backfill` adds the fields", old, transport.index,
        )
    return old == 0


async def _require_positions(transport: Transport, params: SketchParams) -> None:
    """A threshold below the band layout's needs the position query, hence position tokens on every kept
    page; pages written by crawlers with a higher threshold carry none (they need only bands).

    Raises:
        EsError: the index holds kept or pending pages without position tokens (the message says what to do).
    """
    query = {"bool": {
        "filter": [{"term": {F_TAG: params.tag}}, {"terms": {F_STATUS: [KEPT, PENDING]}},
                   {"exists": {"field": F_SIG}}],
        "must_not": [{"exists": {"field": F_POSITIONS}}],
    }}
    lacking = await _count_settling(transport, query)
    if lacking:
        k, t = params.num_perm, params.min_shared
        t0 = band_layout(k)
        raise EsError(
            f"index {transport.index} holds {lacking} pages stored without position tokens (written with a "
            f"threshold of at least {t0}/{k} shared positions), which this crawl's threshold of {t}/{k} needs: use "
            f"another NEARDUP_ES_INDEX, or a NEARDUP_THRESHOLD of at least {t0 / k:.3f}"
        )


async def _count_settling(transport: Transport, query: dict[str, Any]) -> int | None:
    """Count ``query``'s documents once the index answers (:func:`_settling`); ``None``: it still does not."""
    async def count() -> int:
        return int((await transport.es.count(index=transport.index, query=query))["count"])

    try:
        return await _settling(transport.index, count)
    except _NoShardYet:
        return None


async def _settling(index: str, request: Callable[[], Awaitable[T]]) -> T:
    """``request()``, waiting a little while the index is still settling: one another process (or this one, a
    moment ago) has just created may have no active shard yet (HTTP 503), and the node a request reaches may not
    have applied the cluster state that holds it yet (HTTP 404 ``index_not_found_exception`` for a few ms, seen
    on a 3-node cluster). Such waits are not request failures.

    Raises:
        _NoShardYet: still 503 after 5 s.
        NotFoundError: still 404 after 5 s (the index is really gone).
    """
    delay = _POLL_FIRST
    deadline = time.monotonic() + 5.0
    while True:
        try:
            return await request()
        except ApiError as exc:
            not_applied = exc.meta.status == 404 and error_type(exc) == INDEX_NOT_FOUND
            if exc.meta.status != 503 and not not_applied:
                raise
            if time.monotonic() >= deadline:
                if not_applied:
                    raise
                raise _NoShardYet(f"index {index} has no active shard yet") from None
        await asyncio.sleep(delay)
        delay = min(delay * 2, _POLL_MAX)
