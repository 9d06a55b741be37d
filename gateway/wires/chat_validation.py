"""Edge validation of a Chat Completions body: a clear 4xx naming the problem, nothing more.

The gateway forwards every field the client sent, so this checks only what it must read
(model, messages, stream) and the shapes the projection relies on. It is hand-written rather
than a pydantic model because it runs on every request and must not copy the body.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway.errors import ClientError
from gateway.telemetry.context import (
    CALL_OVERHEAD,
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD,
    CountedMessages,
    Totals,
    content_tokens,
    counted_messages,
)
from gateway.wires.shapes import (
    ChatImagePart,
    check,
    check_chat_call,
    check_chat_fields,
    render_brackets,
)

# Each role's source in the context report (``telemetry.context``); the roles accepted.
_SYSTEM, _TOOL_RESULTS, _OTHER = "system", "tool_results", "other"
_ROLE_SOURCES: dict[Any, str] = {
    "system": _SYSTEM, "developer": _SYSTEM, "tool": _TOOL_RESULTS,
    "user": _OTHER, "assistant": _OTHER, "function": _OTHER}
ROLES = frozenset(_ROLE_SOURCES)
# Responses API content parts, which no Chat Completions provider takes: refused here, and
# repaired up front into chat parts (wires/chat_values.py) before the body is checked again.
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image"})
# Deepest JSON nesting accepted (objects and arrays, the body itself counting as 1): the
# depth the serializer can write back out, so every accepted body can be forwarded.
MAX_JSON_DEPTH = 254


def _too_deep() -> ClientError:
    return ClientError(400, f"request body is nested deeper than {MAX_JSON_DEPTH} levels of "
                       "objects and arrays", code="json_too_deep")


def check_depth(body: Any, raw: bytes) -> None:
    """Refuse a body nested deeper than MAX_JSON_DEPTH, in any field.

    A body with fewer brackets than the limit cannot be that deep (the common case, counted
    in C); otherwise the check is a trial serialization, which refuses exactly the bodies the
    gateway could not forward.
    """
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return
    try:
        orjson.dumps(body)
    except orjson.JSONEncodeError:
        raise _too_deep() from None


def dumps_within_depth(value: Any, what: str) -> bytes:
    """``orjson.dumps(value)`` for JSON the gateway writes from a request (translated to
    another wire, echoed in an answer), where a field sits deeper than in the request: a 400
    when that puts it past MAX_JSON_DEPTH, never a failure while answering."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        raise ClientError(400, f"a field of the request is nested too deep to be {what} "
                          f"(at most {MAX_JSON_DEPTH} levels of objects and arrays)",
                          code="json_too_deep") from None


# orjson reads at most 1024 levels and writes at most MAX_JSON_DEPTH. A big body is parsed
# inside _PAD extra arrays: it then parses iff it is at most MAX_JSON_DEPTH deep, which
# replaces counting its brackets and a trial serialization (~270 us at 300 KB) by ~80 us.
_READ_DEPTH = 1024
_PAD = _READ_DEPTH - MAX_JSON_DEPTH
_OPEN, _CLOSE = b"[" * _PAD, b"]" * _PAD
_PADDED_FROM = 96 * 1024  # below, counting brackets (and rarely serializing) is cheaper


def _loads_bounded(raw: bytes) -> Any:
    """``orjson.loads(raw)`` for a body at most MAX_JSON_DEPTH deep, else ``None`` (then
    parse it the plain way: it may be too deep, or not JSON)."""
    try:
        value = orjson.loads(b"".join((_OPEN, raw, _CLOSE)))
    except orjson.JSONDecodeError:
        return None
    for _ in range(_PAD):  # one value per level: raw itself was one JSON value
        if value.__class__ is not list or len(value) != 1:
            return None
        value = value[0]
    return value


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """Decode a request body that must be a JSON object (at most MAX_JSON_DEPTH deep)."""
    if not raw:
        raise ClientError(400, "request body is empty; expected a JSON object")
    if len(raw) >= _PADDED_FROM:
        body = _loads_bounded(raw)
        if body.__class__ is dict:
            return body
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        if "depth limit" in str(err).lower():
            raise _too_deep() from None
        if "surrogate in string" in str(err):
            raise ClientError(400, f"request body is not valid JSON: {err} (half of a UTF-16 "
                              "pair: an emoji or other character cut in two)",
                              code=LONE_SURROGATE) from None
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ClientError(400, "request body is not valid UTF-8") from None
        raise ClientError(400, f"request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise ClientError(400, f"request body must be a JSON object, got {_kind(body)}")
    check_depth(body, raw)
    return body


LONE_SURROGATE = "lone_surrogate"  # the code of that 400: read_json_object repairs it
# A \u escape of a surrogate, after its backslashes (an even count escapes themselves).
_SURROGATE_ESCAPE = re.compile(rb"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")


def read_json_object(raw: bytes) -> tuple[dict[str, Any], bytes]:
    r""":func:`parse_json_object`, and the bytes to forward: ``raw`` itself, or, when what
    stops it is half of a UTF-16 pair (``"\ud83d"`` alone: an emoji a client's string slice
    cut in two), ``raw`` with each such escape written as ``\ufffd`` (the replacement
    character), nothing else changed. No JSON reader takes the half and every provider
    refuses it; the caller reports ``lone_surrogate_replaced``."""
    try:
        return parse_json_object(raw), raw
    except ClientError as err:
        if err.code != LONE_SURROGATE:
            raise
    fixed = replace_lone_surrogates(raw)
    return parse_json_object(fixed), fixed


def replace_lone_surrogates(raw: bytes) -> bytes:
    r"""``raw`` (JSON) with every ``\u`` escape of a surrogate that is not half of a pair
    written as ``\ufffd``."""
    escapes = [m for m in _SURROGATE_ESCAPE.finditer(raw) if len(m.group(1)) % 2]
    out: list[bytes] = []
    last = 0
    paired = -1  # the index of the low half of the last pair found
    for i, found in enumerate(escapes):
        code = int(found.group(2), 16)
        if i == paired:
            continue
        if code < 0xDC00 and i + 1 < len(escapes):
            after = escapes[i + 1]
            if (after.start() == found.end() and len(after.group(1)) == 1
                    and int(after.group(2), 16) >= 0xDC00):
                paired = i + 1
                continue
        start = found.start(2) - 1  # the "u" of this escape
        out += (raw[last:start], b"ufffd")
        last = found.end()
    out.append(raw[last:])
    return b"".join(out)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def require_model(body: dict[str, Any]) -> str:
    """The ``model`` field, which must be a non-empty string."""
    model = body.get("model")
    if model is None:
        raise ClientError(400, "missing required parameter: 'model'", param="model")
    if not isinstance(model, str) or not model:
        raise ClientError(
            400, f"'model' must be a non-empty string, got {_kind(model)}", param="model"
        )
    return model


def validate_chat_body(body: dict[str, Any], *, checked: int = 0,
                       fields_checked: bool = False) -> list[dict[str, Any]]:
    """Check the fields the gateway reads; return ``messages``. The first ``checked``
    messages were validated before (a history read over the client's previous turn), and
    with ``fields_checked`` the other fields too (the very objects of that turn)."""
    return read_chat_body(body, checked=checked, fields_checked=fields_checked)[0]


def read_chat_body(body: dict[str, Any], *, checked: int = 0, fields_checked: bool = False,
                   count: bool = False, added: list[Any] | None = None
                   ) -> tuple[list[dict[str, Any]], CountedMessages | None]:
    """:func:`validate_chat_body`, and with ``count`` what the context report reads of the
    messages it validated, counted in the same pass (None when their shapes needed a closer
    look): a new body's messages are walked once, not once more for telemetry. ``added``:
    the messages after the first ``checked`` when the caller has them (then the others are
    not read: they may be unparsed, ``projection.lazy_messages``)."""
    messages = body.get("messages")
    if messages is None:
        raise ClientError(400, "missing required parameter: 'messages'", param="messages")
    if not isinstance(messages, list):
        raise ClientError(
            400, f"'messages' must be an array, got {_kind(messages)}", param="messages"
        )
    _check_stream(body)
    validated = added if added is not None else messages[checked:] if checked else messages
    common = _common_shapes(validated, count)
    if common is None:
        for i, msg in enumerate(messages):
            _validate_message(i, msg)  # raises for the first message with a problem
    if not fields_checked:  # tools, tool_choice, limits: what LiteLLM and the flow read
        check_chat_fields(body, tools_checked=_tools_ok(body.get("tools")))
    if common is None or common is _UNCOUNTED:
        return messages, None
    return messages, counted_messages(validated, checked, common)


def check_chat_body_fields(body: dict[str, Any], *, tools_checked: bool = False) -> None:
    """:func:`read_chat_body`'s checks of the fields besides ``messages`` (for a body whose
    messages were proved valid as they were decoded: ``wires.chat_typed``); with
    ``tools_checked`` its ``tools`` are a list checked before."""
    _check_stream(body)
    check_chat_fields(body, tools_checked=tools_checked or _tools_ok(body.get("tools")))


def _check_stream(body: dict[str, Any]) -> None:
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ClientError(400, f"'stream' must be a boolean, got {_kind(stream)}", param="stream")


_MISSING: Any = object()
_CONTENT_REQUIRED = frozenset({"user", "system", "developer"})


_UNCOUNTED: Totals = (-1, -1, -1, -1)  # (returned as is: compared by identity)


def _common_shapes(messages: list[Any], count: bool) -> Totals | None:
    """The messages' totals on the context estimate (``count``; else ``_UNCOUNTED``) when
    every one has a shape :func:`_validate_message` accepts.

    The fast check of every request (of the JSON values it is given), one flat loop with no
    call per message in the common shapes. None only means "look closer": the slow path
    then names the first problem, if any. The estimate is ``telemetry.context``'s
    (``_walk``): a message costs MESSAGE_OVERHEAD tokens and a token per four characters.
    """
    t = s = o = pictures = 0
    overhead, call_overhead, per_token = MESSAGE_OVERHEAD, CALL_OVERHEAD, CHARS_PER_TOKEN
    try:
        for msg in messages:
            if msg.__class__ is not dict:
                return None
            role = msg.get("role")
            source = _ROLE_SOURCES.get(role)  # (an unhashable role raises TypeError)
            if source is None:
                return None
            content = msg.get("content", _MISSING)
            if content.__class__ is not str and content is not None:
                if content is _MISSING:
                    if role in _CONTENT_REQUIRED:
                        return None
                elif content.__class__ is not list or not _parts_ok(content):
                    return None
            chars = -1  # the characters of its calls (-1: none)
            if "tool_calls" in msg and (calls := msg["tool_calls"]) is not None:
                if calls.__class__ is not list:
                    return None
                chars = 0
                for call in calls:
                    if call.__class__ is not dict or (size := _call_chars(call)) < 0:
                        return None
                    chars += size
            if "tool_call_id" in msg:
                call_id = msg["tool_call_id"]
                if call_id is not None and call_id.__class__ is not str:
                    return None
            if count:
                if content.__class__ is str:
                    tokens = overhead + (len(content) + per_token - 1) // per_token
                elif content.__class__ is list:
                    text, images = content_tokens(content)
                    tokens = overhead + text + images
                    pictures += images
                else:
                    tokens = overhead
                if chars >= 0:
                    tokens += (chars + per_token - 1) // per_token + call_overhead * len(calls)
                t += tokens
                if source is _TOOL_RESULTS:
                    o += tokens
                elif source is _SYSTEM:
                    s += tokens
    except TypeError:
        return None
    return (t, s, o, pictures) if count else _UNCOUNTED


def _call_chars(call: dict[str, Any]) -> int:
    """The characters of a function call in its common shape (name and arguments, as the
    context estimate counts them); -1 for any other call (looked at closer)."""
    function = call.get("function")
    if function.__class__ is not dict or (name := function.get("name")).__class__ is not str:
        return -1
    arguments = function.get("arguments")
    if arguments.__class__ is str:
        size = len(name) + len(arguments)
    else:
        return -1
    call_id = call.get("id")
    if call_id is not None and call_id.__class__ is not str:
        return -1
    kind = call.get("type")
    return size if kind is None or kind == "function" else -1


_STR_OR_NONE = (str, type(None))


def _tools_ok(tools: Any) -> bool:
    """Function tools in their common shape (the fast check of ``tools``, the typed model
    of :func:`check_chat_fields` names a problem when this says "look closer")."""
    if tools is None:
        return True
    if tools.__class__ is not list:
        return False
    for tool in tools:
        if tool.__class__ is not dict or tool.get("type") != "function":
            return False
        function = tool.get("function")
        if function.__class__ is not dict or function.get("name").__class__ is not str:
            return False
        description = function.get("description")
        parameters = function.get("parameters")
        strict = function.get("strict")
        if ((description is not None and description.__class__ is not str)
                or (parameters is not None and parameters.__class__ is not dict)
                or (strict is not None and strict.__class__ is not bool)):
            return False
    return True


def _parts_ok(parts: list[Any]) -> bool:
    for part in parts:
        if part.__class__ is not dict:
            return False
        kind = part.get("type")
        if kind.__class__ is not str or kind in _RESPONSES_PARTS:
            return False
        if kind == "text":
            if part.get("text").__class__ is not str:
                return False
        elif kind == "image_url":
            image = part.get("image_url")
            if image.__class__ is dict:
                image = image.get("url")
            if image.__class__ is not str:
                return False
    return True


def _validate_message(i: int, msg: Any) -> None:
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise ClientError(400, f"{where} must be an object, got {_kind(msg)}", param=where)
    role = msg.get("role")
    if not isinstance(role, str):
        raise ClientError(400, f"{where}.role is missing or not a string", param=f"{where}.role")
    if role not in ROLES:
        raise ClientError(
            400,
            f"{where}.role {role!r} is not one of {', '.join(sorted(ROLES))}",
            param=f"{where}.role",
        )
    if "content" in msg:
        _validate_content(where, ("messages", i, "content"), msg["content"])
    elif role in ("user", "system", "developer"):
        raise ClientError(
            400, f"{where} ({role}) is missing 'content'", param=f"{where}.content"
        )
    tool_calls = msg.get("tool_calls")
    if tool_calls is not None:
        if not isinstance(tool_calls, list):
            raise ClientError(
                400, f"{where}.tool_calls must be an array", param=f"{where}.tool_calls"
            )
        for j, call in enumerate(tool_calls):
            if not isinstance(call, dict):
                raise ClientError(
                    400,
                    f"{where}.tool_calls[{j}] must be an object",
                    param=f"{where}.tool_calls[{j}]",
                )
            check_chat_call(call, ("messages", i, "tool_calls", j))
            function = call.get("function")
            if type(function) is dict and function.get("arguments") is None:
                raise ClientError(
                    400, f"{where}.tool_calls[{j}].function.arguments is missing; a call "
                    "without arguments has '{}'",
                    param=f"{where}.tool_calls[{j}].function.arguments")
    call_id = msg.get("tool_call_id")
    if call_id is not None and not isinstance(call_id, str):
        raise ClientError(
            400, f"{where}.tool_call_id must be a string", param=f"{where}.tool_call_id"
        )


def _validate_content(where: str, path: tuple[str | int, ...], content: Any) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise ClientError(
            400,
            f"{where}.content must be a string, an array of content parts or null, "
            f"got {_kind(content)}",
            param=f"{where}.content",
        )
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise ClientError(
                400,
                f"{where}.content[{j}] must be an object with a string 'type'",
                param=f"{where}.content[{j}]",
            )
        if part["type"] in _RESPONSES_PARTS:
            raise ClientError(
                400, f"{where}.content[{j}] is a Responses API part ({part['type']!r}); "
                "Chat Completions takes 'text' and 'image_url' parts",
                param=f"{where}.content[{j}].type")
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise ClientError(
                400,
                f"{where}.content[{j}].text must be a string",
                param=f"{where}.content[{j}].text",
            )
        if part["type"] == "image_url":
            check(part, ChatImagePart, (*path, j), render_brackets, True)


MAX_SESSION_ID = 256


def check_session_id(session_id: str) -> None:
    """A session id (``x-session-id`` or ``prompt_cache_key``) the stores can key on: bounded
    and valid UTF-8 (it becomes a store key and ``prompt_cache_key``); else a 400."""
    if len(session_id) > MAX_SESSION_ID:
        raise ClientError(400, f"the session id (x-session-id or prompt_cache_key) must be at "
                          f"most {MAX_SESSION_ID} characters", param="x-session-id")
    if not session_id.isascii():
        try:
            session_id.encode("utf-8")
        except UnicodeEncodeError:  # header bytes that are not UTF-8 arrive as surrogates
            raise ClientError(400, "the session id (x-session-id or prompt_cache_key) must "
                              "be valid UTF-8", param="x-session-id") from None
