"""NEARDUP_* settings: parsing, defaults, and one clear error per wrong value (in-process, no crawl)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from es_integration.es_settings import ElasticsearchSettings
from scrapy_neardup import NearDuplicatePipeline
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.theory import min_shared_for
from scrapy_neardup.crawl.settings import NearDupSettings
from scrapy_neardup.errors import NearDupSettingsError
from scrapy_neardup.store.config import read_setting, unknown_settings
from scrapy_neardup.store.embedded import EmbeddedBackend
from scrapy_neardup.store.settings_registry import KNOWN_SETTINGS, SETTINGS, Setting, reference_page


def parse(**values: Any) -> NearDupSettings:
    return NearDupSettings.from_settings(Settings(values))


def build(**values: Any) -> NearDuplicatePipeline:
    """The pipeline as Scrapy builds it: the settings, then the backend's own (NEARDUP_ES_*, NEARDUP_STATE_DIR)."""
    return NearDuplicatePipeline.from_crawler(get_crawler(settings_dict=values))


def embedded(**values: Any) -> EmbeddedBackend:
    backend = EmbeddedBackend.from_settings(Settings(values), SketchParams.create())
    assert isinstance(backend, EmbeddedBackend)
    return backend


def test_defaults() -> None:
    config = parse()
    assert config.enabled and config.action == "drop" and config.backend == "embedded"
    assert (config.text_field, config.url_field, config.mark_field) == ("text", "url", "neardup")
    assert (config.num_perm, config.threshold, config.min_shared) == (128, 0.9, min_shared_for(0.9, 128))
    assert config.min_shared == 107
    assert (config.shingle, config.shingle_size, config.seed) == ("word", None, 1)
    assert embedded().state_dir is None and not embedded().reset and not config.debug
    assert config.backend_class is EmbeddedBackend
    assert config.sketcher().tag == "mh16-k128-word5-s1-auto"


def test_command_line_strings_are_parsed() -> None:
    # `scrapy crawl -s NAME=value` always passes strings.
    values = dict(
        NEARDUP_THRESHOLD="0.8", NEARDUP_NUM_PERM="64", NEARDUP_SHINGLE="CHAR", NEARDUP_SHINGLE_SIZE="7",
        NEARDUP_SEED="42", NEARDUP_ACTION="Mark", NEARDUP_RESET="true", NEARDUP_DEBUG="1", NEARDUP_ENABLED="yes",
    )
    config = parse(**values)
    assert (config.threshold, config.num_perm, config.min_shared) == (0.8, 64, min_shared_for(0.8, 64))
    assert (config.shingle, config.shingle_size, config.seed, config.action) == ("char", 7, 42, "mark")
    assert embedded(**values).reset and config.debug and config.enabled
    assert config.sketcher().tag == "mh16-k64-char7-s42-auto"


def test_content_setting_reaches_the_sketcher() -> None:
    config = NearDupSettings.from_settings(Settings({"NEARDUP_CONTENT": "main"}))
    assert config.params.content == "main" and config.sketcher().tag == "mh11-k128-word5-s1-main"
    assert NearDupSettings.from_settings(Settings({})).sketcher().content == "auto"


def test_outage_settings() -> None:
    config = parse()
    assert (config.outage.on_backend_down, config.outage.max_unchecked) == ("pass", 0.0)
    assert (config.outage.max_wait, config.outage.retry_interval) == (600.0, 5.0)
    assert (config.monitors.max_backend_errors, config.monitors.max_unchecked, config.monitors.max_drop_rate) == (
        0, 0.0, 0.9)
    config = parse(NEARDUP_ON_BACKEND_DOWN="Pause", NEARDUP_MAX_UNCHECKED="0.05", NEARDUP_BACKEND_DOWN_MAX_WAIT="90",
                   NEARDUP_BACKEND_RETRY_INTERVAL=0.5, NEARDUP_MONITOR_MAX_BACKEND_ERRORS="3")
    assert (config.outage.on_backend_down, config.outage.max_unchecked) == ("pause", 0.05)
    assert (config.outage.max_wait, config.outage.retry_interval) == (90.0, 0.5)
    # The monitors' bound on the unchecked share follows NEARDUP_MAX_UNCHECKED unless set.
    assert (config.monitors.max_backend_errors, config.monitors.max_unchecked) == (3, 0.05)
    assert parse(NEARDUP_MAX_UNCHECKED=0.05, NEARDUP_MONITOR_MAX_UNCHECKED=0).monitors.max_unchecked == 0


def test_min_shared_overrides_threshold() -> None:
    config = parse(NEARDUP_THRESHOLD=0.5, NEARDUP_MIN_SHARED=100)
    assert (config.min_shared, config.threshold) == (100, None)


def test_state_dir_defaults_to_jobdir_subdirectory(tmp_path: Path) -> None:
    jobdir = tmp_path / "job"
    assert str(embedded(JOBDIR=str(jobdir)).state_dir) == str(jobdir / "neardup")
    assert jobdir.is_dir()  # created like Scrapy's own JOBDIR components do
    assert str(embedded(JOBDIR=str(jobdir), NEARDUP_STATE_DIR=str(tmp_path / "s")).state_dir) == str(tmp_path / "s")
    assert str(embedded(NEARDUP_STATE_DIR=tmp_path / "p").state_dir) == str(tmp_path / "p")  # PathLike accepted


def test_elasticsearch_settings(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    values = dict(
        NEARDUP_BACKEND="elasticsearch", NEARDUP_ES_URL="https://127.0.0.1:9200", NEARDUP_ES_INDEX="pages",
        NEARDUP_ES_USERNAME="elastic", NEARDUP_ES_PASSWORD="s3cret", NEARDUP_ES_CA_CERTS=str(ca),
        NEARDUP_ES_TIMEOUT="2.5",
    )
    config = es = ElasticsearchSettings.from_settings(Settings(values))
    assert es is not None
    assert (es.url, es.index, es.username, es.password, es.ca_certs, es.request_timeout) == (
        "https://127.0.0.1:9200", "pages", "elastic", "s3cret", str(ca), 2.5)
    assert "s3cret" not in repr(config)  # secrets never reach a log line
    # Empty strings (unset environment variables in settings.py) count as unset.
    es2 = ElasticsearchSettings.from_settings(Settings(dict(
        NEARDUP_BACKEND="elasticsearch", NEARDUP_ES_URL="http://127.0.0.1:9200", NEARDUP_ES_INDEX="x",
        NEARDUP_ES_API_KEY="", NEARDUP_ES_USERNAME="", NEARDUP_ES_PASSWORD="")))
    assert es2 is not None and (es2.api_key, es2.username, es2.password) == (None, None, None)


BAD_SETTINGS = [
    ({"NEARDUP_ACTION": "delete"}, ["NEARDUP_ACTION", "'delete'", "'drop'", "'mark'"]),
    ({"NEARDUP_BACKEND": "redis"}, ["NEARDUP_BACKEND", "'redis'", "'embedded'", "'elasticsearch'"]),
    ({"NEARDUP_SHINGLE": "sentence"}, ["NEARDUP_SHINGLE", "'sentence'"]),
    ({"NEARDUP_CONTENT": "article"}, ["NEARDUP_CONTENT", "'article'"]),
    ({"NEARDUP_THRESHOLD": 0}, ["NEARDUP_THRESHOLD", "0", "(0, 1]"]),
    ({"NEARDUP_THRESHOLD": 1.5}, ["NEARDUP_THRESHOLD", "1.5"]),
    ({"NEARDUP_THRESHOLD": "-0.2"}, ["NEARDUP_THRESHOLD", "'-0.2'"]),
    ({"NEARDUP_THRESHOLD": "high"}, ["NEARDUP_THRESHOLD", "'high'"]),
    ({"NEARDUP_THRESHOLD": float("nan")}, ["NEARDUP_THRESHOLD", "nan"]),
    ({"NEARDUP_THRESHOLD": 0.01}, ["NEARDUP_THRESHOLD=0.01", "too low", "NEARDUP_NUM_PERM=128"]),
    ({"NEARDUP_MIN_SHARED": 0}, ["NEARDUP_MIN_SHARED", "0", "NEARDUP_NUM_PERM=128"]),
    ({"NEARDUP_MIN_SHARED": 129}, ["NEARDUP_MIN_SHARED", "129", "[1, NEARDUP_NUM_PERM=128]"]),
    ({"NEARDUP_MIN_SHARED": 20, "NEARDUP_NUM_PERM": 16}, ["NEARDUP_MIN_SHARED", "20", "NEARDUP_NUM_PERM=16"]),
    ({"NEARDUP_MIN_SHARED": 3.5}, ["NEARDUP_MIN_SHARED", "3.5", "integer"]),
    ({"NEARDUP_NUM_PERM": 0}, ["NEARDUP_NUM_PERM", "0"]),
    ({"NEARDUP_NUM_PERM": -5}, ["NEARDUP_NUM_PERM", "-5"]),
    ({"NEARDUP_NUM_PERM": 2000}, ["NEARDUP_NUM_PERM", "2000", "1024"]),
    ({"NEARDUP_NUM_PERM": True}, ["NEARDUP_NUM_PERM", "True"]),
    ({"NEARDUP_SHINGLE_SIZE": 0}, ["NEARDUP_SHINGLE_SIZE", "0"]),
    ({"NEARDUP_SHINGLE_SIZE": "-3"}, ["NEARDUP_SHINGLE_SIZE", "'-3'"]),
    ({"NEARDUP_SEED": -1}, ["NEARDUP_SEED", "-1"]),
    ({"NEARDUP_SEED": 2**64}, ["NEARDUP_SEED", str(2**64)]),
    ({"NEARDUP_RESET": "maybe"}, ["NEARDUP_RESET", "'maybe'", "boolean"]),
    ({"NEARDUP_DEBUG": 2}, ["NEARDUP_DEBUG", "2", "boolean"]),
    ({"NEARDUP_ENABLED": "sometimes"}, ["NEARDUP_ENABLED", "'sometimes'"]),
    ({"NEARDUP_TEXT_FIELD": ""}, ["NEARDUP_TEXT_FIELD", "''"]),
    ({"NEARDUP_URL_FIELD": 3}, ["NEARDUP_URL_FIELD", "3"]),
    ({"NEARDUP_MARK_FIELD": "  "}, ["NEARDUP_MARK_FIELD"]),
    ({"NEARDUP_MAX_UNCHECKED": 5}, ["NEARDUP_MAX_UNCHECKED", "5", "a share in [0, 1]"]),
    ({"NEARDUP_MAX_UNCHECKED": "-0.1"}, ["NEARDUP_MAX_UNCHECKED", "'-0.1'"]),
    ({"NEARDUP_ON_BACKEND_DOWN": "wait"}, ["NEARDUP_ON_BACKEND_DOWN", "'wait'", "'pass'", "'pause'", "'stop'"]),
    ({"NEARDUP_BACKEND_DOWN_MAX_WAIT": 0}, ["NEARDUP_BACKEND_DOWN_MAX_WAIT", "0", "seconds > 0"]),
    ({"NEARDUP_BACKEND_RETRY_INTERVAL": "soon"}, ["NEARDUP_BACKEND_RETRY_INTERVAL", "'soon'"]),
    ({"NEARDUP_MONITOR_MAX_BACKEND_ERRORS": -1}, ["NEARDUP_MONITOR_MAX_BACKEND_ERRORS", "-1"]),
    ({"NEARDUP_MONITOR_MAX_UNCHECKED": 2}, ["NEARDUP_MONITOR_MAX_UNCHECKED", "2"]),
    ({"NEARDUP_MONITOR_MAX_DROP_RATE": "high"}, ["NEARDUP_MONITOR_MAX_DROP_RATE", "'high'"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_INDEX": "pages"}, ["NEARDUP_ES_URL", "elasticsearch"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "", "NEARDUP_ES_INDEX": "pages"}, ["NEARDUP_ES_URL"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://127.0.0.1:9200"}, ["NEARDUP_ES_INDEX"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "127.0.0.1:9200", "NEARDUP_ES_INDEX": "p"},
     ["NEARDUP_ES_URL", "'127.0.0.1:9200'", "http"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://h:9200,h2:9200", "NEARDUP_ES_INDEX": "p"},
     ["NEARDUP_ES_URL", "'http://h:9200,h2:9200'", "separated by commas"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://h:9200,", "NEARDUP_ES_INDEX": "p"},
     ["NEARDUP_ES_URL", "'http://h:9200,'"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://h:9200", "NEARDUP_ES_INDEX": "p",
      "NEARDUP_ES_BATCH_SIZE": "0"}, ["NEARDUP_ES_BATCH_SIZE", "'0'", "[1, 500]"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://h:9200", "NEARDUP_ES_INDEX": "Pages"},
     ["NEARDUP_ES_INDEX", "'Pages'", "lowercase"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://h:9200", "NEARDUP_ES_INDEX": "p",
      "NEARDUP_ES_USERNAME": "elastic"}, ["NEARDUP_ES_PASSWORD"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://h:9200", "NEARDUP_ES_INDEX": "p",
      "NEARDUP_ES_CA_CERTS": "/nonexistent/ca.pem"}, ["NEARDUP_ES_CA_CERTS", "/nonexistent/ca.pem"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://h:9200", "NEARDUP_ES_INDEX": "p",
      "NEARDUP_ES_TIMEOUT": 0}, ["NEARDUP_ES_TIMEOUT", "0"]),
    # What the client refuses is refused here, naming the setting (not an EsError from inside the crawler).
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://h:9200,https://h2:9200", "NEARDUP_ES_INDEX": "p"},
     ["NEARDUP_ES_URL", "one scheme"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://h:99999", "NEARDUP_ES_INDEX": "p"},
     ["NEARDUP_ES_URL"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://h:9200", "NEARDUP_ES_INDEX": "my pages"},
     ["NEARDUP_ES_INDEX", "'my pages'"]),
    ({"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": "http://h:9200", "NEARDUP_ES_INDEX": "p",
      "NEARDUP_ES_API_KEY": "a2V5", "NEARDUP_ES_USERNAME": "u", "NEARDUP_ES_PASSWORD": "p"},
     ["NEARDUP_ES_API_KEY", "NEARDUP_ES_USERNAME"]),
]


@pytest.mark.parametrize(("values", "expected"), BAD_SETTINGS, ids=[str(v) for v, _ in BAD_SETTINGS])
def test_wrong_setting_is_named_in_the_error(values: dict[str, Any], expected: list[str]) -> None:
    with pytest.raises(NearDupSettingsError) as info:
        build(**values)
    message = str(info.value)
    for fragment in expected:
        assert fragment in message, f"{fragment!r} missing from {message!r}"
    assert isinstance(info.value, ValueError)


def test_wrong_elasticsearch_settings_never_show_a_password(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    for url, extra in [("ftp://u:s3cret@h:9200", {}), ("http://u:s3cret@h:9200,https://h2:9200", {}),
                       ("http://u:s3cret@h:9200", {"NEARDUP_ES_CA_CERTS": str(ca)})]:
        with pytest.raises(NearDupSettingsError) as info:
            build(NEARDUP_BACKEND="elasticsearch", NEARDUP_ES_URL=url, NEARDUP_ES_INDEX="p", **extra)
        assert "s3cret" not in str(info.value) and "NEARDUP_ES_" in str(info.value)


def test_unknown_settings_are_named_with_the_closest_known_one() -> None:
    names = ["NEARDUP_TRESHOLD", "NEARDUP_THRESHOLD", "neardup_num_perm", "NEARDUP_ES_INDX", "NEARDUP_MIRROR_ENABLED",
             "NEARDUP_XYZZY", "LOG_LEVEL", "ITEM_PIPELINES"]
    assert unknown_settings(names) == [
        ("NEARDUP_ES_INDX", "NEARDUP_ES_INDEX"),
        ("NEARDUP_MIRROR_ENABLED", "NEARDUP_MIRRORS_ENABLED"),
        ("NEARDUP_TRESHOLD", "NEARDUP_THRESHOLD"),
        ("NEARDUP_XYZZY", None),
        ("neardup_num_perm", "NEARDUP_NUM_PERM"),  # Scrapy's settings are case-sensitive: ignored too
    ]


ROOT = Path(__file__).resolve().parents[2]
SETTING_NAME = re.compile(r"\bNEARDUP_[A-Z0-9_]*[A-Z0-9]\b")


def test_the_reference_page_is_what_the_registry_gives() -> None:
    """docs/settings.md is generated (.ci/settings_reference.py): a setting added, or a default or bound changed,
    in the registry without regenerating the page fails here."""
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert page == reference_page(), "run: python .ci/settings_reference.py"
    assert set(SETTING_NAME.findall(page)) == KNOWN_SETTINGS
    # Control: the page shows each default as the registry has it.
    assert "| `NEARDUP_SEARCH_BATCH_SIZE` | int in [1, 5000] | `200` |" in page
    script = subprocess.run([sys.executable, str(ROOT / ".ci" / "settings_reference.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert script.returncode == 0, script.stderr


def test_every_setting_the_product_names_is_registered() -> None:
    named = {name for package in ("scrapy_neardup", "es_integration") for path in (ROOT / package).rglob("*.py")
             for name in SETTING_NAME.findall(path.read_text(encoding="utf-8"))}
    named.discard("NEARDUP_TRESHOLD")  # the typo the unknown-setting warning is explained with
    assert named - KNOWN_SETTINGS == set()
    assert KNOWN_SETTINGS - named == set(), "a registered setting that nothing reads"


NUMBERS = [s for s in SETTINGS if s.kind in ("int", "float") and s.default is not None]


@pytest.mark.parametrize("spec", NUMBERS, ids=lambda s: s.name)
def test_number_settings_keep_their_bounds_and_defaults(spec: Setting) -> None:
    """One reader for every bounded number: its default when unset, its bounds accepted, a value past a bound
    refused with one line naming the setting and the value."""
    assert read_setting({}, spec.name) == spec.default
    assert read_setting({spec.name: ""}, spec.name) == spec.default
    assert spec.low is not None
    step = 1 if spec.kind == "int" else 0.01
    if not spec.low_open:
        assert read_setting({spec.name: str(spec.low)}, spec.name) == spec.low
    outside = [spec.low - step] + ([spec.high + step] if spec.high is not None else [])
    if spec.low_open:
        outside.append(spec.low)
    for value in outside:
        text = str(int(value)) if spec.kind == "int" else str(value)
        with pytest.raises(NearDupSettingsError) as info:
            read_setting({spec.name: text}, spec.name)
        assert str(info.value) == f"{spec.name}={text!r} is not valid: expected {spec.expected}"
    if spec.high is not None:
        assert read_setting({spec.name: spec.high}, spec.name) == spec.high
    with pytest.raises(NearDupSettingsError, match=spec.name):
        read_setting({spec.name: "many"}, spec.name)


def test_unknown_settings_warn_once_per_crawl(caplog: pytest.LogCaptureFixture) -> None:
    from scrapy_neardup.crawl.mirrors import MirrorHostsMiddleware
    from scrapy_neardup.crawl.soft404 import Soft404Middleware

    crawler = get_crawler(settings_dict={"NEARDUP_TRESHOLD": 0.8, "NEARDUP_SEEED": 3})
    with caplog.at_level("WARNING", logger="scrapy_neardup"):
        for component in (MirrorHostsMiddleware, Soft404Middleware, NearDuplicatePipeline):
            component.from_crawler(crawler)
    assert [r.getMessage() for r in caplog.records if r.name == "scrapy_neardup.crawl.startup"] == [
        "unknown setting NEARDUP_SEEED is ignored; did you mean NEARDUP_SEED?",
        "unknown setting NEARDUP_TRESHOLD is ignored; did you mean NEARDUP_THRESHOLD?",
    ]


def test_backend_is_a_dotted_path_or_an_alias() -> None:
    """NEARDUP_BACKEND loads a Backend subclass by its path, as HTTPCACHE_STORAGE does; the aliases stay."""
    assert parse(NEARDUP_BACKEND="scrapy_neardup.store.embedded.EmbeddedBackend").backend_class is EmbeddedBackend
    assert parse(NEARDUP_BACKEND="Embedded").backend == "embedded"
    from es_integration.backend import ElasticsearchBackend

    config = parse(NEARDUP_BACKEND="es_integration.backend.ElasticsearchBackend")
    assert config.backend_class is ElasticsearchBackend and parse(NEARDUP_BACKEND="elasticsearch").backend_class \
        is ElasticsearchBackend
    for wrong in ("nowhere.Backend", "scrapy_neardup.store.embedded.Nothing", "scrapy_neardup.core.index.SketchIndex"):
        with pytest.raises(NearDupSettingsError) as info:
            build(NEARDUP_BACKEND=wrong)
        assert str(info.value).startswith(f"NEARDUP_BACKEND={wrong!r} is not valid") and "\n" not in str(info.value)


def test_settings_error_subclasses_value_error() -> None:
    assert issubclass(NearDupSettingsError, ValueError)


def test_disabled_pipeline_is_not_configured_even_with_wrong_settings() -> None:
    crawler = get_crawler(settings_dict={"NEARDUP_ENABLED": False, "NEARDUP_ACTION": "bogus"})
    with pytest.raises(NotConfigured, match="NEARDUP_ENABLED"):
        NearDuplicatePipeline.from_crawler(crawler)


def test_from_crawler_raises_settings_error() -> None:
    crawler = get_crawler(settings_dict={"NEARDUP_ACTION": "bogus"})
    with pytest.raises(NearDupSettingsError, match="NEARDUP_ACTION='bogus'"):
        NearDuplicatePipeline.from_crawler(crawler)


def test_from_crawler_builds_pipeline_with_settings() -> None:
    crawler = get_crawler(settings_dict={"NEARDUP_NUM_PERM": 64, "NEARDUP_MIN_SHARED": 60})
    pipeline = NearDuplicatePipeline.from_crawler(crawler)
    assert (pipeline.config.num_perm, pipeline.config.min_shared) == (64, 60)
    assert pipeline.sketcher.num_perm == 64


def test_the_embedded_store_loads_under_its_path_only() -> None:
    from scrapy_neardup.crawl.settings import load_backend
    from scrapy_neardup.store.embedded import EmbeddedBackend

    assert load_backend("scrapy_neardup.store.embedded.EmbeddedBackend")[1] is EmbeddedBackend
    # The path of a development version is refused like any wrong one (no pre-release shim).
    with pytest.raises(NearDupSettingsError) as info:
        load_backend("scrapy_neardup.core.embedded.EmbeddedBackend")
    assert str(info.value).startswith("NEARDUP_BACKEND='scrapy_neardup.core.embedded.EmbeddedBackend' is not valid")
