"""Body capture for the inspector (``gateway.capture_bodies``, off by default).

Captured messages are copies with secrets redacted (the configured client and upstream keys,
and anything shaped like a provider key or bearer token) and every string cut to a limit, so
a captured request can be shown in a browser without leaking keys or megabytes of base64.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gateway.redact import MASK, mask

_KEY_SHAPES = re.compile(
    r"(sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{30,}"
    r"|(?i:bearer)\s+[A-Za-z0-9._\-]{16,}|gh[pousr]_[A-Za-z0-9]{30,})"
)


class Capturer:
    """Copies messages for display: keys redacted, strings truncated."""

    def __init__(self, secrets: Iterable[str], max_chars: int) -> None:
        self._secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)
        self.max_chars = max_chars

    def messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A redacted, truncated deep copy of a message list."""
        out: list[dict[str, Any]] = [self._value(m) for m in messages]
        return out

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, dict):
            return {k: self._value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._value(v) for v in value]
        return value

    def _text(self, text: str) -> str:
        # Configured keys, then anything shaped like a provider key a user pasted.
        text = _KEY_SHAPES.sub(MASK, mask(text, self._secrets))
        if len(text) > self.max_chars:
            cut = len(text) - self.max_chars
            text = f"{text[: self.max_chars]}… [{cut} more characters]"
        return text
