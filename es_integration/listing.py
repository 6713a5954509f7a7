"""How the ``neardup es`` listings name a page: its URL and title, never only its ``_id``.

A document's ``_id`` is often a hash (the crawler backend's documents and the search-index writer's are
:func:`~es_integration.backend.doc_id_of` of the URL), so the listings of ``neardup es groups`` and ``neardup es
search`` print each page's URL (the ``--url-field``, else ``neardup.key``, the page key the crawler backend and
the search-index writer store) and its title (``--title-field``); the ``_id`` only when a document has neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from scrapy_neardup.core.evidence import describe_evidence, sides
from scrapy_neardup.core.match import Sketched

from .indexing import get_field
from .mapping import F_DUPLICATE_OF, F_KEY, F_STATUS, ROOT, TEXT_FIELDS, stored_sketched

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

    from .collapse import CollapsedHit
    from .groups import Group

__all__ = [
    "PageLabel", "duplicate_targets", "group_lines", "hit_line", "label_fields", "label_of", "page_labels",
    "write_groups",
]

#: Documents fetched per multi-get.
_MGET_CHUNK = 1000
#: Characters of a title (or of the text standing in for one) in a listing line.
_TITLE_CHARS = 80


@dataclass(frozen=True, slots=True)
class PageLabel:
    """What a listing shows of a page: ``url`` (None when the document has none) and ``title``; ``sketched``:
    what of it was sketched, when its document says (the sides of a group's evidence)."""

    id: str
    url: str | None = None
    title: str | None = None
    sketched: Sketched | None = None

    def text(self) -> str:
        """``URL  title`` (the ``_id`` stands for a missing URL; the title is left out when there is none)."""
        name = self.url or self.id
        return f"{name}  {self.title}" if self.title else name

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "url": self.url, "title": self.title}


def label_fields(url_field: str, title_field: str, *, text: bool = False) -> list[str]:
    """The ``_source`` fields a label is made from (``text``: and a ``text`` field, whose start stands for a
    missing title; whole pages, so only for the few hits of a search)."""
    return [url_field, title_field, F_KEY, *TEXT_FIELDS, *(["text"] if text else [])]


def label_of(doc_id: str, source: Mapping[str, Any], url_field: str, title_field: str) -> PageLabel:
    """The label of one document from its ``_source``: the title falls back to the start of a ``text`` field."""
    url = _text(get_field(dict(source), url_field)) or _text(get_field(dict(source), F_KEY))
    title = _text(get_field(dict(source), title_field)) or _text(source.get("text"))
    if title and len(title) > _TITLE_CHARS:
        title = title[: _TITLE_CHARS - 3] + "..."
    neardup = source.get(ROOT)
    return PageLabel(doc_id, url, title, stored_sketched(neardup) if isinstance(neardup, dict) else None)


def page_labels(
    client: Elasticsearch, index: str, ids: Iterable[str], *, url_field: str = "url", title_field: str = "title"
) -> dict[str, PageLabel]:
    """The labels of the documents ``ids`` of ``index`` (multi-gets of their few label fields); an id with no
    document is labelled by itself."""
    wanted = list(dict.fromkeys(ids))
    labels: dict[str, PageLabel] = {}
    for start in range(0, len(wanted), _MGET_CHUNK):
        chunk = wanted[start : start + _MGET_CHUNK]
        response = client.mget(index=index, ids=chunk, source=label_fields(url_field, title_field))
        for doc in response["docs"]:
            if doc.get("found"):
                labels[doc["_id"]] = label_of(doc["_id"], doc.get("_source") or {}, url_field, title_field)
    return {doc_id: labels.get(doc_id, PageLabel(doc_id)) for doc_id in wanted}


def group_lines(group: Group, labels: Mapping[str, PageLabel]) -> list[str]:
    """A group as text: a line naming its size and the page kept, then one line per near-duplicate."""
    keep = labels.get(group.representative, PageLabel(group.representative))
    lines = [f"group {group.id}: {len(group.members)} pages, keep {keep.text()}"]
    for at, member in enumerate(group.members[1:], start=1):
        line = f"  duplicate {labels.get(member, PageLabel(member)).text()}"
        fields = _with_sides(group.evidence_of(at), labels.get(member), keep)
        lines.append(line + (f"  ({describe_evidence(fields)})" if fields else ""))
    return lines


def write_groups(
    out: IO[str], client: Elasticsearch, index: str, groups: Sequence[Group], *, url_field: str = "url",
    title_field: str = "title", as_json: bool = False,
) -> None:
    """The groups as text (:func:`group_lines`), or one JSON object per group with its pages'
    ``{"id", "url", "title", "resemblance", "evidence"}`` in ``pages`` (``evidence``: ``{"rule", "shared", "k",
    "interval"}`` against the representative, :class:`~es_integration.groups.Group`; None for the
    representative); labelled a few hundred groups per multi-get round."""
    for start in range(0, len(groups), 500):
        chunk = groups[start : start + 500]
        labels = page_labels(client, index, (m for g in chunk for m in g.members), url_field=url_field,
                             title_field=title_field)
        for group in chunk:
            if as_json:
                keep = labels[group.representative]
                pages = [{**labels[m].to_json(), **_page_evidence(_with_sides(group.evidence_of(at), labels[m], keep))}
                         for at, m in enumerate(group.members)]
                out.write(json.dumps({**group.to_json(), "pages": pages}, ensure_ascii=False) + "\n")
            else:
                out.write("\n".join(group_lines(group, labels)) + "\n")
    out.flush()


def _with_sides(
    fields: dict[str, Any] | None, member: PageLabel | None, keep: PageLabel | None,
) -> dict[str, Any] | None:
    """A member's evidence with what of it (``sketched``, ``words``, ``removed``) and of the group's representative
    (``kept_sketched``, ``kept_words``, ``kept_removed``) was sketched, as far as their documents say."""
    if not fields:
        return fields
    return {**fields, **sides(member.sketched if member is not None else None,
                              keep.sketched if keep is not None else None)}


def _page_evidence(fields: dict[str, Any] | None) -> dict[str, Any]:
    """``{"resemblance", "evidence"}`` of a group's page: both None for the representative."""
    if not fields:
        return {"resemblance": None, "evidence": None}
    return {"resemblance": fields["resemblance"], "evidence": {k: v for k, v in fields.items() if k != "resemblance"}}


def hit_line(rank: int, hit: CollapsedHit, label: PageLabel, labels: Mapping[str, PageLabel], hidden: int = 0) -> str:
    """A search hit as text: rank, title and URL, score, and what it hides (collapsed) or duplicates (not
    collapsed: ``neardup.duplicate_of``, labelled through ``labels`` when it names a document); then up to
    ``hidden`` of the pages it hides, one line each with its evidence."""
    score = f"{hit.score:.3f}" if isinstance(hit.score, int | float) else "-"
    name = f"{label.title} - {label.url or label.id}" if label.title else label.url or label.id
    line = f"{rank:>3}. {name}  score {score}"
    if hit.omitted:
        line += f"  ({hit.omitted} similar page{'s' if hit.omitted != 1 else ''} omitted)"
    source = hit.source or {}
    original = get_field(source, F_DUPLICATE_OF)
    if get_field(source, F_STATUS) == "duplicate" and isinstance(original, str):
        other = labels.get(original)
        line += f"  (near-duplicate of {other.url or original if other else original})"
    for doc_id in hit.hidden[:hidden]:  # the hidden pages named (search --hidden N), each with why
        fields = hit.evidence.get(doc_id)
        page = labels.get(doc_id, PageLabel(doc_id))
        line += f"\n       hides {page.url or doc_id}" + (f"  ({describe_evidence(fields)})" if fields else "")
    return line


def duplicate_targets(hits: Sequence[CollapsedHit]) -> list[str]:
    """The ``neardup.duplicate_of`` values of ``hits`` (to label them in one multi-get)."""
    found = (get_field(h.source or {}, F_DUPLICATE_OF) for h in hits)
    return [value for value in found if isinstance(value, str)]


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return " ".join(value.split())
    return None
