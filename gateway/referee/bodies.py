"""The providers' real error bodies, as templates filled per request.

Every message text below was copied from a recorded provider answer (the record number in
the project's ``provider-errors.jsonl`` is given as ``#N``); the few marked "not recorded"
are the providers' well-known texts for cases the records do not cover.

Envelopes, as the providers send them on the wire:

- OpenAI: ``{"error": {"message", "type", "param", "code"}}`` pretty-printed with two
  spaces (records #67, #115), no trailing newline.
- Anthropic: compact ``{"type":"error","error":{"type","message"},"request_id"}``
  (records #26, #52, #86); ``request_id`` is left out when None (records #28, #104).

A problem a provider family never reports in its own words (OpenAI accepts consecutive user
messages, say) is answered the way an OpenAI-compatible proxy in front of a strict provider
answers it: the strict provider's message in the requested style's envelope.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Style = Literal["openai", "anthropic"]
STYLES: tuple[Style, ...] = ("openai", "anthropic")

INVALID_REQUEST = "invalid_request_error"


@dataclass(frozen=True, slots=True)
class Reply:
    """A complete canned HTTP answer: status, body bytes and extra headers."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/json"


@dataclass(frozen=True, slots=True)
class Template:
    """One problem's texts. ``openai``/``anthropic`` are str.format templates or None."""

    openai: str | None
    anthropic: str | None
    param: str | None = None
    code: str | None = None
    status: int = 400
    openai_type: str = INVALID_REQUEST
    anthropic_type: str = INVALID_REQUEST


_ANTHROPIC_EMPTY_MESSAGE = (
    "messages.{ai}: all messages must have non-empty content except for the optional final "
    "assistant message"  # #28, #30
)

TEMPLATES: dict[str, Template] = {
    # situation a
    "tool_result_without_call": Template(
        openai=(
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
            "message with 'tool_calls'."  # #1, #3, #6 (sic "preceeding")
        ),
        param="messages.[{i}].role",
        anthropic=(
            "messages.{ai}.content.{ci}: unexpected `tool_use_id` found in `tool_result` "
            "blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` "
            "block in the previous message."  # #5
        ),
    ),
    # situations b and c
    "tool_call_without_result": Template(
        openai=(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            "response messages: {ids}"  # #12
        ),
        param="{param}",
        anthropic=(
            "messages.{ai}: `tool_use` ids were found without `tool_result` blocks "
            "immediately after: {ids}. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message."  # #15, #21
        ),
    ),
    # situation g
    "duplicate_tool_call_id": Template(
        openai=None,
        anthropic="messages.{ai}.content.{ci}: `tool_use` ids must be unique",  # #52
    ),
    "duplicate_tool_result": Template(
        # #53 (azure-openai); its full-width brackets were typed into an issue title.
        openai=(
            "Invalid parameter: Duplicate value for 'tool_call_id' of '{id}, in "
            "messages[{first}] and messages[{i}]"
        ),
        # not recorded: quoted by several clients that handle it.
        anthropic=(
            "messages.{ai}.content.{ci}: each tool_use must have a single result. Found "
            "multiple `tool_result` blocks with id: {id}"
        ),
    ),
    # situation d
    "empty_text": Template(None, "messages: text content blocks must be non-empty"),  # #26
    "whitespace_text": Template(
        None, "messages: text content blocks must contain non-whitespace text"  # #35
    ),
    "empty_message": Template(None, _ANTHROPIC_EMPTY_MESSAGE),
    "null_content": Template(
        openai="Invalid value for 'content': expected a string, got null.",  # #32
        param="messages.[{i}].content",
        anthropic=_ANTHROPIC_EMPTY_MESSAGE,
    ),
    "empty_array": Template(  # not recorded
        openai=(
            "Invalid '{path}': empty array. Expected an array with minimum length 1, but got "
            "an empty array instead."
        ),
        param="{path}",
        code="empty_array",
        anthropic=None,
    ),
    # situation e
    "consecutive_roles": Template(
        None,
        'messages: roles must alternate between "user" and "assistant", but found multiple '
        '"{role}" roles in a row',  # #41, #43
    ),
    # situation f (#49, bedrock-converse serving Anthropic models)
    "first_not_user": Template(
        None,
        "A conversation must start with a user message. Try again with a conversation that "
        "starts with a user message.",
    ),
    # situation h
    "image_media_type": Template(
        openai=(
            "You uploaded an unsupported image. Please make sure your image has of one the "
            "following formats: {formats}."  # #72
        ),
        code="invalid_image_format",
        anthropic=(
            "messages.{ai}.content.{ci}.image.source.base64.media_type: Input should be "
            "{media_types}"  # #77
        ),
    ),
    "image_invalid": Template(
        openai="Invalid image.",  # #67
        anthropic=(
            "messages.{ai}.content.{ci}.image.source.base64.data: Image does not match the "
            "provided media type {media_type}"  # #69
        ),
    ),
    "image_media_type_mismatch": Template(
        openai=None,
        anthropic=(
            "messages.{ai}.content.{ci}.image.source.base64: The image was specified using "
            "the {media_type} media type, but the image appears to be a {actual} image"  # #73
        ),
    ),
    "image_too_large": Template(
        openai=None,
        anthropic=(
            "messages.{ai}.content.{ci}.image.source.base64: image exceeds {mb} MB maximum: "
            "{size} bytes > {limit} bytes"  # #62, #68
        ),
    ),
    "image_dimensions": Template(
        openai=None,
        anthropic=(
            "messages.{ai}.content.{ci}.image.source.base64.data: At least one of the image "
            "dimensions exceed max allowed size for many-image requests: {limit} pixels"  # #75
        ),
    ),
    # situation i
    "context_overflow": Template(
        openai=(
            "This model's maximum context length is {window} tokens. However, your messages "
            "resulted in {tokens} tokens. Please reduce the length of the messages."  # #82
        ),
        param="messages",
        code="context_length_exceeded",
        anthropic="prompt is too long: {tokens} tokens > {window} maximum",  # #86
    ),
    "context_overflow_functions": Template(
        openai=(
            "This model's maximum context length is {window} tokens. However, your messages "
            "resulted in {tokens} tokens ({message_tokens} in the messages, {tool_tokens} in "
            "the functions). Please reduce the length of the messages or functions."  # #83
        ),
        param="messages",
        code="context_length_exceeded",
        anthropic="prompt is too long: {tokens} tokens > {window} maximum",  # #86
    ),
    # shape (not recorded: OpenAI's request-validation texts)
    "invalid_value": Template(
        "Invalid value: '{value}'. Supported values are: {supported}.",
        None,
        param="{path}",
        code="invalid_value",
    ),
    "image_not_user": Template(  # OpenHands #7700 (an MCP screenshot in a tool result)
        "Invalid 'messages[{i}]'. Image URLs are only allowed for messages with role 'user', "
        "but this message with role '{role}' contains an image URL.",
        None,
        param="messages[{i}]",
        code="invalid_value",
    ),
    "name_pattern": Template(  # AutoGen #4157, Semantic Kernel #9340, Flowise #2948
        "Invalid '{path}': string does not match pattern. Expected a string that matches "
        "the pattern '^[a-zA-Z0-9_-]+$'.",
        None,
        param="{path}",
        code="invalid_value",
    ),
    "invalid_type": Template(
        "Invalid type for '{path}': expected {expected}, but got {got} instead.",
        None,
        param="{path}",
        code="invalid_type",
    ),
    "missing_parameter": Template(
        "Missing required parameter: '{path}'.",
        None,
        param="{path}",
        code="missing_required_parameter",
    ),
    "missing_model": Template("you must provide a model parameter", "model: Field required"),
    "invalid_json": Template(
        "We could not parse the JSON body of your request. (HINT: This likely means you "
        "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but "
        "what was sent was not valid JSON. If you have trouble figuring out how to fix this, "
        "please contact us through our help center at help.openai.com.)",
        None,
    ),
}


def openai_error(
    message: str,
    *,
    type: str = INVALID_REQUEST,
    param: str | None = None,
    code: str | None = None,
) -> bytes:
    """An OpenAI error body, byte-for-byte as the API sends it (2-space indent)."""
    error = {"message": message, "type": type, "param": param, "code": code}
    return json.dumps({"error": error}, indent=2, ensure_ascii=False).encode()


def anthropic_error(
    message: str, *, type: str = INVALID_REQUEST, request_id: str | None = None
) -> bytes:
    """An Anthropic error body, byte-for-byte as the API sends it (compact JSON)."""
    body: dict[str, Any] = {"type": "error", "error": {"type": type, "message": message}}
    if request_id is not None:
        body["request_id"] = request_id
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def render(
    kind: str, style: Style, values: dict[str, Any], request_id: str | None = None
) -> tuple[int, str, bytes]:
    """Fill the template of ``kind`` for ``style``: (status, message text, body bytes).

    The style's own text is used when the provider has one; otherwise the other provider's
    text travels in this style's envelope.
    """
    t = TEMPLATES[kind]
    own, other = (t.openai, t.anthropic) if style == "openai" else (t.anthropic, t.openai)
    text = own if own is not None else other
    assert text is not None, kind
    message = text.format(**values)
    if style == "openai":
        param = t.param.format(**values) if t.param is not None else None
        body = openai_error(message, type=t.openai_type, param=param, code=t.code)
    else:
        body = anthropic_error(message, type=t.anthropic_type, request_id=request_id)
    return t.status, message, body


def overflow(
    style: Style,
    *,
    window: int,
    message_tokens: int,
    tool_tokens: int = 0,
    request_id: str | None = None,
) -> Reply:
    """The context-window overflow answer (situation i); names the functions when tools."""
    kind = "context_overflow_functions" if tool_tokens else "context_overflow"
    values = {
        "window": window,
        "tokens": message_tokens + tool_tokens,
        "message_tokens": message_tokens,
        "tool_tokens": tool_tokens,
    }
    status, _, body = render(kind, style, values, request_id)
    return Reply(status, body)


def _retry_headers(retry_after: float | None) -> tuple[tuple[str, str], ...]:
    if retry_after is None:
        return ()
    return (("Retry-After", f"{retry_after:g}"),)


def rate_limited(
    style: Style,
    *,
    retry_after: float | None = None,
    model: str = "gpt-4.1",
    request_id: str | None = None,
) -> Reply:
    """A 429 rate-limit answer (#105 for OpenAI, #111 for Anthropic), with Retry-After."""
    if style == "openai":
        wait = f"{retry_after:g}s" if retry_after is not None else "3.89s"
        message = (
            f"Rate limit reached for {model} in organization org-vyUrKHsIdLcZGKR3zqCqllrS on "
            "tokens per min (TPM): Limit 30000, Used 28039, Requested 3906. Please try again "
            f"in {wait}. Visit https://platform.openai.com/account/rate-limits to learn more."
        )
        body = openai_error(message, type="tokens", code="rate_limit_exceeded")
    else:
        message = (
            "This request would exceed the rate limit for your organization "
            "(0dccdde6-f924-4f1b-bb3b-92ef846e0a5b) of 20,000 input tokens per minute. For "
            "details, refer to: https://docs.anthropic.com/en/api/rate-limits. You can see the "
            "response headers for current usage. Please reduce the prompt length or the "
            "maximum tokens requested, or try again later. You may also contact sales at "
            "https://www.anthropic.com/contact-sales to discuss your options for a rate limit "
            "increase."
        )
        body = anthropic_error(message, type="rate_limit_error", request_id=request_id)
    return Reply(429, body, _retry_headers(retry_after))


def insufficient_quota() -> Reply:
    """OpenAI's 429 for an exhausted quota (#110): same status as a rate limit, not transient."""
    message = "You exceeded your current quota, please check your plan and billing details."
    return Reply(429, openai_error(message, type="insufficient_quota", code="insufficient_quota"))


def overloaded(
    style: Style, *, retry_after: float | None = None, request_id: str | None = None
) -> Reply:
    """OpenAI's 503 (#115) or Anthropic's 529 with ``x-should-retry: true`` (#104, #107)."""
    if style == "openai":
        message = (
            "That model is currently overloaded with other requests. You can retry your "
            "request, or contact us through our help center at help.openai.com if the error "
            "persists. (Please include the request ID 500d9fff2057e4af93a280f67002c342 in your "
            "message.)"
        )
        return Reply(503, openai_error(message, type="server_error"), _retry_headers(retry_after))
    body = anthropic_error("Overloaded", type="overloaded_error", request_id=request_id)
    return Reply(529, body, (("x-should-retry", "true"), *_retry_headers(retry_after)))


def server_error(style: Style, *, request_id: str | None = None) -> Reply:
    """A 500 (#131 for OpenAI, #117 for Anthropic)."""
    if style == "openai":
        message = "The server had an error while processing your request. Sorry about that!"
        return Reply(500, openai_error(message, type="server_error"))
    body = anthropic_error("Internal server error", type="api_error", request_id=request_id)
    return Reply(500, body)


def _mask_key(key: str) -> str:
    if len(key) <= 8:
        return "*" * len(key)
    return key[:3] + "*" * (len(key) - 7) + key[-4:]


def unauthorized(style: Style, key: str | None, *, request_id: str | None = None) -> Reply:
    """A 401 for a missing or wrong API key (not recorded: the providers' well-known texts)."""
    if style == "openai":
        if key is None:
            message = (
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), "
                "or as the password field (with blank username) if you're accessing the API "
                "from your browser and are prompted for a username. You can obtain an API key "
                "from https://platform.openai.com/account/api-keys."
            )
            return Reply(401, openai_error(message))
        message = (
            f"Incorrect API key provided: {_mask_key(key)}. You can find your API key at "
            "https://platform.openai.com/account/api-keys."
        )
        return Reply(401, openai_error(message, code="invalid_api_key"))
    message = "x-api-key header is required" if key is None else "invalid x-api-key"
    body = anthropic_error(message, type="authentication_error", request_id=request_id)
    return Reply(401, body)


def not_found(style: Style, method: str, path: str, *, request_id: str | None = None) -> Reply:
    """A 404 for an unknown endpoint (not recorded)."""
    if style == "openai":
        return Reply(404, openai_error(f"Invalid URL ({method} {path})"))
    return Reply(404, anthropic_error("Not Found", type="not_found_error", request_id=request_id))
