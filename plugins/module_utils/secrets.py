# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Masking of SGLang's secrets (API keys) in anything a module returns.

Private to the llmops.sglang collection.
"""
from __future__ import annotations

import json
from collections.abc import Iterable

MASK = "***"
# ServerArgs fields (and /server_info keys) that hold a secret.
SECRET_FIELDS = frozenset(("api_key", "admin_api_key"))
_ALREADY_MASKED = (None, "", MASK, "<redacted>")
# Masking replaces every occurrence of the key in text: a key of a few characters would turn ordinary words of the
# log into ``***`` (and is guessable anyway).
MIN_API_KEY_LENGTH = 8


def api_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a server's API key (None when it can): too short to mask, a control character (a line
    break would end the key file's line), or whitespace around it (the launcher strips the line it reads, so the
    server would expect another key than the one the benchmark sends: every request answered 401)."""
    if len(key) < MIN_API_KEY_LENGTH:
        return (f"must be at least {MIN_API_KEY_LENGTH} characters (a shorter key is guessable, and masking it in "
                f"logs would replace ordinary text), got {len(key)}")
    if any(ord(char) < 32 or ord(char) == 127 for char in key):
        return "holds a control character (a line break, tab or NUL); remove it (a YAML block scalar adds a newline: use |-)"
    if key != key.strip():
        return "has whitespace at its start or end, which the server's launcher strips; remove it"
    return None


def secret_forms(secret: str) -> list[str]:
    """A secret as it can appear inside text: verbatim, inside a repr and inside JSON; longest first."""
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    return sorted((f for f in forms if f), key=len, reverse=True)


def mask_secrets(value, secrets: Iterable[str | None] = ()):
    """``value`` (JSON-like) with every secret field set to ``***`` and every known secret replaced in text.

    ``secrets`` are keys known to the caller (a module parameter, the service's key file); values found
    under a secret field anywhere in ``value`` are added to them, so a key that /server_info returned is
    also masked where the log repeats it."""
    known = {s for s in secrets if isinstance(s, str) and s and s not in _ALREADY_MASKED}
    _collect(value, known)
    forms = sorted({form for secret in known for form in secret_forms(secret)}, key=len, reverse=True)
    return _mask(value, forms)


def _collect(value, found: set) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in SECRET_FIELDS and isinstance(item, str) and item not in _ALREADY_MASKED:
                found.add(item)
            _collect(item, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, found)


def _mask(value, forms: list[str]):
    if isinstance(value, dict):
        return {_mask(key, forms) if isinstance(key, str) else key:
                (MASK if key in SECRET_FIELDS and item not in (None, "") else _mask(item, forms))
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask(item, forms) for item in value]
    if isinstance(value, str):
        for form in forms:
            value = value.replace(form, MASK)
    return value
