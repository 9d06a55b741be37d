"""Request validation of the fake Anthropic Messages API, with the real API's error texts
(tests/data/provider-errors.jsonl). Pure functions: they raise RequestRefused."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from tests.fakes.native_base import RequestRefused, decode_base64, image_size, sniff_image

IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_IMAGE_SIDE = 8000  # "At least one of the image dimensions exceed max allowed size"
MAX_IMAGES = 100  # image blocks per request, tool results included
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
# The wire's own history rules (tests/data/wire-errors.jsonl, the API's documentation).
THINKING_FINAL_BLOCK = "messages.{i}: The final block in an assistant message cannot be `thinking`."
THINKING_EXPECTED = (
    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking"
)
THINKING_FOREIGN = (
    "messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block is bound to "
    "a different conversation. Remove the block, or set "
    "`thinking.block_binding.prefix_mismatch_behavior` to \"drop_block\". That setting "
    "requires the `thinking-binding-controls-2026-08-01` value in the `anthropic-beta` header. "
    "The `system` prompt differs from the one this block was created with."
)
THINKING_ORDER = ("messages.{i}.content.{j}: `thinking` blocks must come before any other "
                  "block in an assistant message.")
TOOLS_UNDECLARED = "Requests which include tool_use or tool_result blocks must define tools."
CACHE_ON_EMPTY = "messages.{i}.content.{j}.text: cache_control cannot be set for empty text blocks"
CACHE_TTL_ORDER = ("a ttl='1h' cache_control block must not come after a ttl='5m' "
                   "cache_control block. Found a ttl='1h' block at messages.{i}.content.{j}.")
TRAILING_WHITESPACE = "messages: final assistant content cannot end with trailing whitespace"
TOOL_ID_PATTERN = ("messages.{i}.content.{j}.{kind}.{field}: String should match pattern "
                   "'^[a-zA-Z0-9_-]+$'")
PREFILL = ("This model does not support assistant message prefill. The conversation must end "
           "with a user message.")
NOT_FIRST_TOOL_RESULT = (
    "messages.{i}: Did not find {n} `tool_result` block(s) at the beginning of this message. "
    "Messages following `tool_use` blocks must begin with a matching number of `tool_result` "
    "blocks."
)
TOOL_RESULT_TWICE = ("messages.{i}.content.{j}: each tool_use must have a single result. "
                     "Found multiple `tool_result` blocks with id: {id}")
# Server tool results (web search, web fetch, code execution) answer a server_tool_use of
# the same assistant message.
SERVER_RESULT_ORPHAN = (
    "messages.{i}.content.{j}: unexpected `tool_use_id` found in `{kind}` blocks: {id}. "
    "Each `{kind}` block must have a corresponding `{call}` block before it."
)
SERVER_RESULTS = ("web_search_tool_result", "web_fetch_tool_result",
                  "code_execution_tool_result", "bash_code_execution_tool_result",
                  "text_editor_code_execution_tool_result", "mcp_tool_result")
# The call block a server-side result answers (the MCP connector has its own pair).
SERVER_CALLS = {"mcp_tool_result": "mcp_tool_use"}
# A server tool call must have its result in its own assistant message unless that message
# is the last one (a paused turn sent back to be continued), or a client tool_use of that
# message names it as its caller (programmatic tool calling: the code run's result comes in
# a later assistant message, after the client's tool_result blocks).
SERVER_CALL_UNANSWERED = ("messages.{i}: {name} tool use with id {id} was found without a "
                          "corresponding {name}_tool_result block")
# langchain-ai/langchain#31208, trae-agent#230 / markform#153, claude-code-hub#470,
# GCMP#370 (a top-level cache_control takes one of the four breakpoints).
EXTRA_FIELD = "messages.{i}.content.{j}.{kind}.{field}: Extra inputs are not permitted"
ERROR_RESULT_EMPTY = ("messages.{i}.content.{j}.tool_result: content cannot be empty if "
                      "`is_error` is true")
SERVER_ID_PATTERN = ("messages.{i}.content.{j}.server_tool_use.id: String should match "
                     "pattern '^srvtoolu_[a-zA-Z0-9_]+$'")
# Fields clients leave on blocks that no block has ("Extra inputs are not permitted"); the
# fake knows these, not every block's full field list (the API adds fields over time).
FOREIGN_FIELDS = {"index", "partial_json"}
CALL_FOREIGN_FIELDS = {"text"}  # on tool_use / server_tool_use
TTL_VALUES = ("5m", "1h")
FORCED_TOOL_THINKING = "Thinking may not be enabled when tool_choice forces tool use."
# quarkiverse/quarkus-langchain4j#1812, danny-avila/LibreChat#6023.
TOP_K_THINKING = (
    "`top_k` must be unset when thinking is enabled. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
    "#important-considerations-when-using-extended-thinking"
)
# Blocks the API takes in user turns and tool results besides text and images.
USER_BLOCKS = ("document", "search_result")
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
    if source.get("type") in ("url", "file"):
        return
    media = source.get("media_type")
    if media not in IMAGE_MEDIA_TYPES:
        raise RequestRefused(
            400,
            f"{where}.image.source.base64.media_type: Input should be 'image/jpeg', "
            "'image/png', 'image/gif' or 'image/webp'",
        )
    if source.get("data") == "":  # an upload that failed (anthropics/claude-code#12750)
        raise RequestRefused(400, f"{where}.image.source.base64: image cannot be empty")
    data = decode_base64(source.get("data"))
    if data is None:
        raise RequestRefused(400, f"{where}.image.source.base64: invalid base64 data")
    # The API measures the base64 text (a 4804036-byte GIF is "6405384 bytes > 5242880").
    if len(source["data"]) > MAX_IMAGE_BYTES:
        raise RequestRefused(
            400,
            f"{where}.image.source.base64: image exceeds 5 MB maximum: "
            f"{len(source['data'])} bytes > {MAX_IMAGE_BYTES} bytes",
        )
    if sniff_image(data) != media:
        raise RequestRefused(
            400,
            f"{where}.image.source.base64.data: Image does not match the provided media "
            f"type {media}",
        )
    if max(image_size(data)) > MAX_IMAGE_SIDE:
        raise RequestRefused(
            400,
            f"{where}.image.source.base64.data: At least one of the image dimensions exceed "
            f"max allowed size: {MAX_IMAGE_SIDE} pixels",
        )


def _check_block(i: int, j: int, role: str, block: dict[str, Any]) -> None:
    where = f"messages.{i}.content.{j}"
    kind = block.get("type")
    extra = sorted(set(block) & (FOREIGN_FIELDS | (
        CALL_FOREIGN_FIELDS if kind in ("tool_use", "server_tool_use") else set())))
    if extra:
        raise RequestRefused(400, EXTRA_FIELD.format(i=i, j=j, kind=kind, field=extra[0]))
    if kind == "server_tool_use" and not re.match(r"^srvtoolu_[a-zA-Z0-9_]+$",
                                                  str(block.get("id"))):
        raise RequestRefused(400, SERVER_ID_PATTERN.format(i=i, j=j))
    if kind in ("tool_use", "tool_result"):
        field = "id" if kind == "tool_use" else "tool_use_id"
        if not re.match(r"^[a-zA-Z0-9_-]+$", str(block.get(field))):
            raise RequestRefused(400, TOOL_ID_PATTERN.format(i=i, j=j, kind=kind, field=field))
    if kind == "text":
        if "cache_control" in block and not str(block.get("text") or "").strip():
            raise RequestRefused(400, CACHE_ON_EMPTY.format(i=i, j=j))
        _check_text(block.get("text"))
    elif kind == "image":
        _check_image(where, block)
    elif kind == "tool_use":
        if role != "assistant":
            raise RequestRefused(400, f"{where}: tool_use blocks can only be in assistant messages")
        if "input" not in block:  # (pydantic's word, as for a thinking block's signature)
            raise RequestRefused(400, f"{where}.tool_use.input: Field required")
        if not isinstance(block.get("input"), dict):
            raise RequestRefused(400, f"{where}.tool_use.input: Input should be a valid dictionary")
    elif kind == "tool_result":
        if role != "user":
            raise RequestRefused(400, f"{where}: tool_result blocks can only be in user messages")
        if block.get("is_error") is True and block.get("content") in (None, "", []):
            raise RequestRefused(400, ERROR_RESULT_EMPTY.format(i=i, j=j))
        for k, inner in enumerate(as_blocks(block.get("content", []))):
            if inner.get("type") == "text":
                _check_text(inner.get("text"))
            elif inner.get("type") == "image":
                _check_image(f"{where}.tool_result.content.{k}", inner)
            elif inner.get("type") not in (*USER_BLOCKS, "tool_reference"):
                raise RequestRefused(
                    400, f"{where}.tool_result.content.{k}: Input tag '{inner.get('type')}' "
                    "found using 'type' does not match any of the expected tags: 'text', "
                    "'image', 'search_result', 'document', 'tool_reference'")
    elif kind == "redacted_thinking" and not block.get("data"):
        raise RequestRefused(400, f"{where}.redacted_thinking.data: Field required")
    elif kind in ("server_tool_use", "mcp_tool_use") or kind in SERVER_RESULTS:
        if role != "assistant":
            raise RequestRefused(400, f"{where}: {kind} blocks can only be in assistant messages")
    elif kind not in ("thinking", "redacted_thinking", *USER_BLOCKS):
        raise RequestRefused(
            400,
            f"{where}: Input tag '{kind}' found using 'type' does not match any of the "
            "expected tags: 'text', 'image', 'tool_use', 'tool_result', 'document', 'thinking'",
        )


def _turns(messages: list[Any]) -> list[Turn]:
    turns: list[Turn] = []
    last = len(messages) - 1
    unanswered: list[str] = []  # server tool calls without their result (after the rest)
    awaited: set[str] = set()  # code runs a client call was made from (programmatic calls)
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
        callers = {b["caller"].get("tool_id") for b in blocks if b.get("type") == "tool_use"
                   and isinstance(b.get("caller"), dict)}
        for j, block in enumerate(blocks):
            _check_block(i, j, role, block)
            call = SERVER_CALLS.get(str(block.get("type")), "server_tool_use")
            if block.get("type") in SERVER_RESULTS and block.get("tool_use_id") not in awaited \
                    and not any(b.get("type") == call and b.get("id") == block.get("tool_use_id")
                                for b in blocks[:j]):
                raise RequestRefused(400, SERVER_RESULT_ORPHAN.format(
                    i=i, j=j, kind=block.get("type"), id=block.get("tool_use_id"), call=call))
            if block.get("type") == "server_tool_use" and block.get("id") in callers:
                awaited.add(str(block.get("id")))  # its result follows the client's results
            elif block.get("type") == "server_tool_use" and i != last and not any(
                    b.get("tool_use_id") == block.get("id") for b in blocks[j + 1:]):
                unanswered.append(SERVER_CALL_UNANSWERED.format(
                    i=i, name=block.get("name"), id=block.get("id")))
        placed = [Block(i, j, b) for j, b in enumerate(blocks)]
        if turns and turns[-1].role == role:
            turns[-1].blocks.extend(placed)
        else:
            turns.append(Turn(role, i, placed))
    if unanswered:
        raise RequestRefused(400, unanswered[0])
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
            if ids and following is not None:
                leading = 0
                for p in following.blocks:
                    if p.block.get("type") != "tool_result":
                        break
                    leading += 1
                if leading < len(ids):
                    raise RequestRefused(400, NOT_FIRST_TOOL_RESULT.format(
                        i=following.first_message, n=len(ids) - leading))
        else:
            previous = turns[t - 1] if t > 0 else None
            offered = {
                str(p.block.get("id"))
                for p in (previous.blocks if previous is not None else [])
                if p.block.get("type") == "tool_use"
            }
            results: set[str] = set()
            for placed in turn.blocks:
                if placed.block.get("type") == "tool_result":
                    tool_id = str(placed.block.get("tool_use_id"))
                    if tool_id in results:
                        raise RequestRefused(400, TOOL_RESULT_TWICE.format(
                            i=placed.message, j=placed.index, id=tool_id))
                    results.add(tool_id)
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


def _check_thinking_settings(body: dict[str, Any]) -> None:
    """Thinking cannot go with a forced tool, nor with ``top_k``; a context edit clearing
    thinking needs it on (anthropics/claude-code#11971)."""
    if not _thinking_on(body):
        management = body.get("context_management")
        edits = management.get("edits") if isinstance(management, dict) else None
        for edit in edits if isinstance(edits, list) else ():
            kind = edit.get("type") if isinstance(edit, dict) else None
            if isinstance(kind, str) and kind.startswith("clear_thinking"):
                raise RequestRefused(400, f"`{kind}` strategy requires `thinking` to be "
                                          "enabled")
        return
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        raise RequestRefused(400, FORCED_TOOL_THINKING)
    if body.get("top_k") is not None:
        raise RequestRefused(400, TOP_K_THINKING)


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise RequestRefused(400, "tools: Input should be a valid list")
    names = [t.get("name") for t in tools if isinstance(t, dict)]
    if len(set(names)) != len(names):
        raise RequestRefused(400, "tools: Tool names must be unique.")
    for i, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, dict) else None
        if "input_schema" in (tool if isinstance(tool, dict) else {}) and not (
                isinstance(name, str) and re.fullmatch(r"[a-zA-Z0-9_-]{1,128}", name)):
            raise RequestRefused(400, f"tools.{i}.custom.name: String should match pattern "
                                      "'^[a-zA-Z0-9_-]{1,128}$'")


def _markers(value: Any) -> list[dict[str, Any]]:
    """Every ``cache_control`` object inside ``value``."""
    if isinstance(value, dict):
        here = [value["cache_control"]] if isinstance(value.get("cache_control"), dict) else []
        return here + [m for k, v in value.items() if k != "cache_control"
                       for m in _markers(v)]
    if isinstance(value, list):
        return [m for v in value for m in _markers(v)]
    return []


def _count_breakpoints(value: Any) -> int:
    if isinstance(value, dict):
        here = 1 if isinstance(value.get("cache_control"), dict) else 0
        return here + sum(_count_breakpoints(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return sum(_count_breakpoints(v) for v in value)
    return 0


def sign_thinking(thinking: str, model: str | None = None) -> str:
    """The fake's signature of a thinking text (the real API signs its own blocks); with a
    ``model``, one only that model takes (signatures are model-bound: a session switched to
    another model is refused, vybestack/llxprt-code#2335, openclaw/openclaw#107221)."""
    bound = thinking if model is None else f"{model}|{thinking}"
    return "sig-" + hashlib.sha256(bound.encode()).hexdigest()[:32]


# The API's words for a block another model signed (anomalyco/opencode#11546).
MODEL_BOUND = "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"


def _thinking_on(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _check_thinking(body: dict[str, Any], messages: list[Any], turns: list[Turn],
                    interleaved: bool, model_bound: bool = False) -> None:
    """Thinking blocks: signed, never last in their turn, first in it (unless the request
    asks for interleaved thinking, where a turn thinks again after a tool's result); those
    this API did not sign are refused (the latest turn's as modified, earlier ones as
    foreign); with thinking on, the turn whose tool calls the last user turn answers
    starts with one."""
    latest = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"),
                 default=None)
    for i, message in enumerate(messages):
        blocks = as_blocks(message.get("content"))
        for j, block in enumerate(blocks):
            if block.get("type") not in ("thinking", "redacted_thinking"):
                continue
            if "cache_control" in block:
                raise RequestRefused(400, f"messages.{i}.content.{j}.{block.get('type')}."
                                     "cache_control: Extra inputs are not permitted")
            if block.get("type") == "thinking" and "signature" not in block:
                raise RequestRefused(400, f"messages.{i}.content.{j}.thinking.signature: "
                                     "Field required")
            if block.get("type") == "thinking" and not isinstance(block["signature"], str):
                raise RequestRefused(400, f"messages.{i}.content.{j}.thinking.signature: "
                                     "Input should be a valid string")
            if blocks[-1].get("type") in ("thinking", "redacted_thinking") and \
                    message.get("role") == "assistant":
                raise RequestRefused(400, THINKING_FINAL_BLOCK.format(i=i))
            if not interleaved and any(b.get("type") not in ("thinking", "redacted_thinking")
                                       for b in blocks[:j]):
                raise RequestRefused(400, THINKING_ORDER.format(i=i, j=j))
            signer = str(body.get("model")) if model_bound else None
            if block.get("type") == "thinking" and \
                    block["signature"] != sign_thinking(str(block.get("thinking")), signer):
                template = THINKING_MODIFIED if i == latest else (
                    MODEL_BOUND if model_bound else THINKING_FOREIGN)
                raise RequestRefused(400, template.format(i=i, j=j))
    # A final assistant turn (a prefill) starts with thinking when thinking is on.
    if _thinking_on(body) and len(turns) >= 2 and turns[-1].role == "assistant" \
            and turns[-1].blocks and turns[-1].blocks[0].block.get("type") not in (
                "thinking", "redacted_thinking"):
        raise RequestRefused(400, THINKING_EXPECTED.format(
            i=turns[-1].first_message, found=turns[-1].blocks[0].block.get("type")))
    # On the turns as the API combines them (consecutive same-role messages are one turn).
    if _thinking_on(body) and len(turns) >= 2 and turns[-1].role == "user" \
            and turns[-2].role == "assistant":
        answers = [p.block for p in turns[-1].blocks]
        first = turns[-2].blocks[0].block if turns[-2].blocks else {}
        if any(b.get("type") == "tool_result" for b in answers) and \
                first.get("type") not in ("thinking", "redacted_thinking"):
            raise RequestRefused(400, THINKING_EXPECTED.format(i=turns[-2].first_message,
                                                               found=first.get("type")))


def _breakpoint_ttls(body: dict[str, Any]) -> list[tuple[str, int, int]]:
    found: list[tuple[str, int, int]] = []
    for marker in _markers([body.get("tools"), body.get("system"), body.get("messages")]):
        if "ttl" in marker and marker["ttl"] not in TTL_VALUES:
            raise RequestRefused(400, "cache_control.ephemeral.ttl: Input should be '5m' or "
                                 "'1h'")
    for n, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, dict) and isinstance(tool.get("cache_control"), dict):
            found.append((str(tool["cache_control"].get("ttl", "5m")), -1, n))
    system = body.get("system")
    for n, block in enumerate(system if isinstance(system, list) else []):
        if isinstance(block, dict) and isinstance(block.get("cache_control"), dict):
            found.append((str(block["cache_control"].get("ttl", "5m")), -1, n))
    for i, message in enumerate(body.get("messages") or []):
        for j, block in enumerate(as_blocks(message.get("content"))):
            if isinstance(block.get("cache_control"), dict):
                found.append((str(block["cache_control"].get("ttl", "5m")), i, j))
    return found


def _check_wire_history(body: dict[str, Any], messages: list[Any],
                        refuse_prefill: bool) -> None:
    uses_tools = any(b.get("type") in ("tool_use", "tool_result")
                     for m in messages for b in as_blocks(m.get("content")))
    if uses_tools and not body.get("tools"):
        raise RequestRefused(400, TOOLS_UNDECLARED)
    short_seen = False
    for ttl, i, j in _breakpoint_ttls(body):
        if ttl == "1h" and short_seen:
            raise RequestRefused(400, CACHE_TTL_ORDER.format(i=i, j=j))
        short_seen = short_seen or ttl != "1h"
    last = messages[-1]
    if last.get("role") == "assistant":
        if refuse_prefill:
            raise RequestRefused(400, PREFILL)
        blocks = as_blocks(last.get("content"))
        if blocks and blocks[-1].get("type") == "text" and \
                str(blocks[-1].get("text")) != str(blocks[-1].get("text")).rstrip():
            raise RequestRefused(400, TRAILING_WHITESPACE)


def _image_count(value: Any) -> int:
    """Image blocks anywhere in ``value`` (tool results included)."""
    if isinstance(value, list):
        return sum(_image_count(v) for v in value)
    if isinstance(value, dict):
        own = 1 if value.get("type") == "image" else 0
        return own + _image_count(value.get("content"))
    return 0


def validate_messages_request(body: Any, *, refuse_prefill: bool = False,
                              interleaved: bool = False, model_bound: bool = False) -> list[Turn]:
    """Validate a Messages API body as the real API does; returns the merged turns.
    ``interleaved``: the request's ``anthropic-beta`` asks for interleaved thinking;
    ``model_bound``: thinking signatures are the requested model's own (sign_thinking).

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
    if type(body["max_tokens"]) is not int:
        raise RequestRefused(400, "max_tokens: Input should be a valid integer")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise RequestRefused(400, "messages: Input should be a valid list")
    _check_system(body.get("system"))
    _check_tools(body.get("tools"))
    _check_thinking_settings(body)
    if _image_count(messages) > MAX_IMAGES:
        raise RequestRefused(400, f"messages: Too many images in request (max {MAX_IMAGES})")
    turns = _turns(messages)
    if not turns:
        raise RequestRefused(400, "messages: at least one message is required")
    if turns[0].role != "user":
        raise RequestRefused(400, 'messages: first message must use the "user" role')
    _check_tool_pairing(turns)
    _check_thinking(body, messages, turns, interleaved, model_bound)
    _check_wire_history(body, messages, refuse_prefill)
    found = _count_breakpoints([body.get("tools"), body.get("system"), messages])
    found += isinstance(body.get("cache_control"), dict)  # automatic caching's breakpoint
    if found > MAX_CACHE_BREAKPOINTS:
        raise RequestRefused(
            400,
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be "
            f"provided. Found {found}.",
        )
    return turns
