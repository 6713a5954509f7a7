"""Fetching one artifact from Maven Central: with ``mvn`` when it is on PATH, else over HTTPS with a SHA-1 check.

On a terminal the download shows progress (Maven's own transfer lines, or a byte counter for HTTPS), since the
first Elasticsearch download takes tens of seconds.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .errors import NodeError

logger = logging.getLogger(__name__)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"


@dataclass(frozen=True)
class Artifact:
    """A Maven coordinate ``group:artifact:version[:packaging]``."""

    group: str
    artifact: str
    version: str
    packaging: str = "jar"

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}:{self.packaging}"

    @property
    def filename(self) -> str:
        return f"{self.artifact}-{self.version}.{self.packaging}"

    def url(self, repo: str) -> str:
        return f"{repo.rstrip('/')}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.filename}"


def _show_progress() -> bool:
    return sys.stderr.isatty() and os.environ.get("NEARDUP_QUIET", "") in ("", "0")


def _with_mvn(artifact: Artifact, dest_dir: Path) -> Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise NodeError("mvn is not on PATH")
    progress = _show_progress()
    # -B -q hides Maven's transfer progress; on a terminal we let Maven print it (to stderr) instead.
    flags = ["-ntp", "-B", "-q"] if not progress else []
    cmd = [mvn, *flags, "dependency:copy", f"-Dartifact={artifact.coordinate}", f"-DoutputDirectory={dest_dir}"]
    logger.info("fetching %s with mvn", artifact.coordinate)
    if progress:
        print(f"fetching {artifact.coordinate} from Maven Central (once; cached afterwards)", file=sys.stderr)
    proc = subprocess.run(
        cmd,
        cwd=dest_dir,
        stdin=subprocess.DEVNULL,
        stdout=sys.stderr if progress else subprocess.PIPE,
        stderr=None if progress else subprocess.STDOUT,
        text=True,
        timeout=1800,
        check=False,
    )
    path = dest_dir / artifact.filename
    if proc.returncode != 0 or not path.is_file():
        raise NodeError(
            f"mvn dependency:copy {artifact.coordinate} failed (exit {proc.returncode}):\n{(proc.stdout or '')[-3000:]}"
        )
    return path


def _with_https(artifact: Artifact, dest_dir: Path) -> Path:
    url = artifact.url(os.environ.get("NEARDUP_MAVEN_REPO", MAVEN_CENTRAL))
    path = dest_dir / artifact.filename
    logger.info("fetching %s from %s", artifact.coordinate, url)
    sha1 = hashlib.sha1()
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(path, "wb") as out:
            total = int(resp.headers.get("Content-Length") or 0)
            bar = None
            if _show_progress():
                from tqdm import tqdm

                bar = tqdm(total=total or None, unit="B", unit_scale=True, desc=artifact.filename, file=sys.stderr)
            while chunk := resp.read(1 << 20):
                sha1.update(chunk)
                out.write(chunk)
                if bar is not None:
                    bar.update(len(chunk))
            if bar is not None:
                bar.close()
        with urllib.request.urlopen(url + ".sha1", timeout=60) as resp:
            expected = resp.read().decode("ascii", "replace").split()[0].strip().lower()
    except (urllib.error.URLError, OSError) as exc:
        raise NodeError(f"download of {url} failed: {exc}") from exc
    if sha1.hexdigest() != expected:
        raise NodeError(f"SHA-1 mismatch for {url}: got {sha1.hexdigest()}, expected {expected}")
    return path


def fetch(artifact: Artifact, dest_dir: Path) -> Path:
    """Download *artifact* into *dest_dir*; ``mvn`` first (it honours ``~/.m2/settings.xml`` mirrors and proxies),
    HTTPS second. ``NEARDUP_ES_DOWNLOAD=https`` skips ``mvn``."""
    fetchers = [_with_mvn, _with_https]
    if os.environ.get("NEARDUP_ES_DOWNLOAD") == "https" or shutil.which("mvn") is None:
        fetchers = [_with_https]
    errors = []
    for fetcher in fetchers:
        try:
            return fetcher(artifact, dest_dir)
        except (NodeError, subprocess.TimeoutExpired) as exc:
            logger.warning("%s", exc)
            errors.append(str(exc))
    raise NodeError(f"could not fetch {artifact.coordinate}:\n" + "\n".join(errors))
