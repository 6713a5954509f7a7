"""Host templates shared through Elasticsearch: the sibling index ``<index>-templates``.

``"auto"`` sketches depend on the template of the page's host (:mod:`scrapy_neardup.core.host_template`). Every process
writing sketches to index ``I`` (the crawlers of :class:`~es_integration.backend.ElasticsearchBackend`,
``neardup es index`` and ``backfill``) reads and writes the hosts' templates in ``I-templates``, so that one host
has one template wherever and whenever its pages are sketched.

One document per (tag, host), ``_id`` ``"<tag>|<host>"``: ``host``, ``tag``, ``pages`` (pages it was learned from)
and ``template`` (:meth:`~scrapy_neardup.core.host_template.HostTemplate.to_bytes`, base64; not indexed). A template is
saved with ``create``: the first one saved for a host wins, and a process whose save meets a conflict reads and
uses the saved one. Reads are real-time ``GET``/``mget`` (no refresh needed to see a template just saved). The
index has one primary shard (a few KB a host) and is created before the first template is saved.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from scrapy_neardup.core.host_template import HostTemplate, TemplateLearner
from scrapy_neardup.errors import EsError, TemplateFormatError

from .mapping import REPLICA_SETTINGS, create_missing_steps
from .names import validate_index_name
from .steps import Call, Steps, run, run_async

if TYPE_CHECKING:
    from elasticsearch import AsyncElasticsearch, Elasticsearch


logger = logging.getLogger(__name__)

#: The templates of backend index ``I`` live in ``I`` + this.
TEMPLATES_SUFFIX = "-templates"
_MGET_BATCH = 1000


def templates_index(index: str) -> str:
    """The template index that goes with sketch index ``index``."""
    return validate_index_name(index + TEMPLATES_SUFFIX)


def templates_mappings() -> dict[str, Any]:
    """Mapping of the template index (see the module doc)."""
    keyword = {"type": "keyword"}
    return {"dynamic": "strict", "properties": {
        "host": keyword, "tag": keyword, "pages": {"type": "integer"},
        "template": {"type": "binary", "doc_values": False},
    }}


def _create_settings() -> dict[str, Any]:
    return {**REPLICA_SETTINGS, "number_of_shards": 1}


def doc_id(tag: str, host: str) -> str:
    """The ``_id`` of ``host``'s template for sketches tagged ``tag``."""
    return f"{tag}|{host}"


def _document(tag: str, host: str, template: HostTemplate) -> dict[str, Any]:
    return {"host": host, "tag": tag, "pages": template.pages,
            "template": base64.b64encode(template.to_bytes()).decode("ascii")}


def _parse(index: str, source: dict[str, Any]) -> HostTemplate:
    try:
        return HostTemplate.from_bytes(base64.b64decode(source["template"]))
    except (KeyError, TypeError, ValueError, TemplateFormatError) as exc:
        raise EsError(f"the template of {source.get('host')!r} in {index} is damaged ({exc}); delete that document "
                      "or the whole index to learn it again") from None


# -- the steps (run with either client: :mod:`es_integration.steps`) --------------------------------------------


def _load_steps(index: str, tag: str, hosts: list[str]) -> Steps[dict[str, HostTemplate]]:
    # lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up
    from elasticsearch import NotFoundError

    found: dict[str, HostTemplate] = {}
    for start in range(0, len(hosts), _MGET_BATCH):
        batch = hosts[start : start + _MGET_BATCH]
        try:
            response = yield Call("mget", {"index": index, "ids": [doc_id(tag, host) for host in batch]})
        except NotFoundError:  # no template index yet
            return {}
        for host, doc in zip(batch, response["docs"], strict=True):
            if doc.get("found"):
                found[host] = _parse(index, doc["_source"])
    return found


def _save_steps(index: str, tag: str, host: str, template: HostTemplate) -> Steps[HostTemplate]:
    # lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up
    from elasticsearch import ConflictError

    try:
        yield Call("create", {"index": index, "id": doc_id(tag, host), "document": _document(tag, host, template)})
        return template
    except ConflictError:
        saved = (yield from _load_steps(index, tag, [host])).get(host)
    if saved is None:
        raise EsError(f"saving the template of {host!r} in {index}: a conflict, then no template")
    return saved


def _create_steps(index: str) -> Steps[bool]:
    return create_missing_steps(index, {"mappings": templates_mappings(), "settings": _create_settings()})


# -- asynchronous (the crawler backend) ------------------------------------------------------------------------


async def load_template_async(client: AsyncElasticsearch, index: str, tag: str, host: str) -> HostTemplate | None:
    """``host``'s saved template (``None``: none, or no template index yet)."""
    return (await run_async(client, _load_steps(index, tag, [host]))).get(host)


async def save_template_async(client: AsyncElasticsearch, index: str, tag: str, host: str,
                              template: HostTemplate) -> HostTemplate:
    """:func:`save_template` with an asynchronous client."""
    return await run_async(client, _save_steps(index, tag, host, template))


async def ensure_templates_index_async(client: AsyncElasticsearch, index: str) -> None:
    """:func:`ensure_templates_index` with an asynchronous client."""
    await run_async(client, _create_steps(index))


# -- synchronous (the batch jobs) ------------------------------------------------------------------------------


def load_templates(client: Elasticsearch, index: str, tag: str, hosts: Iterable[str]) -> dict[str, HostTemplate]:
    """The saved templates of those of ``hosts`` that have one (``mget`` in batches)."""
    return run(client, _load_steps(index, tag, list(hosts)))


def save_template(client: Elasticsearch, index: str, tag: str, host: str, template: HostTemplate) -> HostTemplate:
    """Save ``host``'s template unless one is saved; the saved one (first wins). The index must exist
    (:func:`ensure_templates_index`): a write would otherwise create it with a guessed mapping."""
    return run(client, _save_steps(index, tag, host, template))


def ensure_templates_index(client: Elasticsearch, index: str) -> None:
    """Create the template index when missing (a race with another creator is fine)."""
    run(client, _create_steps(index))


def resolve_templates(client: Elasticsearch, index: str, tag: str, learner: TemplateLearner) -> dict[str, HostTemplate]:
    """The template of each host a batch job learned (``learner``), as the sketch index ``index`` keeps them: a host
    saved already keeps its template (what earlier runs and crawls sketched under); the others' are saved now
    (first wins: another process may save one first, which is then the one returned)."""
    templates_at = templates_index(index)
    known = load_templates(client, templates_at, tag, learner.hosts)
    new = [host for host in learner.hosts if host not in known]
    if new:
        ensure_templates_index(client, templates_at)
        for host in new:
            known[host] = save_template(client, templates_at, tag, host, learner.learn(host))
        logger.info("learned the templates of %d hosts (%d known already)", len(new), len(known) - len(new))
    return known
