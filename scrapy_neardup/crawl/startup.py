"""Start-up failures reported as one clear line, with a non-zero exit status.

Design notes: docs/architecture.md#scrapy_neardupcrawlstartup
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from weakref import WeakSet

from scrapy.exceptions import NotConfigured

from ..errors import NearDupSettingsError
from ..store.config import unknown_settings

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: The loggers whose records the filter looks at: asyncio's "never retrieved" handler and Scrapy's signal
#: dispatcher (which logs the ``CoreStats.spider_closed`` assertion).
_WATCHED = ("asyncio", "scrapy.utils.signal")


class _Consequences(logging.Filter):
    """Demotes the records a reported start-up failure causes; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: BaseException | None = None
        self.show_debug = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.failed is None or record.levelno < logging.ERROR:
            return True
        exc = record.exc_info[1] if record.exc_info else None
        ours = exc is not None and (exc is self.failed or exc.__cause__ is self.failed)
        if not ours and record.name != "scrapy.utils.signal":
            return True
        # The failure itself (already said in one line), or a consequence of it (a spider closed that never
        # opened): not news for the user, kept for whoever reads at DEBUG.
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return self.show_debug


_filter = _Consequences()


def one_line(exc: BaseException) -> str:
    """The message; with the exception's class name unless it is a settings error (whose message names the
    setting, which is all there is to say): ``StateError: <file> is damaged ...``."""
    if isinstance(exc, NearDupSettingsError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def report_startup_failure(exc: BaseException, *, log_level: str | int = "DEBUG") -> None:
    """Log *exc* as one CRITICAL line and quiet its later reports (see the module docstring); call it right
    before raising *exc*.

    Args:
        exc: the exception about to be raised.
        log_level: the crawl's ``LOG_LEVEL``; the tracebacks are shown (at DEBUG) only when it is DEBUG.
    """
    level = logging.getLevelName(log_level) if isinstance(log_level, str) else log_level
    _retrieve_from_tasks(exc)
    _filter.failed = exc
    _filter.show_debug = isinstance(level, int) and level <= logging.DEBUG
    for name in _WATCHED:
        log = logging.getLogger(name)
        if _filter not in log.filters:
            log.addFilter(_filter)
    logger.critical("%s", one_line(exc))


def _retrieve_from_tasks(failure: BaseException) -> None:
    """Retrieve *failure* from the crawl's task once that task ends with it.

    ``scrapy crawl`` (Scrapy 2.13+, asyncio) runs each crawl in a task (``AsyncCrawlerRunner._crawl_and_track``)
    that sets ``bootstrap_failed`` on a start-up failure and re-raises it, and that nobody awaits: asyncio reports
    its exception when the task is collected ("Task exception was never retrieved", a traceback of ~35 lines;
    the filter above demotes it to DEBUG, and a ``startproject`` project logs at DEBUG). The failure was just
    reported in one line, so whoever reported it retrieves it: a callback on the crawl's running task reads the
    exception once the task ends. Another exception (not *failure*, not caused by it) is handed to the loop's
    exception handler, which is what asyncio would have done with it: nothing else is hidden.
    """
    import asyncio

    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:  # no running loop: a reactor without asyncio, whose Deferreds the filter covers
        return

    def retrieve(task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()  # marks it retrieved
        if exc is None or exc is failure or exc.__cause__ is failure or exc.__context__ is failure:
            return
        task.get_loop().call_exception_handler(
            {"message": "Task exception was never retrieved", "exception": exc, "future": task})

    for task in tasks:
        coro = task.get_coro()
        if not task.done() and getattr(coro, "__qualname__", "").endswith("._crawl_and_track"):
            task.add_done_callback(retrieve)


#: The crawlers whose settings were checked for unknown names (once per crawl, whichever component comes first).
_checked: WeakSet[Any] = WeakSet()


def warn_unknown_settings(crawler: Crawler) -> None:
    """One WARNING per ``NEARDUP_*`` setting of the crawl that is not a known one, naming the closest known
    name; only the first call for a crawler warns."""
    if crawler in _checked:
        return
    _checked.add(crawler)
    for name, closest in unknown_settings(crawler.settings):
        hint = f"did you mean {closest}?" if closest else "no known NEARDUP_* setting is close"
        logger.warning("unknown setting %s is ignored; %s", name, hint)


@contextlib.contextmanager
def component_startup(crawler: Crawler) -> Iterator[None]:
    """Around a component's ``from_crawler``: warns about unknown ``NEARDUP_*`` settings (once per crawl), and
    reports an exception raised inside (a wrong setting, a backend that cannot be built) as one line
    (:func:`report_startup_failure`) before re-raising it. ``NotConfigured`` (a component switched off) passes."""
    warn_unknown_settings(crawler)
    try:
        yield
    except NotConfigured:
        raise
    except Exception as exc:
        report_startup_failure(exc, log_level=crawler.settings.get("LOG_LEVEL", "DEBUG"))
        raise
