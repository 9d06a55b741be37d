"""The request shape of each wire, as the gateway reads it: typed models checked at the edge.

Each model names the fields some part of the gateway reads (views, translation to chat,
projection, compaction, LiteLLM for chat-translated providers) with the types that code
assumes, so a body the edge accepts is a body the code can read. Unknown fields are
ignored (they pass through untouched: the body is validated, never rebuilt) and the models
check types, not semantics a repair handles later: an empty ``call_id``, a ``system`` role
in Anthropic messages, unsigned thinking blocks, odd tool ids, ``cache_control`` anywhere,
``item_reference`` items, assistant ``input_text`` parts are all accepted.

Tagged objects (content blocks, input items, parts) are checked by their ``type``: a known
type against its model, an unknown one only as an object with a string ``type``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from gateway.errors import ClientError

Path = tuple[str | int, ...]
Obj = dict[str, Any]
Number = int | float


class Shape(msgspec.Struct):
    """A model of the fields the gateway reads; other fields are ignored."""


# --- Chat Completions (the fields besides ``messages``; those are chat_validation's) ---


class ChatFunction(Shape):
    name: str
    description: str | None = None
    parameters: Obj | None = None
    strict: bool | None = None


class ChatTool(Shape):
    type: Literal["function", "custom"]  # LiteLLM refuses others before sending
    function: ChatFunction | None = None


class ChatFunctionTool(Shape):
    function: ChatFunction  # required by a ``function`` tool (LiteLLM reads it)


class ChatChoiceFunction(Shape):
    name: str


class ChatToolChoice(Shape):
    type: str
    function: ChatChoiceFunction | None = None


class ChatFormat(Shape):
    type: str
    json_schema: Obj | None = None


class ChatJSONSchema(Shape):
    name: str
    schema: Obj | None = None
    strict: bool | None = None


class ChatJSONSchemaFormat(Shape):
    json_schema: ChatJSONSchema  # required by a ``json_schema`` format


class ChatStreamOptions(Shape):
    include_usage: bool | None = None


class ChatScalars(Shape):
    tool_choice: str | ChatToolChoice | None = None
    response_format: ChatFormat | None = None
    stream_options: ChatStreamOptions | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = None
    temperature: Number | None = None
    top_p: Number | None = None
    stop: str | list[str] | None = None
    user: str | None = None
    metadata: Obj | None = None


class ChatFields(ChatScalars):
    tools: list[ChatTool] | None = None


class ChatCallFunction(Shape):
    name: str | None = None
    arguments: str | None = None


class ChatCall(Shape):
    id: str | None = None
    type: str | None = None
    function: ChatCallFunction | None = None


class ChatNamedFunction(Shape):
    name: str
    arguments: str | None = None


class ChatFunctionCall(Shape):
    function: ChatNamedFunction  # a ``function`` call (the type by default) names one


class ChatImageURL(Shape):
    url: str
    detail: str | None = None


class ChatImagePart(Shape):
    image_url: str | ChatImageURL


# --- Anthropic Messages ---


class ASource(Shape):
    type: str


class ABase64Source(Shape):
    media_type: str
    data: str


class AURLSource(Shape):
    url: str


_A_SOURCES: dict[str, type[Shape]] = {"base64": ABase64Source, "url": AURLSource}
# A document's: a PDF in base64, plain text, a URL (a Files API or content source: as sent).
_A_DOCUMENT_SOURCES: dict[str, type[Shape]] = {**_A_SOURCES, "text": ABase64Source}


class AText(Shape):
    text: str


class AImage(Shape):
    source: Obj


class ADocument(Shape):
    source: Obj


class AToolUse(Shape):
    id: str
    name: str
    input: Obj | str | None = None  # a JSON string is repaired (tool_input_parsed)


class AToolResult(Shape):
    tool_use_id: str
    content: str | list[Obj] | None = None
    is_error: bool | None = None


class AThinking(Shape):
    thinking: str | None = None
    signature: str | None = None


class ARedactedThinking(Shape):
    data: str | None = None


class AMessage(Shape):
    role: str
    content: str | list[Obj]


class ATool(Shape):
    name: str
    type: str | None = None
    description: str | None = None
    input_schema: Obj | None = None


class AToolChoice(Shape):
    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class AMetadata(Shape):
    user_id: str | None = None


class AThinkingConfig(Shape):
    type: str


class MessagesFields(Shape):
    messages: list[Any]  # (each an object: ``objects_only``, without copying them)
    thinking: AThinkingConfig | None = None
    system: str | list[Obj] | None = None
    tools: list[ATool] | None = None
    tool_choice: AToolChoice | None = None
    metadata: AMetadata | None = None
    max_tokens: int | None = None
    temperature: Number | None = None
    top_p: Number | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None


# --- OpenAI Responses ---


class RMessage(Shape):
    role: str
    content: str | list[Obj] | None  # null: a chat assistant turn with tool_calls (repaired)


class RText(Shape):
    text: str


class RImage(Shape):
    image_url: str | Obj | None = None  # chat's {url, detail}: repaired (content_part_typed)
    detail: str | None = None


class RRefusal(Shape):
    refusal: str


class RCall(Shape):
    name: str
    call_id: str | None = None  # empty or missing: a repair gives it an id
    arguments: str | Obj | None = None  # an object is repaired (tool_value_serialized)


class RCustomCall(Shape):
    name: str  # a chat-only model gets it as a tool call's function name
    call_id: str | None = None


class ROutput(Shape):
    call_id: str | None = None
    # an object, a number, a boolean: tool_value_serialized
    output: str | list[Obj] | Obj | Number | bool | None = None


class RAnyItem(Shape):
    call_id: str | None = None  # any call item and its output (custom, shell, ...)
    name: str | None = None  # a chat-only model gets a call's name as a function name


class RTool(Shape):
    type: str
    name: str | None = None  # required by a function tool: RFunctionTool
    description: str | None = None
    parameters: Obj | None = None
    strict: bool | None = None


class RFunctionTool(Shape):
    name: str


class RToolChoice(Shape):
    type: str
    name: str | None = None


class RFormat(Shape):
    type: str
    name: str | None = None
    schema: Obj | None = None
    strict: bool | None = None
    description: str | None = None


class RJSONSchemaFormat(Shape):
    name: str
    schema: Obj  # required by a ``json_schema`` format (LiteLLM reads it)


class RTextConfig(Shape):
    format: RFormat | None = None


class ResponsesFields(Shape):
    input: str | list[Any] | None = None  # (each item an object: ``objects_only``)
    instructions: str | list[Any] | None = None
    tools: list[RTool] | None = None
    tool_choice: str | RToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: RTextConfig | None = None
    reasoning: Obj | None = None
    metadata: Obj | None = None
    max_output_tokens: int | None = None
    temperature: Number | None = None
    top_p: Number | None = None
    user: str | None = None
    store: bool | None = None
    truncation: str | None = None
    previous_response_id: str | None = None
    stream: bool | None = None


# --- checking and naming the problem in the wire's own words ---

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<where>[^`]*)`)?$", re.S)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_MISSING = re.compile(r"Object missing required field `(?P<name>[^`]+)`")


def render_dotted(path: Path) -> str:
    """``messages.3.content.1`` (Anthropic)."""
    return ".".join(str(key) for key in path)


def render_brackets(path: Path) -> str:
    """``input[3].content[1]`` (OpenAI)."""
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


Render = Callable[[Path], str]


_TYPE_WORDS = {"object": "an object", "array": "an array", "str": "a string",
               "int": "an integer", "float": "a number", "bool": "a boolean", "null": "null"}


def _words(what: str) -> str:
    """msgspec's ``Expected `str | null`, got `int``` as ``Expected a string or null, got an
    integer``."""
    def kinds(found: re.Match[str]) -> str:
        names = [_TYPE_WORDS.get(n.strip(), n.strip()) for n in found[1].split("|")]
        if names[:2] == ["an integer", "a number"]:
            names = names[1:]
        return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]

    return re.sub(r"`([^`]*)`", kinds, what)


def refusal(err: msgspec.ValidationError, prefix: Path, render: Render,
            openai_style: bool) -> ClientError:
    """The 400 for a failed check: the field path in the wire's style, what was expected."""
    found = _AT.match(str(err))
    assert found is not None
    what, where = found["what"], found["where"] or ""
    path: Path = prefix + tuple(name if name else int(index)
                                for name, index in _STEP.findall(where))
    missing = _MISSING.match(what)
    if missing is not None:
        path += (missing["name"],)
        field = render(path)
        if openai_style:
            return ClientError(400, f"Missing required parameter: '{field}'.", param=field,
                               code="missing_required_parameter")
        return ClientError(400, f"{field}: Field required", param=field)
    field = render(path) or "body"
    if openai_style and what.startswith("Invalid"):  # a value outside the wire's set
        return ClientError(400, f"Invalid value for '{field}': {what[0].lower()}{what[1:]}.",
                           param=field, code="invalid_value")
    if openai_style:
        return ClientError(400, f"Invalid type for '{field}': {_words(what).lower()}.",
                           param=field, code="invalid_type")
    return ClientError(400, f"{field}: {_words(what)}", param=field)


def check(value: Any, shape: type[Shape], prefix: Path, render: Render,
          openai_style: bool) -> None:
    """Refuse ``value`` (at ``prefix`` in the body) unless it has ``shape``'s types."""
    try:
        msgspec.convert(value, shape)
    except msgspec.ValidationError as err:
        raise refusal(err, prefix, render, openai_style) from None


def _tagged(value: Any, where: Path, render: Render, openai_style: bool) -> str:
    """The ``type`` of a tagged object, which must be an object with a string ``type``."""
    if value.__class__ is not dict:
        field = render(where)
        if openai_style:
            raise ClientError(400, f"Invalid type for '{field}': expected an object.",
                              param=field, code="invalid_type")
        raise ClientError(400, f"{field}: Input should be an object with a string 'type'",
                          param=field)
    kind = value.get("type")
    if kind.__class__ is not str:
        field = render((*where, "type"))
        if openai_style:
            raise ClientError(400, f"Invalid type for '{field}': expected a string.",
                              param=field, code="invalid_type")
        raise ClientError(400, f"{render(where)}: Input should be an object with a string "
                          "'type'", param=render(where))
    return kind


# Anthropic blocks the gateway reads, by type (others: any object with a string type).
_A_BLOCKS: dict[str, type[Shape]] = {
    "text": AText, "image": AImage, "document": ADocument, "tool_use": AToolUse,
    "tool_result": AToolResult,
    "thinking": AThinking, "redacted_thinking": ARedactedThinking,
}
A_ROLES = ("user", "assistant", "system")  # system: moved to the top level by a repair


def check_anthropic_blocks(blocks: list[Any], where: Path) -> None:
    """Every block of an Anthropic content list (nested tool results included)."""
    for j, block in enumerate(blocks):
        here = (*where, j)
        kind = _tagged(block, here, render_dotted, False)
        shape = _A_BLOCKS.get(kind)
        if shape is None:
            continue
        check(block, shape, here, render_dotted, False)
        if kind in ("image", "document"):
            source = block["source"]
            check(source, ASource, (*here, "source"), render_dotted, False)
            sources = _A_SOURCES if kind == "image" else _A_DOCUMENT_SOURCES
            source_shape = sources.get(source["type"])
            if source_shape is not None:
                check(source, source_shape, (*here, "source"), render_dotted, False)
        elif kind == "tool_result" and isinstance(block.get("content"), list):
            check_anthropic_blocks(block["content"], (*here, "content"))


# The common Anthropic shapes, checked in one pass (msgspec, in C): every block of a known
# type, each source a base64 or URL one. Whatever passes passes the checks below; anything
# else (a block type or source this leaves out, a wrong type) is checked block by block,
# which names the problem.
class _FBase64(msgspec.Struct, tag_field="type", tag="base64"):
    media_type: str
    data: str


class _FURL(msgspec.Struct, tag_field="type", tag="url"):
    url: str


class _FText(msgspec.Struct, tag_field="type", tag="text"):
    text: str


class _FImage(msgspec.Struct, tag_field="type", tag="image"):
    source: _FBase64 | _FURL


class _FDocument(msgspec.Struct, tag_field="type", tag="document"):
    source: _FBase64 | _FURL


class _FToolUse(msgspec.Struct, tag_field="type", tag="tool_use"):
    id: str
    name: str
    input: Obj | str | None = None


class _FToolResult(msgspec.Struct, tag_field="type", tag="tool_result"):
    tool_use_id: str
    content: str | list[_FText | _FImage | _FDocument] | None = None
    is_error: bool | None = None


class _FThinking(msgspec.Struct, tag_field="type", tag="thinking"):
    thinking: str | None = None
    signature: str | None = None


class _FRedactedThinking(msgspec.Struct, tag_field="type", tag="redacted_thinking"):
    data: str | None = None


# (a union: a struct alone would take a block without its ``type``)
_FBlock = (_FText | _FImage | _FDocument | _FToolUse | _FToolResult | _FThinking
           | _FRedactedThinking)


class _FMessage(msgspec.Struct):
    role: Literal["user", "assistant", "system"]
    content: str | list[_FBlock]


_F_SYSTEM = list[_FBlock]
_F_MESSAGES = list[_FMessage]


def common_messages(body: Obj) -> bool:
    """Whether the body's system blocks and messages are all in the common shapes."""
    try:
        system = body.get("system")
        if isinstance(system, list):
            msgspec.convert(system, _F_SYSTEM)
        msgspec.convert(body["messages"], _F_MESSAGES)
    except msgspec.ValidationError:
        return False
    return True


def check_messages_fields(body: Obj) -> list[Obj]:
    """An Anthropic Messages body's fields the gateway reads but for the blocks of the
    messages and of the system prompt (each message an object, see
    :func:`check_messages_blocks`); the body's ``messages``."""
    check_messages_top(body)
    messages: list[Obj] = body["messages"]
    objects_only(messages, ("messages",), render_dotted, False)
    return messages


def check_messages_top(body: Obj) -> None:
    """:func:`check_messages_fields` but for the messages themselves (a typed read
    decoded every one of them as an object)."""
    check(body, MessagesFields, (), render_dotted, False)


_DICT = frozenset({dict})


def objects_only(items: list[Any], prefix: Path, render: Render, openai_style: bool) -> None:
    """Refuse the first of ``items`` (at ``prefix``) that is not an object, as checking a
    ``list[Obj]`` would, without the copy of every object such a check makes (a history
    of hundreds)."""
    if {*map(type, items)} <= _DICT:
        return
    for i, item in enumerate(items):
        if item.__class__ is not dict:
            try:
                msgspec.convert(item, Obj)
            except msgspec.ValidationError as err:
                raise refusal(err, (*prefix, i), render, openai_style) from None


def check_messages_blocks(body: Obj) -> None:
    """The system blocks and messages of a body whose fields have their types
    (:func:`check_messages_fields`): in one pass when all are in the common shapes, else
    block by block, the first problem refused by its path."""
    if not common_messages(body):
        check_each_message(body)


def check_each_message(body: Obj) -> None:
    """The system blocks and messages of a body whose fields have their types, block by
    block: the first problem is refused, named by its path."""
    system = body.get("system")
    if isinstance(system, list):
        check_anthropic_blocks(system, ("system",))
    for i, message in enumerate(body["messages"]):
        where = ("messages", i)
        check(message, AMessage, where, render_dotted, False)
        if message["role"] not in A_ROLES:
            field = render_dotted((*where, "role"))
            raise ClientError(400, f"{field}: Input should be 'user' or 'assistant'",
                              param=field)
        content = message["content"]
        if content.__class__ is list:
            check_anthropic_blocks(content, (*where, "content"))


_R_PARTS: dict[str, type[Shape]] = {
    "input_text": RText, "output_text": RText, "text": RText, "input_image": RImage,
    "refusal": RRefusal,
}
_R_ITEMS: dict[str, type[Shape]] = {
    "message": RMessage, "function_call": RCall, "function_call_output": ROutput,
    "custom_tool_call": RCustomCall,
}


def _responses_parts(parts: list[Any], where: Path) -> None:
    for j, part in enumerate(parts):
        here = (*where, j)
        shape = _R_PARTS.get(_tagged(part, here, render_brackets, True))
        if shape is not None:
            check(part, shape, here, render_brackets, True)


def check_responses_fields(body: Obj, *, items_read: bool = False) -> None:
    """A Responses body's fields the gateway reads (``input`` a string or an item list)
    but for the items' own fields (each item an object, see :func:`check_responses_items`;
    ``items_read``: a typed read decoded each of them as an object)."""
    check(body, ResponsesFields, (), render_brackets, True)
    if not items_read and isinstance(items := body.get("input"), list):
        objects_only(items, ("input",), render_brackets, True)
    for i, tool in enumerate(body.get("tools") or ()):
        if tool["type"] == "function":
            check(tool, RFunctionTool, ("tools", i), render_brackets, True)
    text = body.get("text")
    fmt = text.get("format") if text is not None else None
    if fmt is not None and fmt["type"] == "json_schema":
        check(fmt, RJSONSchemaFormat, ("text", "format"), render_brackets, True)


def check_responses_items(body: Obj) -> None:
    """The items of ``input`` of a body whose fields have their types
    (:func:`check_responses_fields`), item by item: the first problem is refused, named by
    its path."""
    items: list[Any] | str | None = body.get("input")
    if items is None or isinstance(items, str):
        return
    for i, item in enumerate(items):
        where = ("input", i)
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"  # the easy form: {"role", "content"}
        elif kind is None:
            field = render_brackets((*where, "type"))
            raise ClientError(400, f"Missing required parameter: '{field}'.", param=field,
                              code="missing_required_parameter")
        elif kind.__class__ is not str:
            _tagged(item, where, render_brackets, True)
        shape = _R_ITEMS.get(kind)
        check(item, shape or RAnyItem, where, render_brackets, True)
        if shape is None:
            continue
        content = item.get("content") if kind == "message" else item.get("output")
        if content.__class__ is list:
            _responses_parts(content, (*where, "content" if kind == "message" else "output"))


def check_chat_fields(body: Obj, *, tools_checked: bool = False) -> None:
    """The Chat Completions fields besides ``messages`` that the gateway or LiteLLM read
    (``tools`` left out when the caller's fast check found them in their common shape)."""
    if tools_checked:
        check(body, ChatScalars, (), render_brackets, True)
        return
    check(body, ChatFields, (), render_brackets, True)
    for i, tool in enumerate(body.get("tools") or ()):
        if tool["type"] == "function":
            check(tool, ChatFunctionTool, ("tools", i), render_brackets, True)
    fmt = body.get("response_format")
    if fmt is not None and fmt["type"] == "json_schema":
        check(fmt, ChatJSONSchemaFormat, ("response_format",), render_brackets, True)


def check_chat_call(call: Obj, where: Path) -> None:
    """One tool call of an assistant message."""
    check(call, ChatCall, where, render_brackets, True)
    if call.get("type") in (None, "function"):
        check(call, ChatFunctionCall, where, render_brackets, True)
