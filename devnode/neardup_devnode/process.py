"""Processes: the unprivileged user a root launcher runs the node as, process groups, and small OS helpers."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import NodeError

logger = logging.getLogger(__name__)

#: Name of the unprivileged user the node runs as when we are root.
ES_USER = os.environ.get("NEARDUP_ES_USER", "neardup-es")


@dataclass(frozen=True)
class RunAs:
    user: str
    uid: int
    gid: int


def ensure_es_user() -> RunAs | None:
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
    return RunAs(ES_USER, pw.pw_uid, pw.pw_gid)


def blocking_dir(path: Path, run_as: RunAs) -> Path | None:
    """The first of *path* and its parents that *run_as* cannot traverse (e.g. a 0700 ``/root``), else ``None``."""
    for p in [path, *path.parents]:
        st = p.stat()
        if st.st_uid == run_as.uid:
            ok = bool(st.st_mode & stat.S_IXUSR)
        elif st.st_gid == run_as.gid:
            ok = bool(st.st_mode & stat.S_IXGRP)
        else:
            ok = bool(st.st_mode & stat.S_IXOTH)
        if not ok:
            return p
    return None


def check_traversable(path: Path, run_as: RunAs) -> None:
    """Fail early, with a clear message, if *run_as* cannot reach *path*."""
    p = blocking_dir(path, run_as)
    if p is not None:
        raise NodeError(
            f"user {run_as.user} cannot traverse {p} (mode {stat.filemode(p.stat().st_mode)}); "
            f"choose a base dir it can reach with NEARDUP_ES_BASE"
        )


def chown_tree(path: Path, run_as: RunAs) -> None:
    for p in [path, *path.rglob("*")]:
        os.lchown(p, run_as.uid, run_as.gid)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Whether *port* on 127.0.0.1 can be bound now (a node restarted on its data takes its old ports if so)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM binds: TIME_WAIT does not block it
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def tail(path: Path | None, lines: int = 60) -> str:
    if path is None or not path.is_file():
        return "<no log>"
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 64 * 1024))
        data = fh.read().decode("utf-8", "replace")
    return "\n".join(data.splitlines()[-lines:])


def yaml_scalar(value: Any) -> str:
    """Render a value for elasticsearch.yml (JSON scalars/lists are valid YAML flow nodes)."""
    if isinstance(value, Path):
        value = str(value)
    return json.dumps(value)


def proc_stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (index 0 = state), or ``None``."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    fields = proc_stat(pid)
    return int(fields[19]) if fields else None  # field 22 of stat(5) = starttime


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is *pgid*."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = proc_stat(int(entry.name))
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def terminate_group(pgid: int, timeout: float, popen: subprocess.Popen[bytes] | None = None) -> bool:
    """SIGTERM the process group, wait up to *timeout* s, then SIGKILL. True if it stopped gracefully."""
    kill_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    graceful = True
    while True:
        if popen is not None:
            popen.poll()
        else:
            reap(pgid)
        if not group_members(pgid):
            break
        if time.monotonic() > deadline:
            if graceful:
                logger.warning("process group %d did not stop within %.0fs, sending SIGKILL", pgid, timeout)
                kill_group(pgid, signal.SIGKILL)
                graceful = False
                deadline = time.monotonic() + 15
            else:
                raise NodeError(f"processes {group_members(pgid)} survive SIGKILL")
        time.sleep(0.1)
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=5)
    return graceful


def parent_death_signal() -> Any:
    """A ``preexec_fn`` asking the kernel to SIGTERM the child when its parent thread dies (``PR_SET_PDEATHSIG``).

    CPython calls it after switching uid/gid, so the setting survives; it is kept across the ``exec`` of the
    launcher script and its ``exec java``. The launcher then stops the server JVM in its shutdown hook.
    """
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork: nothing to import in the child

    def set_pdeathsig() -> None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG = 1

    return set_pdeathsig


def popen_kwargs(run_as: RunAs | None) -> dict[str, Any]:
    if run_as is None:
        return {}
    return {"user": run_as.uid, "group": run_as.gid, "extra_groups": []}
