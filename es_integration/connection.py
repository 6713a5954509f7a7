"""Where and how to connect to a cluster: :class:`ConnectionSettings`, validated once for every client.

Both engines' clients (:mod:`es_integration.client`, :mod:`es_integration.opensearch_adapter`) are built from it;
it imports neither.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from scrapy_neardup.errors import EsError


@dataclass(frozen=True)
class ConnectionSettings:
    """Where and how to connect.

    Attributes:
        url: ``http(s)://host:port`` (userinfo is moved into ``username``/``password`` by :meth:`create`), or
            several such URLs of one cluster separated by commas (see :attr:`urls`).
        api_key: encoded API key, or ``"id:key"``; excludes ``username``/``password``.
        username, password: basic auth; both or neither.
        ca_certs: PEM file of the CA that signed the cluster's certificate (https only).
        request_timeout: seconds per request.
    """

    url: str
    api_key: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_certs: str | None = None
    request_timeout: float = 30.0

    @classmethod
    def create(
        cls,
        url: str,
        *,
        api_key: str | None = None,
        username: str | None = None,
        password: str | None = None,
        ca_certs: str | None = None,
        request_timeout: float = 30.0,
    ) -> ConnectionSettings:
        """Validated settings; ``user:password@`` in ``url`` becomes basic auth unless ``username`` is given.

        Raises:
            EsError: bad URL scheme, URLs of one list with different schemes or credentials, password without
                user (or the reverse), both an API key and a password, a CA file that does not exist, a
                non-positive timeout.
        """
        nodes = [_split_url(part) for part in url.split(",")]
        schemes = {scheme for scheme, _, _ in nodes}
        if len(schemes) > 1:
            raise EsError(f"Elasticsearch URLs of one cluster must share one scheme, got {safe_url(url)!r}")
        userinfos = {userinfo for _, _, userinfo in nodes}
        if len(userinfos) > 1:
            raise EsError("Elasticsearch URLs of one cluster must carry the same user:password@ (or none)")
        (userinfo,) = userinfos
        if userinfo is not None and username is None:
            username = userinfo[0]
            password = userinfo[1] if password is None else password
        (scheme,) = schemes
        clean = ",".join(address for _, address, _ in nodes)
        if (username is None) != (password is None):
            raise EsError("username and password go together: give both or neither")
        if api_key and username is not None:
            raise EsError("give either an API key or a username and password, not both")
        if ca_certs is not None:
            if scheme != "https":
                raise EsError("a CA certificate only makes sense with an https:// URL")
            if not os.path.isfile(ca_certs):
                raise EsError(f"CA certificate file {ca_certs!r} does not exist")
        if not request_timeout > 0:
            raise EsError(f"request timeout must be > 0 seconds, got {request_timeout}")
        return cls(clean, api_key or None, username, password, ca_certs, float(request_timeout))

    @property
    def urls(self) -> list[str]:
        """The node URLs (one, or the comma-separated list of :attr:`url`), each without userinfo."""
        return self.url.split(",")

    def client_options(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for ``Elasticsearch(...)`` / ``AsyncElasticsearch(...)``."""
        options: dict[str, Any] = {"request_timeout": self.request_timeout}
        if self.api_key:
            options["api_key"] = _api_key(self.api_key)
        elif self.username is not None:
            options["basic_auth"] = (self.username, self.password or "")
        if self.ca_certs:
            options["ca_certs"] = self.ca_certs
        options.update(overrides)
        return options


def _split_url(url: str) -> tuple[str, str, tuple[str, str] | None]:
    """``(scheme, URL without userinfo, query or fragment, (user, password) or None)`` of one node URL.

    Raises:
        EsError: not an http(s) URL with a host.
    """
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise EsError(f"Elasticsearch URL must look like http://host:9200 or https://host:9200, got {safe_url(url)!r}")
    userinfo = None
    if parts.username:
        userinfo = (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
    host = parts.hostname
    netloc = f"[{host}]" if ":" in host else host
    if port:
        netloc += f":{port}"
    return parts.scheme, urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")), userinfo


def _api_key(value: str) -> str | tuple[str, str]:
    """The encoded key (base64, never holds ``:``) as is; ``"id:key"`` as an ``(id, key)`` pair."""
    if ":" in value:
        ident, _, key = value.partition(":")
        return ident, key
    return value


def safe_url(url: str) -> str:
    """``url`` without userinfo, query or fragment (each of a comma-separated list)."""
    if "," in url:
        return ",".join(safe_url(part) for part in url.split(","))
    url = url.strip()
    try:
        parts = urllib.parse.urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<invalid URL>"
    if not parts.hostname:
        return url.split("@")[-1][:200]
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))


