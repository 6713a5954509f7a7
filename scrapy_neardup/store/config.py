"""Typed readers for ``NEARDUP_*`` settings, shared by the Scrapy layer and every backend; each setting's type,
default and bounds are those of :mod:`scrapy_neardup.store.settings_registry` (the reference page: docs/settings.md).

A setting may come from ``settings.py`` (a Python value) or from the command line (``-s NAME=value``, always a
string), so numbers and booleans are accepted in both forms. ``settings`` is any mapping with ``.get``
(Scrapy's ``Settings`` qualifies; so does a plain ``dict``), which keeps this module free of Scrapy. A wrong
value raises :class:`NearDupSettingsError`, whose message names the setting and the value as written.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ..core.atomic_files import write_atomically
from ..core.params import FIELDS, SketchParams
from ..errors import NearDupSettingsError, ParameterError, StateError
from .settings_registry import KNOWN_SETTINGS, SETTING


class SettingsLike(Protocol):
    """What the readers need of a settings object: ``get(name)``, ``None`` when unset."""

    def get(self, name: str, default: Any = None) -> Any: ...


#: The setting behind each sketch parameter (see :class:`~scrapy_neardup.core.params.SketchParams`).
PARAM_SETTINGS: Mapping[str, str] = {name: f"NEARDUP_{name.upper()}" for name in FIELDS}

_PREFIX = len("NEARDUP_")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def settings_error(name: str, value: Any, expected: str) -> NearDupSettingsError:
    """``NAME=value is not valid: expected ...``."""
    return NearDupSettingsError(f"{name}={value!r} is not valid: expected {expected}")


def read_bool(settings: SettingsLike, name: str, default: bool) -> bool:
    value = settings.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
    raise settings_error(name, value, "a boolean (True/False, 1/0, 'true'/'false', 'yes'/'no', 'on'/'off')")


def read_int(settings: SettingsLike, name: str, expected: str = "an integer") -> int | None:
    """An integer from an ``int`` or a string of one; ``None`` when unset or empty. Ranges are the caller's."""
    value = settings.get(name)
    if value is None or value == "":
        return None
    # bool is an int subclass: True must not silently mean 1.
    if isinstance(value, bool):
        raise settings_error(name, value, expected)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise settings_error(name, value, expected) from None
    raise settings_error(name, value, expected)


def read_float(settings: SettingsLike, name: str) -> float | None:
    """A finite number; ``None`` when unset or empty."""
    value = settings.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise settings_error(name, value, "a number")
    try:
        number = float(value)
    except ValueError:
        raise settings_error(name, value, "a number") from None
    if not math.isfinite(number):
        raise settings_error(name, value, "a finite number")
    return number


def read_choice(settings: SettingsLike, name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``, case-insensitive."""
    value = settings.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    raise settings_error(name, value, "one of " + ", ".join(repr(c) for c in choices))


def read_str(settings: SettingsLike, name: str) -> str | None:
    """A string (or path); empty strings, as unset environment variables give, count as unset."""
    value = settings.get(name)
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise settings_error(name, value, "a string")
    return value.strip() or None


def read_field_name(settings: SettingsLike, name: str, default: str) -> str:
    """A non-empty item field name."""
    value = settings.get(name)
    if value is None:
        return default
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise settings_error(name, value, "a non-empty item field name")


def read_setting(settings: SettingsLike, name: str) -> Any:
    """The value of the registered setting ``name`` (:data:`~scrapy_neardup.store.settings_registry.SETTINGS`):
    read as its kind, checked against its bounds, its default when unset.

    Raises:
        NearDupSettingsError: ``NAME=value is not valid: expected ...`` (the bounds, as the registry has them).
        KeyError: ``name`` is not registered.
    """
    spec = SETTING[name]
    if spec.kind == "bool":
        return read_bool(settings, name, spec.default)
    if spec.kind == "choice":
        return read_choice(settings, name, spec.default, spec.choices)
    if spec.kind == "field":
        return read_field_name(settings, name, spec.default)
    if spec.kind in ("str", "path"):
        text = read_str(settings, name)
        return spec.default if text is None else text
    number: float | None = read_int(settings, name, spec.expected) if spec.kind == "int" else read_float(settings, name)
    if number is None:
        return spec.default
    if not spec.allows(number):
        raise settings_error(name, settings.get(name), spec.expected)
    return number


def setting_int(settings: SettingsLike, name: str) -> int:
    """:func:`read_setting` of an integer setting whose default is a number."""
    value = read_setting(settings, name)
    assert isinstance(value, int), name  # the registry gives every caller of this a default
    return value


def setting_float(settings: SettingsLike, name: str, default: float | None = None) -> float:
    """:func:`read_setting` of a number setting; ``default`` when unset, for one computed from other settings
    (the registry's default ``None``)."""
    value = read_setting(settings, name)
    if value is None:
        value = default
    assert isinstance(value, int | float), name
    return float(value)


def setting_bool(settings: SettingsLike, name: str) -> bool:
    """:func:`read_setting` of a boolean setting."""
    return bool(read_setting(settings, name))


def setting_str(settings: SettingsLike, name: str) -> str | None:
    """:func:`read_setting` of a string, path or choice setting (``None``: unset, without a default)."""
    value = read_setting(settings, name)
    return None if value is None else str(value)


def read_sketch_params(settings: SettingsLike) -> SketchParams:
    """``NEARDUP_NUM_PERM``, ``NEARDUP_THRESHOLD`` / ``NEARDUP_MIN_SHARED``, ``NEARDUP_SHINGLE``,
    ``NEARDUP_SHINGLE_SIZE``, ``NEARDUP_SEED`` and ``NEARDUP_CONTENT``, checked by :meth:`SketchParams.create`
    (one rule for every entry point); an error names the setting and the value as written."""
    names = PARAM_SETTINGS
    values: dict[str, Any] = {
        "num_perm": read_int(settings, names["num_perm"]),
        "threshold": read_float(settings, names["threshold"]),
        "min_shared": read_int(settings, names["min_shared"]),
        "shingle": read_setting(settings, names["shingle"]),
        "shingle_size": read_int(settings, names["shingle_size"]),
        "seed": read_int(settings, names["seed"]),
        "content": read_setting(settings, names["content"]),
    }
    given = {name: value for name, value in values.items() if value is not None}
    try:
        return SketchParams.create(**given)
    except ParameterError as exc:
        raise NearDupSettingsError(exc.render(names, value=settings.get(names[exc.field]))) from None


def unknown_settings(names: Iterable[str]) -> list[tuple[str, str | None]]:
    """``(name, closest known name or None)`` for each of ``names`` that looks like one of ours (``NEARDUP_``,
    in any case) but is not in :data:`KNOWN_SETTINGS`; a typo would otherwise be ignored silently."""
    found = []
    for name in sorted(set(names)):
        if not isinstance(name, str) or not name.upper().startswith("NEARDUP_") or name in KNOWN_SETTINGS:
            continue
        # Compared without the prefix they all share, which would make any two names look alike.
        close = difflib.get_close_matches(name.upper()[_PREFIX:], [k[_PREFIX:] for k in sorted(KNOWN_SETTINGS)], n=1)
        found.append((name, "NEARDUP_" + close[0] if close else None))
    return found


#: File under JOBDIR holding the identity of the crawl (see :func:`crawl_identity`).
CRAWL_ID_FILE = "neardup-crawl-id"
_CRAWL_ID = re.compile(r"[A-Za-z0-9._:@/+-]{1,200}")


def crawl_identity(settings: SettingsLike) -> str:
    """The identity of this crawl, which tells a page met twice in one crawl (a *repeat*, never emitted twice)
    from a page met again by a later crawl (a *revisit*, emitted again): ``NEARDUP_CRAWL_ID`` when set (crawler
    processes that make up one crawl share it); else, with ``JOBDIR``, a random identity saved in
    ``<JOBDIR>/neardup-crawl-id`` the first time, so that a crawl paused or killed and resumed with the same
    ``JOBDIR`` stays one crawl; else a random identity for this process.

    Raises:
        NearDupSettingsError: ``NEARDUP_CRAWL_ID`` is not 1-200 letters, digits or ``._:@/+-``.
        StateError: the identity file cannot be read or written.
    """
    given = read_str(settings, "NEARDUP_CRAWL_ID")
    if given is not None:
        if not _CRAWL_ID.fullmatch(given):
            raise settings_error("NEARDUP_CRAWL_ID", settings.get("NEARDUP_CRAWL_ID"),
                                 "1-200 letters, digits or ._:@/+-")
        return given
    jobdir = read_str(settings, "JOBDIR")
    if jobdir is None:
        return uuid.uuid4().hex
    path = Path(jobdir) / CRAWL_ID_FILE
    try:
        saved = path.read_text(encoding="ascii").strip() if path.exists() else ""
        if _CRAWL_ID.fullmatch(saved):
            return saved
        identity = uuid.uuid4().hex
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, (identity + "\n").encode("ascii"))
    except (OSError, UnicodeDecodeError) as exc:
        raise StateError(f"cannot read or write the crawl identity {path}: {exc}") from exc
    return identity


def job_state_dir(settings: SettingsLike, subdir: str) -> str | None:
    """``<JOBDIR>/<subdir>`` when ``JOBDIR`` is set (creating ``JOBDIR`` as Scrapy's own components do)."""
    jobdir = read_str(settings, "JOBDIR")
    if jobdir is None:
        return None
    Path(jobdir).mkdir(parents=True, exist_ok=True)
    return str(Path(jobdir) / subdir)


