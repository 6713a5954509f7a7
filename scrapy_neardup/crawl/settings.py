"""The ``NEARDUP_*`` Scrapy settings, parsed and validated once into a frozen :class:`NearDupSettings`.

Values may come from ``settings.py`` (Python values) or from the command line (``-s NAME=value``, always a
string), so numbers and booleans are accepted in both forms (the readers are in
:mod:`scrapy_neardup.store.config`, shared with the backends). A wrong value raises
:class:`NearDupSettingsError`, whose message names the setting and the bad value; the pipeline raises it from
``from_crawler``, which makes Scrapy abort the crawl before any request is sent (the error is logged at
CRITICAL level and ``scrapy crawl`` exits with status 1). Each backend parses its own settings in its
``from_settings`` (``NEARDUP_STATE_DIR``/``NEARDUP_RESET``: the embedded store; ``NEARDUP_ES_*``:
``es_integration.backend``; ``NEARDUP_CRAWL_ID``: both, through
:func:`~scrapy_neardup.store.config.crawl_identity`), called from the same ``from_crawler``. A ``NEARDUP_*``
name that is none of these (:data:`scrapy_neardup.store.config.KNOWN_SETTINGS`, the one list of them) is a typo
to the crawl: one WARNING names it and the closest known one (:mod:`scrapy_neardup.crawl.startup`).

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
NEARDUP_CONTENT       ``"auto"`` (default: the page's own text), ``"main"`` (marked main content) or ``"body"``.
NEARDUP_ACTION        ``"drop"`` (default) or ``"mark"``.
NEARDUP_MARK_FIELD    item field that receives ``{"duplicate_of", "resemblance", "exact"}`` in mark mode, with the
                      evidence ``{"rule", "shared", "k", "interval"}`` (docs/evidence.md)
                      (``{"revisit": True, "changed": bool}`` for a revisit, ``{"repeat": True, "rule": "repeat"}``
                      for a repeat, ``None`` for a kept page).
NEARDUP_REVISIT       ``"emit"`` (default) or ``"drop_unchanged"``: what becomes of a page seen again under
                      its key by a later crawl (a recurring crawl) whose content did not change. Met again
                      unchanged within one crawl, a page is a repeat: dropped (or marked), never emitted twice.
NEARDUP_CRAWL_ID      the crawl's identity, which tells repeats from revisits (default: saved in JOBDIR, so a
                      resumed crawl is the same crawl; without JOBDIR, new for each run).
NEARDUP_BACKEND       ``"embedded"`` (default), ``"elasticsearch"``, or the dotted path of a
                      :class:`~scrapy_neardup.store.backend.Backend` subclass.
NEARDUP_ES_*          URL, INDEX, API_KEY, USERNAME, PASSWORD, CA_CERTS, TIMEOUT of the Elasticsearch backend.
NEARDUP_STATE_DIR     where the embedded store is saved (default ``<JOBDIR>/neardup``; none without JOBDIR).
NEARDUP_RESET         bool: discard the saved embedded store at start.
NEARDUP_DEBUG         bool: log every drop at INFO instead of DEBUG.
NEARDUP_REPORT        path: write an HTML report of the crawl's decisions there at its end (default: none;
                      the add-on enables :class:`~scrapy_neardup.crawl.report.CrawlReport`).
NEARDUP_WORKER        bool, default True: sketch in one child process, off the crawl's reactor thread
                      (False: sketch in the crawl's own process).
NEARDUP_TEMPLATE_SAMPLE  int >= 1, default 100: pages of a host its template is learned from ("auto" mode).
NEARDUP_MAX_UNCHECKED  share in [0, 1], default 0: of the pages that went to the duplicate check
                      (``neardup/checked``), the share that may pass through unchecked (``neardup/unchecked``:
                      the backend could not answer) before the crawl fails: close reason ``neardup_unchecked``
                      and exit status 1 (:mod:`scrapy_neardup.crawl.outage`). 0: any unchecked page fails it;
                      1: none does.
NEARDUP_ON_BACKEND_DOWN  what a check the backend cannot answer does: ``"pass"`` (default: the item passes
                      through unchecked), ``"pause"`` (pause the crawl and retry until the backend answers) or
                      ``"stop"`` (close the spider, reason ``neardup_backend_down``).
NEARDUP_BACKEND_DOWN_MAX_WAIT  seconds > 0, default 600: ``"pause"``: how long one outage may pause the crawl
                      before it stops as ``"stop"`` does.
NEARDUP_BACKEND_RETRY_INTERVAL  seconds > 0, default 5: ``"pause"``: time between two tries of the backend.
NEARDUP_MONITOR_MAX_BACKEND_ERRORS  int >= 0, default 0: the Spidermon suite's bound on ``neardup/backend_errors``
                      (:mod:`scrapy_neardup.crawl.monitors`).
NEARDUP_MONITOR_MAX_UNCHECKED  share in [0, 1], default NEARDUP_MAX_UNCHECKED: the suite's bound on the unchecked
                      share.
NEARDUP_MONITOR_MAX_DROP_RATE  share in [0, 1], default 0.9: the suite's bound on the share of the checked pages
                      found to be near-duplicates (dropped, or marked).
====================  ========================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from scrapy.utils.misc import load_object

from ..core.params import SketchParams
from ..core.sketch import Sketcher
from ..core.template import SAMPLE_PAGES
from ..store.backend import Backend
from ..store.config import (
    NearDupSettingsError,
    SettingsLike,
    read_bool,
    read_choice,
    read_field_name,
    read_float,
    read_int,
    read_sketch_params,
    settings_error,
)
from ..store.embedded import EmbeddedBackend

if TYPE_CHECKING:
    from ..core.shingles import ShingleKind

Action = Literal["drop", "mark"]

ACTIONS: tuple[Action, ...] = ("drop", "mark")
Revisit = Literal["emit", "drop_unchanged"]
REVISITS: tuple[Revisit, ...] = ("emit", "drop_unchanged")
OnBackendDown = Literal["pass", "pause", "stop"]
ON_BACKEND_DOWN: tuple[OnBackendDown, ...] = ("pass", "pause", "stop")
#: ``NEARDUP_BACKEND_DOWN_MAX_WAIT``: seconds one outage may pause the crawl (``"pause"``) before it stops.
BACKEND_DOWN_MAX_WAIT = 600.0
#: ``NEARDUP_BACKEND_RETRY_INTERVAL``: seconds between two tries of a backend that is down (``"pause"``).
BACKEND_RETRY_INTERVAL = 5.0
#: ``NEARDUP_MONITOR_MAX_DROP_RATE``: the Spidermon suite's default bound on the drop rate.
MONITOR_MAX_DROP_RATE = 0.9
#: ``NEARDUP_BACKEND`` aliases and the classes they stand for.
BACKEND_ALIASES: dict[str, str] = {
    "embedded": "scrapy_neardup.store.embedded.EmbeddedBackend",
    "elasticsearch": "es_integration.backend.ElasticsearchBackend",
}
BACKENDS: tuple[str, ...] = tuple(BACKEND_ALIASES)
#: Dotted paths of earlier versions, still accepted: the stores moved from ``core`` to ``store``.
MOVED_PATHS: dict[str, str] = {"scrapy_neardup.core.embedded.": "scrapy_neardup.store.embedded.",
                               "scrapy_neardup.core.backend.": "scrapy_neardup.store.backend."}


@dataclass(frozen=True, slots=True)
class NearDupSettings:
    """The validated ``NEARDUP_*`` settings of one crawl (the backend's own settings aside).

    Attributes:
        enabled: the pipeline runs at all.
        text_field: item field with the page text or HTML.
        url_field: item field with the page URL, the key a kept page is known by.
        params: the sketch parameters, ``k``, ``t`` (see :class:`~scrapy_neardup.core.params.SketchParams`);
            also readable as ``num_perm``, ``min_shared``, ``threshold``, ``shingle``, ``shingle_size``, ``seed``.
        action: ``"drop"`` raises :class:`~scrapy_neardup.crawl.pipeline.NearDuplicateDropped`; ``"mark"`` keeps the
            item and fills ``mark_field``.
        mark_field: item field that receives ``{"duplicate_of": url, "resemblance": r, "exact": bool}``.
        revisit: a page seen again under its key with unchanged content is emitted (``"emit"``) or dropped
            (``"drop_unchanged"``, :class:`~scrapy_neardup.crawl.pipeline.RevisitDropped`).
        backend: ``NEARDUP_BACKEND`` as given (an alias, lowercased, or a dotted path).
        backend_class: the :class:`~scrapy_neardup.store.backend.Backend` subclass it names.
        debug: log every drop at INFO instead of DEBUG.
        sketch_process: sketch in a child process (:mod:`scrapy_neardup.crawl.sketch_worker`) instead of on the
            crawl's reactor thread.
        template_sample: ``"auto"`` mode: pages of a host its template is learned from, the host's first pages
            waiting until then (:mod:`scrapy_neardup.crawl.templates`).
        outage: what happens while the backend cannot answer, and how many unchecked pages fail the crawl
            (:class:`OutageSettings`).
        monitors: the thresholds of the Spidermon suite (:class:`MonitorThresholds`), validated with the rest so
            that a wrong one stops the crawl at start rather than at its end.
    """

    enabled: bool = True
    text_field: str = "text"
    url_field: str = "url"
    params: SketchParams = field(default_factory=SketchParams)
    action: Action = "drop"
    mark_field: str = "neardup"
    revisit: Revisit = "emit"
    backend: str = "embedded"
    backend_class: type[Backend] = EmbeddedBackend
    debug: bool = False
    sketch_process: bool = True
    template_sample: int = SAMPLE_PAGES
    outage: OutageSettings = field(default_factory=lambda: OutageSettings())
    monitors: MonitorThresholds = field(default_factory=lambda: MonitorThresholds())

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> NearDupSettings:
        """Parse and validate the ``NEARDUP_*`` settings of a Scrapy settings object (any mapping with ``.get``).

        Raises:
            NearDupSettingsError: a setting has a wrong type or value (the message names it).
        """
        enabled = read_bool(settings, "NEARDUP_ENABLED", True)
        if not enabled:
            # A disabled pipeline must not fail on settings it will never use.
            return cls(enabled=False)
        params = read_sketch_params(settings)
        action = cast(Action, read_choice(settings, "NEARDUP_ACTION", "drop", ACTIONS))
        backend, backend_class = load_backend(settings.get("NEARDUP_BACKEND"))
        return cls(
            enabled=True,
            text_field=read_field_name(settings, "NEARDUP_TEXT_FIELD", "text"),
            url_field=read_field_name(settings, "NEARDUP_URL_FIELD", "url"),
            params=params,
            action=action,
            mark_field=read_field_name(settings, "NEARDUP_MARK_FIELD", "neardup"),
            revisit=cast(Revisit, read_choice(settings, "NEARDUP_REVISIT", "emit", REVISITS)),
            backend=backend,
            backend_class=backend_class,
            debug=read_bool(settings, "NEARDUP_DEBUG", False),
            sketch_process=read_bool(settings, "NEARDUP_WORKER", True),
            template_sample=_read_template_sample(settings),
            outage=OutageSettings.from_settings(settings),
            monitors=MonitorThresholds.from_settings(settings),
        )

    @property
    def num_perm(self) -> int:
        return self.params.num_perm

    @property
    def min_shared(self) -> int:
        return self.params.min_shared

    @property
    def threshold(self) -> float | None:
        return self.params.threshold

    @property
    def shingle(self) -> ShingleKind:
        return self.params.shingle

    @property
    def shingle_size(self) -> int | None:
        return self.params.shingle_size

    @property
    def seed(self) -> int:
        return self.params.seed

    def sketcher(self) -> Sketcher:
        """A :class:`~scrapy_neardup.Sketcher` with these sketch parameters."""
        return Sketcher.from_params(self.params)

    def make_backend(self, settings: SettingsLike) -> Backend:
        """The backend ``NEARDUP_BACKEND`` names, built from ``settings`` by its ``from_settings``.

        Raises:
            NearDupSettingsError: one of the backend's own settings is wrong.
        """
        return self.backend_class.from_settings(settings, self.params)


@dataclass(frozen=True, slots=True)
class OutageSettings:
    """What the pipeline does while its backend cannot answer (:mod:`scrapy_neardup.crawl.outage`).

    Attributes:
        max_unchecked: ``NEARDUP_MAX_UNCHECKED``, the share of the checked pages that may pass through unchecked
            before the crawl fails (close reason ``neardup_unchecked``, exit status 1); 0: none may.
        on_backend_down: ``NEARDUP_ON_BACKEND_DOWN``: ``"pass"``, ``"pause"`` or ``"stop"``.
        max_wait: ``NEARDUP_BACKEND_DOWN_MAX_WAIT``, seconds one outage may pause the crawl.
        retry_interval: ``NEARDUP_BACKEND_RETRY_INTERVAL``, seconds between two tries while paused.
    """

    max_unchecked: float = 0.0
    on_backend_down: OnBackendDown = "pass"
    max_wait: float = BACKEND_DOWN_MAX_WAIT
    retry_interval: float = BACKEND_RETRY_INTERVAL

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> OutageSettings:
        return cls(
            max_unchecked=read_share(settings, "NEARDUP_MAX_UNCHECKED", 0.0),
            on_backend_down=cast(OnBackendDown, read_choice(settings, "NEARDUP_ON_BACKEND_DOWN", "pass",
                                                            ON_BACKEND_DOWN)),
            max_wait=read_seconds(settings, "NEARDUP_BACKEND_DOWN_MAX_WAIT", BACKEND_DOWN_MAX_WAIT),
            retry_interval=read_seconds(settings, "NEARDUP_BACKEND_RETRY_INTERVAL", BACKEND_RETRY_INTERVAL),
        )


@dataclass(frozen=True, slots=True)
class MonitorThresholds:
    """The bounds of the Spidermon suite (:mod:`scrapy_neardup.crawl.monitors`).

    Attributes:
        max_backend_errors: ``NEARDUP_MONITOR_MAX_BACKEND_ERRORS``, pages whose check the backend failed at least
            once (``neardup/backend_errors``).
        max_unchecked: ``NEARDUP_MONITOR_MAX_UNCHECKED`` (default ``NEARDUP_MAX_UNCHECKED``), the unchecked share.
        max_drop_rate: ``NEARDUP_MONITOR_MAX_DROP_RATE``, the share of the decided pages found to be near-duplicates.
    """

    max_backend_errors: int = 0
    max_unchecked: float = 0.0
    max_drop_rate: float = MONITOR_MAX_DROP_RATE

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> MonitorThresholds:
        expected = "an integer >= 0"
        errors = read_int(settings, "NEARDUP_MONITOR_MAX_BACKEND_ERRORS", expected)
        if errors is not None and errors < 0:
            raise settings_error("NEARDUP_MONITOR_MAX_BACKEND_ERRORS",
                                 settings.get("NEARDUP_MONITOR_MAX_BACKEND_ERRORS"), expected)
        max_unchecked = read_share(settings, "NEARDUP_MAX_UNCHECKED", 0.0)
        return cls(
            max_backend_errors=0 if errors is None else errors,
            max_unchecked=read_share(settings, "NEARDUP_MONITOR_MAX_UNCHECKED", max_unchecked),
            max_drop_rate=read_share(settings, "NEARDUP_MONITOR_MAX_DROP_RATE", MONITOR_MAX_DROP_RATE),
        )


def read_share(settings: SettingsLike, name: str, default: float) -> float:
    """A share in [0, 1] (``0.05``: 5%); ``default`` when unset."""
    value = read_float(settings, name)
    if value is None:
        return default
    if not 0.0 <= value <= 1.0:
        raise settings_error(name, settings.get(name), "a share in [0, 1] (0.05 for 5%)")
    return value


def read_seconds(settings: SettingsLike, name: str, default: float) -> float:
    """A positive number of seconds; ``default`` when unset."""
    value = read_float(settings, name)
    if value is None:
        return default
    if value <= 0:
        raise settings_error(name, settings.get(name), "a number of seconds > 0")
    return value


def _read_template_sample(settings: SettingsLike) -> int:
    expected = "an integer >= 1"
    value = read_int(settings, "NEARDUP_TEMPLATE_SAMPLE", expected)
    if value is None:
        return SAMPLE_PAGES
    if value < 1:
        raise settings_error("NEARDUP_TEMPLATE_SAMPLE", settings.get("NEARDUP_TEMPLATE_SAMPLE"), expected)
    return value


def load_backend(value: Any) -> tuple[str, type[Backend]]:
    """``(value as given, class)`` for a ``NEARDUP_BACKEND`` value: an alias or a dotted path, loaded with
    :func:`scrapy.utils.misc.load_object` as Scrapy loads ``HTTPCACHE_STORAGE``.

    Raises:
        NearDupSettingsError: naming NEARDUP_BACKEND when the value is not a loadable Backend subclass.
    """
    if value is None or value == "":
        return "embedded", EmbeddedBackend
    expected = (
        "one of " + ", ".join(repr(a) for a in BACKEND_ALIASES)
        + " or the dotted path of a scrapy_neardup.store.backend.Backend subclass"
    )
    if not isinstance(value, str) and not isinstance(value, type):
        raise settings_error("NEARDUP_BACKEND", value, expected)
    path: str | type
    if isinstance(value, type):  # a class object in settings.py, as Scrapy allows for its own components
        name, path = f"{value.__module__}.{value.__qualname__}", value
    else:
        name = value.strip()
        if name.lower() in BACKEND_ALIASES:
            name = name.lower()
        path = BACKEND_ALIASES.get(name, name)
        for old, new in MOVED_PATHS.items():
            if path.startswith(old):
                path = new + path[len(old):]
    if isinstance(path, str) and "." not in path:
        raise settings_error("NEARDUP_BACKEND", value, expected)
    try:
        loaded = load_object(path)
    except (ImportError, NameError, AttributeError, ValueError) as exc:
        raise NearDupSettingsError(
            f"NEARDUP_BACKEND={value!r} is not valid: expected {expected} (cannot load {path}: {exc})"
        ) from None
    if not (isinstance(loaded, type) and issubclass(loaded, Backend)):
        raise settings_error("NEARDUP_BACKEND", value, expected + f" ({path} is not one)")
    return name, loaded


__all__ = [
    "ACTIONS",
    "BACKENDS",
    "BACKEND_ALIASES",
    "ON_BACKEND_DOWN",
    "MonitorThresholds",
    "NearDupSettings",
    "NearDupSettingsError",
    "OutageSettings",
    "load_backend",
    "read_seconds",
    "read_share",
]
