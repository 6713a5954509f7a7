"""The core: text, shingles, hashing, MinHash, sketches, the S-curve, the embedded index and its storage.

Imports no Scrapy, Twisted or Elasticsearch module; the Scrapy layer (:mod:`scrapy_neardup.crawl`) and
``es_integration`` both build on it, never the other way round.
"""
