"""The ``neardup`` command (``python -m scrapy_neardup`` runs it too)."""
