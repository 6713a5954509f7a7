"""Writing a run's groups onto the documents (``neardup es groups --assign``): the group fields where they
change, then the watermark, and the band filter kept for the next incremental run."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from scrapy_neardup.core.stored_signature import stored_bands

from ..band_filter import BandFilter, BandFilterStore
from ..bulk import write_bulk
from ..mapping import DUPLICATE, KEPT, ROOT
from ..names import validate_index_name
from .queries import Progress
from .results import GroupReport
from .watermark import index_uuid, write_watermark

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch


logger = logging.getLogger(__name__)


def assign_groups(
    client: Elasticsearch,
    index: str,
    report: GroupReport,
    *,
    refresh: bool = True,
    progress: Progress | None = None,
    band_filter: BandFilterStore | None = None,
    chunk_size: int = 500,
) -> int:
    """Write each swept document's group fields where they change; return the number of documents updated.

    Members of a group get ``group = representative``, ``status = "duplicate"`` and
    ``duplicate_of = representative``; representatives and documents in no group get their own ``_id`` as
    group and ``status = "kept"``. Then the watermark of :func:`find_new_groups` is recorded in the index's
    mapping ``_meta``.

    Args:
        band_filter: where band filters are kept: a full run writes the band filter of every swept document
            for the watermark it records; an incremental run that used one adds its new documents to it; one
            that did not removes this index's (it no longer covers the watermark). See
            :mod:`es_integration.band_filter`.
        chunk_size: updates per bulk request to start with; rejected requests (HTTP 429) are retried with backoff
            in smaller ones (:func:`es_integration.bulk.write_bulk`).

    Raises:
        EsError: via the caller's :func:`~es_integration.client.translate_errors`; refused updates (rejected
            past the retries included) are raised as ``elasticsearch.helpers.BulkIndexError`` once the others are
            written, and the watermark is then not recorded (the next ``--new`` run covers them).
    """
    from elasticsearch.helpers import BulkIndexError  # lazy: elasticsearch-py is slow to import

    validate_index_name(index)
    written = 0
    refused: list[Any] = []
    for ok, info in write_bulk(client, _assign_actions(index, report), chunk_size=chunk_size):
        written += ok
        if not ok:
            refused.append(info)
        if progress is not None:
            progress(1)
    if refresh:
        client.indices.refresh(index=index)
    if refused:
        raise BulkIndexError(f"{len(refused)} document(s) failed to update; {written} updated", refused)
    if report.tag:
        seq = write_watermark(client, index, report)
        if band_filter is not None:
            _keep_band_filter(band_filter, index_uuid(client, index), report, seq)
    logger.info("updated group fields of %d documents in %s", written, index)
    return written


def _keep_band_filter(store: BandFilterStore, uuid: str, report: GroupReport, seq: int) -> None:
    """Write, extend or drop the band filter of ``report``'s index and tag for the watermark ``seq`` just
    recorded (see :func:`assign_groups`)."""
    docs = report.swept
    if docs is None:
        return
    if not report.new:
        fresh = BandFilter.sized_for(docs.with_values * stored_bands(docs.num_perm))
        fresh.add(docs.values())
    elif report.band_filter is not None:
        fresh = report.band_filter
        fresh.add(docs.values()[: report.documents])  # the new rows come first
    else:
        store.discard(uuid, report.tag)
        return
    if not store.save(fresh, uuid, report.tag, seq, replaces=report.band_filter_seq if report.new else None):
        return
    logger.info("band filter for %s written (%d keys, false-positive rate %.3f)", report.tag, fresh.keys,
                fresh.false_positive_rate())


def _assign_actions(index: str, report: GroupReport) -> Iterator[dict[str, Any]]:
    docs = report.swept
    if docs is None:
        return
    wanted: dict[str, tuple[str, str, str | None]] = {}
    for group in report.groups:
        for member in group.members:
            is_rep = member == group.representative
            wanted[member] = (group.id, KEPT if is_rep else DUPLICATE, None if is_rep else group.representative)
    # Rows that may need a write: members of groups, and rows whose fields are not "kept, own group" now. An
    # incremental run covers its new rows and the groups it reports; the older pages it read for comparison
    # (band hits) keep their fields: their groups did not change (were one a duplicate in an untouched group,
    # "kept, own group" would wrongly be written over it).
    grouped = set() if report.grouped_rows is None else set(report.grouped_rows.tolist())
    if report.new:
        rows: Iterable[int] = sorted(set(range(report.documents)) | grouped)  # new rows come first
    else:
        rows = sorted(set(docs.state.rows()) | grouped)
    for row in rows:
        doc_id = docs.id(row)
        target = wanted.get(doc_id, (doc_id, KEPT, None))
        current = docs.state.get(row, (doc_id, KEPT, None))
        if current == target:
            continue
        group_id, status, duplicate_of = target
        yield {
            "_op_type": "update",
            "_index": index,
            "_id": doc_id,
            "doc": {ROOT: {"group": group_id, "status": status, "duplicate_of": duplicate_of}},
            "retry_on_conflict": 3,
        }
