"""The Elasticsearch backend of the Scrapy pipeline: check-and-insert against an index shared by many crawlers.

Design notes: docs/architecture.md#es_integrationbackend
"""

from .crawler_backend import ElasticsearchBackend
from .pages import doc_id_of as doc_id_of

__all__ = ["ElasticsearchBackend"]
