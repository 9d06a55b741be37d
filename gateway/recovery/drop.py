"""LiteLLM's ``drop_params`` for the ladder: which top-level request field an upstream's
400 refuses as unsupported, so the request may be resent without it. Pure."""

from __future__ import annotations

from collections.abc import Collection

from gateway.providers.failure import UpstreamFailure

__all__ = ["NEVER_DROPPED", "UNSUPPORTED_PARAM_CODES", "unsupported_param"]

# OpenAI's codes of a 400 naming one request parameter the model does not take.
UNSUPPORTED_PARAM_CODES = frozenset({"unsupported_parameter", "unsupported_value"})
# Fields that are the request itself: never dropped (a model refusing ``stream: true``
# must not answer a streaming client with one whole body).
NEVER_DROPPED = frozenset({"model", "messages", "input", "stream", "tools", "functions"})


def unsupported_param(failure: UpstreamFailure, fields: Collection[str]) -> str | None:
    """The top-level request field an OpenAI-style 400 refuses as unsupported (``code``
    ``unsupported_parameter`` / ``unsupported_value`` naming it in ``param``), when it is
    one of ``fields`` and may be left out; else None."""
    if failure.status != 400 or failure.code not in UNSUPPORTED_PARAM_CODES:
        return None
    param = failure.param
    if not param or param in NEVER_DROPPED or param not in fields:
        return None
    return param
