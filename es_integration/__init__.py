"""Elasticsearch and OpenSearch integration for scrapy-neardup: the mapping, indexing, candidate queries, groups,
serve-time collapse, and the crawler backend several Scrapy processes share (the local node launcher is the
separate ``neardup_devnode`` distribution)."""
