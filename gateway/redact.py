"""One redaction function for every exit: configured secrets never leave the gateway.

Upstream keys (and client keys) are registered once at start-up; :func:`redact` replaces each
of them in any text before it reaches a client body, an SSE error event, a span or a log
line. Pure: no I/O. Short values (under 8 characters) are not registered, since replacing
them would mangle ordinary text.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

MASK = "***"
MIN_SECRET_CHARS = 8

# A credential header quoted in a text (an HTTP parse error names the header line it could
# not read): its value, even when it is no configured secret (a wrong key, a provider's key
# sent by mistake). A "<key>" placeholder or a short word is left alone.
CREDENTIAL_HEADERS = ("proxy-authorization", "authorization", "x-litellm-api-key",
                      "x-api-key", "api-key", "x-goog-api-key")


def _credential_pattern(names: Iterable[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    return re.compile(
        r"(" + alternatives + r")(\s*:\s*)"
        r"(?:(bearer|basic)\s+|(?!bearer\b|basic\b))(?!<)([^\s'\"]{" + str(MIN_SECRET_CHARS)
        + r",})", re.I)


_credential_headers: frozenset[str] = frozenset(CREDENTIAL_HEADERS)
_QUOTED_CREDENTIAL = _credential_pattern(_credential_headers)

_secrets: tuple[str, ...] = ()
_secrets_bytes: tuple[bytes, ...] = ()


def register_secrets(values: Iterable[str | None]) -> None:
    """Add secrets to redact (longest first, so a key containing another is masked whole)."""
    global _secrets, _secrets_bytes
    found = set(_secrets)
    for value in values:
        if value and len(value) >= MIN_SECRET_CHARS:
            found.add(value)
            found.update(_json_forms(value))
    _secrets = tuple(sorted(found, key=len, reverse=True))
    _secrets_bytes = tuple(s.encode() for s in _secrets)


# Characters JSON encoders escape besides quotes, backslashes and controls: '/' (PHP's
# json_encode, Java's) and the HTML-sensitive ones (.NET's System.Text.Json writes '+' of a
# base64 key as \u002B, Go's encoding/json '<', '>' and '&' as \u003c...).
_OPTIONAL_ESCAPES = "/+<>&'`"


_PERCENT = re.compile(r"%[0-9A-F]{2}")
# A key shorter than this has too few characters of its own in base64 to mask safely (an
# ordinary word's base64 could match).
_MIN_BASE64_BYTES = 16


def _json_forms(value: str) -> set[str]:
    """``value`` as it appears inside a JSON string written by common encoders, or in a URL
    (percent-encoded: an upstream echoing a request URL that carried it), when that differs
    from the value: a relayed upstream body quoting the key, decoded by the client."""
    plain = json.dumps(value, ensure_ascii=False)[1:-1]
    forms = {plain, json.dumps(value)[1:-1]}
    for encoded in (quote(value, safe=""), quote(value, safe="/"), quote_plus(value)):
        forms.update((encoded, _PERCENT.sub(lambda m: m.group(0).lower(), encoded)))
    if any(c in value for c in _OPTIONAL_ESCAPES):
        forms.add(plain.replace("/", "\\/"))
        for hexes in ("\\u{:04x}", "\\u{:04X}"):
            forms.add("".join(hexes.format(ord(c)) if c in _OPTIONAL_ESCAPES else c
                              for c in plain))
            forms.add("".join(hexes.format(ord(c)) if c in _OPTIONAL_ESCAPES[1:] else c
                              for c in plain))
    forms.update(_base64_forms(value))
    forms.discard(value)
    return forms


def _base64_forms(value: str) -> set[str]:
    """``value`` as it reads inside base64 (standard and URL-safe), at each of the three
    alignments it can have in a longer encoded text (a Basic credential, an encoded JSON
    echoing the request): the characters only its own bytes decide, without the edges
    that mix in a neighbour's (a few characters, which tell nothing of the key)."""
    raw = value.encode()
    if len(raw) < _MIN_BASE64_BYTES:
        return set()
    forms: set[str] = set()
    for lead in range(3):
        encoded = base64.b64encode(b"\0" * lead + raw).decode().rstrip("=")
        inner = encoded[(0, 2, 3)[lead]:]
        if (lead + len(raw)) % 3:
            inner = inner[:-1]  # the last character mixes in what follows
        forms.update((inner, inner.replace("+", "-").replace("/", "_")))
    return forms


def register_credential_headers(names: Iterable[str | None]) -> None:
    """Add header names whose quoted values are masked like ``Authorization``'s (a
    ``general_settings.litellm_key_header_name``)."""
    global _QUOTED_CREDENTIAL, _credential_headers
    _credential_headers = _credential_headers | {n.lower() for n in names if n}
    _QUOTED_CREDENTIAL = _credential_pattern(_credential_headers)


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    return mask(text, _secrets)


def mask_credential_headers(text: str) -> str:
    """``text`` with the value of every quoted credential header replaced by ``***``."""
    if ":" not in text:
        return text
    return _QUOTED_CREDENTIAL.sub(
        lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) + ' ' if m.group(3) else ''}{MASK}",
        text)


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` replaced by ``***`` (give the longest first)."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_bytes(data: bytes) -> bytes:
    """``data`` with every registered secret (UTF-8) replaced by ``***``."""
    for secret in _secrets_bytes:
        if secret in data:
            data = data.replace(secret, MASK.encode())
    return data


def install_log_redaction() -> None:
    """Redact the formatted message of every log record (once per process)."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "gateway_redacts", False):
        return

    def make_record(*args: object, **kwargs: object) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler
            return record
        clean = mask_credential_headers(redact(message) if _secrets else message)
        if clean != message:
            record.msg, record.args = clean, None
        return record

    make_record.gateway_redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make_record)
