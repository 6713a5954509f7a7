"""The local node launcher of scrapy-neardup: Elasticsearch and OpenSearch nodes on 127.0.0.1 for development,
tests and benchmarks (``neardup es start|stop|status``; :mod:`.node` to start nodes from Python)."""
