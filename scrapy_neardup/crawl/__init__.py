"""The Scrapy layer: settings, the item pipeline, the add-on, the sketch worker.

Builds on :mod:`scrapy_neardup.core`; never imported by it.
"""
