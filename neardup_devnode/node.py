"""Launch a real, throw-away Elasticsearch 8.x node on 127.0.0.1.

Used by the test suite, the benchmarks, the example project and ``neardup es start``.

Where things live
-----------------
* **Distribution cache** - ``${NEARDUP_CACHE:-~/.cache/scrapy-neardup}/elasticsearch/<version>/``: the unpacked
  ``org.elasticsearch.distribution.integ-test-zip:elasticsearch:<version>:zip`` from Maven Central (fetched with
  ``mvn dependency:copy`` when ``mvn`` is on PATH, else over HTTPS with a SHA-1 check). Downloaded once.
* **Base dir** - ``${NEARDUP_ES_BASE:-<tmp>/scrapy-neardup-es-<uid>}`` (``<tmp>`` is :func:`tempfile.gettempdir`,
  normally ``/tmp``). It holds ``nodes/<node-name>/`` (one fresh directory per node: ``config/``, ``data/``,
  ``logs/``, ``tmp/``), and for background nodes ``state.json`` and ``elasticsearch.pid``. When running as root it
  also holds ``dist/<version>/``, a world-readable hard-linked (or copied) twin of the cached distribution,
  because the cache under ``/root`` is not readable by the unprivileged user that runs the node.

Running as root
---------------
Elasticsearch refuses to run as root. When the effective uid is 0 a system user ``neardup-es`` (override with
``NEARDUP_ES_USER``) is created once with ``useradd --system`` and the node runs as that user; its node
directory is owned by it, everything else it reads is world-readable.

Secured mode
------------
``start_node(secure=True)`` enables ``xpack.security`` with TLS on the HTTP layer. A throw-away CA and a server
certificate for ``localhost`` / ``127.0.0.1`` / ``::1`` are generated with :mod:`cryptography` and written to
``<node>/config/certs/``; :attr:`RunningNode.ca_certs` is the CA's path. The ``elastic`` superuser's password is
put in the node's keystore as ``bootstrap.password`` (``bin/elasticsearch-keystore add -x``). API keys can be
made with :meth:`ClusterHandle.create_api_key`. Transport TLS uses the same certificate.

Compat modules
--------------
The integ-test-zip has no analysis-common and no rest-root module. Two small modules, compiled once into the
cached distribution with the JDK's ``javac`` (see ``_COMPAT_MODULES``), add what this project needs from them:
the three analysis components the ``.security`` index needs (so API keys work) and ``GET /`` / ``HEAD /`` (so
``Elasticsearch.info()`` and ``.ping()`` work). Everything else of those modules (most analyzers and filters,
painless, reindex, update-by-query) is still absent.

Example::

    from neardup_devnode.node import start_node

    with start_node(secure=True) as node:
        es = node.client()
        es.index(index="pages", document={"title": "hello"}, refresh=True)
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime as _dt
import fcntl
import ipaddress
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - import only for type checkers
    from elasticsearch import Elasticsearch

__all__ = [
    "ES_VERSION",
    "DEFAULT_HEAP",
    "ES_USER",
    "ClusterHandle",
    "RunningNode",
    "NodeError",
    "NodeStartError",
    "start_node",
    "start_background",
    "stop_background",
    "background_nodes",
    "ensure_distribution",
    "find_java_home",
    "cache_dir",
    "base_dir",
]

logger = logging.getLogger(__name__)

#: Newest 8.x ``integ-test-zip`` on Maven Central at the time of writing; runs on Java 17.
ES_VERSION = "8.19.21"
#: Default fixed heap (``-Xms`` = ``-Xmx``).
DEFAULT_HEAP = "512m"
#: Name of the unprivileged user the node runs as when we are root.
ES_USER = os.environ.get("NEARDUP_ES_USER", "neardup-es")

MAVEN_GROUP = "org.elasticsearch.distribution.integ-test-zip"
MAVEN_ARTIFACT = "elasticsearch"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
DEBIAN_JDK17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")

_COMPLETE_MARKER = ".neardup-complete"
#: Bump when the prepared layout of a distribution changes (cached copies are then rebuilt).
_LAYOUT = "3"
# The integ-test-zip lacks modules that real Elasticsearch nodes have. Two tiny "compat" modules fill the gaps
# that matter here. They are compiled once per cached distribution with the JDK's ``javac`` against the jars in
# ``lib/`` (a JRE without javac just skips them, with a warning). Set NEARDUP_ES_COMPAT_MODULES=0 to skip both.
#
# * neardup-analysis-compat: analysis-common is missing, and the ``.security`` system index (API keys, native
#   users, built-in role sync) declares an ``email`` analyzer using three of its components: the
#   ``uax_url_email`` tokenizer and the ``pattern_capture`` and ``unique`` token filters. Without them
#   ``POST /_security/api_key`` fails with "Unknown filter type [pattern_capture]". This module provides those
#   three (from the Lucene classes already in ``lib/``), nothing else.
# * neardup-root-compat: rest-root is missing, so ``GET /`` (``Elasticsearch.info()``) and ``HEAD /``
#   (``Elasticsearch.ping()``) answer 405. This module serves them with the usual body (name, cluster_name,
#   cluster_uuid, version{number, build_*, lucene_version, ...}, tagline) taken from the running node.
_ANALYSIS_COMPAT_JAVA = r"""
package org.scrapyneardup.esshim.analysis;

import java.io.IOException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.regex.Pattern;
import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.TokenFilter;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.email.UAX29URLEmailTokenizer;
import org.apache.lucene.analysis.pattern.PatternCaptureGroupTokenFilter;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.analysis.tokenattributes.PositionIncrementAttribute;
import org.elasticsearch.index.analysis.TokenFilterFactory;
import org.elasticsearch.index.analysis.TokenizerFactory;
import org.elasticsearch.indices.analysis.AnalysisModule.AnalysisProvider;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;

/** uax_url_email, pattern_capture and unique, as in Elasticsearch's analysis-common module. */
public final class AnalysisCompatPlugin extends Plugin implements AnalysisPlugin {

    private static final class Filter implements TokenFilterFactory {
        private final String name;
        private final Function<TokenStream, TokenStream> wrap;

        Filter(String name, Function<TokenStream, TokenStream> wrap) {
            this.name = name;
            this.wrap = wrap;
        }

        @Override
        public String name() {
            return name;
        }

        @Override
        public TokenStream create(TokenStream tokenStream) {
            return wrap.apply(tokenStream);
        }
    }

    private static final class UniqueFilter extends TokenFilter {
        private final CharTermAttribute term = addAttribute(CharTermAttribute.class);
        private final PositionIncrementAttribute posInc = addAttribute(PositionIncrementAttribute.class);
        private final CharArraySet seen = new CharArraySet(8, false);
        private final boolean onlyOnSamePosition;

        UniqueFilter(TokenStream in, boolean onlyOnSamePosition) {
            super(in);
            this.onlyOnSamePosition = onlyOnSamePosition;
        }

        @Override
        public boolean incrementToken() throws IOException {
            while (input.incrementToken()) {
                if (onlyOnSamePosition && posInc.getPositionIncrement() > 0) {
                    seen.clear();
                }
                final char[] buffer = term.buffer();
                final int length = term.length();
                if (seen.contains(buffer, 0, length)) {
                    continue;
                }
                final char[] copy = new char[length];
                System.arraycopy(buffer, 0, copy, 0, length);
                seen.add(copy);
                return true;
            }
            return false;
        }

        @Override
        public void reset() throws IOException {
            super.reset();
            seen.clear();
        }
    }

    @Override
    public Map<String, AnalysisProvider<TokenFilterFactory>> getTokenFilters() {
        Map<String, AnalysisProvider<TokenFilterFactory>> filters = new HashMap<>();
        filters.put("pattern_capture", AnalysisPlugin.requiresAnalysisSettings((indexSettings, env, name, settings) -> {
            List<String> regexes = settings.getAsList("patterns");
            if (regexes.isEmpty()) {
                throw new IllegalArgumentException(
                    "required setting 'patterns' is missing for token filter [" + name + "]");
            }
            Pattern[] patterns = new Pattern[regexes.size()];
            for (int i = 0; i < patterns.length; i++) {
                patterns[i] = Pattern.compile(regexes.get(i));
            }
            boolean preserveOriginal = settings.getAsBoolean("preserve_original", true);
            return new Filter(name, ts -> new PatternCaptureGroupTokenFilter(ts, preserveOriginal, patterns));
        }));
        filters.put("unique", (indexSettings, env, name, settings) -> {
            boolean samePosition = settings.getAsBoolean("only_on_same_position", false);
            return new Filter(name, ts -> new UniqueFilter(ts, samePosition));
        });
        return filters;
    }

    @Override
    public Map<String, AnalysisProvider<TokenizerFactory>> getTokenizers() {
        Map<String, AnalysisProvider<TokenizerFactory>> tokenizers = new HashMap<>();
        tokenizers.put("uax_url_email", (indexSettings, env, name, settings) -> {
            int maxTokenLength = settings.getAsInt("max_token_length", 255);
            return TokenizerFactory.newFactory(name, () -> {
                UAX29URLEmailTokenizer tokenizer = new UAX29URLEmailTokenizer();
                tokenizer.setMaxTokenLength(maxTokenLength);
                return tokenizer;
            });
        });
        return tokenizers;
    }
}
"""

_ROOT_COMPAT_JAVA = r"""
package org.scrapyneardup.esshim.root;

import java.util.Collection;
import java.util.List;
import java.util.function.Predicate;
import java.util.function.Supplier;
import org.elasticsearch.Build;
import org.elasticsearch.cluster.ClusterState;
import org.elasticsearch.cluster.metadata.IndexNameExpressionResolver;
import org.elasticsearch.cluster.node.DiscoveryNodes;
import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.client.internal.node.NodeClient;
import org.elasticsearch.common.bytes.BytesArray;
import org.elasticsearch.common.io.stream.NamedWriteableRegistry;
import org.elasticsearch.common.settings.ClusterSettings;
import org.elasticsearch.common.settings.IndexScopedSettings;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.common.settings.SettingsFilter;
import org.elasticsearch.features.NodeFeature;
import org.elasticsearch.plugins.ActionPlugin;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.rest.BaseRestHandler;
import org.elasticsearch.rest.RestController;
import org.elasticsearch.rest.RestHandler;
import org.elasticsearch.rest.RestRequest;
import org.elasticsearch.rest.RestResponse;
import org.elasticsearch.rest.RestStatus;
import org.elasticsearch.xcontent.XContentBuilder;

/** GET / and HEAD / (the rest-root module's main action), answered from the local cluster state. */
public final class RootCompatPlugin extends Plugin implements ActionPlugin {
    private volatile ClusterService clusterService;

    @Override
    public Collection<?> createComponents(PluginServices services) {
        clusterService = services.clusterService();
        return List.of();
    }

    @Override
    public Collection<RestHandler> getRestHandlers(
        Settings settings,
        NamedWriteableRegistry namedWriteableRegistry,
        RestController restController,
        ClusterSettings clusterSettings,
        IndexScopedSettings indexScopedSettings,
        SettingsFilter settingsFilter,
        IndexNameExpressionResolver indexNameExpressionResolver,
        Supplier<DiscoveryNodes> nodesInCluster,
        Predicate<NodeFeature> clusterSupportsFeature
    ) {
        return List.of(new MainHandler());
    }

    private final class MainHandler extends BaseRestHandler {
        @Override
        public String getName() {
            return "neardup_main_action";
        }

        @Override
        public List<Route> routes() {
            return List.of(new Route(RestRequest.Method.GET, "/"), new Route(RestRequest.Method.HEAD, "/"));
        }

        @Override
        protected RestChannelConsumer prepareRequest(RestRequest request, NodeClient client) {
            final boolean head = request.method() == RestRequest.Method.HEAD;
            return channel -> {
                if (head) {
                    channel.sendResponse(new RestResponse(RestStatus.OK, "application/json", BytesArray.EMPTY));
                    return;
                }
                final ClusterState state = clusterService.state();
                final Build build = Build.current();
                final XContentBuilder b = channel.newBuilder();
                b.startObject();
                b.field("name", clusterService.getNodeName());
                b.field("cluster_name", state.getClusterName().value());
                b.field("cluster_uuid", state.metadata().clusterUUID());
                b.startObject("version");
                b.field("number", build.qualifiedVersion());
                b.field("build_flavor", build.flavor());
                b.field("build_type", build.type().displayName());
                b.field("build_hash", build.hash());
                b.field("build_date", build.date());
                b.field("build_snapshot", build.isSnapshot());
                b.field("lucene_version", org.apache.lucene.util.Version.LATEST.toString());
                b.field("minimum_wire_compatibility_version", build.minWireCompatVersion());
                b.field("minimum_index_compatibility_version", build.minIndexCompatVersion());
                b.endObject();
                b.field("tagline", "You Know, for Search");
                b.endObject();
                channel.sendResponse(new RestResponse(RestStatus.OK, b));
            };
        }
    }
}
"""


@dataclass(frozen=True)
class _CompatModule:
    name: str
    classname: str
    source: str
    description: str
    replaces: str  # the real module; when the distribution has it, this one is not built


_COMPAT_MODULES = (
    _CompatModule(
        "neardup-analysis-compat",
        "org.scrapyneardup.esshim.analysis.AnalysisCompatPlugin",
        _ANALYSIS_COMPAT_JAVA,
        "uax_url_email, pattern_capture and unique for the integ-test-zip (scrapy-neardup)",
        "analysis-common",
    ),
    _CompatModule(
        "neardup-root-compat",
        "org.scrapyneardup.esshim.root.RootCompatPlugin",
        _ROOT_COMPAT_JAVA,
        "GET / and HEAD / for the integ-test-zip (scrapy-neardup)",
        "rest-root",
    ),
)
_STATE_FILE = "state.json"
_PID_FILE = "elasticsearch.pid"


class NodeError(RuntimeError):
    """Something went wrong preparing, starting or stopping a node."""


class NodeStartError(NodeError):
    """The node did not become ready. The message includes the tail of its log."""


# --------------------------------------------------------------------------------------------------------------
# locations
# --------------------------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Root of the download cache: ``${NEARDUP_CACHE:-~/.cache/scrapy-neardup}``."""
    env = os.environ.get("NEARDUP_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "scrapy-neardup"


def base_dir() -> Path:
    """Runtime base dir: ``${NEARDUP_ES_BASE:-<tmp>/scrapy-neardup-es-<uid>}``."""
    env = os.environ.get("NEARDUP_ES_BASE")
    if env:
        return Path(env).expanduser().resolve()
    return Path(tempfile.gettempdir()) / f"scrapy-neardup-es-{os.geteuid()}"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on *path* (created if needed); serialises installs and state updates."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------------------------
# distribution
# --------------------------------------------------------------------------------------------------------------


def _maven_coordinate(version: str) -> str:
    return f"{MAVEN_GROUP}:{MAVEN_ARTIFACT}:{version}:zip"


def _download_with_mvn(version: str, dest_dir: Path) -> Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise NodeError("mvn is not on PATH")
    cmd = [
        mvn,
        "-B",
        "-q",
        "dependency:copy",
        f"-Dartifact={_maven_coordinate(version)}",
        f"-DoutputDirectory={dest_dir}",
    ]
    logger.info("fetching Elasticsearch %s with %s", version, " ".join(cmd))
    proc = subprocess.run(
        cmd, cwd=dest_dir, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800, check=False
    )
    zip_path = dest_dir / f"{MAVEN_ARTIFACT}-{version}.zip"
    if proc.returncode != 0 or not zip_path.is_file():
        out = (proc.stdout + proc.stderr)[-3000:]
        raise NodeError(f"mvn dependency:copy failed (exit {proc.returncode}):\n{out}")
    return zip_path


def _download_with_urllib(version: str, dest_dir: Path) -> Path:
    import hashlib

    repo = os.environ.get("NEARDUP_MAVEN_REPO", MAVEN_CENTRAL).rstrip("/")
    name = f"{MAVEN_ARTIFACT}-{version}.zip"
    url = f"{repo}/{MAVEN_GROUP.replace('.', '/')}/{MAVEN_ARTIFACT}/{version}/{name}"
    zip_path = dest_dir / name
    logger.info("fetching Elasticsearch %s from %s", version, url)
    sha1 = hashlib.sha1()
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(zip_path, "wb") as out:
            while chunk := resp.read(1 << 20):
                sha1.update(chunk)
                out.write(chunk)
        with urllib.request.urlopen(url + ".sha1", timeout=60) as resp:
            expected = resp.read().decode("ascii", "replace").split()[0].strip().lower()
    except (urllib.error.URLError, OSError) as exc:
        raise NodeError(f"download of {url} failed: {exc}") from exc
    if sha1.hexdigest() != expected:
        raise NodeError(f"SHA-1 mismatch for {url}: got {sha1.hexdigest()}, expected {expected}")
    return zip_path


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


def ensure_distribution(version: str = ES_VERSION, *, cache: Path | None = None) -> Path:
    """Return the unpacked distribution for *version*, downloading and unpacking it on first use.

    Also builds the small compat modules described at ``_COMPAT_MODULES`` into it (once). Safe against
    concurrent callers (file lock; unpack into a temp dir, then rename).
    """
    root = (cache or cache_dir()) / "elasticsearch"
    home = root / version
    if not (home / _COMPLETE_MARKER).is_file():
        with _file_lock(root / f".{version}.lock"):
            if not (home / _COMPLETE_MARKER).is_file():
                _download_and_unpack(version, root, home)
    _ensure_compat_modules(home, version, root)
    return home


def _download_and_unpack(version: str, root: Path, home: Path) -> None:
    if home.exists():
        shutil.rmtree(home)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{version}-", dir=root) as tmp:
        tmp_dir = Path(tmp)
        errors: list[str] = []
        zip_path: Path | None = None
        fetchers = [_download_with_mvn, _download_with_urllib]
        if os.environ.get("NEARDUP_ES_DOWNLOAD") == "https" or shutil.which("mvn") is None:
            fetchers = [_download_with_urllib]
        for fetch in fetchers:
            try:
                zip_path = fetch(version, tmp_dir)
                break
            except (NodeError, subprocess.TimeoutExpired) as exc:
                logger.warning("%s", exc)
                errors.append(str(exc))
        if zip_path is None:
            raise NodeError(f"could not fetch {_maven_coordinate(version)}:\n" + "\n".join(errors))
        unpacked = tmp_dir / "home"
        unpacked.mkdir()
        _unpack_zip(zip_path, unpacked)
        if not (unpacked / "bin" / "elasticsearch").is_file():
            raise NodeError(f"{zip_path} does not look like an Elasticsearch distribution")
        (unpacked / _COMPLETE_MARKER).write_text(version + "\n")
        unpacked.rename(home)
    logger.info("Elasticsearch %s unpacked in %s (%.1fs)", version, home, time.monotonic() - started)


def _has_module(home: Path, name: str) -> bool:
    return (home / "modules" / name / "plugin-descriptor.properties").is_file()


def _ensure_compat_modules(home: Path, version: str, root: Path) -> None:
    """Build the missing ``_COMPAT_MODULES`` into ``<home>/modules`` (once; failures only warn)."""
    if os.environ.get("NEARDUP_ES_COMPAT_MODULES", "1") == "0":
        return
    wanted = [
        m for m in _COMPAT_MODULES if not _has_module(home, m.name) and not (home / "modules" / m.replaces).is_dir()
    ]
    if not wanted:
        return
    try:
        java_home = find_java_home()
    except NodeError as exc:
        logger.warning("not building compat modules: %s", exc)
        return
    candidates = [java_home / "bin" / "javac", DEBIAN_JDK17 / "bin" / "javac", Path(shutil.which("javac") or "/-")]
    javac = next((c for c in candidates if c.is_file()), None)
    if javac is None:
        logger.warning(
            "not building compat modules: no javac next to %s nor on PATH (install a JDK, e.g. "
            "openjdk-17-jdk-headless); API keys will not work on secured nodes and GET / answers 405",
            java_home,
        )
        return
    with _file_lock(root / f".{version}.lock"):
        for module in wanted:
            if _has_module(home, module.name):
                continue
            try:
                _build_compat_module(module, home, version, root, javac)
            except (OSError, subprocess.SubprocessError) as exc:
                logger.warning("building %s failed: %s", module.name, exc)


def _build_compat_module(module: _CompatModule, home: Path, version: str, root: Path, javac: Path) -> None:
    # Build outside modules/: a half-built directory there would stop every node from starting.
    with tempfile.TemporaryDirectory(prefix=f".{module.name}-", dir=root) as tmp:
        tmp_dir = Path(tmp)
        src = tmp_dir / "src" / (module.classname.rsplit(".", 1)[1] + ".java")
        src.parent.mkdir()
        src.write_text(module.source)
        classes = tmp_dir / "classes"
        cmd = [str(javac), "--release", "17", "-nowarn", "-cp", str(home / "lib" / "*"), "-d", str(classes), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            logger.warning("building %s failed:\n%s", module.name, (proc.stdout + proc.stderr)[-3000:])
            return
        out = tmp_dir / "module"
        out.mkdir()
        with zipfile.ZipFile(out / f"{module.name}.jar", "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for cls in sorted(classes.rglob("*.class")):
                jar.write(cls, cls.relative_to(classes).as_posix())
        (out / "plugin-descriptor.properties").write_text(
            f"description={module.description}\n"
            f"version={version}\n"
            f"name={module.name}\n"
            f"classname={module.classname}\n"
            "java.version=17\n"
            f"elasticsearch.version={version}\n"
        )
        for p in [out, *out.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        out.rename(home / "modules" / module.name)
    logger.info("built %s into %s", module.name, home / "modules")


def _dist_fingerprint(home: Path) -> str:
    modules = ",".join(m.name for m in _COMPAT_MODULES if _has_module(home, m.name))
    return f"{(home / _COMPLETE_MARKER).read_text().strip()} layout={_LAYOUT} compat={modules}\n"


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _runtime_distribution(version: str, base: Path, run_as_other_user: bool) -> Path:
    """The ES home the node actually runs from (a world-readable twin under *base* when we are root)."""
    home = ensure_distribution(version)
    if not run_as_other_user:
        return home
    twin = base / "dist" / version
    fingerprint = _dist_fingerprint(home)

    def twin_ok() -> bool:
        marker = twin / _COMPLETE_MARKER
        return marker.is_file() and marker.read_text() == fingerprint

    if twin_ok():
        return twin
    twin.parent.mkdir(parents=True, exist_ok=True)
    twin.parent.chmod(0o755)
    with _file_lock(base / "dist" / f".{version}.lock"):
        if twin_ok():
            return twin
        if twin.exists():
            shutil.rmtree(twin)
        tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=twin.parent))
        try:
            shutil.copytree(home, tmp / "home", copy_function=_link_or_copy)
            for p in [tmp / "home", *(tmp / "home").rglob("*")]:
                if p.is_dir():
                    p.chmod(0o755)
            (tmp / "home" / _COMPLETE_MARKER).unlink()
            (tmp / "home" / _COMPLETE_MARKER).write_text(fingerprint)
            (tmp / "home").rename(twin)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return twin


# --------------------------------------------------------------------------------------------------------------
# java and user
# --------------------------------------------------------------------------------------------------------------


def _is_java_home(path: Path) -> bool:
    return (path / "bin" / "java").is_file()


def find_java_home() -> Path:
    """Pick the JDK for the node.

    Order: ``ES_JAVA_HOME`` (if set, used as is), the Debian OpenJDK 17 (``/usr/lib/jvm/java-17-openjdk-*``),
    ``JAVA_HOME``, then the JDK of ``java`` on PATH.
    """
    env = os.environ.get("ES_JAVA_HOME")
    if env:
        if not _is_java_home(Path(env)):
            raise NodeError(f"ES_JAVA_HOME={env} has no bin/java")
        return Path(env)
    candidates = [DEBIAN_JDK17, *sorted(Path("/usr/lib/jvm").glob("java-17-openjdk-*"))]
    for cand in candidates:
        if _is_java_home(cand):
            return cand
    env = os.environ.get("JAVA_HOME")
    if env and _is_java_home(Path(env)):
        return Path(env)
    java = shutil.which("java")
    if java:
        home = Path(java).resolve().parent.parent
        if _is_java_home(home):
            return home
    raise NodeError("no Java found: install OpenJDK 17 (apt-get install openjdk-17-jdk-headless) or set ES_JAVA_HOME")


@dataclass(frozen=True)
class _RunAs:
    user: str
    uid: int
    gid: int


def _ensure_es_user() -> _RunAs | None:
    """When root, make sure the unprivileged user exists (idempotent) and return it; else ``None``."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pw = pwd.getpwnam(ES_USER)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        cmd = [
            useradd,
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            "--comment",
            "scrapy-neardup Elasticsearch",
            ES_USER,
        ]
        logger.info("creating system user %s", ES_USER)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        # exit code 9: the name already exists (another process raced us)
        if proc.returncode not in (0, 9):
            raise NodeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}") from None
        pw = pwd.getpwnam(ES_USER)
    if pw.pw_uid == 0:
        raise NodeError(f"user {ES_USER} has uid 0; Elasticsearch will not run as root")
    return _RunAs(ES_USER, pw.pw_uid, pw.pw_gid)


def _check_traversable(path: Path, run_as: _RunAs) -> None:
    """Fail early, with a clear message, if *run_as* cannot reach *path* (e.g. a 0700 parent directory)."""
    for p in [path, *path.parents]:
        st = p.stat()
        if st.st_uid == run_as.uid:
            ok = bool(st.st_mode & stat.S_IXUSR)
        elif st.st_gid == run_as.gid:
            ok = bool(st.st_mode & stat.S_IXGRP)
        else:
            ok = bool(st.st_mode & stat.S_IXOTH)
        if not ok:
            raise NodeError(
                f"user {run_as.user} cannot traverse {p} (mode {stat.filemode(st.st_mode)}); "
                f"choose a base dir it can reach with NEARDUP_ES_BASE"
            )


def _chown_tree(path: Path, run_as: _RunAs) -> None:
    for p in [path, *path.rglob("*")]:
        os.lchown(p, run_as.uid, run_as.gid)


# --------------------------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path | None, lines: int = 60) -> str:
    if path is None or not path.is_file():
        return "<no log>"
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 64 * 1024))
        data = fh.read().decode("utf-8", "replace")
    return "\n".join(data.splitlines()[-lines:])


def _yaml_scalar(value: Any) -> str:
    """Render a value for elasticsearch.yml (JSON scalars/lists are valid YAML flow nodes)."""
    if isinstance(value, Path):
        value = str(value)
    return json.dumps(value)


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (index 0 = state), or ``None``."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None  # field 22 of stat(5) = starttime


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is *pgid*."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _proc_stat(int(entry.name))
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _terminate_group(pgid: int, timeout: float, popen: subprocess.Popen[bytes] | None = None) -> bool:
    """SIGTERM the process group, wait up to *timeout* s, then SIGKILL. True if it stopped gracefully."""
    _kill_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    graceful = True
    while True:
        if popen is not None:
            popen.poll()
        else:
            _reap(pgid)
        if not _group_members(pgid):
            break
        if time.monotonic() > deadline:
            if graceful:
                logger.warning("process group %d did not stop within %.0fs, sending SIGKILL", pgid, timeout)
                _kill_group(pgid, signal.SIGKILL)
                graceful = False
                deadline = time.monotonic() + 15
            else:
                raise NodeError(f"processes {_group_members(pgid)} survive SIGKILL")
        time.sleep(0.1)
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=5)
    return graceful


def _make_tls_material(cert_dir: Path) -> tuple[Path, Path, Path]:
    """Write a throw-away CA and a server certificate for localhost/127.0.0.1/::1. Returns (ca, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = _dt.datetime.now(_dt.UTC)
    not_before, not_after = now - _dt.timedelta(days=1), now + _dt.timedelta(days=3650)

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "scrapy-neardup test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    cert_dir.mkdir(parents=True, exist_ok=True)
    ca_path, cert_path, key_path = cert_dir / "ca.crt", cert_dir / "node.crt", cert_dir / "node.key"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    ca_path.chmod(0o644)
    return ca_path, cert_path, key_path


# --------------------------------------------------------------------------------------------------------------
# handles
# --------------------------------------------------------------------------------------------------------------


@dataclass
class ClusterHandle:
    """Connection details of an Elasticsearch cluster (a local node or an existing cluster from ``ES_URL``)."""

    url: str
    username: str | None = None
    password: str | None = None
    ca_certs: str | None = None
    api_key: str | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        username: str | None = None,
        password: str | None = None,
        ca_certs: str | None = None,
        api_key: str | None = None,
    ) -> ClusterHandle:
        """A handle for an existing cluster; ``user:password@`` in *url* is honoured."""
        parts = urllib.parse.urlsplit(url)
        if parts.username and username is None:
            username = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
        netloc = parts.hostname or ""
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if parts.port:
            netloc += f":{parts.port}"
        clean = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        return cls(url=clean, username=username, password=password, ca_certs=ca_certs, api_key=api_key)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClusterHandle:
        """A handle from ``ES_URL`` plus optional ``ES_USERNAME``, ``ES_PASSWORD``, ``ES_CA_CERTS``,
        ``ES_API_KEY``."""
        env = os.environ if env is None else env
        url = env.get("ES_URL")
        if not url:
            raise NodeError("ES_URL is not set")
        return cls.from_url(
            url,
            username=env.get("ES_USERNAME") or None,
            password=env.get("ES_PASSWORD") or None,
            ca_certs=env.get("ES_CA_CERTS") or None,
            api_key=env.get("ES_API_KEY") or None,
        )

    @property
    def secure(self) -> bool:
        return self.url.startswith("https://")

    def stop(self, keep_data: bool | None = None) -> None:  # noqa: B027 - deliberately a no-op here
        """Nothing to stop for an existing cluster."""

    def client(self, **kwargs: Any) -> Elasticsearch:
        """An ``elasticsearch.Elasticsearch`` client for this cluster; *kwargs* override the defaults."""
        from elasticsearch import Elasticsearch

        opts: dict[str, Any] = {"request_timeout": 60}
        if self.ca_certs:
            opts["ca_certs"] = self.ca_certs
        if self.api_key:
            opts["api_key"] = self.api_key
        elif self.username:
            opts["basic_auth"] = (self.username, self.password or "")
        opts.update(kwargs)
        return Elasticsearch(self.url, **opts)

    def ssl_context(self) -> ssl.SSLContext | None:
        """An SSL context trusting :attr:`ca_certs` (``None`` for plain http)."""
        if not self.secure:
            return None
        return ssl.create_default_context(cafile=self.ca_certs) if self.ca_certs else ssl.create_default_context()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        auth: tuple[str, str] | None | bool = True,
        timeout: float = 30.0,
    ) -> tuple[int, Any]:
        """A raw REST call with the standard library (no client involved); returns ``(status, json_or_text)``.

        *auth*: ``True`` uses this handle's credentials, ``None``/``False`` sends none, a tuple is used as basic
        auth. HTTP errors are returned, not raised; connection and TLS errors raise their :class:`OSError`
        (e.g. :class:`ConnectionRefusedError`, :class:`ssl.SSLCertVerificationError`)."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth is True:
            if self.api_key:
                headers["Authorization"] = f"ApiKey {self.api_key}"
            elif self.username:
                auth = (self.username, self.password or "")
        if isinstance(auth, tuple):
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        req = urllib.request.Request(self.url + "/" + path.lstrip("/"), data=data, headers=headers, method=method)
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        ctx = self.ssl_context()
        if ctx is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ctx))
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(req, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except urllib.error.URLError as exc:  # raise the real cause (refused, TLS verification, ...)
            if isinstance(exc.reason, OSError):
                raise exc.reason from None
            raise
        text = raw.decode("utf-8", "replace")
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def create_api_key(
        self,
        name: str = "neardup-test",
        *,
        role_descriptors: Mapping[str, Any] | None = None,
        expiration: str | None = None,
    ) -> dict[str, Any]:
        """Create an API key with ``POST /_security/api_key`` using this handle's credentials.

        Returns Elasticsearch's answer: ``id``, ``name``, ``api_key`` and ``encoded`` (the value for
        ``Authorization: ApiKey <encoded>`` or ``Elasticsearch(api_key=encoded)``).
        """
        body: dict[str, Any] = {"name": name}
        if role_descriptors is not None:
            body["role_descriptors"] = dict(role_descriptors)
        if expiration is not None:
            body["expiration"] = expiration
        status, answer = self.request("POST", "/_security/api_key", body)
        if status != 200 or not isinstance(answer, dict):
            raise NodeError(f"creating API key failed: HTTP {status}: {answer}")
        return answer

    def __enter__(self) -> ClusterHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class RunningNode(ClusterHandle):
    """A node started by :func:`start_node`. Stop it with :meth:`stop` or use it as a context manager.

    Besides the connection details of :class:`ClusterHandle` (``url``, ``username``, ``password``,
    ``ca_certs``): ``pid`` is the launcher's pid, which is also the process group of the node's processes;
    ``node_dir`` holds ``config/``, ``data/`` (= ``data_dir``), ``logs/`` (= ``logs_dir``) and ``tmp/``;
    ``log_path`` is the node's stdout/stderr; ``http_port``/``transport_port`` are on 127.0.0.1.
    """

    pid: int = 0
    version: str = ES_VERSION
    node_dir: Path = field(default_factory=Path)
    data_dir: Path = field(default_factory=Path)
    logs_dir: Path = field(default_factory=Path)
    log_path: Path = field(default_factory=Path)
    http_port: int = 0
    transport_port: int = 0
    keep_data: bool = False
    background: bool = False
    start_time: int | None = None
    _popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    _stopped: bool = field(default=False, repr=False, compare=False)

    @property
    def server_log_path(self) -> Path:
        """Elasticsearch's own server log (``<logs>/<cluster.name>.log``); :attr:`log_path` is stdout/stderr."""
        return self.logs_dir / f"neardup-{self.node_dir.name}.log"

    def is_running(self) -> bool:
        """True while any process of the node's process group is alive (and it is still the same node)."""
        if self._stopped or not self.pid:
            return False
        if self._popen is not None:
            self._popen.poll()
        else:
            _reap(self.pid)
            if self.start_time is not None and _start_time(self.pid) not in (None, self.start_time):
                return False  # pid reused by an unrelated process; the group is gone
        return bool(_group_members(self.pid))

    def stop(self, keep_data: bool | None = None, timeout: float = 30.0) -> None:
        """SIGTERM the node, wait up to *timeout* s, then SIGKILL; remove the node dir unless *keep_data*."""
        if self._stopped:
            return
        if self.pid and self.is_running():
            logger.info("stopping Elasticsearch node pid %d", self.pid)
            _terminate_group(self.pid, timeout, self._popen)
        elif self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=1)
        self._stopped = True
        _FOREGROUND[:] = [n for n in _FOREGROUND if n is not self]
        keep = self.keep_data if keep_data is None else keep_data
        if not keep and self.node_dir.name and self.node_dir.is_dir():
            shutil.rmtree(self.node_dir, ignore_errors=True)

    def to_state(self) -> dict[str, Any]:
        """JSON-serialisable description (written to ``state.json`` for background nodes)."""
        return {
            "url": self.url,
            "username": self.username,
            "password": self.password,
            "ca_certs": self.ca_certs,
            "pid": self.pid,
            "start_time": self.start_time,
            "version": self.version,
            "node_dir": str(self.node_dir),
            "data_dir": str(self.data_dir),
            "logs_dir": str(self.logs_dir),
            "log_path": str(self.log_path),
            "http_port": self.http_port,
            "transport_port": self.transport_port,
            "keep_data": self.keep_data,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RunningNode:
        """Rebuild a handle (e.g. in another process) from :meth:`to_state` output."""
        return cls(
            url=state["url"],
            username=state.get("username"),
            password=state.get("password"),
            ca_certs=state.get("ca_certs"),
            pid=int(state["pid"]),
            start_time=state.get("start_time"),
            version=state.get("version", ES_VERSION),
            node_dir=Path(state["node_dir"]),
            data_dir=Path(state["data_dir"]),
            logs_dir=Path(state["logs_dir"]),
            log_path=Path(state["log_path"]),
            http_port=int(state.get("http_port", 0)),
            transport_port=int(state.get("transport_port", 0)),
            keep_data=bool(state.get("keep_data", False)),
            background=True,
        )

    def __enter__(self) -> RunningNode:
        return self


#: Foreground nodes still running; stopped at interpreter exit so a crashed test run leaves nothing behind.
_FOREGROUND: list[RunningNode] = []


@atexit.register
def _stop_foreground_nodes() -> None:
    for node in list(_FOREGROUND):
        with contextlib.suppress(Exception):
            node.stop()


# --------------------------------------------------------------------------------------------------------------
# starting
# --------------------------------------------------------------------------------------------------------------


def _node_settings(
    *,
    name: str,
    node_dir: Path,
    http_port: int,
    transport_port: int,
    secure: bool,
    es_home: Path,
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    s: dict[str, Any] = {
        "cluster.name": f"neardup-{name}",
        "node.name": name,
        "path.data": str(node_dir / "data"),
        "path.logs": str(node_dir / "logs"),
        "network.host": "127.0.0.1",
        "http.port": http_port,
        "transport.port": transport_port,
        "discovery.type": "single-node",
        "cluster.routing.allocation.disk.threshold_enabled": False,
        "action.destructive_requires_name": False,
        "xpack.security.enabled": secure,
        "xpack.security.enrollment.enabled": False,
        "xpack.security.autoconfiguration.enabled": False,
    }
    modules = es_home / "modules"
    # Only set options for modules the distribution has: unknown settings make the node refuse to start.
    if (modules / "ingest-geoip").is_dir():
        s["ingest.geoip.downloader.enabled"] = False
    if (modules / "x-pack-ml").is_dir():
        s["xpack.ml.enabled"] = False
    if (modules / "x-pack-monitoring").is_dir():
        s["xpack.monitoring.collection.enabled"] = False
    if (modules / "apm").is_dir():
        s["tracing.apm.enabled"] = False
    if secure:
        s.update(
            {
                "xpack.security.http.ssl.enabled": True,
                "xpack.security.http.ssl.key": "certs/node.key",
                "xpack.security.http.ssl.certificate": "certs/node.crt",
                "xpack.security.http.ssl.certificate_authorities": ["certs/ca.crt"],
                "xpack.security.authc.api_key.enabled": True,
                # Not required for a single node bound to loopback, but without it every start warns.
                "xpack.security.transport.ssl.enabled": True,
                "xpack.security.transport.ssl.verification_mode": "certificate",
                "xpack.security.transport.ssl.key": "certs/node.key",
                "xpack.security.transport.ssl.certificate": "certs/node.crt",
                "xpack.security.transport.ssl.certificate_authorities": ["certs/ca.crt"],
            }
        )
    if extra:
        s.update(extra)
    return s


def _prepare_config(
    es_home: Path, node_dir: Path, settings: Mapping[str, Any], heap: str, jvm_options: Sequence[str]
) -> Path:
    conf = node_dir / "config"
    shutil.copytree(es_home / "config", conf)
    # GC log: keep it small and inside the node's logs dir.
    jvm = conf / "jvm.options"
    text = jvm.read_text()
    text = re.sub(
        r"^(-Xlog:gc\S*?):file=[^:]*:(\S*?):filecount=\d+,filesize=\d+\w?$",
        lambda m: f"{m.group(1)}:file={node_dir / 'logs' / 'gc.log'}:{m.group(2)}:filecount=2,filesize=16m",
        text,
        flags=re.M,
    )
    jvm.write_text(text)
    (conf / "jvm.options.d").mkdir(exist_ok=True)
    opts = [f"-Xms{heap}", f"-Xmx{heap}", *jvm_options]
    (conf / "jvm.options.d" / "neardup.options").write_text("\n".join(opts) + "\n")
    lines = ["# written by neardup_devnode.node"]
    lines += [f"{k}: {_yaml_scalar(v)}" for k, v in settings.items()]
    (conf / "elasticsearch.yml").write_text("\n".join(lines) + "\n")
    for p in [conf, *conf.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return conf


def _parent_death_signal() -> Any:
    """A ``preexec_fn`` asking the kernel to SIGTERM the child when its parent thread dies (``PR_SET_PDEATHSIG``).

    CPython calls it after switching uid/gid, so the setting survives; it is kept across the ``exec`` of the
    launcher script and its ``exec java``. The launcher then stops the server JVM in its shutdown hook.
    """
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork: nothing to import in the child

    def set_pdeathsig() -> None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG = 1

    return set_pdeathsig


def _popen_kwargs(run_as: _RunAs | None) -> dict[str, Any]:
    if run_as is None:
        return {}
    return {"user": run_as.uid, "group": run_as.gid, "extra_groups": []}


def _make_keystore(es_home: Path, conf: Path, env: Mapping[str, str], password: str, run_as: _RunAs | None) -> None:
    cmd = [str(es_home / "bin" / "elasticsearch-keystore"), "add", "-x", "-f", "-s", "bootstrap.password"]
    proc = subprocess.run(
        cmd,
        input=password.encode(),
        env=dict(env),
        cwd=conf,
        capture_output=True,
        timeout=300,
        check=False,
        **_popen_kwargs(run_as),
    )
    if proc.returncode != 0 or not (conf / "elasticsearch.keystore").is_file():
        out = (proc.stdout + proc.stderr).decode("utf-8", "replace")[-3000:]
        raise NodeStartError(f"elasticsearch-keystore failed ({proc.returncode}):\n{out}")


def _wait_ready(
    node: RunningNode, proc: subprocess.Popen[bytes], timeout: float, *, security_index: bool = False
) -> None:
    """Poll until the node is ready; raise :class:`NodeStartError` with the log tail on early exit or timeout.

    Ready means cluster health yellow. With *security_index* it also means the ``.security`` system index
    exists and is allocated: the security plugin creates it lazily (built-in role sync, first API key, ...) and
    while its shard initialises even correct ``elastic`` logins get 401. So we create it ourselves (put and
    delete a throw-away role), wait for it to be green, and require a few consecutive successful logins.
    """
    role = "/_security/role/neardup-ready-probe"
    steps: list[tuple[str, str, Any, tuple[int, ...]]] = [
        ("GET", "/_cluster/health?wait_for_status=yellow&timeout=1s", None, (200,)),
    ]
    if security_index:
        steps += [
            ("PUT", role, {"cluster": [], "indices": []}, (200,)),
            ("DELETE", role, None, (200, 404)),
            (
                "GET",
                "/_cluster/health/.security?wait_for_status=green&wait_for_no_initializing_shards=true&timeout=1s",
                None,
                (200,),
            ),
            ("GET", "/_security/_authenticate", None, (200,)),
            ("GET", "/_security/_authenticate", None, (200,)),
            ("GET", "/_security/_authenticate", None, (200,)),
        ]
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    done = 0
    while True:
        rc = proc.poll()
        if rc is not None:
            raise NodeStartError(
                f"Elasticsearch exited with code {rc} before becoming ready; node dir {node.node_dir}\n"
                f"--- tail of {node.log_path} ---\n{_tail(node.log_path)}"
            )
        method, path, body, ok = steps[done]
        try:
            status, answer = node.request(method, path, body, timeout=5)
            if status in ok:
                done += 1
                if done == len(steps):
                    return
                if path.startswith("/_security/_authenticate"):
                    time.sleep(0.2)
                continue
            last = f"{method} {path}: HTTP {status}: {str(answer)[:300]}"
            if path == "/_security/_authenticate":
                done = steps.index((method, path, body, ok))  # start the run of good logins again
        except (OSError, ssl.SSLError) as exc:
            last = f"{method} {path}: {exc!r}"
        if time.monotonic() > deadline:
            raise NodeStartError(
                f"Elasticsearch did not become ready within {timeout:.0f}s ({last}); node dir {node.node_dir}\n"
                f"--- tail of {node.log_path} ---\n{_tail(node.log_path)}"
            )
        time.sleep(0.25)


def _port_clash(log: Path) -> bool:
    text = _tail(log, 200)
    return "BindException" in text or "Address already in use" in text


def start_node(
    *,
    secure: bool = False,
    heap: str = DEFAULT_HEAP,
    version: str = ES_VERSION,
    name: str | None = None,
    base: Path | str | None = None,
    password: str | None = None,
    keep_data: bool = False,
    settings: Mapping[str, Any] | None = None,
    jvm_options: Sequence[str] = (),
    timeout: float = 180.0,
    background: bool = False,
    die_with_parent: bool = False,
) -> RunningNode:
    """Start a single-node Elasticsearch on 127.0.0.1 and wait until it is ready (health yellow).

    :param secure: enable security with HTTP TLS and a password for ``elastic`` (see module docs).
    :param heap: JVM heap, used for both ``-Xms`` and ``-Xmx`` (e.g. ``"512m"``, ``"1g"``).
    :param version: Elasticsearch version (an ``integ-test-zip`` on Maven Central).
    :param name: node name; default ``node-<random>``. The node dir is ``<base>/nodes/<name>``.
    :param base: base dir (default :func:`base_dir`).
    :param password: password of ``elastic`` in secured mode; default a random one (see :attr:`password`).
    :param keep_data: keep the node dir (data, logs, config) when the node is stopped.
    :param settings: extra ``elasticsearch.yml`` settings, applied last.
    :param jvm_options: extra JVM options (the inherited ``ES_JAVA_OPTS`` is ignored).
    :param timeout: seconds to wait for readiness.
    :param background: the node survives this Python process (new session; no cleanup at exit).
    :param die_with_parent: (Linux, foreground only) the node gets SIGTERM when the *thread* that started it
        dies, even if this process is SIGKILLed. Handy for test sessions; do not use it from a worker thread.
        Without it, foreground nodes are stopped at interpreter exit (``atexit``) only.
    :raises NodeStartError: the node exited early or did not become ready; the message has the log tail.
    :raises NodeError: no Java, download failed, user could not be created, ...
    """
    started = time.monotonic()
    base_path = Path(base).resolve() if base is not None else base_dir()
    run_as = _ensure_es_user()
    created = not base_path.exists()
    base_path.mkdir(parents=True, exist_ok=True)
    st = base_path.stat()
    if st.st_uid != os.geteuid():
        raise NodeError(f"{base_path} belongs to another user; set NEARDUP_ES_BASE to a directory of yours")
    if run_as:
        base_path.chmod(stat.S_IMODE(st.st_mode) | 0o755)  # only ever adds r-x (never touches /tmp's 1777)
        _check_traversable(base_path, run_as)
    elif created:
        base_path.chmod(0o700)
    es_home = _runtime_distribution(version, base_path, run_as is not None)
    java_home = find_java_home()

    name = name or f"node-{secrets.token_hex(4)}"
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"invalid node name {name!r}")
    nodes = base_path / "nodes"
    nodes.mkdir(exist_ok=True)
    nodes.chmod(0o755 if run_as else 0o700)
    node_dir = nodes / name
    if node_dir.exists():
        raise NodeError(f"{node_dir} already exists (is a node named {name!r} running?)")
    node_dir.mkdir()
    for sub in ("data", "logs", "tmp"):
        (node_dir / sub).mkdir()
    node_dir.chmod(0o755)
    (node_dir / "data").chmod(0o700)

    password = (password or secrets.token_urlsafe(18)) if secure else None
    env = {k: v for k, v in os.environ.items() if k not in {"ES_JAVA_OPTS", "JAVA_HOME", "ES_HOME", "ES_PATH_CONF"}}
    env.update(
        {
            "ES_JAVA_HOME": str(java_home),
            "ES_PATH_CONF": str(node_dir / "config"),
            "ES_TMPDIR": str(node_dir / "tmp"),
            # the launcher JVM's temp files ("final-flags*" dirs) would otherwise pile up in /tmp
            "CLI_JAVA_OPTS": f"{os.environ.get('CLI_JAVA_OPTS', '')} -Djava.io.tmpdir={node_dir / 'tmp'}".strip(),
            "HOME": str(node_dir),
            "LC_ALL": "C.UTF-8",
        }
    )

    attempts = 3
    for attempt in range(1, attempts + 1):
        http_port, transport_port = _free_port(), _free_port()
        while transport_port == http_port:
            transport_port = _free_port()
        s = _node_settings(
            name=name,
            node_dir=node_dir,
            http_port=http_port,
            transport_port=transport_port,
            secure=secure,
            es_home=es_home,
            extra=settings,
        )
        conf = node_dir / "config"
        if conf.exists():
            shutil.rmtree(conf)
        _prepare_config(es_home, node_dir, s, heap, jvm_options)
        ca_path: Path | None = None
        if secure:
            ca_path, _, _ = _make_tls_material(conf / "certs")
        if run_as:
            _chown_tree(node_dir, run_as)
        if secure:
            assert password is not None
            _make_keystore(es_home, conf, env, password, run_as)

        scheme = "https" if secure else "http"
        log_path = node_dir / "logs" / "console.log"
        node = RunningNode(
            url=f"{scheme}://127.0.0.1:{http_port}",
            username="elastic" if secure else None,
            password=password,
            ca_certs=str(ca_path) if ca_path else None,
            version=version,
            node_dir=node_dir,
            data_dir=node_dir / "data",
            logs_dir=node_dir / "logs",
            log_path=log_path,
            http_port=http_port,
            transport_port=transport_port,
            keep_data=keep_data,
            background=background,
        )
        logger.info("starting Elasticsearch %s at %s (node dir %s)", version, node.url, node_dir)
        with open(log_path, "ab") as log:
            if run_as:
                os.fchown(log.fileno(), run_as.uid, run_as.gid)
            proc = subprocess.Popen(
                [str(es_home / "bin" / "elasticsearch")],
                cwd=node_dir / "logs",
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_parent_death_signal() if die_with_parent and not background else None,
                close_fds=True,
                **_popen_kwargs(run_as),
            )
        node.pid = proc.pid
        node.start_time = _start_time(proc.pid)
        node._popen = proc
        try:
            analysis = _has_module(es_home, "neardup-analysis-compat") or _has_module(es_home, "analysis-common")
            _wait_ready(node, proc, timeout, security_index=secure and analysis)
        except NodeStartError:
            if proc.poll() is None:
                _terminate_group(proc.pid, 20, proc)
            else:
                _terminate_group(proc.pid, 5, proc)  # stray children, if any
            if attempt < attempts and _port_clash(log_path):
                logger.warning("port clash starting %s, retrying with other ports", name)
                shutil.move(str(log_path), str(log_path) + f".attempt{attempt}")
                continue
            raise
        except BaseException:
            _terminate_group(proc.pid, 20, proc)
            raise
        break

    if background:
        node._popen = None  # do not reap/kill it from this process
    else:
        _FOREGROUND.append(node)
    logger.info("Elasticsearch ready at %s after %.1fs", node.url, time.monotonic() - started)
    return node


# --------------------------------------------------------------------------------------------------------------
# background nodes (``neardup es start`` / ``neardup es stop``)
# --------------------------------------------------------------------------------------------------------------


def _read_state(base: Path) -> list[dict[str, Any]]:
    path = base / _STATE_FILE
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
    except ValueError:
        logger.warning("ignoring unreadable %s", path)
        return []
    return list(data.get("nodes", []))


def _write_state(base: Path, nodes: list[dict[str, Any]]) -> None:
    path = base / _STATE_FILE
    pid_path = base / _PID_FILE
    if not nodes:
        for p in (path, pid_path):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        return
    for target, content in (
        (path, json.dumps({"nodes": nodes}, indent=2) + "\n"),
        (pid_path, "".join(f"{n['pid']}\n" for n in nodes)),
    ):
        tmp = target.with_name(target.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(content)
        os.replace(tmp, target)


def background_nodes(base: Path | str | None = None) -> list[RunningNode]:
    """Background nodes recorded in ``<base>/state.json`` that are still running."""
    base_path = Path(base).resolve() if base is not None else base_dir()
    return [n for n in map(RunningNode.from_state, _read_state(base_path)) if n.is_running()]


def start_background(*, base: Path | str | None = None, **kwargs: Any) -> RunningNode:
    """Start a node that outlives this process and record it in ``<base>/state.json`` and
    ``<base>/elasticsearch.pid``. Keyword arguments are those of :func:`start_node`.

    :raises NodeError: a recorded background node is still running (stop it first).
    """
    base_path = Path(base).resolve() if base is not None else base_dir()
    base_path.mkdir(parents=True, exist_ok=True, mode=0o755 if os.geteuid() == 0 else 0o700)
    with _file_lock(base_path / ".state.lock"):
        running = background_nodes(base_path)
        if running:
            raise NodeError(
                f"an Elasticsearch node is already running at {running[0].url} (pid {running[0].pid}); stop it first"
            )
        node = start_node(base=base_path, background=True, **kwargs)
        _write_state(base_path, [node.to_state()])
    return node


def stop_background(
    base: Path | str | None = None, *, keep_data: bool | None = None, timeout: float = 30.0
) -> list[RunningNode]:
    """Stop every node recorded in ``<base>/state.json``; return those that were running."""
    base_path = Path(base).resolve() if base is not None else base_dir()
    if not base_path.is_dir():
        return []
    with _file_lock(base_path / ".state.lock"):
        stopped = []
        for state in _read_state(base_path):
            node = RunningNode.from_state(state)
            if node.is_running():
                node.stop(keep_data=keep_data, timeout=timeout)
                stopped.append(node)
            else:
                node._stopped = True
                if not (node.keep_data if keep_data is None else keep_data) and node.node_dir.is_dir():
                    shutil.rmtree(node.node_dir, ignore_errors=True)
        _write_state(base_path, [])
    return stopped
