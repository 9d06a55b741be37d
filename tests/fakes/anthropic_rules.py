"""Request validation of the fake Anthropic Messages API, with the real API's error texts
(tests/data/provider-errors.jsonl). Pure functions: they raise RequestRefused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.fakes.native_base import RequestRefused, decode_base64, sniff_image

IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_CACHE_BREAKPOINTS = 4
# Top-level Messages API fields; anything else is refused ("Extra inputs are not permitted").
REQUEST_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
        "context_management",
        "cache_control",
        "output_format",
        "output_config",
        "inference_geo",
    }
)
MISSING_TOOL_RESULT = (
    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
    "{ids}. Each `tool_use` block must have a corresponding `tool_result` block in the next "
    "message."
)
UNEXPECTED_TOOL_RESULT = (
    "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. "
    "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
    "message."
)
EMPTY_CONTENT = (
    "messages.{i}: all messages must have non-empty content except for the optional final "
    "assistant message"
)
THINKING_MODIFIED = (
    "messages.{i}.content.{j}: `thinking` or `redacted_thinking` blocks in the latest "
    "assistant message cannot be modified. These blocks must remain as they were in the "
    "original response."
)
SYSTEM_ROLE = (
    'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
    'parameter, not "system" as an input message role.'
)


@dataclass
class Block:
    """A content block with its position in the request as sent (before merging)."""

    message: int
    index: int
    block: dict[str, Any]


@dataclass
class Turn:
    role: str
    first_message: int
    blocks: list[Block]


def as_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b if isinstance(b, dict) else {"type": "?"} for b in content]
    return []


def _check_text(text: Any) -> None:
    if not isinstance(text, str) or text == "":
        raise RequestRefused(400, "messages: text content blocks must be non-empty")
    if not text.strip():
        raise RequestRefused(400, "messages: text content blocks must contain non-whitespace text")


def _check_image(where: str, block: dict[str, Any]) -> None:
    source = block.get("source")
    if not isinstance(source, dict):
        raise RequestRefused(400, f"{where}.image.source: Field required")
    if source.get("type") == "url":
        return
    media = source.get("media_type")
    if media not in IMAGE_MEDIA_TYPES:
        raise RequestRefused(
            400,
            f"{where}.image.source.base64.media_type: Input should be 'image/jpeg', "
            "'image/png', 'image/gif' or 'image/webp'",
        )
    data = decode_base64(source.get("data"))
    if data is None:
        raise RequestRefused(400, f"{where}.image.source.base64: invalid base64 data")
    if len(data) > MAX_IMAGE_BYTES:
        raise RequestRefused(
            400,
            f"{where}.image.source.base64: image exceeds 5 MB maximum: "
            f"{len(data)} bytes > {MAX_IMAGE_BYTES} bytes",
        )
    if sniff_image(data) != media:
        raise RequestRefused(
            400,
            f"{where}.image.source.base64.data: Image does not match the provided media "
            f"type {media}",
        )


def _check_block(i: int, j: int, role: str, block: dict[str, Any]) -> None:
    where = f"messages.{i}.content.{j}"
    kind = block.get("type")
    if kind == "text":
        _check_text(block.get("text"))
    elif kind == "image":
        _check_image(where, block)
    elif kind == "tool_use":
        if role != "assistant":
            raise RequestRefused(400, f"{where}: tool_use blocks can only be in assistant messages")
        if not isinstance(block.get("input"), dict):
            raise RequestRefused(400, f"{where}.tool_use.input: Input should be a valid dictionary")
    elif kind == "tool_result":
        if role != "user":
            raise RequestRefused(400, f"{where}: tool_result blocks can only be in user messages")
        for k, inner in enumerate(as_blocks(block.get("content", []))):
            if inner.get("type") == "text":
                _check_text(inner.get("text"))
            elif inner.get("type") == "image":
                _check_image(f"{where}.tool_result.content.{k}", inner)
    elif kind not in ("thinking", "redacted_thinking", "document"):
        raise RequestRefused(
            400,
            f"{where}: Input tag '{kind}' found using 'type' does not match any of the "
            "expected tags: 'text', 'image', 'tool_use', 'tool_result', 'document', 'thinking'",
        )


def _turns(messages: list[Any]) -> list[Turn]:
    turns: list[Turn] = []
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestRefused(400, f"messages.{i}: Input should be a valid dictionary")
        role = message.get("role")
        if role == "system":
            raise RequestRefused(400, SYSTEM_ROLE)
        if role not in ("user", "assistant"):
            raise RequestRefused(400, f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        blocks = as_blocks(content)
        if not blocks or content == "":
            if i == last and role == "assistant":
                continue
            raise RequestRefused(400, EMPTY_CONTENT.format(i=i))
        for j, block in enumerate(blocks):
            _check_block(i, j, role, block)
        placed = [Block(i, j, b) for j, b in enumerate(blocks)]
        if turns and turns[-1].role == role:
            turns[-1].blocks.extend(placed)
        else:
            turns.append(Turn(role, i, placed))
    return turns


def _check_tool_pairing(turns: list[Turn]) -> None:
    seen: set[str] = set()
    for t, turn in enumerate(turns):
        if turn.role == "assistant":
            ids: list[str] = []
            for placed in turn.blocks:
                if placed.block.get("type") != "tool_use":
                    continue
                tool_id = str(placed.block.get("id"))
                if tool_id in seen:
                    raise RequestRefused(
                        400,
                        f"messages.{placed.message}.content.{placed.index}: "
                        "`tool_use` ids must be unique",
                    )
                seen.add(tool_id)
                ids.append(tool_id)
            following = turns[t + 1] if t + 1 < len(turns) else None
            answered = {
                str(p.block.get("tool_use_id"))
                for p in (following.blocks if following is not None else [])
                if p.block.get("type") == "tool_result"
            }
            missing = [x for x in ids if x not in answered]
            if missing:
                where = turn.blocks[-1].message
                raise RequestRefused(
                    400, MISSING_TOOL_RESULT.format(i=where, ids=", ".join(missing))
                )
        else:
            previous = turns[t - 1] if t > 0 else None
            offered = {
                str(p.block.get("id"))
                for p in (previous.blocks if previous is not None else [])
                if p.block.get("type") == "tool_use"
            }
            for placed in turn.blocks:
                if placed.block.get("type") == "tool_result":
                    tool_id = str(placed.block.get("tool_use_id"))
                    if tool_id not in offered:
                        raise RequestRefused(
                            400,
                            UNEXPECTED_TOOL_RESULT.format(
                                i=placed.message, j=placed.index, id=tool_id
                            ),
                        )


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise RequestRefused(400, "system: Input should be a valid list")
    for block in system:
        if not isinstance(block, dict) or block.get("type") != "text":
            raise RequestRefused(400, "system: Input should be a valid list of text blocks")
        if not block.get("text"):
            raise RequestRefused(400, "system: text content blocks must be non-empty")


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise RequestRefused(400, "tools: Input should be a valid list")
    names = [t.get("name") for t in tools if isinstance(t, dict)]
    if len(set(names)) != len(names):
        raise RequestRefused(400, "tools: Tool names must be unique.")


def _count_breakpoints(value: Any) -> int:
    if isinstance(value, dict):
        here = 1 if isinstance(value.get("cache_control"), dict) else 0
        return here + sum(_count_breakpoints(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return sum(_count_breakpoints(v) for v in value)
    return 0


def sign_thinking(thinking: str) -> str:
    """The fake's signature of a thinking text (the real API signs its own blocks)."""
    import hashlib

    return "sig-" + hashlib.sha256(thinking.encode()).hexdigest()[:32]


def _check_thinking(messages: list[Any]) -> None:
    """Signed thinking blocks of the latest assistant message must come back unmodified."""
    latest = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"),
                 default=None)
    for i, message in enumerate(messages):
        for j, block in enumerate(as_blocks(message.get("content"))):
            if block.get("type") != "thinking":
                continue
            if "signature" not in block:
                raise RequestRefused(400, f"messages.{i}.content.{j}.thinking.signature: "
                                     "Field required")
            if i == latest and block["signature"] != sign_thinking(str(block.get("thinking"))):
                raise RequestRefused(400, THINKING_MODIFIED.format(i=i, j=j))


def validate_messages_request(body: Any) -> list[Turn]:
    """Validate a Messages API body as the real API does; returns the merged turns.

    Raises RequestRefused with the native status and message on the first problem.
    """
    if not isinstance(body, dict):
        raise RequestRefused(400, "Input should be a valid dictionary")
    for name in body:
        if name not in REQUEST_FIELDS:
            raise RequestRefused(400, f"{name}: Extra inputs are not permitted")
    for required in ("model", "max_tokens", "messages"):
        if required not in body:
            raise RequestRefused(400, f"{required}: Field required")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise RequestRefused(400, "messages: Input should be a valid list")
    _check_system(body.get("system"))
    _check_tools(body.get("tools"))
    turns = _turns(messages)
    if not turns:
        raise RequestRefused(400, "messages: at least one message is required")
    if turns[0].role != "user":
        raise RequestRefused(400, 'messages: first message must use the "user" role')
    _check_tool_pairing(turns)
    _check_thinking(messages)
    found = _count_breakpoints([body.get("tools"), body.get("system"), messages])
    if found > MAX_CACHE_BREAKPOINTS:
        raise RequestRefused(
            400,
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be "
            f"provided. Found {found}.",
        )
    return turns
