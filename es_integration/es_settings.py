"""The ``NEARDUP_ES_*`` settings of the Elasticsearch backend, parsed by the backend itself.

``ElasticsearchBackend.from_settings`` calls :meth:`ElasticsearchSettings.from_settings` when the crawler is
built, so a wrong value stops the crawl before any request with one
:class:`~scrapy_neardup.errors.NearDupSettingsError` line naming the setting. The readers are the store's
(:mod:`scrapy_neardup.store.config`), shared with the Scrapy layer.

Each setting's type, default and bounds: :mod:`scrapy_neardup.store.settings_registry` (the reference page:
docs/settings.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scrapy_neardup.errors import EsError, InvalidNameError, NearDupSettingsError
from scrapy_neardup.store.config import SettingsLike, read_str, setting_float, setting_int, settings_error
from scrapy_neardup.store.settings_registry import default_of

from .connection import ConnectionSettings, safe_url
from .names import validate_index_name


@dataclass(frozen=True, slots=True)
class ElasticsearchSettings:
    """Connection settings of the Elasticsearch backend (``NEARDUP_ES_*``).

    ``password`` and ``api_key`` are kept out of ``repr`` so that they never reach a log line.
    """

    url: str
    index: str
    api_key: str | None = None
    username: str | None = None
    password: str | None = None
    ca_certs: str | None = None
    request_timeout: float = default_of("NEARDUP_ES_TIMEOUT")
    batch_size: int = default_of("NEARDUP_ES_BATCH_SIZE")
    shards: int = default_of("NEARDUP_ES_SHARDS")

    def __repr__(self) -> str:
        secrets = ", api_key=***" if self.api_key else ""
        secrets += f", username={self.username!r}, password=***" if self.username else ""
        return f"ElasticsearchSettings(url={self.url!r}, index={self.index!r}{secrets})"

    @classmethod
    def from_settings(
        cls, settings: SettingsLike, *, index_setting: str = "NEARDUP_ES_INDEX",
        needed_by: str = "NEARDUP_BACKEND='elasticsearch'",
    ) -> ElasticsearchSettings:
        """Parse and check the ``NEARDUP_ES_*`` settings (any mapping with ``.get``).

        Args:
            index_setting: the setting naming the index (``NEARDUP_SEARCH_INDEX`` for the search-index writer,
                which shares the connection settings).
            needed_by: what needs the settings, for the message when one is missing.

        Raises:
            NearDupSettingsError: a setting is missing or wrong (the message names it).
        """
        url = read_str(settings, "NEARDUP_ES_URL")
        if url is None:
            raise NearDupSettingsError(
                f"{needed_by} needs NEARDUP_ES_URL (e.g. 'http://127.0.0.1:9200'), got "
                f"{settings.get('NEARDUP_ES_URL')!r}"
            )
        # Several nodes of one cluster: comma-separated URLs; a request that fails on one node is retried on another.
        if not all(part.strip().lower().startswith(("http://", "https://")) for part in url.split(",")):
            raise settings_error("NEARDUP_ES_URL", safe_url(url),
                                 "an http:// or https:// URL, or several separated by commas")
        index = read_str(settings, index_setting)
        if index is None:
            raise NearDupSettingsError(
                f"{needed_by} needs {index_setting} (the index to write to), got "
                f"{settings.get(index_setting)!r}"
            )
        if index != index.lower():
            raise settings_error(index_setting, index, "a lowercase Elasticsearch index name")
        try:
            validate_index_name(index)
        except InvalidNameError as exc:
            raise NearDupSettingsError(f"{index_setting}={index!r} is not valid: {exc}") from None
        username = read_str(settings, "NEARDUP_ES_USERNAME")
        password = read_str(settings, "NEARDUP_ES_PASSWORD")
        if (username is None) != (password is None):
            missing = "NEARDUP_ES_PASSWORD" if password is None else "NEARDUP_ES_USERNAME"
            raise NearDupSettingsError(
                f"NEARDUP_ES_USERNAME and NEARDUP_ES_PASSWORD go together: {missing} is not set"
            )
        ca_certs = read_str(settings, "NEARDUP_ES_CA_CERTS")
        if ca_certs is not None and not Path(ca_certs).is_file():
            raise settings_error("NEARDUP_ES_CA_CERTS", ca_certs, "the path of an existing CA certificate file")
        timeout = setting_float(settings, "NEARDUP_ES_TIMEOUT")
        api_key = read_str(settings, "NEARDUP_ES_API_KEY")
        if api_key is not None and username is not None:
            raise NearDupSettingsError(
                "NEARDUP_ES_API_KEY and NEARDUP_ES_USERNAME/NEARDUP_ES_PASSWORD exclude each other: give one of them"
            )
        if ca_certs is not None and not all(part.strip().lower().startswith("https://") for part in url.split(",")):
            raise settings_error("NEARDUP_ES_CA_CERTS", ca_certs, "no CA certificate with an http:// NEARDUP_ES_URL")
        # What the client checks of the URL (one scheme and one user:password@ for all nodes, a valid port): here,
        # so that the message names the setting.
        try:
            ConnectionSettings.create(url, api_key=api_key, username=username, password=password)
        except EsError as exc:
            raise NearDupSettingsError(f"NEARDUP_ES_URL={safe_url(url)!r} is not valid: {exc}") from None
        return cls(
            url=url,
            index=index,
            api_key=api_key,
            username=username,
            password=password,
            ca_certs=ca_certs,
            request_timeout=timeout,
            # Pages decided together at most: the default, Scrapy's CONCURRENT_ITEMS, takes every page ready at
            # once. Shards: an existing index keeps its own count.
            batch_size=setting_int(settings, "NEARDUP_ES_BATCH_SIZE"),
            shards=setting_int(settings, "NEARDUP_ES_SHARDS"),
        )

