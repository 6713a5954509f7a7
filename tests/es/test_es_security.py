"""Security: basic auth, API keys and TLS with a CA, clear errors, and no secret in logs or messages."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from es_integration.backend import ElasticsearchBackend
from scrapy_neardup.cli.main import main
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.errors import EsError

pytestmark = pytest.mark.es

SKETCHER = Sketcher()
PARAMS = SketchParams.from_tag(SKETCHER.tag, min_shared=107)
WRONG_PASSWORD = "wr0ng-" + uuid.uuid4().hex
WRONG_API_KEY = "aWQ6d3JvbmctYXBpLWtleS0" + uuid.uuid4().hex[:12]


@pytest.fixture(scope="module")
def docs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secure") / "docs.jsonl"
    text = "the apple orchard " + " ".join(f"w{i}" for i in range(120))
    records = [
        {"id": "a", "text": text},
        {"id": "b", "text": text + " extra"},
        {"id": "c", "text": "apple " + " ".join(f"v{i}" for i in range(120))},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def secure_index(secure_es_node: Any) -> Iterator[str]:
    name = f"nd-secure-{uuid.uuid4().hex[:10]}"
    yield name
    with secure_es_node.client() as es:
        es.indices.delete(index=name, ignore_unavailable=True)


@pytest.fixture
def api_key(secure_es_node: Any) -> Iterator[str]:
    key = secure_es_node.create_api_key(f"neardup-test-{uuid.uuid4().hex[:6]}", expiration="1h")
    yield key["encoded"]
    with secure_es_node.client() as es:
        es.security.invalidate_api_key(ids=[key["id"]])


def _base(node: Any, index: str) -> list[str]:
    return ["--es-url", node.url, "--index", index, "--ca-certs", node.ca_certs]


def _run_all(node: Any, index: str, docs: Path, auth: list[str]) -> None:
    """index, groups --assign --json, search --json."""
    assert main(["es", "index", str(docs), *_base(node, index), *auth]) == 0
    assert main(["es", "groups", *_base(node, index), *auth, "--assign", "--json"]) == 0
    assert main(["es", "search", *_base(node, index), *auth, "apple", "--json", "--field", "text"]) == 0


def test_basic_auth_with_ca_and_password_from_env(
    secure_es_node: Any, secure_index: str, docs_file: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("NEARDUP_ES_PASSWORD", secure_es_node.password)
    _run_all(secure_es_node, secure_index, docs_file, ["--username", secure_es_node.username])
    out = capsys.readouterr().out.splitlines()
    group = json.loads(out[0])
    assert {k: group[k] for k in ("group", "representative", "members")} == {
        "group": "a", "representative": "a", "members": ["a", "b"]}
    # Each page with its evidence against the representative (none for the representative itself).
    assert [(p["id"], p["url"], p["title"]) for p in group["pages"]] == [("a", None, None), ("b", None, None)]
    assert group["pages"][0]["evidence"] is None and group["pages"][1]["evidence"]["rule"] == "near_duplicate"
    hits = json.loads(out[-1])["hits"]
    assert sorted((h["id"], h["omitted"]) for h in hits) == [("a", 1), ("c", 0)]


def test_api_key_from_env(
    secure_es_node: Any, secure_index: str, docs_file: Path, api_key: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("NEARDUP_ES_API_KEY", api_key)
    _run_all(secure_es_node, secure_index, docs_file, [])
    hits = json.loads(capsys.readouterr().out.splitlines()[-1])["hits"]
    assert {h["id"] for h in hits} == {"a", "c"}


@pytest.mark.parametrize("case", ["wrong-password", "wrong-api-key", "no-ca", "plain-http"])
def test_clear_errors(
    case: str, secure_es_node: Any, secure_index: str, docs_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = secure_es_node
    args = ["es", "index", str(docs_file), "--es-url", node.url, "--index", secure_index]
    expected = {
        "wrong-password": (["--ca-certs", node.ca_certs, "--username", "elastic", "--password", WRONG_PASSWORD],
                           "authentication failed"),
        "wrong-api-key": (["--ca-certs", node.ca_certs, "--api-key", WRONG_API_KEY], "authentication failed"),
        "no-ca": (["--username", "elastic", "--password", node.password], "--ca-certs"),
        "plain-http": (["--username", "elastic", "--password", node.password], "cannot connect"),
    }
    extra, fragment = expected[case]
    if case == "plain-http":
        args[4] = node.url.replace("https://", "http://")
    assert main([*args, *extra]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("neardup es index: error: ") and fragment in err, err
    assert "\n" not in err and "Traceback" not in err
    for secret in (WRONG_PASSWORD, WRONG_API_KEY, node.password):
        assert secret not in captured.err and secret not in captured.out


def test_no_secrets_in_logs_or_messages(
    secure_es_node: Any, secure_index: str, docs_file: Path, api_key: str, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Everything at DEBUG (the transport logs every request and its headers) holds no password or key."""
    node = secure_es_node
    secrets = [node.password, api_key, WRONG_PASSWORD]
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("elastic_transport").setLevel(logging.DEBUG)
        logging.getLogger("elasticsearch").setLevel(logging.DEBUG)
        assert main(["-v", "es", "index", str(docs_file), *_base(node, secure_index), "--username", "elastic",
                     "--password", node.password]) == 0
        assert main(["-v", "es", "search", *_base(node, secure_index), "--api-key", api_key, "apple"]) == 0
        assert main(["-v", "es", "groups", *_base(node, secure_index), "--username", "elastic",
                     "--password", WRONG_PASSWORD]) == 1
        monkeypatch.setenv("NEARDUP_ES_API_KEY", api_key)
        assert main(["-v", "es", "search", *_base(node, secure_index), "apple", "--json"]) == 0

        async def backend_run() -> list[str]:
            messages = []
            good = ElasticsearchBackend(url=node.url, index=secure_index + "-b", params=PARAMS,
                                        username="elastic", password=node.password,
                                        ca_certs=node.ca_certs)
            await good.open()
            assert await good.check_and_add("k", SKETCHER.sketch("a b c d e f g h i j")) is None
            messages.append(repr(good))
            await good.close()
            wrong: list[dict[str, Any]] = [{"username": "elastic", "password": WRONG_PASSWORD},
                                           {"api_key": WRONG_API_KEY}]
            for kwargs in wrong:
                bad = ElasticsearchBackend(url=node.url, index=secure_index + "-b", params=PARAMS,
                                           ca_certs=node.ca_certs, **kwargs)
                with pytest.raises(EsError) as info:
                    await bad.open()
                messages.append(str(info.value))
                assert "authentication failed" in str(info.value)
            return messages

        messages = asyncio.run(backend_run())
    captured = capsys.readouterr()
    assert "> POST" in caplog.text or "POST" in caplog.text  # requests were logged at DEBUG
    assert any(r.name.startswith("elastic_transport") for r in caplog.records)
    for secret in secrets + [WRONG_API_KEY]:
        assert secret not in caplog.text
        assert secret not in captured.out and secret not in captured.err
        assert all(secret not in m for m in messages)
    with node.client() as es:
        es.indices.delete(index=secure_index + "-b", ignore_unavailable=True)


def test_backend_with_api_key_and_least_privileges(secure_es_node: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A key limited to its index and the index's siblings (``<index>-*``: the sequencer, templates, hosts), with
    no cluster or monitor privilege, is enough; the checkpoint wait is skipped with one warning."""
    index = f"nd-least-{uuid.uuid4().hex[:8]}"
    key = secure_es_node.create_api_key(
        "neardup-least",
        expiration="1h",
        role_descriptors={"crawler": {"indices": [{"names": [index, f"{index}-*"], "privileges": [
            "read", "write", "create_index", "view_index_metadata", "maintenance"]}]}},
    )
    a, b = SKETCHER.sketch_many(["x " + " ".join(f"w{i}" for i in range(100)), " ".join(f"w{i}" for i in range(100))])

    async def run() -> list[Any]:
        backend = ElasticsearchBackend(url=secure_es_node.url, index=index, params=PARAMS,
                                       api_key=key["encoded"], ca_certs=secure_es_node.ca_certs)
        await backend.open()
        try:
            return [await backend.check_and_add("a", a), await backend.check_and_add("b", b),
                    await backend.check_and_add("c", a)]
        finally:
            await backend.close()

    try:
        with caplog.at_level(logging.WARNING, logger="es_integration.backend"):
            first, second, third = asyncio.run(run())
        assert first is None and second is not None and second.key == "a" and third.exact
        assert caplog.text.count("no 'monitor' privilege") == 1
    finally:
        with secure_es_node.client() as es:
            es.indices.delete(index=f"{index},{index}-order", ignore_unavailable=True)
