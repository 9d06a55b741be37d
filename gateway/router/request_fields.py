"""LiteLLM-only request fields: consumed by the gateway, never forwarded to a provider.

LiteLLM's proxy reads these from a Chat Completions body (per-request fallbacks and retries,
its cache controls, mock answers, tags, its own metadata). A provider would refuse most of
them or, worse, act on them; the gateway takes the ones it honours (``fallbacks``,
``num_retries``, ``timeout``) and drops the rest. OpenAI's own fields (``metadata``,
``user``, ``store``, ...) are not touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import ClientError

# Read and honoured.
_HONOURED = ("fallbacks", "num_retries", "timeout", "request_timeout", "disable_fallbacks",
             "tags")
# Dropped: LiteLLM proxy and SDK controls with no meaning for a provider. Credentials and
# endpoints chosen by a client are dropped too: the gateway's config decides where a
# request goes.
DROPPED_FIELDS = frozenset({
    "context_window_fallbacks", "content_policy_fallbacks", "max_retries", "stream_timeout",
    "caching", "cache", "no-cache", "ttl", "mock_response", "mock_tool_calls",
    "mock_testing_fallbacks", "mock_testing_rate_limit_error", "mock_testing_content_policy_error",
    "mock_testing_context_window_error", "mock_timeout", "litellm_metadata",
    "litellm_session_id", "litellm_trace_id", "litellm_call_id", "proxy_server_request",
    "guardrails", "drop_params", "additional_drop_params", "api_base", "base_url", "api_key",
    "api_version", "custom_llm_provider", "input_cost_per_token", "output_cost_per_token",
    "model_list", "litellm_logging_obj", "use_in_pass_through", "use_litellm_proxy",
    "cache_key", "enable_preview_features", "litellm_disabled_callbacks", "user_api_key",
})
MAX_REQUEST_RETRIES = 10
TAGS_HEADER = "x-litellm-tags"  # LiteLLM's request tags as a header (comma-separated)


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What a request asked of the router."""

    fallbacks: tuple[str, ...] | None = None  # replaces the group's general chain
    num_retries: int | None = None
    timeout: float | None = None  # seconds for the whole request (the ladder's deadline)
    dropped: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()  # tag-based routing (``tags``, ``metadata.tags``, the header)
    edited: bool = False  # fields were taken out of the body (its bytes must be rebuilt)


NO_OPTIONS = RequestOptions()


def take_litellm_fields(body: dict[str, Any], header_tags: str = "") -> RequestOptions:
    """Remove LiteLLM-only fields from ``body``; return the ones the gateway honours.
    ``header_tags``: LiteLLM's ``x-litellm-tags`` header (comma-separated). Raises
    ClientError (400) naming a field of the wrong shape."""
    metadata = body.get("metadata")
    listed = metadata.get("tags") if metadata.__class__ is dict else None
    if (not header_tags and listed.__class__ is not list and not any(
            key in body for key in _HONOURED) and body.keys().isdisjoint(DROPPED_FIELDS)):
        return NO_OPTIONS
    size = len(body)
    tags = [t.strip() for t in header_tags.split(",") if t.strip()]
    edited = isinstance(listed, list)
    if isinstance(listed, list) and isinstance(metadata, dict):
        # LiteLLM's routing tags in its metadata: a list no provider's metadata takes (their
        # values are strings). Taken out of a copy: the client's objects stay as sent.
        tags += _tag_list(listed, "metadata.tags")
        rest = {k: v for k, v in metadata.items() if k != "tags"}
        if rest:
            body["metadata"] = rest
        else:
            del body["metadata"]
    if "tags" in body:
        tags += _tag_list(body.pop("tags"), "tags")
    dropped = tuple(sorted(k for k in body if k in DROPPED_FIELDS))
    for key in dropped:
        del body[key]
    fallbacks = body.pop("fallbacks", None)
    if body.pop("disable_fallbacks", None) is True:
        fallbacks = []
    if fallbacks is not None and (not isinstance(fallbacks, list) or not all(
            isinstance(name, str) and name for name in fallbacks)):
        raise ClientError(400, "'fallbacks' must be a list of model names", param="fallbacks")
    retries = body.pop("num_retries", None)
    if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int)
                                or not 0 <= retries <= MAX_REQUEST_RETRIES):
        raise ClientError(400, f"'num_retries' must be an integer from 0 to "
                          f"{MAX_REQUEST_RETRIES}", param="num_retries")
    timeout = body.pop("timeout", None)
    request_timeout = body.pop("request_timeout", None)
    timeout = timeout if timeout is not None else request_timeout
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not timeout > 0):
        raise ClientError(400, "'timeout' must be a number of seconds > 0", param="timeout")
    return RequestOptions(
        fallbacks=tuple(fallbacks) if fallbacks is not None else None,
        num_retries=retries,
        timeout=float(timeout) if timeout is not None else None,
        dropped=dropped,
        tags=tuple(dict.fromkeys(tags)),
        edited=edited or len(body) != size,
    )


def _tag_list(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ClientError(400, f"'{name}' must be a list of strings", param=name)
    return [t for t in value if t]
