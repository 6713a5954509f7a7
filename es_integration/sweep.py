"""Point-in-time sweeps: every document matching a query, once, as of one moment, in pages.

A point in time (PIT) freezes the index's view; ``search_after`` on the ``_shard_doc`` tiebreaker walks it
without the deep-paging limit and without holding a scroll context per page. Writes made during the sweep
(bulk updates of the swept documents, for instance) are invisible to it, so a sweep never sees a document
twice. (This mirrors ``elasticsearch.dsl.Search.iterate``; it is written against the plain client.)
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch


logger = logging.getLogger(__name__)


@dataclass
class PointInTime:
    """An open point in time; ``id`` may change with every search that uses it (always use the latest)."""

    id: str
    keep_alive: str

    def body(self) -> dict[str, Any]:
        """The ``pit`` clause of a search body."""
        return {"id": self.id, "keep_alive": self.keep_alive}


@contextlib.contextmanager
def point_in_time(client: Elasticsearch, index: str, keep_alive: str = "5m") -> Iterator[PointInTime]:
    """Open a point in time over ``index`` and close it on exit (also on error)."""
    pit = PointInTime(client.open_point_in_time(index=index, keep_alive=keep_alive)["id"], keep_alive)
    try:
        yield pit
    finally:
        try:
            client.close_point_in_time(id=pit.id)
        except Exception:  # noqa: BLE001 - closing is best effort; it expires after keep_alive anyway
            logger.debug("could not close point in time", exc_info=True)


def sweep(
    client: Elasticsearch,
    pit: PointInTime,
    *,
    query: dict[str, Any] | None = None,
    source: bool | list[str] = True,
    page_size: int = 1000,
    **search_options: Any,
) -> Iterator[list[dict[str, Any]]]:
    """Pages of hits (lists of ``{"_id", "_index", "_source", ...}``) of every document matching ``query``.

    Args:
        pit: from :func:`point_in_time`; its ``id`` is updated as Elasticsearch renews it.
        query: a query clause (default: all documents).
        source: ``_source`` filtering (``False`` for none, or a list of fields).
        page_size: hits per request.
        search_options: further search body options (e.g. ``docvalue_fields``).
    """
    search_after: list[Any] | None = None
    while True:
        response = client.search(
            pit=pit.body(),
            query=query or {"match_all": {}},
            source=source if isinstance(source, bool) else {"includes": list(source)},
            size=page_size,
            sort=["_shard_doc"],
            search_after=search_after,
            track_total_hits=False,
            **search_options,
        )
        pit.id = response.get("pit_id", pit.id)
        hits = response.get("hits", {}).get("hits", [])
        if not hits:
            return
        yield hits
        if len(hits) < page_size:
            return
        search_after = hits[-1]["sort"]


#: Parts of a sweep response that are used (``filter_path``): less JSON to build, send and parse.
SWEEP_FILTER = "pit_id,hits.hits._id,hits.hits._index,hits.hits.fields,hits.hits._source,hits.hits.sort"


def sliced_sweep(
    client: Elasticsearch,
    pit: PointInTime,
    *,
    query: dict[str, Any] | None = None,
    slices: int = 2,
    page_size: int = 1000,
    source: bool | list[str] = False,
    docvalue_fields: list[str] | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """Pages of hits of every document matching ``query``, read by ``slices`` threads in parallel slices of one
    point in time (each slice a :func:`sweep` of its own; the client is thread-safe), in no fixed order.

    Parsing the responses is most of the client's work, so the threads overlap it with Elasticsearch's; only
    the fields asked for are returned (``filter_path``). At most ``slices`` pages wait in memory.
    """
    if slices < 1:
        raise ValueError(f"slices must be positive, got {slices}")
    options: dict[str, Any] = {"filter_path": SWEEP_FILTER}
    if docvalue_fields:
        options["docvalue_fields"] = [{"field": f} for f in docvalue_fields]
    if slices == 1:
        yield from sweep(client, pit, query=query, source=source, page_size=page_size, **options)
        return
    pages: queue.Queue[Any] = queue.Queue(maxsize=slices)
    stop = threading.Event()
    done = object()

    def run(slice_id: int) -> None:
        own = PointInTime(pit.id, pit.keep_alive)
        try:
            for hits in sweep(client, own, query=query, source=source, page_size=page_size,
                              slice={"id": slice_id, "max": slices}, **options):
                while not stop.is_set():
                    try:
                        pages.put(hits, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            pages.put(done)
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread, which raises it
            pages.put(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True, name=f"sweep-slice-{i}") for i in range(slices)]
    for thread in threads:
        thread.start()
    try:
        running = slices
        while running:
            item = pages.get()
            if item is done:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()
        while any(t.is_alive() for t in threads):  # unblock writers waiting on a full queue
            with contextlib.suppress(queue.Empty):
                pages.get(timeout=0.05)
        for thread in threads:
            thread.join()
