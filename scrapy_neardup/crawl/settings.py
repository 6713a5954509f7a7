"""The ``NEARDUP_*`` Scrapy settings, parsed and validated once into a frozen :class:`NearDupSettings`.

Each setting's type, default and bounds are declared once in :mod:`scrapy_neardup.store.settings_registry` (the
reference page, docs/settings.md, is made from it) and read by :mod:`scrapy_neardup.store.config`, shared with the
backends, which parse their own settings in their ``from_settings``. A wrong value raises
:class:`NearDupSettingsError` naming the setting and the value, from the pipeline's ``from_crawler``: Scrapy aborts
the crawl before any request (one CRITICAL line, exit status 1). An unknown ``NEARDUP_*`` name gets one WARNING
naming the closest known one (:mod:`scrapy_neardup.crawl.startup`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from scrapy.utils.misc import load_object

from ..core.params import SketchParams
from ..core.sketch import Sketcher
from ..errors import NearDupSettingsError
from ..store.backend import Backend
from ..store.config import (
    SettingsLike,
    read_setting,
    read_sketch_params,
    setting_bool,
    setting_float,
    setting_int,
    settings_error,
)
from ..store.embedded import EmbeddedBackend
from ..store.settings_registry import SETTING, default_of

if TYPE_CHECKING:
    from ..core.shingles import ShingleKind

Action = Literal["drop", "mark"]

ACTIONS = cast(tuple[Action, ...], SETTING["NEARDUP_ACTION"].choices)
Revisit = Literal["emit", "drop_unchanged"]
REVISITS = cast(tuple[Revisit, ...], SETTING["NEARDUP_REVISIT"].choices)
OnBackendDown = Literal["pass", "pause", "stop"]
ON_BACKEND_DOWN = cast(tuple[OnBackendDown, ...], SETTING["NEARDUP_ON_BACKEND_DOWN"].choices)
#: ``NEARDUP_BACKEND`` aliases and the classes they stand for.
BACKEND_ALIASES: dict[str, str] = {
    "embedded": "scrapy_neardup.store.embedded.EmbeddedBackend",
    "elasticsearch": "es_integration.backend.ElasticsearchBackend",
}
BACKENDS: tuple[str, ...] = tuple(BACKEND_ALIASES)


@dataclass(frozen=True, slots=True)
class NearDupSettings:
    """The validated ``NEARDUP_*`` settings of one crawl (the backend's own settings aside).

    Attributes:
        enabled: the pipeline runs at all.
        text_field: item field with the page text or HTML.
        url_field: item field with the page URL, the key a kept page is known by.
        params: the sketch parameters, ``k``, ``t`` (see :class:`~scrapy_neardup.core.params.SketchParams`);
            also readable as ``num_perm``, ``min_shared``, ``threshold``, ``shingle``, ``shingle_size``, ``seed``.
        action: ``"drop"`` raises :class:`~scrapy_neardup.crawl.drops.NearDuplicateDropped`; ``"mark"`` keeps the
            item and fills ``mark_field``.
        mark_field: item field that receives ``{"duplicate_of": url, "resemblance": r, "exact": bool}``.
        revisit: a page seen again under its key with unchanged content is emitted (``"emit"``) or dropped
            (``"drop_unchanged"``, :class:`~scrapy_neardup.crawl.drops.RevisitDropped`).
        backend: ``NEARDUP_BACKEND`` as given (an alias, lowercased, or a dotted path).
        backend_class: the :class:`~scrapy_neardup.store.backend.Backend` subclass it names.
        debug: log every drop at INFO instead of DEBUG.
        sketch_process: sketch in a child process (:mod:`scrapy_neardup.crawl.sketch_worker`) instead of on the
            crawl's reactor thread.
        template_sample: ``"auto"`` mode: pages of a host its template is learned from, the host's first pages
            waiting until then (:mod:`scrapy_neardup.crawl.template_wait`).
        outage: what happens while the backend cannot answer, and how many unchecked pages fail the crawl
            (:class:`OutageSettings`).
        monitors: the thresholds of the Spidermon suite (:class:`MonitorThresholds`), validated with the rest so
            that a wrong one stops the crawl at start rather than at its end.
    """

    enabled: bool = default_of("NEARDUP_ENABLED")
    text_field: str = default_of("NEARDUP_TEXT_FIELD")
    url_field: str = default_of("NEARDUP_URL_FIELD")
    params: SketchParams = field(default_factory=SketchParams)
    action: Action = default_of("NEARDUP_ACTION")
    mark_field: str = default_of("NEARDUP_MARK_FIELD")
    revisit: Revisit = default_of("NEARDUP_REVISIT")
    backend: str = default_of("NEARDUP_BACKEND")
    backend_class: type[Backend] = EmbeddedBackend
    debug: bool = default_of("NEARDUP_DEBUG")
    sketch_process: bool = default_of("NEARDUP_WORKER")
    template_sample: int = default_of("NEARDUP_TEMPLATE_SAMPLE")
    outage: OutageSettings = field(default_factory=lambda: OutageSettings())
    monitors: MonitorThresholds = field(default_factory=lambda: MonitorThresholds())

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> NearDupSettings:
        """Parse and validate the ``NEARDUP_*`` settings of a Scrapy settings object (any mapping with ``.get``).

        Raises:
            NearDupSettingsError: a setting has a wrong type or value (the message names it).
        """
        enabled = setting_bool(settings, "NEARDUP_ENABLED")
        if not enabled:
            # A disabled pipeline must not fail on settings it will never use.
            return cls(enabled=False)
        params = read_sketch_params(settings)
        action = cast(Action, read_setting(settings, "NEARDUP_ACTION"))
        backend, backend_class = load_backend(settings.get("NEARDUP_BACKEND"))
        return cls(
            enabled=True,
            text_field=read_setting(settings, "NEARDUP_TEXT_FIELD"),
            url_field=read_setting(settings, "NEARDUP_URL_FIELD"),
            params=params,
            action=action,
            mark_field=read_setting(settings, "NEARDUP_MARK_FIELD"),
            revisit=cast(Revisit, read_setting(settings, "NEARDUP_REVISIT")),
            backend=backend,
            backend_class=backend_class,
            debug=setting_bool(settings, "NEARDUP_DEBUG"),
            sketch_process=setting_bool(settings, "NEARDUP_WORKER"),
            template_sample=setting_int(settings, "NEARDUP_TEMPLATE_SAMPLE"),
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

    max_unchecked: float = default_of("NEARDUP_MAX_UNCHECKED")
    on_backend_down: OnBackendDown = default_of("NEARDUP_ON_BACKEND_DOWN")
    max_wait: float = default_of("NEARDUP_BACKEND_DOWN_MAX_WAIT")
    retry_interval: float = default_of("NEARDUP_BACKEND_RETRY_INTERVAL")

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> OutageSettings:
        return cls(
            max_unchecked=setting_float(settings, "NEARDUP_MAX_UNCHECKED"),
            on_backend_down=cast(OnBackendDown, read_setting(settings, "NEARDUP_ON_BACKEND_DOWN")),
            max_wait=setting_float(settings, "NEARDUP_BACKEND_DOWN_MAX_WAIT"),
            retry_interval=setting_float(settings, "NEARDUP_BACKEND_RETRY_INTERVAL"),
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

    max_backend_errors: int = default_of("NEARDUP_MONITOR_MAX_BACKEND_ERRORS")
    max_unchecked: float = default_of("NEARDUP_MAX_UNCHECKED")
    max_drop_rate: float = default_of("NEARDUP_MONITOR_MAX_DROP_RATE")

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> MonitorThresholds:
        max_unchecked = setting_float(settings, "NEARDUP_MAX_UNCHECKED")
        return cls(
            max_backend_errors=setting_int(settings, "NEARDUP_MONITOR_MAX_BACKEND_ERRORS"),
            max_unchecked=setting_float(settings, "NEARDUP_MONITOR_MAX_UNCHECKED", max_unchecked),
            max_drop_rate=setting_float(settings, "NEARDUP_MONITOR_MAX_DROP_RATE"),
        )


def load_backend(value: Any) -> tuple[str, type[Backend]]:
    """``(value as given, class)`` for a ``NEARDUP_BACKEND`` value: an alias or a dotted path, loaded with
    :func:`scrapy.utils.misc.load_object` as Scrapy loads ``HTTPCACHE_STORAGE``.

    Raises:
        NearDupSettingsError: naming NEARDUP_BACKEND when the value is not a loadable Backend subclass.
    """
    if value is None or value == "":
        return default_of("NEARDUP_BACKEND"), EmbeddedBackend
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


