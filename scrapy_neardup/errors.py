"""Every error the package raises, under one base: ``except NearDupError`` catches all of them.

Design notes: docs/architecture.md#scrapy_nearduperrors
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class NearDupError(Exception):
    """The base of every exception of ``scrapy_neardup`` and ``es_integration``."""


class _OwnNames(dict[str, str]):
    """Field names rendered as themselves (the Python API's names)."""

    def __missing__(self, key: str) -> str:
        return key


# -- wrong input ---------------------------------------------------------------------------------------------


class ParameterError(NearDupError, ValueError):
    """A sketch parameter has a wrong value.

    Attributes:
        field: which one (one of :data:`scrapy_neardup.core.params.FIELDS`).
        value: the value refused.
        problem: what is wrong, a template in which ``{num_perm}`` etc. stand for the fields' names, so that
            each entry point can name them its own way (see :meth:`render`).
    """

    def __init__(self, field: str, value: Any, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(self.render(_OwnNames()))

    def render(self, names: Mapping[str, str], value: Any = None) -> str:
        """``"<name>=<value> <problem>"`` with every field named through ``names`` (``value``: the raw value
        as the user wrote it, e.g. the string of ``-s NAME=value``; default the value refused)."""
        shown = self.value if value is None else value
        return f"{names[self.field]}={shown!r} " + self.problem.format_map(names)


class NearDupSettingsError(NearDupError, ValueError):
    """A ``NEARDUP_*`` setting has a wrong value; the message names the setting and the value."""


class MarkFieldError(NearDupSettingsError):
    """``NEARDUP_ACTION='mark'`` but the item class does not declare ``NEARDUP_MARK_FIELD``.

    Not raised through Scrapy (that would lose the item): the pipeline logs its message, passes such items
    through unmarked (``neardup/mark_field_missing``), stops the crawl and makes its exit status non-zero
    (:mod:`scrapy_neardup.crawl.exit_status`)."""


class InputError(NearDupError, ValueError):
    """The input cannot be read (``cannot read PATH: reason``), or a line is not a JSON object (``line N: ...``);
    the commands print the message as their one-line error."""


class InvalidNameError(NearDupError, ValueError):
    """An index or field name that must not reach Elasticsearch; the message says which rule it breaks."""


class IncompatibleSketches(NearDupError, ValueError):
    """Sketches made with different parameters (different tags) were compared."""


class BinaryContent(NearDupError, ValueError):
    """The content is binary (a PDF, an image), not text: it is not sketched."""


class CommandError(NearDupError):
    """A failure the ``neardup`` command reports as ``neardup: error: ...`` with exit status 1."""


# -- unusable state ------------------------------------------------------------------------------------------


class StateError(NearDupError, RuntimeError):
    """A saved index cannot be used: damaged, truncated, of another format, or made with other parameters."""


class DamagedRecord(NearDupError, ValueError):
    """A record of a journal or template log failed a check and is not the last one: the file is damaged (the
    message says how)."""


class TemplateFormatError(NearDupError, ValueError):
    """Bytes that are not a host template written by ``HostTemplate.to_bytes``."""


class DirectoryLocked(NearDupError, OSError):
    """Another process holds the lock of the state directory."""


# -- a backend that could not decide -------------------------------------------------------------------------


class BackendError(NearDupError):
    """A backend could not decide a page (its store is unreachable, refused the request, or could not record
    the page). The pipeline catches this type, and only this one, to pass the item through unchecked."""


class JournalWriteError(StateError, BackendError):
    """A record could not be appended to the journal (e.g. a full disk): the page is kept for this run but would
    be forgotten after a crash. A :class:`BackendError`, so the pipeline passes the item through unchecked."""


class TemplateWriteError(StateError, BackendError):
    """A host template could not be appended (e.g. a full disk). A :class:`BackendError`: the pages waiting for
    it pass through unchecked, and the host's template is learned again."""


class SketchWorkerError(NearDupError, RuntimeError):
    """The sketch worker process died, could not start, or answered something unreadable."""


class EsError(BackendError, RuntimeError):
    """A failure talking to Elasticsearch, with a message fit for a user (no traceback, no secrets).

    A :class:`BackendError`, so that the pipeline passes an item whose check failed through unchecked."""


class TagMismatch(EsError):
    """The index holds sketches made with other parameters (another tag) than the ones asked for."""


__all__ = [
    "BackendError", "BinaryContent", "CommandError", "DamagedRecord", "DirectoryLocked", "EsError",
    "IncompatibleSketches", "InputError", "InvalidNameError", "JournalWriteError", "MarkFieldError",
    "NearDupError", "NearDupSettingsError", "ParameterError", "SketchWorkerError", "StateError", "TagMismatch",
    "TemplateFormatError", "TemplateWriteError",
]
