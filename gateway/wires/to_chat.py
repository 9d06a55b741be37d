"""Wire requests -> Chat Completions requests, for models that only speak chat.

The neutral view already holds the history as chat messages; this turns the wire-only
parts into chat parts (Anthropic images -> ``image_url``, ``input_text`` -> text), drops
what a chat upstream cannot take (thinking blocks, reasoning and built-in tool items), and
maps the request fields (system/instructions, tools, tool_choice, limits, stop, format).
The chat body then goes through the same Flow as any chat request: projection, ladder,
compaction. A tool error flag becomes the gateway's ``is_error`` extension, rendered by
projection (SPEC §2.3).
"""

from __future__ import annotations

from typing import Any

from gateway.errors import ClientError
from gateway.projection.exchanges import OPAQUE_ROLE
from gateway.wires.anthropic_view import _ABSENT, AnthropicView
from gateway.wires.base import WIRE_KEY, Message, WireView

_ANTHROPIC_CHOICE = {"auto": "auto", "any": "required", "none": "none"}


def _text_of(parts: Any) -> str:
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    texts = [p.get("text") for p in parts if type(p) is dict and p.get("type") in
             ("text", "input_text", "output_text")]
    return "\n".join(t for t in texts if isinstance(t, str))


def _image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _file_part(data: Any, filename: Any, file_id: Any = None) -> dict[str, Any] | None:
    """A chat ``file`` part (a PDF as a data URL, or an uploaded file's id)."""
    file: dict[str, Any] = {}
    if isinstance(file_id, str):
        file["file_id"] = file_id
    elif isinstance(data, str):
        file["file_data"] = data
    else:
        return None
    if isinstance(filename, str):
        file["filename"] = filename
    return {"type": "file", "file": file}


def unread_document(name: str, where: str) -> dict[str, Any]:
    """The text part standing for a document a chat model cannot be sent (a URL, a file of
    another provider's Files API): the model learns it was there, not what it says."""
    return {"type": "text", "text": f"[The user attached a document, {name} ({where}); "
                                    "it could not be passed on to this model, which cannot "
                                    "read it from there.]"}


def _document_part(block: dict[str, Any]) -> dict[str, Any] | None:
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    kind = source.get("type")
    title = block.get("title") if isinstance(block.get("title"), str) else None
    if kind == "text" and isinstance(source.get("data"), str):
        return {"type": "text", "text": source["data"]}
    if kind == "base64":
        return _file_part(f"data:{source.get('media_type')};base64,{source.get('data')}",
                          title or "document.pdf")
    if kind == "content" and isinstance(source.get("content"), list):
        # A document made of content blocks: its text (chat has no document of blocks).
        text = _text_of(source["content"])
        return {"type": "text", "text": text} if text else None
    if kind == "url" and isinstance(source.get("url"), str):
        return unread_document(repr(title or "a PDF"), f"at {source['url']!r}")
    if kind == "file" and isinstance(source.get("file_id"), str):
        return unread_document(repr(title or "a file"),
                               f"Anthropic file {source['file_id']!r}")
    return None


def _anthropic_part(block: Any) -> dict[str, Any] | None:
    if type(block) is not dict:
        return None
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text")}
    if kind == "image":
        source = block.get("source")
        if not isinstance(source, dict):
            return None
        if source.get("type") == "base64":
            return _image_part(f"data:{source.get('media_type')};base64,{source.get('data')}")
        if source.get("type") == "url":
            return _image_part(str(source.get("url")))
    if kind == "document":
        return _document_part(block)
    if kind == "search_result":  # (a tool's result with its citation source: as text)
        found = _text_of(block.get("content"))
        said = "\n".join(str(v) for v in (block.get("title"), block.get("source"), found)
                         if isinstance(v, str) and v)
        return {"type": "text", "text": said} if said else None
    return None  # thinking, server tools: nothing a chat upstream reads


def _chat_message(message: Message, convert: Any) -> Message:
    out = {k: v for k, v in message.items() if k != WIRE_KEY}
    content = out.get("content")
    role = out.get("role")
    if role == "tool":
        parts = ([p for p in map(convert, content) if p is not None]
                 if isinstance(content, list) else [])
        if any(p.get("type") != "text" for p in parts):
            # (an image or a file a tool returned goes as the result's part: a server that
            # takes none in a tool message says so, and the strict rung moves it to a user
            # turn, reported, rather than it being lost here unsaid)
            out["content"] = parts
        else:
            out["content"] = "" if content is _ABSENT else _text_of(
                parts if isinstance(content, list) else content)
    elif isinstance(content, list):
        parts = [p for p in map(convert, content) if p is not None]
        if role == "assistant" or all(p.get("type") == "text" for p in parts):
            joined = _text_of(parts)
            out["content"] = joined if joined or not out.get("tool_calls") else None
            if role == "user" and not parts:
                out["content"] = []
        else:
            out["content"] = parts
    return out


def _choice_name(choice: dict[str, Any], *, anthropic: bool) -> str:
    """The tool a forced tool choice names; a 400 in the wire API's words without one (the
    edge shapes allow a null name, which a chat upstream refuses)."""
    name = choice.get("name")
    if not isinstance(name, str):
        message = ("tool_choice.name: Field required" if anthropic
                   else "Missing required parameter: 'tool_choice.name'.")
        raise ClientError(400, message, param="tool_choice.name")
    return name


def anthropic_positions(body: dict[str, Any], view: AnthropicView) -> tuple[int | None, ...]:
    """For each message of :func:`anthropic_to_chat`'s body, the client's message it came
    from (None: the ``system`` field)."""
    system = (None,) if _text_of(body.get("system")) else ()
    return (*system, *(group for group, message in zip(view.groups, view.messages,
                                                        strict=False)
                       if message.get("role") != OPAQUE_ROLE))


def responses_positions(body: dict[str, Any], view: WireView) -> tuple[int | None, ...]:
    """For each message of :func:`responses_to_chat`'s body, the client's ``input`` item it
    came from (the first, for a message made of several; None: ``instructions``)."""
    items = body.get("input")
    position = {id(item): i for i, item in enumerate(items)} if isinstance(items, list) else {}
    instructions = body.get("instructions")
    out: list[int | None] = [None] if isinstance(instructions, str) and instructions else []
    for k, message in enumerate(view.messages):
        if message.get("role") != OPAQUE_ROLE:
            sources = view.sources[k] if k < len(view.sources) else []
            out.append(position.get(id(sources[0])) if sources else None)
    return tuple(out)


def anthropic_to_chat(body: dict[str, Any], view: AnthropicView) -> dict[str, Any]:
    """The Chat Completions body for an Anthropic Messages body (``model`` kept as sent)."""
    messages: list[Message] = []
    system = body.get("system")
    text = _text_of(system)
    if text:
        messages.append({"role": "system", "content": text})
    for k, message in enumerate(view.messages):
        if message.get("role") == OPAQUE_ROLE:  # (nothing a chat model reads: an empty
            continue                            # final assistant message, kept as sent)
        chat = _chat_message(message, _anthropic_part)
        if message.get("role") == "tool" and view.sources[k][0].get("is_error") is True:
            chat["is_error"] = True
        messages.append(chat)
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    for src, dst in (("max_tokens", "max_tokens"), ("temperature", "temperature"),
                     ("top_p", "top_p"), ("stop_sequences", "stop")):
        if body.get(src) is not None:
            out[dst] = body[src]
    user = (body.get("metadata") or {}).get("user_id") if isinstance(
        body.get("metadata"), dict) else None
    if isinstance(user, str):
        out["user"] = user
    if type(body.get("top_k")) is int:
        out["top_k"] = body["top_k"]
    effort = _effort_of_thinking(body.get("thinking"))
    if effort is not None:
        out["reasoning_effort"] = effort
    tools = [
        {"type": "function", "function": {
            "name": t.get("name"), "description": t.get("description", ""),
            "parameters": t.get("input_schema") or {"type": "object", "properties": {}}}}
        for t in body.get("tools") or () if type(t) is dict and "input_schema" in t
    ]
    if tools:
        out["tools"] = tools
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            kind = choice.get("type")
            if kind == "tool":
                out["tool_choice"] = {"type": "function",
                                      "function": {"name": _choice_name(choice, anthropic=True)}}
            elif kind in _ANTHROPIC_CHOICE:
                out["tool_choice"] = _ANTHROPIC_CHOICE[kind]
            if choice.get("disable_parallel_tool_use") is True:
                out["parallel_tool_calls"] = False
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else body.get("output_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(
            fmt.get("schema"), dict):
        # Not strict: a schema Anthropic takes (optional properties) can fail OpenAI's check.
        out["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "output", "schema": fmt["schema"]}}
    if body.get("stream") is True:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def _responses_part(part: Any) -> dict[str, Any] | None:
    if type(part) is not dict:
        return None
    kind = part.get("type")
    if kind == "text":
        return part
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        image: dict[str, Any] = _image_part(part["image_url"])
        if part.get("detail") in ("low", "high", "auto"):
            image["image_url"]["detail"] = part["detail"]
        return image
    if kind == "input_file":
        found = _file_part(part.get("file_data"), part.get("filename"), part.get("file_id"))
        if found is None and isinstance(part.get("file_url"), str):
            name = part.get("filename") if isinstance(part.get("filename"), str) else None
            return unread_document(repr(name or "a file"), f"at {part['file_url']!r}")
        return found
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "text", "text": part["refusal"]}
    return None


# The fields the translations write that a chat upstream may not take (a model without
# reasoning, a provider without service tiers): left out when it refuses one
# (``ChatRequest.optional_fields``).
OPTIONAL_FIELDS = frozenset({"reasoning_effort", "service_tier", "safety_identifier",
                             "prompt_cache_key", "verbosity", "logprobs", "top_logprobs",
                             "top_k"})
# An Anthropic thinking budget as Chat Completions' reasoning effort (LiteLLM's buckets:
# ``reasoning_effort_from_thinking_budget``), from the largest budget down.
_EFFORT_BY_BUDGET = ((4096, "high"), (2048, "medium"), (1024, "low"), (0, "minimal"))


def _effort_of_thinking(thinking: Any) -> str | None:
    """The reasoning effort of an enabled ``thinking`` with a numeric budget, else None."""
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int | float) or isinstance(budget, bool) or not budget > 0:
        return None  # (no budget to speak of: the chat model's own default)
    return next((effort for least, effort in _EFFORT_BY_BUDGET if budget >= least), None)


def responses_to_chat(body: dict[str, Any], view: WireView) -> dict[str, Any]:
    """The Chat Completions body for a Responses API body (``model`` kept as sent)."""
    messages: list[Message] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    for message in view.messages:
        if message.get("role") != OPAQUE_ROLE:
            messages.append(_chat_message(message, _responses_part))
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    for src, dst in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"),
                     ("top_p", "top_p"), ("user", "user"), ("service_tier", "service_tier"),
                     ("safety_identifier", "safety_identifier"),
                     ("prompt_cache_key", "prompt_cache_key")):
        if body.get(src) is not None:
            out[dst] = body[src]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and isinstance(reasoning.get("effort"), str):
        out["reasoning_effort"] = reasoning["effort"]
    verbosity = (body.get("text") or {}).get("verbosity") if isinstance(
        body.get("text"), dict) else None
    if isinstance(verbosity, str):
        out["verbosity"] = verbosity
    if type(body.get("top_logprobs")) is int:
        out["logprobs"], out["top_logprobs"] = True, body["top_logprobs"]
    tools: list[dict[str, Any]] = [
        {"type": "function", "function": {
            k: v for k, v in (("name", t.get("name")), ("description", t.get("description")),
                              ("parameters", t.get("parameters")), ("strict", t.get("strict")))
            if v is not None}}
        for t in body.get("tools") or () if type(t) is dict and t.get("type") == "function"
    ]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        # Chat servers seldom know allowed_tools: the model is offered only the allowed
        # functions, under the mode (auto: it may call one; required: it must).
        allowed = {t.get("name") for t in choice.get("tools") or ()
                   if type(t) is dict and t.get("type") == "function"}
        tools = [t for t in tools if t["function"].get("name") in allowed]
        choice = choice.get("mode") if choice.get("mode") in ("auto", "required") else None
    if tools:
        out["tools"] = tools
        if isinstance(choice, str):
            out["tool_choice"] = choice
        elif isinstance(choice, dict) and choice.get("type") == "function":
            out["tool_choice"] = {"type": "function",
                                  "function": {"name": _choice_name(choice, anthropic=False)}}
        if isinstance(body.get("parallel_tool_calls"), bool):
            out["parallel_tool_calls"] = body["parallel_tool_calls"]
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    if body.get("stream") is True:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out
