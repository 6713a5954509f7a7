"""Elasticsearch integration for scrapy-neardup (mapping, queries, backend, local node launcher)."""
