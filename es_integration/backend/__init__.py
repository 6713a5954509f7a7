"""The Elasticsearch backend of the Scrapy pipeline: check-and-insert against an index shared by many crawlers.

Semantics
---------
Those of the embedded :class:`~scrapy_neardup.core.index.SketchIndex`: a page is a near-duplicate when it shares
``>= t`` of ``k`` signature positions with a *kept* page; the answer is the best kept match (exact duplicates
first, then most shared positions, then the earliest kept), else the page is kept under its key. Both compare
the low 16 bits of each position (see :mod:`es_integration.mapping`), so the counts are the same too.

Documents
---------
One document per key (``_id``: :func:`doc_id_of`, a 128-bit hash of the key), holding only the ``neardup``
object: ``key`` (the page key, returned as ``Match.key``), ``positions``, ``sig``, ``bands``, ``fingerprint``,
``tag``, ``status`` (``pending`` -> ``kept`` | ``duplicate``; or ``unchecked``: :mod:`.unchecked`), ``seq`` (the write
order), ``group`` and ``duplicate_of``/``shared`` for duplicates, ``writer`` (which process, and which of its
batches, wrote a pending page), ``crawl`` (the crawls that kept or revisited its current content: a page met
again unchanged by one of them is a repeat, see :mod:`.protocol`). The index has **one primary shard** (created
so when missing; refused otherwise), so ``_seq_no`` totally orders the writes.

Modules
-------
The package is one class, :class:`ElasticsearchBackend`, assembled from bases that each hold one concern
(imports point down this list, never up). Bases rather than objects of their own because they share the
backend's state (the client, counters, writer token, unchecked queue): each base declares the attributes it
uses, and :class:`ElasticsearchBackend` sets them.

* :mod:`.facade`: :class:`ElasticsearchBackend` itself: settings, lifecycle (the index checks of ``open``),
  host templates, and :meth:`~ElasticsearchBackend.check_and_add_many`, which runs the rounds under a lock and
  hands the pages of a failed call to the unchecked queue;
* :mod:`.protocol`: the rounds of check-and-insert (a batch's pending writes, the checkpoint wait, the settling
  of other crawlers' pending pages) and the argument that they are correct and that waiting ends;
* :mod:`.unchecked`: the queue of pages whose check failed, written later with status ``unchecked``;
* :mod:`.writes`: the writes of a round (pending pages, decisions) and the wait for every copy's checkpoint;
* :mod:`.hits`: the candidate searches and what their hits say (shared positions, pending or kept);
* :mod:`.pages`: the records a batch is decided with (pages, their stored versions, candidates), and
  :func:`doc_id_of`;
* :mod:`.requests`: the client, bounded retries (:meth:`~ElasticsearchBackend._call`), bulk and multi-get.

Cost (see :mod:`.protocol`): about seven requests per batch, two for a batch answered in (a) alone (duplicates,
repeats; three with unchanged revisits), whatever its size; one refresh per batch that writes.
"""

from .crawler_backend import ElasticsearchBackend
from .pages import doc_id_of as doc_id_of

__all__ = ["ElasticsearchBackend"]
