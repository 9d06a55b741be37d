"""LiteLLM's ``drop_params`` for the ladder: which top-level request field an upstream's
400 refuses as unsupported, so the request may be resent without it. Pure."""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

from gateway.providers.failure import UpstreamFailure

__all__ = ["NEVER_DROPPED", "UNSUPPORTED_PARAM_CODES", "unsupported_param"]

# OpenAI's codes of a 400 naming one request parameter the model does not take.
UNSUPPORTED_PARAM_CODES = frozenset({"unsupported_parameter", "unsupported_value"})
# Fields that are the request itself: never dropped (a model refusing ``stream: true``
# must not answer a streaming client with one whole body).
NEVER_DROPPED = frozenset({"model", "messages", "input", "stream", "tools", "functions"})
_MAX_BODY = 20_000  # a pydantic refusal naming extra fields is small
_MAX_DEPTH = 6


def unsupported_param(failure: UpstreamFailure, fields: Collection[str]) -> str | None:
    """The top-level request field an OpenAI-style 400 refuses as unsupported (``code``
    ``unsupported_parameter`` / ``unsupported_value`` naming it in ``param``), or a
    pydantic server's 422 as an extra input (Mistral: ``{"type": "extra_forbidden", "loc":
    ["body", "max_completion_tokens"]}``), when it is one of ``fields`` and may be left out;
    else None."""
    candidates: list[str | None]
    if failure.status == 400 and failure.code in UNSUPPORTED_PARAM_CODES:
        candidates = [failure.param]
    elif failure.status in (400, 422):
        candidates = [*_extra_fields(failure.body), *_litellm_unsupported(failure)]
    else:
        return None
    for param in candidates:
        if param and param not in NEVER_DROPPED and param in fields:
            return param
    return None


# litellm's UnsupportedParamsError (raised before sending, a 400): "anthropic does not
# support parameters: ['verbosity', 'safety_identifier'], for model=...".
# Or of one value: "claude-sonnet-4-5 does not support service_tier='flex'".
_LITELLM_UNSUPPORTED = re.compile(r"does not support parameters?:?\s*\[([^\]]{1,2000})\]")
_LITELLM_UNSUPPORTED_VALUE = re.compile(r"does not support ([A-Za-z_]\w{0,80})\s*=")
_QUOTED = re.compile(r"""['"]([A-Za-z_][\w.-]{0,80})['"]""")


def _litellm_unsupported(failure: UpstreamFailure) -> list[str]:
    """The fields litellm's refusal of unsupported parameters names, in its order."""
    text = failure.message or failure.body[:_MAX_BODY].decode("utf-8", "replace")
    found = _LITELLM_UNSUPPORTED.search(text)
    if found is not None:
        return _QUOTED.findall(found.group(1))
    return _LITELLM_UNSUPPORTED_VALUE.findall(text)[:1]


def _extra_fields(body: bytes) -> list[str]:
    """The top-level fields a pydantic ``detail`` list in ``body`` refuses as extra inputs
    (errors at a nested path, a message's own field, are not the request's to drop)."""
    if not body or len(body) > _MAX_BODY or b"extra_forbidden" not in body:
        return []
    try:
        value = json.loads(body)
    except ValueError:
        return []
    found: list[str] = []
    _walk(value, found, 0)
    return found


def _walk(value: Any, found: list[str], depth: int) -> None:
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, dict):
        loc = value.get("loc")
        if (value.get("type") == "extra_forbidden" and isinstance(loc, list) and len(loc) == 2
                and loc[0] == "body" and isinstance(loc[1], str)):
            found.append(loc[1])
        for item in value.values():
            _walk(item, found, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _walk(item, found, depth + 1)
