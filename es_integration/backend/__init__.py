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
again unchanged by one of them is a repeat, see :mod:`.rounds`). The index has ``shards`` primary shards when
this backend creates it (an existing index is used as it is): the order of the fleet's writes comes from the
sequencer (:mod:`.sequencer`), not from a shard.

Parts
-----
:class:`ElasticsearchBackend` is a thin facade over objects that each hold one concern and are built with what
they use (imports point down this list, never up); each can be built and run alone against a node:

* :mod:`.crawler_backend`: :class:`ElasticsearchBackend`: settings, lifecycle, host templates, and
  :meth:`~ElasticsearchBackend.check_and_add_many`, which runs the rounds under a lock and hands the pages of a
  failed call to the unchecked queue;
* :mod:`.opening`: the index checks of ``open`` (create or check the index, the band query usable or not);
* :mod:`.rounds`: :class:`~.rounds.Rounds`, the rounds of check-and-insert (a batch's pending writes, the
  checkpoint wait, the settling of other crawlers' pending pages) and the argument that they are correct and
  that waiting ends;
* :mod:`.unchecked`: :class:`~.unchecked.UncheckedQueue`, the pages whose check failed, written later with status
  ``unchecked``;
* :mod:`.writes`: :class:`~.writes.Writes`, the writes of a round (pending pages, revisit notes, decisions);
* :mod:`.searches`: :class:`~.searches.Searches`, the candidate searches, what their hits say (shared positions,
  pending or kept), and the wait for pending pages of other crawlers;
* :mod:`.sequencer`: :class:`~.sequencer.Sequencer`, the fleet's order of batches;
* :mod:`.pages`: the records a batch is decided with (pages, their stored versions, candidates), and
  :func:`doc_id_of`;
* :mod:`.transport`: :class:`~.transport.Transport`, the client, bounded retries (:meth:`~.transport.Transport.call`),
  bulk and multi-get.

Cost (see :mod:`.rounds`): about eight requests per batch, two for a batch answered in (a) alone (duplicates,
repeats; three with unchanged revisits), whatever its size; one refresh per batch that writes.
"""

from .crawler_backend import ElasticsearchBackend
from .pages import doc_id_of as doc_id_of

__all__ = ["ElasticsearchBackend"]
