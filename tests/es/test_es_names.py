"""Index and field names are validated before they reach a request path or a query; tokens round-trip."""

from __future__ import annotations

import numpy as np
import pytest

from es_integration.client import ConnectionSettings, describe_error
from es_integration.mapping import position_tokens, signature_from_tokens, signatures_from_token_lists
from es_integration.names import validate_field_name, validate_index_name
from scrapy_neardup.core.stored_signature import stored_values
from scrapy_neardup.errors import EsError, InvalidNameError


@pytest.mark.parametrize("name", ["pages", "pages-2024.01", "a_b+c", "x" * 255, "crawl.v2", "über"])
def test_valid_index_names(name: str) -> None:
    assert validate_index_name(name) == name


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "non-empty"),
        ("Pages", "lowercase"),
        ("pages*", "'*'"),
        ("pa?ges", "'?'"),
        ("a,b", "','"),
        ("a b", "' '"),
        ("a/b", "'/'"),
        ("a\\b", "'\\\\'"),
        ("a|b", "'|'"),
        ("a#b", "'#'"),
        ("a:b", "':'"),
        ('a"b', "'\"'"),
        ("a<b", "'<'"),
        ("a\nb", "'\\n'"),
        ("_all", "start with '_'"),
        ("-pages", "start with '-'"),
        ("+pages", "start with '+'"),
        (".security", "start with '.'"),
        (".", "not allowed"),
        ("..", "not allowed"),
        ("x" * 256, "255 bytes"),
        ("ü" * 128, "255 bytes"),
    ],
)
def test_invalid_index_names(name: str, fragment: str) -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_index_name(name)
    assert fragment in str(info.value)


@pytest.mark.parametrize("name", ["text", "page.body", "body_html", "title-2", "a.b.c", "Título"])
def test_valid_field_names(name: str) -> None:
    assert validate_field_name(name) == name


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "non-empty"),
        ("_source", "must not start with '_'"),
        ("_id", "must not start with '_'"),
        ("text*", "wildcards"),
        ("te?t", "wildcards"),
        ("a..b", "empty segment"),
        (".a", "empty segment"),
        ("a.", "empty segment"),
        ("a b", "whitespace"),
        ('a"b', "quotes"),
        ("a,b", "','"),
        ("a#b", "'#'"),
        ("a\x00b", "control"),
        ("neardup", "reserved"),
        ("neardup.positions", "reserved"),
        ("x" * 256, "longer than"),
    ],
)
def test_invalid_field_names(name: str, fragment: str) -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_field_name(name)
    assert fragment in str(info.value)


def test_reserved_fields_allowed_when_asked() -> None:
    assert validate_field_name("neardup.group", allow_reserved=True) == "neardup.group"


def test_position_tokens_round_trip() -> None:
    rng = np.random.default_rng(5)
    signature = rng.integers(0, 2**32, size=128, dtype=np.uint64).astype(np.uint32)
    signature[0], signature[1] = 0, 2**32 - 1
    tokens = position_tokens(signature)
    assert tokens[0] == "0_0" and tokens[1] == "1_ffff" and tokens[17] == f"17_{int(signature[17]) & 0xFFFF:x}"
    assert len(set(tokens)) == 128
    assert np.array_equal(signature_from_tokens(list(reversed(tokens)), 128), signature & 0xFFFF)
    assert np.array_equal(stored_values(signature), signature & 0xFFFF)
    with pytest.raises(ValueError, match="positions"):
        signature_from_tokens(tokens[:-1], 128)
    with pytest.raises(ValueError, match="repeated"):
        signature_from_tokens([*tokens[:-1], tokens[0]], 128)
    with pytest.raises(ValueError, match="malformed"):
        signature_from_tokens(["12"], 128)


def test_token_lists_parse_like_one_by_one() -> None:
    """The vectorized parser agrees with signature_from_tokens and rejects exactly the malformed lists."""
    rng = np.random.default_rng(8)
    k = 128
    signatures = rng.integers(0, 2**32, size=(300, k), dtype=np.uint64).astype(np.uint32)
    signatures[0] = 0
    signatures[1] = 2**32 - 1
    lists = [position_tokens(s) for s in signatures]
    lists[2] = list(reversed(lists[2]))  # any order is fine
    bad = {
        3: lists[3][:-1],  # a position missing
        4: [*lists[4][:-1], lists[4][0]],  # a position repeated
        5: [*lists[5][:-1], f"{k}_1"],  # a position out of range
        6: [*lists[6][:-1], f"{k - 1}_10000"],  # a value beyond 16 bits
    }
    for i, tokens in bad.items():
        lists[i] = tokens
    got, valid = signatures_from_token_lists(lists, k)
    assert np.flatnonzero(~valid).tolist() == sorted(bad)
    assert np.array_equal(got[valid], stored_values(signatures[valid]))
    assert not got[~valid].any()
    # One list with a character that is no digit sends the page down the one-by-one path: same answers.
    lists[7] = [*lists[7][:-1], f"{k - 1}_zz"]
    slow, slow_valid = signatures_from_token_lists(lists, k)
    assert np.flatnonzero(~slow_valid).tolist() == sorted([*bad, 7])
    assert np.array_equal(slow[slow_valid], got[slow_valid])
    empty, none_valid = signatures_from_token_lists([[], ["0_1"]], k)
    assert empty.shape == (2, k) and not none_valid.any()


def test_connection_settings_validation_and_repr(tmp_path: object) -> None:
    s = ConnectionSettings.create("https://bob:s3cret-pw@127.0.0.1:9200/")
    assert s.url == "https://127.0.0.1:9200" and s.username == "bob" and s.password == "s3cret-pw"
    assert "s3cret-pw" not in repr(s)
    assert "k3y-value" not in repr(ConnectionSettings.create("http://h:1", api_key="k3y-value"))
    assert ConnectionSettings.create("http://h:1", api_key="id:key").client_options()["api_key"] == ("id", "key")
    for bad, fragment in [
        ("ftp://h:1", "must look like"),
        ("h:9200", "must look like"),
        ("http://h:99999", "must look like"),
    ]:
        with pytest.raises(EsError, match=fragment):
            ConnectionSettings.create(bad)
    with pytest.raises(EsError, match="go together"):
        ConnectionSettings.create("http://h:1", username="u")
    with pytest.raises(EsError, match="not both"):
        ConnectionSettings.create("http://h:1", username="u", password="p", api_key="k")
    with pytest.raises(EsError, match="does not exist"):
        ConnectionSettings.create("https://h:1", ca_certs="/no/such/ca.pem")
    with pytest.raises(EsError, match="https"):
        ConnectionSettings.create("http://h:1", ca_certs=__file__)


def test_several_node_urls() -> None:
    s = ConnectionSettings.create(" http://bob:pw@127.0.0.1:9200/ ,http://bob:pw@127.0.0.2:9201")
    assert s.urls == ["http://127.0.0.1:9200", "http://127.0.0.2:9201"]
    assert s.url == "http://127.0.0.1:9200,http://127.0.0.2:9201" and (s.username, s.password) == ("bob", "pw")
    for bad, fragment in [
        ("http://h:1,https://h:2", "one scheme"),
        ("http://u:p@h:1,http://h:2", "same user:password"),
        ("http://h:1,", "must look like"),
        ("http://h:1,h:2", "must look like"),
    ]:
        with pytest.raises(EsError, match=fragment):
            ConnectionSettings.create(bad)
    from elastic_transport import ConnectionError as TransportConnectionError

    message = describe_error(TransportConnectionError("refused"), "http://bob:pw@127.0.0.1:9/,http://bob:pw@h:8")
    assert "pw" not in message and message.startswith("cannot connect to Elasticsearch at http://127.0.0.1:9/,http://h:8")


def test_describe_error_strips_credentials_from_urls() -> None:
    from elastic_transport import ConnectionError as TransportConnectionError

    message = describe_error(TransportConnectionError("refused"), "http://bob:s3cret-pw@127.0.0.1:9/")
    assert "s3cret-pw" not in message and "bob" not in message
    assert message.startswith("cannot connect to Elasticsearch at http://127.0.0.1:9/")
