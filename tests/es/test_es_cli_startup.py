"""``neardup es <command>`` against a cluster it cannot reach, or with wrong options: one line on stderr, exit 1.

No node is needed: the URL is a closed port on 127.0.0.1 (connection refused). Each command runs as its own
process, as a user runs it, so logging is configured by the command itself (no pytest handler in the way).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLOSED = "http://127.0.0.1:1"


def neardup(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    for name in ("NEARDUP_ES_URL", "NEARDUP_ES_API_KEY", "NEARDUP_ES_USERNAME", "NEARDUP_ES_PASSWORD"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "scrapy_neardup", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


@pytest.fixture
def pages(tmp_path: Path) -> str:
    path = tmp_path / "pages.jsonl"
    path.write_text('{"id": "a", "text": "one two three four five six"}\n')
    return str(path)


@pytest.mark.parametrize("command", ["search", "groups", "index"])
def test_unreachable_cluster_is_one_line_and_exit_1(command: str, pages: str, tmp_path: Path) -> None:
    args = {"search": ["search", "apple"], "groups": ["groups"], "index": ["index", pages]}[command]
    proc = neardup("es", *args, "--es-url", CLOSED, "--index", "startup", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"neardup es {command}: error: cannot connect to Elasticsearch at {CLOSED} ")
    assert lines[0].endswith("check --es-url and that the node is up")
    assert "Traceback" not in proc.stderr


def test_verbose_shows_the_transports_retries(tmp_path: Path) -> None:
    proc = neardup("-v", "es", "search", "apple", "--es-url", CLOSED, "--index", "startup", cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "elastic_transport" in proc.stderr  # at DEBUG, for whoever asks
    assert proc.stderr.splitlines()[-1].startswith("neardup es search: error: cannot connect")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--es-url", "127.0.0.1:9200"], "Elasticsearch URL must look like http://host:9200"),
        (["--es-url", CLOSED, "--username", "elastic"], "username and password go together"),
        (["--es-url", CLOSED, "--timeout", "0"], "request timeout must be > 0 seconds"),
        (["--es-url", CLOSED, "--threshold", "2"], "--threshold=2.0 is not valid"),  # said before connecting
        ([], "no cluster URL: give --es-url or set NEARDUP_ES_URL"),
    ],
    ids=["url", "username-alone", "timeout", "threshold", "no-url"],
)
def test_wrong_options_are_one_line_and_exit_1(options: list[str], message: str, tmp_path: Path) -> None:
    proc = neardup("es", "search", "apple", "--index", "startup", *options, cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("neardup es search: error: ") and message in lines[0], lines
