"""Start-up failures reported as one clear line, with a non-zero exit status.

A wrong ``NEARDUP_*`` setting, or a backend that cannot be opened, must stop the crawl before any request,
make ``scrapy crawl`` exit with status 1, and say what to fix in one line. Scrapy (2.13+, asyncio) gets the
exit status right when a component raises at start-up, but reports the exception through asyncio's "Task
exception was never retrieved" handler: a traceback of ~35 lines whose last line is the message. And when the
failure happens while the spider opens, Scrapy closes a spider whose ``spider_opened`` signal never fired, so
``CoreStats`` adds an unrelated ``AssertionError`` traceback.

:func:`report_startup_failure` is called just before the component raises: it installs (once) a logging filter
that turns the record of *that* exception into one line, ``scrapy-neardup: <message>``, and moves the records
of the signal handlers that fail as a consequence to DEBUG. The traceback itself is logged at DEBUG, so only a
crawl run with ``-L DEBUG`` shows it.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

#: The loggers whose records the filter looks at: asyncio's "never retrieved" handler and Scrapy's signal
#: dispatcher (which logs the ``CoreStats.spider_closed`` assertion).
_WATCHED = ("asyncio", "scrapy.utils.signal")


class StartupError(Exception):
    """The crawl cannot start: a setting is wrong or the backend cannot be opened.

    Subclasses (``NearDupSettingsError``) name the setting and the value in their message.
    """


class _OneLine(logging.Filter):
    """Rewrites the records a start-up failure causes; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: BaseException | None = None
        self.show_debug = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.failed is None:
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if exc is self.failed or (exc is not None and exc.__cause__ is self.failed):
            if self.show_debug:
                logger.debug("traceback of the start-up failure", exc_info=record.exc_info)
            record.msg, record.args = "scrapy-neardup: %s", (str(self.failed),)
            record.exc_info, record.exc_text, record.stack_info = None, None, None
            return True
        if record.name == "scrapy.utils.signal" and record.levelno >= logging.ERROR:
            # A consequence of the failure (a spider closed that never opened), not news for the user.
            if self.show_debug:
                record.levelno, record.levelname = logging.DEBUG, "DEBUG"
                return True
            return False
        return True


_filter = _OneLine()


def report_startup_failure(exc: BaseException, *, log_level: str | int = "DEBUG") -> None:
    """Make the coming report of *exc* one line (see the module docstring); call it right before raising.

    Args:
        exc: the exception about to be raised.
        log_level: the crawl's ``LOG_LEVEL``; the traceback is logged (at DEBUG) only when it is DEBUG.
    """
    level = logging.getLevelName(log_level) if isinstance(log_level, str) else log_level
    _filter.failed = exc
    _filter.show_debug = isinstance(level, int) and level <= logging.DEBUG
    for name in _WATCHED:
        log = logging.getLogger(name)
        if _filter not in log.filters:
            log.addFilter(_filter)
