"""``neardup es start|stop|status`` come from the launcher's distribution through the ``neardup.commands`` entry
point; without it the product says what to install. No node is started here."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from neardup_devnode import cli as devnode_cli

from es_integration import cli as es_cli


def neardup(*args: str, env_base: Path | None = None) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ)
    if env_base is not None:
        env["NEARDUP_ES_BASE"] = str(env_base)
    return subprocess.run([sys.executable, "-m", "scrapy_neardup", *args], capture_output=True, text=True,
                          timeout=120, check=False, env=env)


def test_the_neardup_command_has_the_launchers_commands() -> None:
    proc = neardup("es", "--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("start", "stop", "status", "index", "groups", "search"):
        assert f"    {command} " in proc.stdout, proc.stdout
    start = neardup("es", "start", "--help")
    assert "--version VERSION" in start.stdout and "--engine" in start.stdout and "--keep-data" not in start.stdout
    assert "--purge" in neardup("es", "stop", "--help").stdout


def _parser(*registers: object) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="neardup")
    sub = parser.add_subparsers(dest="command")
    for register in registers:
        register(sub)  # type: ignore[operator]
    return parser


def test_without_the_launcher_the_commands_say_what_to_install(capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser(es_cli.register)  # the product alone
    for argv in (["es", "start", "--version", "9.5.4"], ["es", "stop", "--purge"], ["es", "status"]):
        args = parser.parse_args(argv)
        assert args.func(args) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "pip install -e ./devnode" in err, err
    assert "start" not in parser.format_help()


def test_the_launcher_adds_its_commands_to_the_es_group() -> None:
    parser = _parser(es_cli.register, devnode_cli.register)
    assert parser.parse_args(["es", "start", "--version", "9.5.4"]).func is devnode_cli.cmd_start
    assert parser.parse_args(["es", "stop", "--purge"]).func is devnode_cli.cmd_stop
    assert parser.parse_args(["es", "status", "--name", "x"]).func is devnode_cli.cmd_status
    # without the product's es group there is nothing to add to: no error
    devnode_cli.register(argparse.ArgumentParser().add_subparsers())


def test_status_and_stop_without_a_node(tmp_path: Path) -> None:
    status = neardup("es", "status", env_base=tmp_path)
    assert status.returncode == devnode_cli.NOT_RUNNING and "no node was started" in status.stdout
    assert status.stderr == ""
    stop = neardup("es", "stop", "--name", "other", env_base=tmp_path)
    assert stop.returncode == 0 and "no node named 'other'" in stop.stdout
    alone = subprocess.run([sys.executable, "-m", "neardup_devnode", "status", "--name", "x"], capture_output=True,
                           text=True, timeout=120, check=False, env={"NEARDUP_ES_BASE": str(tmp_path),
                                                                     "PATH": "/usr/bin:/bin"})
    assert alone.returncode == devnode_cli.NOT_RUNNING and "no node named 'x'" in alone.stdout, alone.stderr
