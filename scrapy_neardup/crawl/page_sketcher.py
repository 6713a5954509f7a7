"""How the pipeline sketches a page: in the sketch worker process when there is one, and in ``"auto"`` mode under
its host's template, which the host's first pages wait for (:mod:`scrapy_neardup.crawl.template_wait`).

The pipeline decides; this module only turns an item's content into a :class:`~scrapy_neardup.core.sketch.Sketch`.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred, fail, maybeDeferred

from ..core.mirror_table import host_of
from ..core.text import looks_binary
from ..errors import BinaryContent, SketchWorkerError
from .scraper_room import ScraperRoom
from .sketch_worker import SketchWorker
from .template_wait import HostTemplates

if TYPE_CHECKING:
    from twisted.internet.interfaces import IReactorCore
    from twisted.python.failure import Failure

    from ..core.host_template import HostTemplate
    from ..core.sketch import Content, Sketch, Sketcher
    from ..store.backend import Backend
    from .context import CrawlContext

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _HostPage:
    """A page on its way to its sketch under its host's template."""

    content: Content
    worker: SketchWorker | None
    url: str
    host: str


class PageSketcher:
    """Sketches the pipeline's pages (see the module doc).

    Args:
        context: the crawl's context: the sketch parameters, ``NEARDUP_WORKER`` (sketch in a child process),
            ``NEARDUP_TEMPLATE_SAMPLE`` (pages a host's template is learned from), its counters, the running crawl
            (none outside one: pages never wait, no worker is started).
    """

    def __init__(self, context: CrawlContext) -> None:
        config = context.config
        self.sketcher: Sketcher = config.sketcher()
        self.sketch_process = config.sketch_process
        self.template_sample = config.template_sample
        self.crawler = context.crawler
        self._inc = context.count
        self._sketch_worker: SketchWorker | None = None
        self._worker_given_up = False
        self._templates: HostTemplates | None = None  # "auto" mode, once open

    def open(self, backend: Backend) -> None:
        """Start holding pages for their hosts' templates (``"auto"`` mode) and the worker (if the reactor runs;
        else on the first item)."""
        if self.sketcher.content == "auto":
            self._templates = HostTemplates(backend, self.template_sample, self._inc, self._downloads_idle(),
                                            room=ScraperRoom(self.crawler).grow)
        self.worker()

    async def close(self) -> None:
        """Release the pages still held (their hosts learned from what they have) and stop the worker."""
        if self._templates is not None:
            self._templates.close()
        await self._stop_worker()

    async def sketch_page(self, content: Content, worker: SketchWorker | None, url: Any) -> Sketch:
        """The page's sketch; in ``"auto"`` mode under its host's template, which the host's first pages wait
        for (:mod:`scrapy_neardup.crawl.template_wait`): such a page is sketched once to read its blocks, waits, and
        is sketched again under the template learned (unless it is empty, which changes nothing).

        Order: the pages of a host that take the same way here leave in the order they came, so that the
        pipeline decides them in that order. Each step below runs as a Deferred callback the moment the step
        before it answers (one template load answers every page that asked meanwhile, in the order they asked;
        held pages are released in the order they began to wait), and the worker answers in the order it was
        asked. A page no template changes (one block, or main content it marks) is not held, and can be decided
        before a page of its host that came earlier and is still held.

        Raises:
            BackendError: the host's template could not be loaded or saved.
        """
        templates = self._templates
        host = host_of(url) if templates is not None and isinstance(url, str) else None
        if templates is None or host is None:
            return await maybe_deferred_to_future(self._sketch(content, worker))
        page = _HostPage(content, worker, url, host)
        with templates.on_the_way():
            sketched = templates.known(host).addCallback(self._under_known, templates, page)
            return cast("Sketch", await maybe_deferred_to_future(sketched))

    def _under_known(self, template: HostTemplate | None, templates: HostTemplates, page: _HostPage,
                     ) -> Deferred[Sketch]:
        """Sketch under the host's known ``template``; without one, sketch to read the blocks and hold."""
        if template is not None or not templates.holds_pages:
            return self._sketch(page.content, page.worker, template)
        return self._sketch(page.content, page.worker).addCallback(self._hold, templates, page)

    def _hold(self, first: Sketch, templates: HostTemplates, page: _HostPage) -> Sketch | Deferred[Sketch]:
        if first.empty or first.blocks is None:
            return first
        templates.add(page.host, page.url, first.blocks)
        if first.blocks.size <= 1:  # one block: the same sketch under any template (core.blocks.own_text)
            return first
        return templates.wait(page.host, len(page.content)).addCallback(
            lambda template: first if template.empty else self._sketch(page.content, page.worker, template))

    def _sketch(self, content: Content, worker: SketchWorker | None, template: HostTemplate | None = None,
                ) -> Deferred[Sketch]:
        """Sketch in the worker process when there is one (see :mod:`scrapy_neardup.crawl.sketch_worker`), else here.

        The page is queued in the worker at once (its answers come back in that order). The worker is started
        on the first item, when the reactor is known to run; if it dies, this process sketches from then on
        (counted in ``neardup/sketch_worker_failed``), so no item waits on it forever.
        """
        if worker is not None:
            try:
                queued = worker.sketch(content, template)
            except SketchWorkerError:
                queued = fail()
            return queued.addCallbacks(self._sketched_in_worker, self._after_worker_failed,
                                       errbackArgs=(content, template))
        return maybeDeferred(self._sketch_here, content, template)

    def _sketched_in_worker(self, sketch: Sketch) -> Sketch:
        self._inc("sketched_in_worker", 1)
        return sketch

    def _after_worker_failed(self, failure: Failure, content: Content, template: HostTemplate | None) -> Sketch:
        failure.trap(SketchWorkerError)
        self._worker_failed()
        if looks_binary(content):  # the worker died before it could tell
            raise BinaryContent("binary content is not sketched")
        return self._sketch_here(content, template)

    def _sketch_here(self, content: Content, template: HostTemplate | None) -> Sketch:
        return self.sketcher.sketch(content, template=None if template is None else template.hashes)

    def _downloads_idle(self) -> Any:
        """A check of whether the crawl has no download in flight (for the templates' idle check); ``None``
        outside a running crawl."""
        try:
            engine = self.crawler.engine if self.crawler is not None else None
        except RuntimeError:
            return None
        if engine is None or running_reactor() is None:
            return None
        return lambda: not engine.downloader.active

    def worker(self) -> SketchWorker | None:
        """The running sketch worker (started on first use while the reactor runs), or ``None``: sketch here."""
        if self._sketch_worker is None and self.sketch_process and not self._worker_given_up:
            if running_reactor() is None:  # used outside a crawl: nothing would read the child's answers
                return None
            started = SketchWorker(self.sketcher)
            try:
                started.start()
            except Exception:
                logger.warning("could not start the sketch worker process; sketching in this process",
                               exc_info=True)
                self._worker_given_up = True
                return None
            self._sketch_worker = started
        worker = self._sketch_worker
        return worker if worker is not None and worker.alive else None

    def _worker_failed(self) -> None:
        if not self._worker_given_up:
            self._worker_given_up = True
            self._inc("sketch_worker_failed", 1)
            logger.warning("the sketch worker process failed; sketching in this process from now on",
                           exc_info=True)

    async def _stop_worker(self) -> None:
        self._worker_given_up = True  # items after close_spider (there should be none) sketch in-process
        worker, self._sketch_worker = self._sketch_worker, None
        if worker is not None:
            await maybe_deferred_to_future(worker.stop())


def running_reactor() -> IReactorCore | None:
    """The Twisted reactor if one is installed and running (without importing one, which would install it)."""
    if "twisted.internet.reactor" not in sys.modules:
        return None
    # lazy: importing the reactor installs Twisted's default one; Scrapy installs the configured one first
    from twisted.internet import reactor

    return reactor if getattr(reactor, "running", False) else None


