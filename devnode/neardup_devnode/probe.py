"""Plain HTTP requests to a node that may not answer yet: the readiness wait and ``neardup es status``.

The Python clients are no good here: elastic-transport's node pool logs a WARNING for every refused connection
(``... has failed for 1 times in a row, putting on 1 second timeout``, some 27 lines while a node boots), and
opensearch-py logs its own. The standard library's ``http.client`` says nothing: a refused connection is an
``OSError`` for the caller to count.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import urllib.parse
from typing import Any

#: What a probe raises when the node does not answer (refused, reset, timed out, TLS failure, garbled answer).
ProbeError = (OSError, http.client.HTTPException)


def probe(
    url: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    auth: tuple[str, str] | None = None,
    ca_certs: str | None = None,
    timeout: float = 5.0,
) -> tuple[int, Any]:
    """One request to the node at *url*; returns ``(status, body)``, the body parsed as JSON when it is JSON.

    :raises OSError: or ``http.client.HTTPException`` (see :data:`ProbeError`) when the node does not answer.
    """
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=ca_certs)
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {"accept": "application/json"}
    payload = None
    if body is not None:
        payload = json.dumps(body).encode()
        headers["content-type"] = "application/json"
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
        headers["authorization"] = f"Basic {token}"
    try:
        conn.request(method, "/" + path.lstrip("/"), body=payload, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(raw) if raw else None
    except ValueError:
        return resp.status, raw.decode("utf-8", "replace")
