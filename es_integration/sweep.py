"""Point-in-time sweeps: every document matching a query, once, as of one moment, in pages.

A point in time (PIT) freezes the index's view; ``search_after`` on the ``_shard_doc`` tiebreaker walks it
without the deep-paging limit and without holding a scroll context per page. Writes made during the sweep
(bulk updates of the swept documents, for instance) are invisible to it, so a sweep never sees a document
twice. (This mirrors ``elasticsearch.dsl.Search.iterate``; it is written against the plain client.)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

__all__ = ["PointInTime", "point_in_time", "sweep"]

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
        hits = response["hits"]["hits"]
        if not hits:
            return
        yield hits
        if len(hits) < page_size:
            return
        search_after = hits[-1]["sort"]
