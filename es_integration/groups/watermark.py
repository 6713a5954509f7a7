"""The watermark of assigned groups runs: the record an ``--assign`` run writes in the index's mapping ``_meta``
(the highest ``seq`` its groups cover, its ``t`` and linkage, per tag), which an incremental run
(``neardup es groups --new``) starts from and checks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_neardup.core.params import SketchParams, require_params
from scrapy_neardup.core.stored_signature import band_layout
from scrapy_neardup.errors import EsError

from .results import GroupReport, Linkage, check_linkage

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch


_META_KEY = "neardup_groups"


def groups_watermark(client: Elasticsearch, index: str, params: SketchParams) -> dict[str, Any] | None:
    """The record of the last assigned groups run for ``params`` (its tag; ``{"seq": ..., "min_shared": ...,
    "linkage": ...}``; records written before linkages existed have none: they were transitive), or None."""
    tag = require_params(params, "groups_watermark").tag
    mappings = client.indices.get_mapping(index=index)
    for body in mappings.values():
        meta = body.get("mappings", {}).get("_meta", {}) or {}
        record = (meta.get(_META_KEY) or {}).get(tag)
        if isinstance(record, dict):
            return record
    return None


def write_watermark(client: Elasticsearch, index: str, report: GroupReport) -> int:
    mappings = client.indices.get_mapping(index=index)
    meta = dict(next(iter(mappings.values())).get("mappings", {}).get("_meta", {}) or {})
    records = dict(meta.get(_META_KEY) or {})
    seq = report.watermark
    previous = records.get(report.tag, {}).get("seq") if report.new else None
    if seq is None:
        seq = previous if previous is not None else -1
    elif previous is not None:
        seq = max(seq, int(previous))
    records[report.tag] = {"seq": seq, "min_shared": report.min_shared, "linkage": report.linkage}
    meta[_META_KEY] = records
    client.indices.put_mapping(index=index, meta=meta)
    return int(seq)


def index_uuid(client: Elasticsearch, index: str) -> str:
    """The UUID of ``index`` (of each index behind an alias, joined): names a band filter."""
    settings = client.indices.get_settings(index=index, name="index.uuid")
    return "+".join(sorted(body["settings"]["index"]["uuid"] for body in settings.values()))



def recorded_watermark(client: Elasticsearch, index: str, params: SketchParams, linkage: Linkage) -> int:
    """The ``seq`` up to which the last assigned run of ``params.tag`` grouped ``index``, once checked that an
    incremental run with ``t = params.min_shared`` and ``linkage`` may continue it.

    Raises:
        EsError: no assigned run is recorded for the tag, it used another ``t`` or another linkage, or ``t`` is
            below the stored band layout's.
    """
    tag, num_perm, min_shared = params.tag, params.num_perm, params.min_shared
    record = groups_watermark(client, index, params)
    if record is None:
        raise EsError(f"no assigned groups run of {index} is recorded for {tag}: run `neardup es groups --assign` "
                      "once before --new")
    if record.get("min_shared") != min_shared:
        raise EsError(f"the last assigned groups run of {index} used t={record.get('min_shared')}, this one t="
                      f"{min_shared}: run a full `neardup es groups --assign` to change t")
    check_linkage(linkage)
    recorded = record.get("linkage", "transitive")  # records from before linkages: Broder's components
    if recorded != linkage:
        raise EsError(f"the last assigned groups run of {index} made {recorded} groups, this one {linkage}: run a "
                      f"full `neardup es groups --assign{' --transitive' if linkage == 'transitive' else ''}` to "
                      f"change the linkage{' (or pass --transitive)' if recorded == 'transitive' else ''}")
    if min_shared < band_layout(num_perm):
        raise EsError(f"--new needs t >= {band_layout(num_perm)} (the stored band layout's); got {min_shared}")
    return int(record["seq"])
