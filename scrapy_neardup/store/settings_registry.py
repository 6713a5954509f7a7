"""Every ``NEARDUP_*`` setting, declared once: name, type, default, bounds and a one-line meaning.

The typed readers (:func:`scrapy_neardup.store.config.read_setting` and its typed forms), the check for unknown
``NEARDUP_*`` names (:func:`scrapy_neardup.store.config.unknown_settings`) and the settings reference page
(``docs/settings.md``, written by :func:`write_reference` through ``.ci/settings_reference.py``) all come from
:data:`SETTINGS`: a default, a bound or a meaning is written here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..core.host_template import SAMPLE_PAGES
from ..core.mirror_table import DEFAULT_MIN_PAGES, DEFAULT_SHARE, DEFAULT_SYNC_INTERVAL
from ..core.params import DEFAULT_NUM_PERM, DEFAULT_SEED, MAX_NUM_PERM, SEED_LIMIT
from ..core.shingles import SHINGLE_KINDS
from ..core.text import CONTENT_MODES, DEFAULT_CONTENT
from ..core.theory import DEFAULT_THRESHOLD

#: ``bool``: True/False, 1/0 and their spellings; ``int``/``float``: a number, in ``[low, high]``; ``choice``: one of
#: ``choices``, case-insensitive; ``field``: a non-empty item field name; ``str``/``path``: a string, empty = unset.
Kind = Literal["bool", "int", "float", "choice", "field", "str", "path"]
#: What a float counts, which the message of a wrong value and the reference page say.
Unit = Literal["", "seconds", "share"]


@dataclass(frozen=True, slots=True)
class Setting:
    """One ``NEARDUP_*`` setting.

    Attributes:
        name: the setting's name.
        kind: how a value is read (see :data:`Kind`).
        default: the value when unset; ``None``: unset means none, or a default computed from other settings
            (``default_doc`` says which).
        doc: one line for the reference page (Markdown).
        group: the section of the reference page.
        low: the smallest allowed number (``int``/``float``); ``low_open``: ``low`` itself is refused.
        high: the largest allowed number (``int``/``float``).
        choices: the allowed values of a ``choice``.
        unit: what a ``float`` counts (``"seconds"``, ``"share"``).
        default_doc: the default as the reference page shows it when ``default`` alone does not say it.
        type_doc: the type as the reference page shows it when kind and bounds alone do not say it.
    """

    name: str
    kind: Kind
    default: Any
    doc: str
    group: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] = ()
    unit: Unit = ""
    default_doc: str | None = None
    type_doc: str | None = None

    @property
    def expected(self) -> str:
        """What a valid value is, as the message of a wrong one says it (``expected an integer in [1, 100]``)."""
        if self.kind == "int":
            if self.high is not None:
                return f"an integer in [{_num(self.low)}, {_num(self.high)}]"
            return f"an integer >= {_num(self.low)}" if self.low is not None else "an integer"
        if self.kind == "float":
            if self.unit == "share":
                opening = "(" if self.low_open else "["
                hint = "" if self.low_open else " (0.05 for 5%)"
                return f"a share in {opening}{_num(self.low)}, {_num(self.high)}]{hint}"
            if self.unit == "seconds":
                return f"seconds {'>' if self.low_open else '>='} {_num(self.low)}"
            return "a number"
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "bool":
            return "a boolean (True/False, 1/0, 'true'/'false', 'yes'/'no', 'on'/'off')"
        if self.kind == "field":
            return "a non-empty item field name"
        return "a string"

    def allows(self, value: float) -> bool:
        """``value`` is within the bounds (a number of an ``int`` or ``float`` setting)."""
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or value <= self.high

    @property
    def shown_type(self) -> str:
        """The type column of the reference page."""
        if self.type_doc is not None:
            return self.type_doc
        if self.kind == "choice":
            return " / ".join(f'`"{c}"`' for c in self.choices)
        if self.kind in ("int", "float"):
            word = {"share": "share", "seconds": "seconds"}.get(self.unit, self.kind)
            if self.high is not None:
                opening = "(" if self.low_open else "["
                return f"{word} in {opening}{_num(self.low)}, {_num(self.high)}]"
            if self.low is not None:
                return f"{word} {'>' if self.low_open else '≥'} {_num(self.low)}"
            return word
        return {"field": "item field name"}.get(self.kind, self.kind)

    @property
    def shown_default(self) -> str:
        """The default column of the reference page."""
        if self.default_doc is not None:
            return self.default_doc
        if self.default is None:
            return "unset"
        if isinstance(self.default, str):
            return f'`"{self.default}"`'
        return f"`{_num(self.default)}`"


def _num(value: Any) -> str:
    """``5.0`` as ``5``: bounds and defaults read as the user writes them."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_PIPELINE = "The pipeline"
_SKETCH = "Sketch parameters"
_STORE = "Crawls and the embedded store"
_OUTAGE = "Backend outages and the Spidermon suite"
_HOSTS = "Soft-404s, mirrors, copies and canonical links"
_ES = "The Elasticsearch backend"
_SEARCH = "The search index"

#: Every ``NEARDUP_*`` setting, in the order of the reference page.
SETTINGS: tuple[Setting, ...] = (
    Setting("NEARDUP_ENABLED", "bool", True, "`False` disables the pipeline (`NotConfigured`)", _PIPELINE),
    Setting("NEARDUP_TEXT_FIELD", "field", "text", "item field with the page text or HTML", _PIPELINE),
    Setting("NEARDUP_URL_FIELD", "field", "url",
            "item field naming the page, its key across crawls; items without it get the key "
            "`no-url:<16-hex text fingerprint>` and are counted", _PIPELINE),
    Setting("NEARDUP_ACTION", "choice", "drop", "drop near-duplicates, or keep them and mark them", _PIPELINE,
            choices=("drop", "mark")),
    Setting("NEARDUP_MARK_FIELD", "field", "neardup",
            "mark mode: the item field that receives the decision and its evidence "
            "([why a page was dropped](evidence.md))", _PIPELINE),
    Setting("NEARDUP_REVISIT", "choice", "emit",
            "a page seen again by a later crawl with unchanged content: emitted again, or dropped "
            "([recurring crawls](scrapy/recurring.md))", _PIPELINE, choices=("emit", "drop_unchanged")),
    Setting("NEARDUP_BACKEND", "str", "embedded",
            "where kept sketches live: an alias or the dotted path of a `Backend` subclass", _PIPELINE,
            type_doc='`"embedded"` / `"elasticsearch"` / dotted path'),
    Setting("NEARDUP_DEBUG", "bool", False, "log every drop at INFO instead of DEBUG", _PIPELINE),
    Setting("NEARDUP_REPORT", "path", None,
            "write an HTML report of the crawl's decisions there when it ends", _PIPELINE),
    Setting("NEARDUP_WORKER", "bool", True,
            "sketch in one child process, off the crawl's reactor thread; `False`: in the crawl's own process",
            _PIPELINE),
    Setting("NEARDUP_FREE_PARSE_TREES", "bool", True,
            "the add-on frees each response's parsed tree (`response.selector`) once the spider's callback is done "
            "with it: responses whose items wait for their check hold their text, not their tree", _PIPELINE),
    Setting("NEARDUP_THRESHOLD", "float", DEFAULT_THRESHOLD,
            "target resemblance r\\*: `t` is the largest that flags r\\* with probability ≥ 0.99 "
            "([the threshold](threshold.md))", _SKETCH, low=0.0, high=1.0, low_open=True,
            type_doc="float in (0, 1]"),
    Setting("NEARDUP_MIN_SHARED", "int", None, "`t` directly: positions that must agree (overrides "
            "`NEARDUP_THRESHOLD`)", _SKETCH, low=1, type_doc="int in [1, k]",
            default_doc="from `NEARDUP_THRESHOLD`"),
    Setting("NEARDUP_NUM_PERM", "int", DEFAULT_NUM_PERM, "`k`, signature positions", _SKETCH, low=1,
            high=MAX_NUM_PERM),
    Setting("NEARDUP_SHINGLE", "choice", "word", "shingle unit", _SKETCH, choices=SHINGLE_KINDS),
    Setting("NEARDUP_SHINGLE_SIZE", "int", None, "units per shingle", _SKETCH, low=1,
            default_doc="5 words / 9 characters"),
    Setting("NEARDUP_SEED", "int", DEFAULT_SEED, "hash seed; sketches compare only under equal seeds", _SKETCH,
            low=0, high=SEED_LIMIT - 1, type_doc="int in [0, 2⁶⁴)"),
    Setting("NEARDUP_CONTENT", "choice", DEFAULT_CONTENT,
            "what of a page is sketched ([content modes](content.md))", _SKETCH, choices=CONTENT_MODES),
    Setting("NEARDUP_TEMPLATE_SAMPLE", "int", SAMPLE_PAGES,
            '`"auto"` content: pages of a host its template is learned from; they wait for it', _SKETCH, low=1),
    Setting("NEARDUP_CRAWL_ID", "str", None,
            "the crawl's identity, which tells repeats from revisits: 1-200 of `A-Za-z0-9._:@/+-`", _STORE,
            default_doc="saved in `JOBDIR`, else new each run"),
    Setting("NEARDUP_STATE_DIR", "path", None, "where the embedded store is saved; without one nothing is",
            _STORE, default_doc="`<JOBDIR>/neardup`, else none"),
    Setting("NEARDUP_RESET", "bool", False, "discard the saved embedded store at start", _STORE),
    Setting("NEARDUP_MAX_UNCHECKED", "float", 0.0,
            "share of the checked pages that may pass through unchecked (backend down) before the crawl fails "
            "([outages](outages.md))", _OUTAGE, low=0.0, high=1.0, unit="share"),
    Setting("NEARDUP_ON_BACKEND_DOWN", "choice", "pass",
            "what a check the backend cannot answer does: pass unchecked, pause the crawl, or stop it", _OUTAGE,
            choices=("pass", "pause", "stop")),
    Setting("NEARDUP_BACKEND_DOWN_MAX_WAIT", "float", 600.0,
            '`"pause"`: how long one outage may pause the crawl before it stops', _OUTAGE, low=0.0,
            low_open=True, unit="seconds"),
    Setting("NEARDUP_BACKEND_RETRY_INTERVAL", "float", 5.0, '`"pause"`: time between two tries of the backend',
            _OUTAGE, low=0.0, low_open=True, unit="seconds"),
    Setting("NEARDUP_MONITOR_MAX_BACKEND_ERRORS", "int", 0,
            "the Spidermon suite's bound on `neardup/backend_errors`", _OUTAGE, low=0),
    Setting("NEARDUP_MONITOR_MAX_UNCHECKED", "float", None, "the Spidermon suite's bound on the unchecked share",
            _OUTAGE, low=0.0, high=1.0, unit="share", default_doc="`NEARDUP_MAX_UNCHECKED`"),
    Setting("NEARDUP_MONITOR_MAX_DROP_RATE", "float", 0.9,
            "the Spidermon suite's bound on the share of checked pages found to be near-duplicates", _OUTAGE,
            low=0.0, high=1.0, unit="share"),
    Setting("NEARDUP_SOFT404_ENABLED", "bool", True,
            "probe each host for its soft-404 page and drop the pages like it "
            "([soft-404s and mirrors](scrapy/soft404-mirrors.md))", _HOSTS),
    Setting("NEARDUP_SOFT404_PROBES_PER_HOST", "int", 20,
            "probes per host at most: the root first, then one per first path segment met", _HOSTS, low=1,
            high=100),
    Setting("NEARDUP_SOFT404_TIMEOUT", "float", 30.0,
            "how long a page waits for its host's probes; after it, it is handed on unchecked for soft 404s",
            _HOSTS, low=0.0, low_open=True, unit="seconds"),
    Setting("NEARDUP_MIRRORS_ENABLED", "bool", True, "skip the requests of a host that mirrors another", _HOSTS),
    Setting("NEARDUP_MIRROR_MIN_PAGES", "int", DEFAULT_MIN_PAGES, "checked pages a host needs before it can be a "
            "mirror", _HOSTS, low=1),
    Setting("NEARDUP_MIRROR_SHARE", "float", DEFAULT_SHARE,
            "share of a host's checked pages with a twin on an earlier host that makes it a mirror", _HOSTS,
            low=0.0, high=1.0, low_open=True, unit="share"),
    Setting("NEARDUP_MIRROR_SYNC_INTERVAL", "float", DEFAULT_SYNC_INTERVAL,
            "seconds between two exchanges of mirror counts with the other crawler processes of a fleet", _HOSTS,
            low=0.0, low_open=True, unit="seconds"),
    Setting("NEARDUP_COPY_WAIT", "float", None,
            "how long a page of a host met after another waits for the earlier host's copy; `0`: no waiting",
            _HOSTS, low=0.0, unit="seconds", default_doc="2 s or four `DOWNLOAD_DELAY`, the longer"),
    Setting("NEARDUP_CANONICAL", "bool", True, "a page whose canonical link names a page checked earlier is its "
            "duplicate", _HOSTS),
    Setting("NEARDUP_ES_URL", "str", None, "the cluster's URL, or every node's, separated by commas", _ES,
            type_doc="http(s) URL(s)", default_doc="required"),
    Setting("NEARDUP_ES_INDEX", "str", None, "index of kept sketches (created when missing)", _ES,
            type_doc="lowercase index name", default_doc="required"),
    Setting("NEARDUP_ES_API_KEY", "str", None, "API key (encoded form); or the user name and password", _ES),
    Setting("NEARDUP_ES_USERNAME", "str", None, "basic authentication, with `NEARDUP_ES_PASSWORD`", _ES),
    Setting("NEARDUP_ES_PASSWORD", "str", None, "basic authentication, with `NEARDUP_ES_USERNAME`", _ES),
    Setting("NEARDUP_ES_CA_CERTS", "path", None, "PEM file of the CA that signed the cluster's certificate", _ES),
    Setting("NEARDUP_ES_TIMEOUT", "float", 10.0, "seconds per request", _ES, low=0.0, low_open=True,
            unit="seconds"),
    Setting("NEARDUP_ES_BATCH_SIZE", "int", 100,
            "pages decided together in one round of requests ([batches](elasticsearch/crawler-backend.md#batches))",
            _ES, low=1, high=500),
    Setting("NEARDUP_ES_SHARDS", "int", 1, "primary shards of the index the backend creates "
            "([capacity](elasticsearch/crawler-backend.md#capacity))", _ES, low=1, high=1024),
    Setting("NEARDUP_SEARCH_INDEX", "str", None,
            "write each item into this search index (not `NEARDUP_ES_INDEX`) "
            "([from crawl to search results](elasticsearch/search-index.md))", _SEARCH,
            type_doc="lowercase index name"),
    Setting("NEARDUP_SEARCH_DUPLICATES", "choice", "skip", "write the near-duplicates too, as `duplicate`",
            _SEARCH, choices=("skip", "index")),
    Setting("NEARDUP_SEARCH_FAILED_FILE", "path", None,
            "where the items that could not be written are recorded (JSON lines)", _SEARCH,
            default_doc="`<JOBDIR>/neardup-search-failed.jl`, else `neardup-search-failed.jl`"),
    Setting("NEARDUP_SEARCH_BATCH_SIZE", "int", 200, "documents per bulk request", _SEARCH, low=1, high=5000),
    Setting("NEARDUP_SEARCH_RETRIES", "int", 5, "retries of a failed bulk request or of refused documents",
            _SEARCH, low=0, high=20),
)

#: The settings by name.
SETTING: dict[str, Setting] = {s.name: s for s in SETTINGS}
#: Every known ``NEARDUP_*`` name: any other is a typo (:func:`scrapy_neardup.store.config.unknown_settings`).
KNOWN_SETTINGS: frozenset[str] = frozenset(SETTING)


def default_of(name: str) -> Any:
    """The default of the setting ``name`` (``KeyError`` for an unknown name)."""
    return SETTING[name].default


def reference_page() -> str:
    """The settings reference page (Markdown), ``docs/settings.md``."""
    lines = [
        "<!-- Generated from scrapy_neardup/store/settings_registry.py by .ci/settings_reference.py: "
        "edit the registry, not this page. -->",
        "",
        "# Settings reference",
        "",
        "Every `NEARDUP_*` setting, with its type, default and allowed values. Set them in the project's "
        "`settings.py` or with `scrapy crawl -s NAME=value`; numbers and booleans are accepted in both forms "
        "(booleans as `True`/`False`, `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`).",
        "",
        "A wrong value stops the crawl at start-up, before any request, with one line naming the setting and "
        "the value (`NearDupSettingsError`), and `scrapy crawl` exits with status 1. A `NEARDUP_*` name that is "
        "none of these is reported at start-up with one WARNING naming the closest known one.",
    ]
    groups: dict[str, list[Setting]] = {}
    for setting in SETTINGS:
        groups.setdefault(setting.group, []).append(setting)
    for group, settings in groups.items():
        lines += ["", f"## {group}", "", "| Setting | Type | Default | Meaning |", "|---|---|---|---|"]
        lines += [f"| `{s.name}` | {s.shown_type} | {s.shown_default} | {s.doc} |" for s in settings]
    return "\n".join(lines) + "\n"


def write_reference(path: str | Path) -> bool:
    """Write :func:`reference_page` to ``path``; ``True`` when the file changed."""
    page = reference_page()
    target = Path(path)
    if target.exists() and target.read_text(encoding="utf-8") == page:
        return False
    target.write_text(page, encoding="utf-8")
    return True


