"""How a groups run reads the index: the query of the documents sketched with a tag, the sliced sweep into
:class:`~es_integration.groups.model.SweptDocs`, the paged fetch of a query's hits, and the lowest ``seq`` that
crawlers are still deciding (which keeps the watermark below it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy_neardup.errors import EsError

from ..mapping import F_DUPLICATE_OF, F_GROUP, F_POSITIONS, F_SEQ, F_SIG, F_STATUS, F_TAG, PENDING
from ..sweep import SWEEP_FILTER, PointInTime, sliced_sweep, sweep
from .model import KeepRule, SweptDocs

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch


logger = logging.getLogger(__name__)

Progress = Callable[[int], Any]
#: Default sweep threads (slices of the point in time).
DEFAULT_SLICES = 2
#: Hits per request of those queries when the index does not say (Elasticsearch's default
#: ``index.max_result_window``): a query is answered in one request unless it matches more, since every further
#: page of a point-in-time search runs the whole terms query (its seeks) again.
_DEFAULT_WINDOW = 10_000
STATE_FIELDS = [F_SEQ, F_GROUP, F_STATUS, F_DUPLICATE_OF]


def sketched(tag: str, *extra: dict[str, Any], settled: bool = False) -> dict[str, Any]:
    """The documents sketched with ``tag`` that match ``extra``; with ``settled``, not those a crawler is deciding
    right now (status ``pending``)."""
    query: dict[str, Any] = {"bool": {"filter": [{"term": {F_TAG: tag}}, {"exists": {"field": F_SIG}}, *extra]}}
    if settled:
        query["bool"]["must_not"] = [{"term": {F_STATUS: PENDING}}]
    return query


def refuse_old_documents(client: Elasticsearch, index: str, tag: str) -> None:
    """Raise unless every document sketched with ``tag`` has the compact signature field."""
    query = {"bool": {"filter": [{"term": {F_TAG: tag}}, {"exists": {"field": F_POSITIONS}}],
                      "must_not": [{"exists": {"field": F_SIG}}]}}
    old = int(client.count(index=index, query=query)["count"])
    if old:
        raise EsError(
            f"{old} documents of {index} have position tokens but no compact signature (neardup.sig; indexed by an "
            f"older version): run `neardup es backfill --index {index} --text-field ...` first, which writes it "
            "from their positions"
        )


def sweep_into(
    client: Elasticsearch, pit: PointInTime, docs: SweptDocs, query: dict[str, Any], *, slices: int,
    page_size: int, progress: Progress | None, after_page: Callable[[], Any] | None = None,
) -> None:
    keep = docs.keep
    source: bool | list[str] = [keep.field] if keep.field else False
    for hits in sliced_sweep(client, pit, query=query, slices=slices, page_size=page_size, source=source,
                             docvalue_fields=[F_SIG, *STATE_FIELDS]):
        docs.add_page(hits)
        if progress is not None:
            progress(len(hits))
        if after_page is not None:
            after_page()



def lowest_pending_seq(client: Elasticsearch, pit: PointInTime, tag: str, index: str) -> int | None:
    """The lowest ``_seq_no`` of the pages crawlers were deciding in ``pit`` (status ``pending``), or None.

    The Elasticsearch backend writes a page ``pending`` and then its decision with ``seq`` = that first write's
    ``_seq_no``, so a page settled after a run may get a ``seq`` below the run's watermark, and ``--new`` would
    never take it. The backend decides a page only once every earlier write is visible (the checkpoint wait and
    refresh of its step c), so a page that can still settle below the highest ``seq`` a run saw is pending in that
    run's point in time: the watermark is kept below the lowest of them (:func:`below_pending`).
    """
    response = client.search(
        pit=pit.body(), query=sketched(tag, {"term": {F_STATUS: PENDING}}), source=False, size=1,
        sort=[{"_seq_no": "asc"}], track_total_hits=True, filter_path="pit_id,hits.total,hits.hits.sort",
    )
    pit.id = response.get("pit_id", pit.id)
    hits = response.get("hits", {}).get("hits", [])
    if not hits:
        return None
    lowest = int(hits[0]["sort"][0])
    logger.info("%d pages of %s were being decided by crawlers (pending): the watermark stays below seq %d, so "
                "the next --new takes them once settled", response["hits"]["total"]["value"], index, lowest)
    return lowest


def below_pending(max_seq: int | None, pending: int | None) -> int | None:
    """The watermark of a run that saw ``max_seq`` at most, kept below the lowest pending ``_seq_no``."""
    if max_seq is None or pending is None:
        return max_seq
    return min(max_seq, pending - 1)


def result_window(client: Elasticsearch, index: str) -> int:
    """The index's ``index.max_result_window`` (the most hits one search may return)."""
    settings = client.indices.get_settings(index=index, name="index.max_result_window", include_defaults=True)
    for body in settings.values():
        for part in ("settings", "defaults"):
            value = body.get(part, {}).get("index", {}).get("max_result_window")
            if value is not None:
                return int(value)
    return _DEFAULT_WINDOW


def fetch_hits(
    client: Elasticsearch, pit: PointInTime, keep: KeepRule, page_size: int, query: dict[str, Any], *,
    with_values: bool,
) -> list[dict[str, Any]]:
    """Every hit of ``query`` in ``pit`` with the fields :class:`SweptDocs` reads (only those: ``filter_path``),
    in pages of ``page_size``."""
    fields = [F_SIG, *STATE_FIELDS] if with_values else STATE_FIELDS
    source: bool | list[str] = [keep.field] if keep.field else False
    own = PointInTime(pit.id, pit.keep_alive)
    return [hit for hits in sweep(client, own, query=query, source=source, page_size=page_size,
                                  docvalue_fields=[{"field": f} for f in fields], filter_path=SWEEP_FILTER)
            for hit in hits]

