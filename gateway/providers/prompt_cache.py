"""Prompt-cache helpers (SPEC §6). Pure functions: no I/O, bodies are never mutated.

The session id is the cache key. OpenAI-style upstreams receive it as ``prompt_cache_key``;
Anthropic-style upstreams get ``cache_control`` breakpoints at the end of the stable prefix
(tools table and system prompt), written in the OpenAI-wire form litellm translates.
Nothing in the stable prefix is reordered or rewritten: a breakpoint only adds a field.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

import orjson
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.redact import redact

WireStyle = Literal["openai", "anthropic", "gemini", "other"]

SESSION_HEADER = "x-session-id"
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}

# litellm providers whose Chat Completions mapping accepts ``prompt_cache_key`` (checked
# against litellm.get_supported_openai_params; sending it elsewhere is refused by litellm).
_OPENAI_STYLE_PROVIDERS = frozenset(
    {
        "openai",
        "custom_openai",
        "openai_like",
        "azure",
        "azure_ai",
        "mistral",
        "fireworks_ai",
        "openrouter",
        "deepseek",
        "groq",
        "together_ai",
        "hosted_vllm",
        "lm_studio",
        "github_copilot",
        "moonshot",
        "dashscope",
    }
)
_GEMINI_PROVIDERS = frozenset({"gemini", "vertex_ai", "vertex_ai_beta"})
_SYSTEM_ROLES = frozenset({"system", "developer"})
_FINGERPRINT_CHARS = 16


def _nonempty_str(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value
    return None


def session_id_from(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The session id: the ``x-session-id`` header, else the body's ``prompt_cache_key``.

    Header lookup is case-insensitive even for a plain dict. Empty values count as absent.
    """
    value = headers.get(SESSION_HEADER)
    if value is None and not isinstance(headers, CIMultiDictProxy | CIMultiDict):
        # (a multidict's lookup is case-insensitive already)
        for key, candidate in headers.items():
            if key.lower() == SESSION_HEADER:
                value = candidate
                break
    found = _nonempty_str(value)
    if found is not None:
        return found
    return _nonempty_str(body.get("prompt_cache_key"))


def apply_openai_cache_key(body: dict[str, Any], session_id: str | None) -> dict[str, Any]:
    """Add ``prompt_cache_key = session_id`` unless the client set one (or there is no id).

    Returns a new dict when a key is added, else ``body`` itself (never mutated). An id
    that quotes a key (a client that pasted one into ``x-session-id``) is not sent: no
    client key goes upstream.
    """
    if (session_id is None or body.get("prompt_cache_key") is not None
            or redact(session_id) != session_id):
        return body
    return {**body, "prompt_cache_key": session_id}


def _has_cache_control(value: Any) -> bool:
    if isinstance(value, dict):
        return "cache_control" in value or any(_has_cache_control(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_cache_control(v) for v in value)
    return False


def carries_cache_control(body: Mapping[str, Any]) -> bool:
    """True when the client placed any ``cache_control`` (top level, messages or tools)."""
    return (
        "cache_control" in body
        or _has_cache_control(body.get("messages"))
        or _has_cache_control(body.get("tools"))
    )


def _mark_last_tool(tools: Any) -> Any:
    if not isinstance(tools, list) or not tools or not isinstance(tools[-1], dict):
        return tools
    return [*tools[:-1], {**tools[-1], "cache_control": EPHEMERAL}]


def _marked_system(message: dict[str, Any]) -> dict[str, Any] | None:
    """The system message with a breakpoint on its last part; None if it has no text."""
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return None
        part = {"type": "text", "text": content, "cache_control": EPHEMERAL}
        return {**message, "content": [part]}
    if isinstance(content, list) and content:
        last = content[-1]
        if not isinstance(last, dict) or last.get("type", "text") != "text" or not last.get("text"):
            return None
        return {**message, "content": [*content[:-1], {**last, "cache_control": EPHEMERAL}]}
    return None


def apply_anthropic_breakpoint(body: dict[str, Any]) -> dict[str, Any]:
    """Mark the end of the stable prefix as an Anthropic cache breakpoint.

    When the request carries no ``cache_control`` anywhere, adds
    ``cache_control: {"type": "ephemeral"}`` to the last tool in ``tools`` and to the last
    content part of the last system (or developer, which litellm maps to system) message
    (a string content becomes one text part). A
    system message whose last part is empty or not text is left alone (Anthropic rejects a
    breakpoint on an empty block). Returns a new dict when anything changed, else ``body``;
    untouched messages and tools are shared, nothing is reordered.
    """
    if carries_cache_control(body):
        return body
    result = dict(body)
    changed = False
    tools = body.get("tools")
    marked_tools = _mark_last_tool(tools)
    if marked_tools is not tools:
        result["tools"] = marked_tools
        changed = True
    messages = body.get("messages")
    if isinstance(messages, list):
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, dict) and message.get("role") in _SYSTEM_ROLES:
                marked = _marked_system(message)
                if marked is not None:
                    result["messages"] = [*messages[:index], marked, *messages[index + 1 :]]
                    changed = True
                break
    return result if changed else body


def _short_hash(value: Any) -> str:
    canonical = orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)
    return hashlib.sha256(canonical).hexdigest()[:_FINGERPRINT_CHARS]


def system_contents(messages: list[Any]) -> list[Any]:
    """The contents of the system and developer messages, in order."""
    return [m.get("content") for m in messages
            if isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES]


def prefix_fingerprints(body: Mapping[str, Any], systems: list[Any] | None = None
                        ) -> tuple[str, str]:
    """``(system_hash, tools_hash)``: short sha256 hex of the system prompt(s) and tools.

    System prompts are the contents of every system/developer message, in order (``systems``
    when the caller collected them already); both values are hashed as canonical JSON
    (sorted keys), so an absent table hashes stably. For logs and span attributes only,
    never as a cache key.
    """
    if systems is None:
        messages = body.get("messages")
        systems = system_contents(messages) if isinstance(messages, list) else []
    return _short_hash(systems), _short_hash(body.get("tools") or [])


def wire_style(litellm_model: str) -> WireStyle:
    """How the upstream of a litellm model string takes its prompt-cache hint.

    "openai": ``prompt_cache_key`` (OpenAI-compatible providers, and bare model names
    other than claude*/gemini*); "anthropic": ``cache_control`` breakpoints (anthropic/,
    and Claude models on any other non-OpenAI-style provider, e.g. bedrock/, vertex_ai/);
    "gemini": Gemini models (implicit caching, no hint); "other": everything else.
    """
    provider, _, name = litellm_model.partition("/")
    if not name:
        provider, name = "", litellm_model
    provider = provider.lower()
    lowered = name.lower()
    if provider in _OPENAI_STYLE_PROVIDERS:
        return "openai"
    if provider == "anthropic" or "claude" in lowered:
        return "anthropic"
    if provider in _GEMINI_PROVIDERS or (not provider and lowered.startswith("gemini")):
        return "gemini"
    if not provider:
        return "openai"
    return "other"
