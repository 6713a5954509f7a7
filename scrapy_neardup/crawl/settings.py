"""The ``NEARDUP_*`` Scrapy settings, parsed and validated once into a frozen :class:`NearDupSettings`.

Values may come from ``settings.py`` (Python values) or from the command line (``-s NAME=value``, always a
string), so numbers and booleans are accepted in both forms. A wrong value raises
:class:`NearDupSettingsError`, whose message names the setting and the bad value; the pipeline raises it from
``from_crawler``, which makes Scrapy abort the crawl before any request is sent (the error is logged at
CRITICAL level and ``scrapy crawl`` exits with status 1).

====================  ========================================================================================
Setting               Meaning
====================  ========================================================================================
NEARDUP_ENABLED       bool, default True. False disables the pipeline (``NotConfigured``).
NEARDUP_TEXT_FIELD    item field holding the page text or HTML (default ``"text"``).
NEARDUP_URL_FIELD     item field naming the page (default ``"url"``); the key kept pages are known by.
NEARDUP_THRESHOLD     target resemblance r in (0, 1] (default 0.9): pairs at r are caught with probability
                      >= 0.99; sets ``t`` through :func:`scrapy_neardup.core.theory.min_shared_for`.
NEARDUP_MIN_SHARED    ``t`` in [1, k]: positions that must agree; overrides NEARDUP_THRESHOLD.
NEARDUP_NUM_PERM      ``k``, signature positions (default 128).
NEARDUP_SHINGLE       ``"word"`` (default) or ``"char"``.
NEARDUP_SHINGLE_SIZE  units per shingle (default 5 words / 9 characters).
NEARDUP_SEED          hash seed (default 1).
NEARDUP_ACTION        ``"drop"`` (default) or ``"mark"``.
NEARDUP_MARK_FIELD    item field that receives ``{"duplicate_of", "resemblance", "exact"}`` in mark mode.
NEARDUP_BACKEND       ``"embedded"`` (default) or ``"elasticsearch"``.
NEARDUP_ES_*          URL, INDEX, API_KEY, USERNAME, PASSWORD, CA_CERTS, TIMEOUT of the Elasticsearch backend.
NEARDUP_STATE_DIR     where the embedded store is saved (default ``<JOBDIR>/neardup``; none without JOBDIR).
NEARDUP_RESET         bool: discard the saved embedded store at start.
NEARDUP_DEBUG         bool: log every drop at INFO instead of DEBUG.
NEARDUP_WORKER        bool, default True: sketch in one child process, off the crawl's reactor thread
                      (False: sketch in the crawl's own process).
====================  ========================================================================================
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from ..core.minhash import MAX_NUM_PERM
from ..core.shingles import ShingleKind
from ..core.sketch import DEFAULT_NUM_PERM, DEFAULT_SEED, Sketcher
from ..core.theory import DEFAULT_THRESHOLD, min_shared_for

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

Action = Literal["drop", "mark"]
BackendName = Literal["embedded", "elasticsearch"]

ACTIONS: tuple[Action, ...] = ("drop", "mark")
BACKENDS: tuple[BackendName, ...] = ("embedded", "elasticsearch")
SHINGLES: tuple[ShingleKind, ...] = ("word", "char")
#: Seeds are hashed as unsigned 64-bit integers; larger ones would silently alias smaller ones.
MAX_SEED = (1 << 64) - 1
#: Directory under JOBDIR that holds the embedded store.
JOBDIR_SUBDIR = "neardup"

_DEFAULT_MIN_SHARED = min_shared_for(DEFAULT_THRESHOLD, DEFAULT_NUM_PERM)
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


class NearDupSettingsError(ValueError):
    """A ``NEARDUP_*`` setting has a wrong value; the message names the setting and the value."""


@dataclass(frozen=True, slots=True)
class ElasticsearchSettings:
    """Connection settings of the Elasticsearch backend (``NEARDUP_ES_*``).

    ``password`` and ``api_key`` are kept out of ``repr`` so that they never reach a log line.
    """

    url: str
    index: str
    api_key: str | None = None
    username: str | None = None
    password: str | None = None
    ca_certs: str | None = None
    request_timeout: float = 10.0

    def __repr__(self) -> str:
        secrets = ", api_key=***" if self.api_key else ""
        secrets += f", username={self.username!r}, password=***" if self.username else ""
        return f"ElasticsearchSettings(url={self.url!r}, index={self.index!r}{secrets})"


@dataclass(frozen=True, slots=True)
class NearDupSettings:
    """The validated ``NEARDUP_*`` settings of one crawl.

    Attributes:
        enabled: the pipeline runs at all.
        text_field: item field with the page text or HTML.
        url_field: item field with the page URL, the key a kept page is known by.
        threshold: target resemblance ``r*``; ``None`` when ``min_shared`` was given explicitly.
        min_shared: ``t``: a page is a near-duplicate of a kept page when their signatures agree in at least
            ``t`` of ``k`` positions. Each position agrees with probability ``r`` (the pages' resemblance), so
            ``P(flag) = P[Binomial(k, r) >= t]``; by default ``t`` is the largest value that still flags
            ``r = threshold`` with probability >= 0.99 (``t = 107`` for ``k = 128, r* = 0.9``).
        num_perm: ``k``, signature positions.
        shingle, shingle_size, seed: sketch parameters (see :class:`~scrapy_neardup.Sketcher`).
        action: ``"drop"`` raises :class:`~scrapy_neardup.crawl.pipeline.NearDuplicateDropped`; ``"mark"`` keeps the
            item and fills ``mark_field``.
        mark_field: item field that receives ``{"duplicate_of": url, "resemblance": r, "exact": bool}``.
        backend: ``"embedded"`` or ``"elasticsearch"``.
        elasticsearch: connection settings when ``backend == "elasticsearch"``, else ``None``.
        state_dir: directory of the embedded store, or ``None`` for no persistence.
        reset: discard the saved embedded store at start.
        debug: log every drop at INFO instead of DEBUG.
        sketch_process: sketch in a child process (:mod:`scrapy_neardup.crawl.sketch_worker`) instead of on the
            crawl's reactor thread.
    """

    enabled: bool = True
    text_field: str = "text"
    url_field: str = "url"
    threshold: float | None = DEFAULT_THRESHOLD
    min_shared: int = _DEFAULT_MIN_SHARED
    num_perm: int = DEFAULT_NUM_PERM
    shingle: ShingleKind = "word"
    shingle_size: int | None = None
    seed: int = DEFAULT_SEED
    action: Action = "drop"
    mark_field: str = "neardup"
    backend: BackendName = "embedded"
    elasticsearch: ElasticsearchSettings | None = None
    state_dir: str | None = None
    reset: bool = False
    debug: bool = False
    sketch_process: bool = True

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> NearDupSettings:
        """Parse and validate the ``NEARDUP_*`` settings (and ``JOBDIR``) of a Scrapy settings object.

        Raises:
            NearDupSettingsError: a setting has a wrong type or value (the message names it).
        """
        enabled = _bool(settings, "NEARDUP_ENABLED", True)
        if not enabled:
            # A disabled pipeline must not fail on settings it will never use.
            return cls(enabled=False)
        num_perm = _int(settings, "NEARDUP_NUM_PERM", DEFAULT_NUM_PERM, low=1, high=MAX_NUM_PERM)
        threshold, min_shared = _threshold_and_min_shared(settings, num_perm)
        shingle = cast(ShingleKind, _choice(settings, "NEARDUP_SHINGLE", "word", SHINGLES))
        shingle_size = _optional_int(settings, "NEARDUP_SHINGLE_SIZE", low=1)
        seed = _int(settings, "NEARDUP_SEED", DEFAULT_SEED, low=0, high=MAX_SEED)
        action = cast(Action, _choice(settings, "NEARDUP_ACTION", "drop", ACTIONS))
        backend = cast(BackendName, _choice(settings, "NEARDUP_BACKEND", "embedded", BACKENDS))
        return cls(
            enabled=True,
            text_field=_field_name(settings, "NEARDUP_TEXT_FIELD", "text"),
            url_field=_field_name(settings, "NEARDUP_URL_FIELD", "url"),
            threshold=threshold,
            min_shared=min_shared,
            num_perm=num_perm,
            shingle=shingle,
            shingle_size=shingle_size,
            seed=seed,
            action=action,
            mark_field=_field_name(settings, "NEARDUP_MARK_FIELD", "neardup"),
            backend=backend,
            elasticsearch=_elasticsearch(settings) if backend == "elasticsearch" else None,
            state_dir=_state_dir(settings),
            reset=_bool(settings, "NEARDUP_RESET", False),
            debug=_bool(settings, "NEARDUP_DEBUG", False),
            sketch_process=_bool(settings, "NEARDUP_WORKER", True),
        )

    def sketcher(self) -> Sketcher:
        """A :class:`~scrapy_neardup.Sketcher` with these sketch parameters."""
        return Sketcher(
            num_perm=self.num_perm, shingle=self.shingle, shingle_size=self.shingle_size, seed=self.seed
        )


# -- parsing helpers: each names the setting and the value it rejects ----------------------------------------


def _raw(settings: BaseSettings, name: str) -> Any:
    return settings.get(name)


def _error(name: str, value: Any, expected: str) -> NearDupSettingsError:
    return NearDupSettingsError(f"{name}={value!r} is not valid: expected {expected}")


def _bool(settings: BaseSettings, name: str, default: bool) -> bool:
    value = _raw(settings, name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
    raise _error(name, value, "a boolean (True/False, 1/0, 'true'/'false', 'yes'/'no', 'on'/'off')")


def _int(settings: BaseSettings, name: str, default: int, *, low: int, high: int | None = None) -> int:
    number = _optional_int(settings, name, low=low, high=high)
    return default if number is None else number


def _optional_int(
    settings: BaseSettings, name: str, *, low: int, high: int | None = None, expected: str | None = None
) -> int | None:
    value = _raw(settings, name)
    if value is None or value == "":
        return None
    if expected is None:
        expected = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    return _checked_int(name, value, low, high, expected)


def _checked_int(name: str, value: Any, low: int, high: int | None, expected: str) -> int:
    # bool is an int subclass: True must not silently mean 1.
    if isinstance(value, bool):
        raise _error(name, value, expected)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            raise _error(name, value, expected) from None
    else:
        raise _error(name, value, expected)
    if number < low or (high is not None and number > high):
        raise _error(name, value, expected)
    return number


def _float(settings: BaseSettings, name: str) -> float | None:
    value = _raw(settings, name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _error(name, value, "a number")
    try:
        number = float(value)
    except ValueError:
        raise _error(name, value, "a number") from None
    if not math.isfinite(number):
        raise _error(name, value, "a finite number")
    return number


def _choice(settings: BaseSettings, name: str, default: str, choices: tuple[str, ...]) -> str:
    value = _raw(settings, name)
    if value is None or value == "":
        return default
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    raise _error(name, value, "one of " + ", ".join(repr(c) for c in choices))


def _field_name(settings: BaseSettings, name: str, default: str) -> str:
    value = _raw(settings, name)
    if value is None:
        return default
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise _error(name, value, "a non-empty item field name")


def _optional_str(settings: BaseSettings, name: str) -> str | None:
    value = _raw(settings, name)
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise _error(name, value, "a string")
    # Empty strings come from unset environment variables (os.environ.get("X", "")): treat them as unset.
    return value.strip() or None


def _threshold_and_min_shared(settings: BaseSettings, num_perm: int) -> tuple[float | None, int]:
    threshold = _float(settings, "NEARDUP_THRESHOLD")
    if threshold is not None and not 0 < threshold <= 1:
        raise _error("NEARDUP_THRESHOLD", _raw(settings, "NEARDUP_THRESHOLD"), "a resemblance in (0, 1]")
    min_shared = _optional_int(
        settings, "NEARDUP_MIN_SHARED", low=1, high=num_perm,
        expected=f"an integer in [1, NEARDUP_NUM_PERM={num_perm}]",
    )
    if min_shared is not None:
        # An explicit t overrides the threshold; say so in the settings object rather than keep a stale value.
        return None, min_shared
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    t = min_shared_for(threshold, num_perm)
    if t < 1:
        raise NearDupSettingsError(
            f"NEARDUP_THRESHOLD={threshold!r} is too low for NEARDUP_NUM_PERM={num_perm}: no number of "
            "shared positions catches it reliably; raise the threshold or NEARDUP_NUM_PERM, or set "
            "NEARDUP_MIN_SHARED"
        )
    return threshold, t


def _state_dir(settings: BaseSettings) -> str | None:
    explicit = _optional_str(settings, "NEARDUP_STATE_DIR")
    if explicit is not None:
        return explicit
    from scrapy.utils.job import job_dir

    jobdir = job_dir(settings)  # creates JOBDIR when it does not exist, as Scrapy's own components do
    return str(Path(jobdir) / JOBDIR_SUBDIR) if jobdir else None


def _elasticsearch(settings: BaseSettings) -> ElasticsearchSettings:
    url = _optional_str(settings, "NEARDUP_ES_URL")
    if url is None:
        raise NearDupSettingsError(
            "NEARDUP_BACKEND='elasticsearch' needs NEARDUP_ES_URL (e.g. 'http://127.0.0.1:9200'), got "
            f"{_raw(settings, 'NEARDUP_ES_URL')!r}"
        )
    # Several nodes of one cluster: comma-separated URLs; a request that fails on one node is retried on another.
    if not all(part.strip().lower().startswith(("http://", "https://")) for part in url.split(",")):
        raise _error("NEARDUP_ES_URL", url, "an http:// or https:// URL, or several separated by commas")
    index = _optional_str(settings, "NEARDUP_ES_INDEX")
    if index is None:
        raise NearDupSettingsError(
            "NEARDUP_BACKEND='elasticsearch' needs NEARDUP_ES_INDEX (the index of kept sketches), got "
            f"{_raw(settings, 'NEARDUP_ES_INDEX')!r}"
        )
    if index != index.lower():
        raise _error("NEARDUP_ES_INDEX", index, "a lowercase Elasticsearch index name")
    username = _optional_str(settings, "NEARDUP_ES_USERNAME")
    password = _optional_str(settings, "NEARDUP_ES_PASSWORD")
    if (username is None) != (password is None):
        missing = "NEARDUP_ES_PASSWORD" if password is None else "NEARDUP_ES_USERNAME"
        raise NearDupSettingsError(
            f"NEARDUP_ES_USERNAME and NEARDUP_ES_PASSWORD go together: {missing} is not set"
        )
    ca_certs = _optional_str(settings, "NEARDUP_ES_CA_CERTS")
    if ca_certs is not None and not Path(ca_certs).is_file():
        raise _error("NEARDUP_ES_CA_CERTS", ca_certs, "the path of an existing CA certificate file")
    timeout = _float(settings, "NEARDUP_ES_TIMEOUT")
    if timeout is not None and timeout <= 0:
        raise _error("NEARDUP_ES_TIMEOUT", _raw(settings, "NEARDUP_ES_TIMEOUT"), "seconds > 0")
    return ElasticsearchSettings(
        url=url,
        index=index,
        api_key=_optional_str(settings, "NEARDUP_ES_API_KEY"),
        username=username,
        password=password,
        ca_certs=ca_certs,
        request_timeout=10.0 if timeout is None else timeout,
    )


__all__ = [
    "ACTIONS",
    "BACKENDS",
    "ElasticsearchSettings",
    "NearDupSettings",
    "NearDupSettingsError",
]
