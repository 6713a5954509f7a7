"""Bulk writes that ride out rejections: the one way every ``neardup es`` command writes documents.

Design notes: docs/architecture.md#es_integrationbulk
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from typing import Any

from .opensearch_adapter import bulk_helpers

logger = logging.getLogger(__name__)

REJECTED = 429


class Chunking:
    """The chunk size of one run of :func:`write_bulk`: it starts at ``chunk_size`` and halves on rejections.

    Attributes:
        size: documents per bulk request now.
        smallest: the smallest size used (``size`` never grows back).
        rejections: rejected requests and items met (each retried or split).
    """

    def __init__(self, chunk_size: int) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk size must be at least 1, not {chunk_size}")
        self.size = chunk_size
        self.smallest = chunk_size
        self.rejections = 0

    def shrink(self, to: int) -> None:
        if to < self.size:
            logger.info("bulk request rejected (HTTP 429): %d documents per request from now on", to)
            self.size = to
            self.smallest = min(self.smallest, to)


def _status(info: Any) -> int:
    op = next(iter(info.values()), {}) if isinstance(info, dict) and len(info) == 1 else info
    return int(op.get("status", 0)) if isinstance(op, dict) else 0


def _send(helpers: Any, client: Any, part: list[Any]) -> tuple[list[tuple[bool, Any]], list[Any], Any]:
    """One bulk request of ``part``: its results in order, the rejected actions, and one rejection's info."""
    from elasticsearch import ApiError  # lazy: elasticsearch-py is slow to import

    try:
        results = list(helpers.streaming_bulk(client, part, chunk_size=len(part), raise_on_error=False,
                                              raise_on_exception=True, max_retries=0))
    except ApiError as exc:
        if exc.meta.status != REJECTED:
            raise
        error = exc.body.get("error") if isinstance(exc.body, dict) else None
        reason = str(error.get("reason", error)) if isinstance(error, dict) else str(exc.body)
        kind = str(error.get("type", "es_rejected_execution_exception")) if isinstance(error, dict) else "rejected"
        info = {"index": {"_id": part[0].get("_id", "?"), "status": REJECTED,
                          "error": {"type": kind, "reason": reason}}}
        return [], part, info
    done: list[tuple[bool, Any]] = []
    rejected: list[Any] = []
    last: Any = None
    for action, (ok, info) in zip(part, results, strict=True):
        if not ok and _status(info) == REJECTED:
            rejected.append(action)
            last = info
        else:
            done.append((ok, info))
    return done, rejected, last


def write_bulk(
    client: Any,
    actions: Iterable[dict[str, Any]],
    *,
    chunk_size: int = 500,
    retries: int = 3,
    backoff: float = 0.5,
    chunking: Chunking | None = None,
    threads: int = 1,
) -> Iterator[tuple[bool, Any]]:
    """Write ``actions`` (``streaming_bulk`` actions) in bulk requests of ``chunk_size``; yield ``(ok, info)`` once
    per action as ``streaming_bulk`` does, rejections ridden out as the module doc says (a retried document's
    result comes after those of its chunk's others).

    Args:
        chunk_size: documents per bulk request to start with (``c``; halved on rejections down to 1).
        threads: bulk requests in flight at once (worker threads; this thread keeps producing the actions,
            e.g. sketching, meanwhile). Results come chunk by chunk in the order of the chunks.
        retries: retries of a single rejected document, ``backoff * 2**i`` seconds before retry ``i + 1``.
        chunking: pass one to read the sizes used afterwards (a fresh one from ``chunk_size`` otherwise).

    Raises:
        elasticsearch.ApiError: a whole-request failure other than HTTP 429 (the client has retried what it
            retries).
    """
    state = chunking if chunking is not None else Chunking(chunk_size)
    if threads <= 1:
        source = iter(actions)
        while chunk := list(islice(source, state.size)):
            yield from _write_chunk(client, chunk, state, retries, backoff)
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="neardup-bulk") as pool:
        in_flight: deque[Future[list[tuple[bool, Any]]]] = deque()
        source = iter(actions)
        while chunk := list(islice(source, state.size)):
            in_flight.append(pool.submit(lambda c: list(_write_chunk(client, c, state, retries, backoff)), chunk))
            while len(in_flight) >= 2 * threads:  # bounded memory: a few chunks ahead of the slowest request
                yield from in_flight.popleft().result()
        while in_flight:
            yield from in_flight.popleft().result()


def _write_chunk(client: Any, chunk: list[Any], state: Chunking, retries: int,
                 backoff: float) -> Iterator[tuple[bool, Any]]:
    helpers = bulk_helpers(client)
    queue: deque[list[Any]] = deque([chunk])
    tries: dict[int, int] = {}
    while queue:
        part = queue.popleft()
        done, rejected, info = _send(helpers, client, part)
        yield from done  # a rejected part is split in place: results stay in order only per part
        if not rejected:
            continue
        state.rejections += 1
        if len(rejected) > 1:
            half = len(rejected) // 2
            state.shrink(half)
            time.sleep(backoff)
            queue.extendleft(reversed([rejected[i:i + half] for i in range(0, len(rejected), half)]))
            continue
        key = id(rejected[0])
        tries[key] = tries.get(key, 0) + 1
        if tries[key] > retries:
            logger.warning("a document was rejected %d times (HTTP 429); given up", tries[key])
            yield False, info
            continue
        time.sleep(backoff * 2 ** (tries[key] - 1))
        queue.appendleft(rejected)
