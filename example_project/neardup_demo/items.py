"""The item the demo spider yields."""

import scrapy


class PageItem(scrapy.Item):
    """One crawled page.

    ``neardup`` is declared so that the pipeline can fill it when ``NEARDUP_ACTION = "mark"``: a scrapy.Item
    rejects undeclared fields, and the pipeline stops the crawl with a message naming the missing field.
    """

    url = scrapy.Field()
    title = scrapy.Field()
    text = scrapy.Field()  # NEARDUP_TEXT_FIELD: the text the pipeline sketches
    neardup = scrapy.Field()  # NEARDUP_MARK_FIELD: {"duplicate_of", "resemblance", "exact"} in mark mode
