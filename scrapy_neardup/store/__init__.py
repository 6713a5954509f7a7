"""Where kept sketches live: the :class:`~scrapy_neardup.store.backend.Backend` contract the pipeline talks to, the
embedded store (an in-process index, a journal and the host templates, in a state directory), and the typed
readers of the ``NEARDUP_*`` settings that configure a store. Built on :mod:`scrapy_neardup.core`; imports no
framework."""
