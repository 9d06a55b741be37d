"""Held-out agent-framework histories, sixth set: the agent wires (``/v1/messages`` and
``/v1/responses``) as specific agent frameworks write them in the field, and broken the way
those frameworks break them.

- **Claude Code:** a tool call cut by Esc ("[Request interrupted by user]" as the next user
  turn, with or without thinking), parallel calls whose results are split over user turns
  (a hook's text between them), a Task subagent killed before its result, ``--resume``
  writing the last assistant turn twice, images inside tool results, signed and redacted
  thinking across turns, web search / web fetch / code execution results, ``container_upload``,
  ``context_management`` edits.
- **Codex CLI and the OpenAI Agents SDK on Responses:** Ctrl-C during a freeform
  ``apply_patch`` (``custom_tool_call``) or a ``local_shell_call``, encrypted reasoning under
  ``store: false`` with ``include: ["reasoning.encrypted_content"]``, handoffs
  (``transfer_to_...`` calls) without their output, a continuation by
  ``previous_response_id`` with only the new outputs.
- **Cline / Roo / Kilo / LangGraph / PydanticAI / Vercel AI SDK / Aider / OpenHands:** tool
  ids reused on every turn (``call_0``, ``toolu_1``), empty and whitespace text, results
  whose call was trimmed away, non-ASCII tool ids, mixed string / list content.

Each broken history is first refused by the strict native fake with the provider's words
(tests/fakes/anthropic_rules.py, tests/fakes/responses_server.py), then sent through the
gateway with the official SDK: the answer comes back in the client's wire, ``x-gateway-repairs``
names the repair, and what the upstream finally accepted is checked where the repair's
meaning matters (signed thinking and encrypted reasoning kept, each result still with its
own call). Valid field histories arrive byte for byte, unreported.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from gateway.projection.exchanges import SYNTHETIC_TOOL_RESULT_TEXT
from gateway.referee import Referee
from gateway.wires.responses_rules import repair_input
from tests.conftest import GatewayFactory
from tests.fakes import anthropic_rules
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses
from tests.wires.test_wire_heldout import PNG, WEB_TOOLS, redacted, search_result, server_use
from tests.wires.test_wire_rules import _messages_round
from tests.wires.test_wire_situations import (
    CACHE,
    CLAUDE,
    GPT,
    THINKING_ON,
    am,
    assert_arrives_as_sent,
    native_config,
    text,
    think,
    um,
)

ANTHROPIC_AUTH = {"x-api-key": "client-key", "anthropic-version": "2023-06-01"}
OPENAI_AUTH = {"authorization": "Bearer client-key"}
INTERRUPTED = "[Request interrupted by user]"
INTERRUPTED_TOOL = "[Request interrupted by user for tool use]"

# -- Messages: Claude Code's tools and blocks -----------------------------------------------

CC_TOOLS = [
    {"name": "Read", "description": "Read a file",
     "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}},
    {"name": "Bash", "description": "Run a command",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
    {"name": "Task", "description": "Launch a subagent",
     "input_schema": {"type": "object", "properties": {
         "description": {"type": "string"}, "prompt": {"type": "string"},
         "subagent_type": {"type": "string"}}}},
]
SERVER_TOOLS = [*WEB_TOOLS, {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 2},
                {"type": "code_execution_20250825", "name": "code_execution"}]


def read(tool_id: str, path: str = "a.py") -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "Read", "input": {"file_path": path}}


def bash(tool_id: str, command: str = "ls") -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": command}}


def task(tool_id: str, what: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "Task", "input": {
        "description": what, "prompt": f"Find {what}", "subagent_type": "general-purpose"}}


def done(tool_id: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content, **extra}


def image(data: str = PNG) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                        "data": data}}


def fetch_use(tool_id: str) -> dict[str, Any]:
    return {"type": "server_tool_use", "id": tool_id, "name": "web_fetch",
            "input": {"url": "https://example.com/doc"}}


def fetch_result(tool_id: str) -> dict[str, Any]:
    return {"type": "web_fetch_tool_result", "tool_use_id": tool_id, "content": {
        "type": "web_fetch_result", "url": "https://example.com/doc",
        "retrieved_at": "2025-09-10T10:00:00Z",
        "content": {"type": "document", "source": {
            "type": "text", "media_type": "text/plain", "data": "the doc"}}}}


def code_use(tool_id: str) -> dict[str, Any]:
    return {"type": "server_tool_use", "id": tool_id, "name": "bash_code_execution",
            "input": {"command": "wc -l data.csv"}}


def code_result(tool_id: str) -> dict[str, Any]:
    return {"type": "bash_code_execution_tool_result", "tool_use_id": tool_id, "content": {
        "type": "bash_code_execution_result", "stdout": "42 data.csv\n", "stderr": "",
        "return_code": 0, "content": []}}


def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def all_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in body["messages"] for b in blocks(m)]


@dataclass
class Case:
    """A broken field history: the repairs it is answered with, the provider's words for
    it, whether the repair waits for the refusal, and what must hold of what was accepted."""

    broken: dict[str, Any]
    repairs: tuple[str, ...]
    refusal: str
    strict: bool = False
    check: Callable[[dict[str, Any]], None] | None = None
    headers: dict[str, str] = field(default_factory=dict)


# -- what the Messages upstream accepted ------------------------------------------------


def the_interrupt_answered_then_said(body: dict[str, Any]) -> None:
    # The synthesized result opens the user turn; the user's words stay after it.
    after = all_blocks(body)
    results = [b for b in after if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["toolu_01"]
    assert results[0]["content"] == SYNTHETIC_TOOL_RESULT_TEXT
    words = [b["text"] for b in after if b["type"] == "text"]
    assert words[-2:] == [INTERRUPTED, "no, read b.py instead"]
    assert body["messages"][1]["content"] == [text("I'll read it."), read("toolu_01")]


def the_breakpoint_where_it_was(body: dict[str, Any]) -> None:
    turn = [b for m in body["messages"][2:] for b in blocks(m)]
    assert turn[0]["tool_use_id"] == "toolu_01" and "cache_control" not in turn[0]
    assert turn[-1] == text(INTERRUPTED, cache_control=CACHE)
    assert body["system"] == [text("You are Claude Code.", cache_control=CACHE)]


def the_signed_thinking_kept_on(body: dict[str, Any]) -> None:
    assert body["thinking"] == THINKING_ON
    assert body["messages"][1]["content"][:2] == [redacted(), think("the user wants a.py")]


def the_answered_result_kept_the_other_synthesized(body: dict[str, Any]) -> None:
    turn = body["messages"][2]["content"]
    assert turn[0] == done("toolu_1", "A")
    assert turn[1]["tool_use_id"] == "toolu_2"
    assert turn[1]["content"] == SYNTHETIC_TOOL_RESULT_TEXT
    assert turn[-1] == text(INTERRUPTED_TOOL)


def the_results_before_the_hook_text(body: dict[str, Any]) -> None:
    after = [b for m in body["messages"][2:] for b in blocks(m)]
    assert after[:2] == [done("toolu_1", "A"), done("toolu_2", "B")]
    assert text("PostToolUse:Bash hook: formatted 1 file") in after


def each_call_its_own_result(body: dict[str, Any]) -> None:
    # The reused id no longer pairs "read b.py" with a.py's contents, nor drops it.
    calls = [b for b in all_blocks(body) if b["type"] == "tool_use"]
    results = [b for b in all_blocks(body) if b["type"] == "tool_result"]
    assert [c["input"]["file_path"] for c in calls] == ["a.py", "b.py"]
    assert len({c["id"] for c in calls}) == 2
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]+", c["id"]) for c in calls)
    assert [r["tool_use_id"] for r in results] == [c["id"] for c in calls]
    assert [r["content"] for r in results] == ["A", "B"]


def the_thinking_of_each_turn_kept(body: dict[str, Any]) -> None:
    assert body["thinking"] == THINKING_ON
    assert [body["messages"][i]["content"][0] for i in (1, 3)] == [think("read a"),
                                                                   think("now b")]


def the_later_call_answered(body: dict[str, Any]) -> None:
    # b.py's contents answer the call that read b.py; the cut call gets the "not available"
    # result, not b.py's contents.
    calls = [b for b in all_blocks(body) if b["type"] == "tool_use"]
    results = {b["tool_use_id"]: b["content"] for b in all_blocks(body)
               if b["type"] == "tool_result"}
    assert [c["input"]["file_path"] for c in calls] == ["a.py", "b.py"]
    assert results[calls[0]["id"]] == SYNTHETIC_TOOL_RESULT_TEXT
    assert results[calls[1]["id"]] == "B"


def one_call_one_result(body: dict[str, Any]) -> None:
    calls = [b for b in all_blocks(body) if b["type"] == "tool_use"]
    results = [b for b in all_blocks(body) if b["type"] == "tool_result"]
    assert calls == [bash("toolu_01", "pytest")]
    assert results == [done("toolu_01", "3 passed")]


def no_orphan_and_the_user_words_kept(body: dict[str, Any]) -> None:
    assert all(b["type"] != "tool_result" for b in all_blocks(body))
    assert blocks(body["messages"][-1])[-1] == text("now b.py") or \
        body["messages"][-1]["content"] == "now b.py"


def both_user_turns_kept(body: dict[str, Any]) -> None:
    assert body["messages"] == [um("what does a.py do?"), um("and b.py?")]


def ascii_ids_still_paired(body: dict[str, Any]) -> None:
    call = body["messages"][1]["content"][0]
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", call["id"])
    assert body["messages"][2]["content"][0]["tool_use_id"] == call["id"]
    assert call["input"] == {"file_path": "説明.md"}


def the_fetch_result_gone_the_answer_kept(body: dict[str, Any]) -> None:
    assert body["messages"][1]["content"] == [text("The doc says hi.")]


def thinking_kept_blank_gone(body: dict[str, Any]) -> None:
    assert body["thinking"] == THINKING_ON
    assert body["messages"][1]["content"] == [think("plan the read"), read("toolu_1")]


def the_subagent_result_kept_the_killed_one_synthesized(body: dict[str, Any]) -> None:
    turn = body["messages"][2]["content"]
    assert turn[0] == done("toolu_t1", [text("Found 3 call sites."),
                                        text("agentId: a1b2 (for resuming)")])
    assert turn[1]["tool_use_id"] == "toolu_t2"
    assert turn[1]["content"] == SYNTHETIC_TOOL_RESULT_TEXT


def the_server_blocks_kept(body: dict[str, Any]) -> None:
    turn = body["messages"][1]["content"]
    assert turn[:4] == [code_use("srvtoolu_c1"), code_result("srvtoolu_c1"),
                        text("42 lines. Now I'll read it."), read("toolu_1")]
    assert body["messages"][2]["content"][0]["tool_use_id"] == "toolu_1"


def the_blank_text_gone_the_image_kept(body: dict[str, Any]) -> None:
    result = body["messages"][2]["content"][0]
    assert result["content"] == [image()]


def the_string_turns_kept(body: dict[str, Any]) -> None:
    assert body["messages"][0] == um("Summarize the repo.")
    assert body["messages"][-1] == um("thanks")


MESSAGES: dict[str, Case] = {
    # anthropics/claude-code#2179: Esc while a tool runs; the call stays, no result, the
    # interrupt marker as the next user turn ("tool_use ids were found without tool_result").
    "Claude Code: Esc during a tool call, the interrupt marker as the next turn": Case(
        {"tools": CC_TOOLS, "messages": [
            um("explain a.py"), am(text("I'll read it."), read("toolu_01")),
            um(text(INTERRUPTED)), um("no, read b.py instead")]},
        ("tool_result_synthesized",), "`tool_use` ids were found without `tool_result`",
        check=the_interrupt_answered_then_said),
    # Claude Code moves its breakpoint to the newest user block every turn: it stays on the
    # interrupt marker when the missing result is put before it.
    "Claude Code: Esc during a call, the turn's breakpoint on the interrupt marker": Case(
        {"tools": CC_TOOLS, "system": [text("You are Claude Code.", cache_control=CACHE)],
         "messages": [
            um("explain a.py"), am(read("toolu_01")),
            um(text(INTERRUPTED, cache_control=CACHE))]},
        ("tool_result_synthesized",), "`tool_use` ids were found without `tool_result`",
        check=lambda body: the_breakpoint_where_it_was(body)),
    # The same with thinking on: the turn's redacted and signed thinking must go back as made.
    "Claude Code: Esc after a thinking turn's tool call, thinking on": Case(
        {"tools": CC_TOOLS, "thinking": THINKING_ON, "messages": [
            um("explain a.py"),
            am(redacted(), think("the user wants a.py"), read("toolu_01")),
            um(text(INTERRUPTED))]},
        ("tool_result_synthesized",), "`tool_use` ids were found without `tool_result`",
        check=the_signed_thinking_kept_on),
    # anthropics/claude-code#7796: two parallel calls, one result written, then the interrupt.
    "Claude Code: parallel calls, one answered, interrupted before the other": Case(
        {"tools": CC_TOOLS, "messages": [
            um("read a and b"), am(read("toolu_1", "a.py"), read("toolu_2", "b.py")),
            um(done("toolu_1", "A"), text(INTERRUPTED_TOOL))]},
        ("tool_result_synthesized",), "`tool_use` ids were found without `tool_result`",
        check=the_answered_result_kept_the_other_synthesized),
    # rjwalters/loom#1315, router-for-me/CLIProxyAPI#4656: parallel results written as one
    # user message each, a PostToolUse hook's note between them.
    "Claude Code: parallel results split over user turns, a hook's note between": Case(
        {"tools": CC_TOOLS, "messages": [
            um("run both"), am(bash("toolu_1", "make fmt"), bash("toolu_2", "make lint")),
            um(done("toolu_1", "A")), um(text("PostToolUse:Bash hook: formatted 1 file")),
            um(done("toolu_2", "B"))]},
        ("tool_result_reordered",), "Did not find 1 `tool_result` block(s) at the beginning",
        check=the_results_before_the_hook_text),
    # anthropics/claude-code#6836 (Task subagents): two subagents launched, one killed.
    "Claude Code: two Task subagents, one killed before its result": Case(
        {"tools": CC_TOOLS, "messages": [
            um("find the callers and the tests"),
            am(task("toolu_t1", "callers"), task("toolu_t2", "tests")),
            um(done("toolu_t1", [text("Found 3 call sites."),
                                 text("agentId: a1b2 (for resuming)")]),
               text(INTERRUPTED_TOOL))]},
        ("tool_result_synthesized",), "`tool_use` ids were found without `tool_result`",
        check=the_subagent_result_kept_the_killed_one_synthesized),
    # anthropics/claude-code#20901 / #20693: a resumed session writes the last assistant
    # message twice, the same tool_use in both.
    "Claude Code --resume: the last tool turn written twice": Case(
        {"tools": CC_TOOLS, "messages": [
            um("run the tests"), am(bash("toolu_01", "pytest")), am(bash("toolu_01", "pytest")),
            um(done("toolu_01", "3 passed"))]},
        ("duplicate_tool_call_deduped",), "`tool_use` ids must be unique", strict=True,
        check=one_call_one_result),
    # Code execution (a server tool) answered in the turn, then a client tool cut by Esc.
    "Claude Code: a code execution result, then a client call cut by Esc": Case(
        {"tools": [*CC_TOOLS, *SERVER_TOOLS], "messages": [
            um("count the rows, then read the loader"),
            am(code_use("srvtoolu_c1"), code_result("srvtoolu_c1"),
               text("42 lines. Now I'll read it."), read("toolu_1")),
            um(text(INTERRUPTED))]},
        ("tool_result_synthesized",), "`tool_use` ids were found without `tool_result`",
        check=the_server_blocks_kept),
    # Kimi K2 / Roo / Kilo (functions.x:0) and Gemini-backed LangGraph agents number their
    # calls from zero on every turn: the same id for another call in a later turn.
    "Roo/Kilo: a tool id reused by a later turn's different call": Case(
        {"tools": CC_TOOLS, "messages": [
            um("read a.py"), am(read("toolu_1", "a.py")), um(done("toolu_1", "A")),
            am(text("Now b.py."), read("toolu_1", "b.py")), um(done("toolu_1", "B")),
            um("compare them")]},
        ("tool_id_rewritten",), "`tool_use` ids must be unique",
        check=each_call_its_own_result),
    # The first turn's call cut by Esc, the next turn numbered from zero again.
    "Roo/Kilo: an interrupted call's id reused by the next turn's call": Case(
        {"tools": CC_TOOLS, "messages": [
            um("read a.py"), am(read("toolu_1", "a.py")), um(text(INTERRUPTED)),
            um("read b.py instead"), am(read("toolu_1", "b.py")), um(done("toolu_1", "B"))]},
        ("tool_id_rewritten", "tool_result_synthesized"),
        "`tool_use` ids were found without `tool_result`",
        check=lambda body: the_later_call_answered(body)),
    # anthropics/claude-code#20693: parallel calls in one turn under one id.
    "Claude Code: two parallel calls under one id, each answered": Case(
        {"tools": CC_TOOLS, "messages": [
            um("read a and b"), am(read("toolu_1", "a.py"), read("toolu_1", "b.py")),
            um(done("toolu_1", "A"), done("toolu_1", "B")), um("compare")]},
        ("tool_id_rewritten",), "`tool_use` ids must be unique",
        check=each_call_its_own_result),
    # The same through Claude Code on Kimi K2 (ids "functions.Read:0", outside the API's
    # alphabet too), thinking on: the signed thinking of each turn goes back as made.
    "Claude Code on Kimi K2: functions.Read:0 on every turn, thinking on": Case(
        {"tools": CC_TOOLS, "thinking": THINKING_ON, "messages": [
            um("read a.py"), am(think("read a"), read("functions.Read:0", "a.py")),
            um(done("functions.Read:0", "A")),
            am(think("now b"), read("functions.Read:0", "b.py")),
            um(done("functions.Read:0", "B"))]},
        ("tool_id_rewritten",), "String should match pattern",
        check=lambda body: (each_call_its_own_result(body),
                            the_thinking_of_each_turn_kept(body))),
    # langchain-ai/langgraph trim_messages: the cut leaves a user turn of a lone result.
    "LangGraph: a trim that leaves a user turn of nothing but an orphan result": Case(
        {"tools": CC_TOOLS, "messages": [
            um("what is in a.py?"), am(text("It prints hi.")), um(done("toolu_gone", "X")),
            um("now b.py")]},
        ("orphan_tool_result_dropped",), "unexpected `tool_use_id` found in `tool_result`",
        check=no_orphan_and_the_user_words_kept),
    # anthropics/claude-code#6774: an assistant turn saved as "" (Aider's cancelled reply).
    "Aider: an assistant turn saved as an empty string": Case(
        {"messages": [um("what does a.py do?"), {"role": "assistant", "content": ""},
                      um("and b.py?")]},
        ("empty_content_dropped",), "all messages must have non-empty content",
        check=both_user_turns_kept),
    # OpenHands / models naming calls in their language: ids the pattern refuses.
    "OpenHands: non-ASCII tool ids": Case(
        {"tools": CC_TOOLS, "messages": [
            um("説明.md を読んで"),
            am({**read("call_読む_1"), "input": {"file_path": "説明.md"}}),
            um(done("call_読む_1", "内容"))]},
        ("tool_id_rewritten",), "String should match pattern", check=ascii_ids_still_paired),
    # A web fetch result whose server_tool_use a trimmer cut (the same turn's text stays).
    "Claude Code: a web fetch result whose call was trimmed away": Case(
        {"tools": [*CC_TOOLS, *SERVER_TOOLS], "messages": [
            um("what does the doc say?"),
            am(fetch_result("srvtoolu_gone"), text("The doc says hi.")), um("thanks")]},
        ("orphan_tool_result_dropped",), "unexpected `tool_use_id` found in "
        "`web_fetch_tool_result`", check=the_fetch_result_gone_the_answer_kept),
    # langchain-ai/langchain-anthropic: an empty text block kept between thinking and the call.
    "LangChain: an empty text block between signed thinking and the call, thinking on": Case(
        {"tools": CC_TOOLS, "thinking": THINKING_ON, "messages": [
            um("read a.py"), am(think("plan the read"), text(""), read("toolu_1")),
            um(done("toolu_1", "A"))]},
        ("empty_content_dropped",), "text content blocks must be non-empty",
        check=thinking_kept_blank_gone),
    # Roo Code's screenshot result: a blank caption beside the image.
    "Roo Code: a screenshot result with a blank caption": Case(
        {"tools": CC_TOOLS, "messages": [
            um("take a screenshot"), am(bash("toolu_1", "screencap")),
            um(done("toolu_1", [text("\n"), image()]))]},
        ("empty_content_dropped",), "text content blocks must contain non-whitespace",
        check=the_blank_text_gone_the_image_kept),
    # Vercel AI SDK: string contents, and a whitespace part beside the tool result.
    "Vercel AI SDK: a whitespace text part beside a tool result, string turns around": Case(
        {"tools": CC_TOOLS, "messages": [
            um("Summarize the repo."), {"role": "assistant", "content": [read("toolu_1")]},
            um(done("toolu_1", "README"), text("  ")),
            {"role": "assistant", "content": "It is a gateway."}, um("thanks")]},
        ("empty_content_dropped",), "text content blocks must contain non-whitespace",
        check=the_string_turns_kept),
}


async def _send_messages(gw_root: str, body: dict[str, Any],
                         headers: dict[str, str]) -> tuple[Any, httpx.Headers]:
    async with anthropic.AsyncAnthropic(base_url=gw_root, api_key="client-key",
                                        max_retries=0) as c:
        raw = await c.messages.with_raw_response.create(  # type: ignore[call-overload]
            **body, extra_headers=headers)
        return await raw.parse(), raw.headers


@pytest.mark.parametrize("name", list(MESSAGES))
async def test_messages_framework_history(gateway_factory: GatewayFactory, name: str) -> None:
    case = MESSAGES[name]
    body = {"model": CLAUDE, "max_tokens": 64, **case.broken}
    before = copy.deepcopy(body)
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with httpx.AsyncClient() as direct:
            refused = await direct.post(f"{fake.base_url}/v1/messages", json=body, headers={
                "x-api-key": "upstream-anthropic-key", "anthropic-version": "2023-06-01"})
        assert refused.status_code == 400
        assert case.refusal in refused.json()["error"]["message"]
        sent_before = len(fake.requests)
        answer, headers = await _send_messages(gw.root, body, case.headers)
        accepted = fake.requests[-1].body
        tries = len(fake.requests) - sent_before
    assert body == before  # the client's body is never edited
    assert answer.type == "message" and answer.content[0].type in ("text", "tool_use")
    for kind in case.repairs:
        assert kind in headers["x-gateway-repairs"], headers.get("x-gateway-repairs")
    assert tries == (2 if case.strict else 1)
    if case.strict:
        assert headers["x-gateway-recovery"] == "strict"
    anthropic_rules.validate_messages_request(accepted)
    if case.check is not None:
        case.check(accepted)
    again, more = _messages_round(orjson.loads(orjson.dumps(accepted)))
    assert more == set() and again == accepted


MESSAGES_VALID: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    # Claude Code's own shape of an interrupted call: an error result and the marker.
    "Claude Code: an interrupted call written as an error result and the marker": ({
        "tools": CC_TOOLS, "messages": [
            um("read a and b"), am(read("toolu_1", "a.py"), read("toolu_2", "b.py")),
            um(done("toolu_1", "A"), done("toolu_2", INTERRUPTED_TOOL, is_error=True),
               text(INTERRUPTED_TOOL)), um("read c.py instead")]}, {}),
    # Consecutive user messages are one turn: results split over them are valid as sent.
    "Claude Code: parallel results in consecutive user messages": ({
        "tools": CC_TOOLS, "messages": [
            um("run both"), am(bash("toolu_1", "make fmt"), bash("toolu_2", "make lint")),
            um(done("toolu_1", "A")), um(done("toolu_2", "B"))]}, {}),
    # The Read tool on an image, cache breakpoints on the system, the tools, a result.
    "Claude Code: a screenshot read into a tool result, breakpoints on four blocks": ({
        "system": [text("You are Claude Code.", cache_control=CACHE),
                   text("env: linux", cache_control=CACHE)],
        "tools": [*CC_TOOLS[:2], {**CC_TOOLS[2], "cache_control": CACHE}],
        "messages": [
            um("what is on screen.png?"), am(read("toolu_1", "screen.png")),
            um(done("toolu_1", [image()], cache_control=CACHE)), am(text("A green square.")),
            um("thanks")]}, {}),
    # Signed and redacted thinking across turns, the latest one's tool call answered.
    "Claude Code: redacted and signed thinking across two tool turns, thinking on": ({
        "tools": CC_TOOLS, "thinking": THINKING_ON, "messages": [
            um("fix the bug"), am(redacted(), think("read first"), read("toolu_1")),
            um(done("toolu_1", "bug here")), am(think("now run"), bash("toolu_2", "pytest")),
            um(done("toolu_2", "1 failed"))]}, {}),
    # Server tools: a search, a fetch and a code run answered in one assistant turn.
    "Claude Code: web search, web fetch and code execution answered in one turn": ({
        "tools": [*CC_TOOLS, *SERVER_TOOLS], "thinking": THINKING_ON, "messages": [
            um("check the doc and count the rows"),
            am(think("search, fetch, count"), server_use("srvtoolu_s1"),
               search_result("srvtoolu_s1"), fetch_use("srvtoolu_f1"),
               fetch_result("srvtoolu_f1"), code_use("srvtoolu_c1"),
               code_result("srvtoolu_c1"), text("42 rows; the doc says hi.")),
            um("thanks")]}, {"anthropic-beta": "code-execution-2025-08-25"}),
    # Context editing: Claude Code's clear_tool_uses edit with its beta header.
    "Claude Code: context_management clearing old tool results": ({
        "tools": CC_TOOLS, "context_management": {"edits": [{
            "type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens",
                                                            "value": 30000},
            "keep": {"type": "tool_uses", "value": 3}, "exclude_tools": ["Task"]}]},
        "messages": [um("read a"), am(read("toolu_1")), um(done("toolu_1", "A")),
                     am(text("done")), um("next")]},
        {"anthropic-beta": "context-management-2025-06-27"}),
    # A file uploaded to the code execution container (Files API), then its run.
    "the Files API: a container_upload block, then code execution on it": ({
        "tools": SERVER_TOOLS, "messages": [
            um({"type": "container_upload", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"},
               text("count the rows of the csv")),
            am(code_use("srvtoolu_c1"), code_result("srvtoolu_c1"), text("42 rows.")),
            um("thanks")]},
        {"anthropic-beta": "code-execution-2025-08-25,files-api-2025-04-14"}),
    # PydanticAI / Vercel AI SDK: string contents beside block lists, a retry prompt.
    "PydanticAI: string and list contents, a retry prompt as an error result": ({
        "tools": CC_TOOLS, "messages": [
            um("read a.py"), {"role": "assistant", "content": [read("toolu_1", "")]},
            um(done("toolu_1", "file_path must not be empty\n\nFix the errors and try "
                               "again.", is_error=True)),
            {"role": "assistant", "content": [text("Retrying."), read("toolu_2")]},
            um(done("toolu_2", [text("print('hi')")])),
            {"role": "assistant", "content": "It prints hi."}, um("thanks")]}, {}),
}


@pytest.mark.parametrize("name", list(MESSAGES_VALID))
async def test_valid_messages_framework_history_arrives_as_sent(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    body, headers = MESSAGES_VALID[name]
    # The API takes container_upload blocks in user turns (the Files API with code
    # execution); the fake learns that block here.
    monkeypatch.setattr(anthropic_rules, "USER_BLOCKS",
                        (*anthropic_rules.USER_BLOCKS, "container_upload"))
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        await assert_arrives_as_sent(gw, f"{gw.root}/v1/messages",
                                     {"model": CLAUDE, "max_tokens": 64, **body},
                                     {**ANTHROPIC_AUTH, **headers}, fake)
        assert all(fake.requests[-1].headers.get(k) == v for k, v in headers.items())


# -- Responses: Codex CLI, the Agents SDK and friends ---------------------------------------

FN = [{"type": "function", "name": "read_file", "description": "read a file",
       "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]
CODEX_TOOLS = [
    {"type": "local_shell"},
    {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
     "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"}},
    {"type": "web_search"},
]
CODEX = {"store": False, "include": ["reasoning.encrypted_content"],
         "reasoning": {"effort": "medium", "summary": "auto"}, "parallel_tool_calls": True,
         "prompt_cache_key": "0199a1b2-codex-session", "tools": CODEX_TOOLS,
         "instructions": "You are Codex, a coding agent."}
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"


def user(words: str) -> dict[str, Any]:
    return {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": words}]}


def thought(secret: str = "gAAAA-codex-1", item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "summary": [
        {"type": "summary_text", "text": "**Planning the edit**"}], "content": None,
        "encrypted_content": secret}
    if item_id is not None:
        item["id"] = item_id
    return item


def patch(call_id: str) -> dict[str, Any]:
    return {"type": "custom_tool_call", "call_id": call_id, "name": "apply_patch",
            "input": PATCH, "status": "completed"}


def patched(call_id: str) -> dict[str, Any]:
    return {"type": "custom_tool_call_output", "call_id": call_id,
            "output": "Exit code: 0\nOutput:\nSuccess. Updated the following files:\nA hello.txt\n"}


def shell(call_id: str, command: str = "ls") -> dict[str, Any]:
    return {"type": "local_shell_call", "call_id": call_id, "status": "completed",
            "action": {"type": "exec", "command": ["bash", "-lc", command],
                       "timeout_ms": 10000, "working_directory": "/repo", "env": {},
                       "user": None}}


def shelled(call_id: str, out: str = "a.py\n") -> dict[str, Any]:
    return {"type": "local_shell_call_output", "call_id": call_id,
            "output": orjson.dumps({"output": out, "metadata": {
                "exit_code": 0, "duration_seconds": 0.1}}).decode()}


def said(words: str, item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": words, "annotations": []}]}
    if item_id is not None:
        item["id"] = item_id
    return item


def call(call_id: str, name: str = "read_file", arguments: str = "{}",
         item_id: str | None = None) -> dict[str, Any]:
    item = {"type": "function_call", "call_id": call_id, "name": name,
            "arguments": arguments}
    if item_id is not None:
        item["id"] = item_id
    return item


def output(call_id: str, value: Any = "contents") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": value}


# -- what the Responses upstream accepted ---------------------------------------------------


def the_patch_answered_its_own_way(items: list[Any]) -> None:
    # A custom call is answered by a custom output; the encrypted reasoning goes as sent.
    assert items[2] == thought()
    assert items[3] == patch("call_p1")
    assert items[4] == {"type": "custom_tool_call_output", "call_id": "call_p1",
                        "output": SYNTHETIC_TOOL_RESULT_TEXT}
    assert items[-1] == user("stop, write it to b.txt")


def the_shell_answered_its_own_way(items: list[Any]) -> None:
    assert items[2] == thought("gAAAA-codex-2")
    assert [i["type"] for i in items[3:5]] == ["local_shell_call", "local_shell_call_output"]
    assert items[4]["call_id"] == "call_s1"
    assert items[4]["output"] == SYNTHETIC_TOOL_RESULT_TEXT


def the_run_answered_and_the_cancelled_one_synthesized(items: list[Any]) -> None:
    outputs = {i["call_id"]: i["output"] for i in items
               if i["type"] == "local_shell_call_output"}
    assert outputs["call_a"] == shelled("call_a")["output"]
    assert outputs["call_b"] == SYNTHETIC_TOOL_RESULT_TEXT
    assert thought("gAAAA-codex-3") in items


def the_handoff_answered(items: list[Any]) -> None:
    assert items[1] == call("call_h1", "transfer_to_refund_agent")
    assert items[2] == output("call_h1", SYNTHETIC_TOOL_RESULT_TEXT)


def the_reused_call_ids_told_apart(items: list[Any]) -> None:
    calls = [i for i in items if i.get("type") == "function_call"]
    outs = [i for i in items if i.get("type") == "function_call_output"]
    assert [c["arguments"] for c in calls] == ['{"path":"a.py"}', '{"path":"b.py"}']
    assert len({c["call_id"] for c in calls}) == 2
    assert [o["call_id"] for o in outs] == [c["call_id"] for c in calls]
    assert [o["output"] for o in outs] == ["A", "B"]


def the_relay_numbering_told_apart(items: list[Any]) -> None:
    calls = [i for i in items if i.get("type") in ("custom_tool_call", "local_shell_call")]
    outs = [i for i in items if i.get("type") in ("custom_tool_call_output",
                                                   "local_shell_call_output")]
    assert len({c["call_id"] for c in calls}) == 4
    assert [o["call_id"] for o in outs] == [c["call_id"] for c in calls]
    assert "bye" in calls[2]["input"] and outs[3]["output"] == shelled("x", "bye\n")["output"]
    assert [c["call_id"] for c in calls[:2]] == ["call_0", "call_1"]  # the first as sent


def the_orphan_gone_the_reasoning_kept(items: list[Any]) -> None:
    assert all(i.get("type") != "function_call_output" for i in items)
    assert thought("gAAAA-codex-4") in items


def the_second_call_kept_without_its_id(items: list[Any]) -> None:
    # The later item that reused "fc_1" is another call: it stays (without the id).
    calls = [i for i in items if i.get("type") == "function_call"]
    assert [c["call_id"] for c in calls] == ["call_1", "call_2"]
    outs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert outs == ["call_1", "call_2"]


@dataclass
class ResponsesCase:
    """A broken Responses history (see :class:`Case`)."""

    broken: dict[str, Any]
    repairs: tuple[str, ...]
    refusal: str
    strict: bool = False
    check: Callable[[list[Any]], None] | None = None


RESPONSES: dict[str, ResponsesCase] = {
    # openai/codex (Ctrl-C during a freeform apply_patch; ds4#745 "Function call output is
    # missing for call id"): the custom call stays without its output.
    "Codex: Ctrl-C during a freeform apply_patch, stateless with encrypted reasoning": (
        ResponsesCase(
            {**CODEX, "input": [user("add hello.txt"), said("On it."), thought(),
                                patch("call_p1"), user("stop, write it to b.txt")]},
            ("tool_result_synthesized",), "No tool output found for custom tool call",
            check=the_patch_answered_its_own_way)),
    "Codex: Ctrl-C during a local shell call": ResponsesCase(
        {**CODEX, "input": [user("list files"), said("Listing."), thought("gAAAA-codex-2"),
                            shell("call_s1"), user("never mind")]},
        ("tool_result_synthesized",), "No tool output found for local shell call",
        check=the_shell_answered_its_own_way),
    "Codex: parallel shell calls, the turn aborted after the first finished": ResponsesCase(
        {**CODEX, "input": [user("lint and test"), thought("gAAAA-codex-3"),
                            shell("call_a", "ruff ."), shell("call_b", "pytest"),
                            shelled("call_a"), user("skip the tests")]},
        ("tool_result_synthesized",), "No tool output found for local shell call",
        check=the_run_answered_and_the_cancelled_one_synthesized),
    # openai/openai-agents-js#42: a handoff's transfer call is left without its output.
    "Agents SDK: a handoff's transfer call without its output": ResponsesCase(
        {"tools": [*FN, {**FN[0], "name": "transfer_to_refund_agent"}], "input": [
            user("I want a refund"), call("call_h1", "transfer_to_refund_agent"),
            user("hello?")]},
        ("tool_result_synthesized",), "No tool output found for function call",
        check=the_handoff_answered),
    # Gemini-backed LangGraph / PydanticAI agents number calls from zero every turn.
    "LangGraph: call ids reused on every turn, no item ids": ResponsesCase(
        {"tools": FN, "input": [
            user("read a.py"), call("call_0", arguments='{"path":"a.py"}'),
            output("call_0", "A"), said("Now b."), user("read b.py"),
            call("call_0", arguments='{"path":"b.py"}'), output("call_0", "B"),
            user("compare")]},
        ("tool_call_id_rewritten",), "Duplicate function_call_output for call_id",
        check=the_reused_call_ids_told_apart),
    # The Agents SDK loop on a Gemini-backed model: parallel calls under one id.
    "Agents SDK on a Gemini backend: two parallel calls under one call id": ResponsesCase(
        {"tools": FN, "input": [
            user("read a.py and b.py"), call("call_0", arguments='{"path":"a.py"}'),
            call("call_0", arguments='{"path":"b.py"}'), output("call_0", "A"),
            output("call_0", "B"), user("compare")]},
        ("tool_call_id_rewritten",), "Duplicate function_call_output for call_id",
        check=the_reused_call_ids_told_apart),
    # The same on Codex's own calls behind a relay that numbers them per response.
    "Codex behind a relay: apply_patch and shell calls numbered per response": ResponsesCase(
        {**CODEX, "input": [
            user("add hello.txt"), patch("call_0"), patched("call_0"), shell("call_1", "ls"),
            shelled("call_1"), user("now bye.txt"),
            {**patch("call_0"), "input": PATCH.replace("hello", "bye")},
            patched("call_0"), shell("call_1", "cat bye.txt"), shelled("call_1", "bye\n"),
            user("thanks")]},
        ("tool_call_id_rewritten",), "Duplicate function_call_output for call_id",
        check=lambda items: the_relay_numbering_told_apart(items)),
    # A context trimmer (LangGraph trim_messages, Codex's own truncation) cut a call away.
    "a trim that left an output before the user's turn, stateless": ResponsesCase(
        {**CODEX, "input": [
            {"type": "function_call_output", "call_id": "call_gone", "output": "old"},
            user("continue"), thought("gAAAA-codex-4"), said("Done."), user("next")],
         "tools": FN},
        ("orphan_tool_result_dropped",), "No tool call found for function call output",
        check=the_orphan_gone_the_reasoning_kept),
    # A relay minting item ids per response ("fc_1" on every turn).
    "a relay's item id used again for another call": ResponsesCase(
        {"tools": FN, "input": [
            user("read a"), call("call_1", item_id="fc_1"), output("call_1"), user("and b"),
            call("call_2", arguments='{"path":"b"}', item_id="fc_1"), output("call_2"),
            user("compare")]},
        ("item_id_removed",), "Duplicate item found with id fc_1",
        check=the_second_call_kept_without_its_id),
}


@pytest.mark.parametrize("name", list(RESPONSES))
async def test_responses_framework_history(gateway_factory: GatewayFactory,
                                           name: str) -> None:
    case = RESPONSES[name]
    body = {"model": GPT, **case.broken}
    before = copy.deepcopy(body)
    async with FakeResponses(api_key="upstream-openai-key") as fake:
        gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
        async with httpx.AsyncClient() as direct:
            refused = await direct.post(f"{fake.base_url}/v1/responses", json=body,
                                        headers={"authorization": "Bearer upstream-openai-key"})
        assert refused.status_code in (400, 404)
        assert case.refusal in refused.json()["error"]["message"]
        sent_before = len(fake.requests)
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            raw = await c.responses.with_raw_response.create(**body)
        accepted = fake.requests[-1].body["input"]
        tries = len(fake.requests) - sent_before
    assert body == before
    assert raw.parse().output_text
    for kind in case.repairs:
        assert kind in raw.headers["x-gateway-repairs"], raw.headers.get("x-gateway-repairs")
    assert tries == (2 if case.strict else 1)
    if case.strict:
        assert raw.headers["x-gateway-recovery"] == "strict"
    if case.check is not None:
        case.check(accepted)
    assert repair_input(accepted, store=body.get("store") is not False) == (accepted, ())


RESPONSES_VALID: dict[str, dict[str, Any]] = {
    # A Codex CLI turn as it sends it: stateless, encrypted reasoning, a shell run, a
    # freeform patch, a web search, the answer.
    "Codex: a stateless turn with shell, apply_patch and web search": {**CODEX, "input": [
        {"type": "message", "role": "developer", "content": [
            {"type": "input_text", "text": "<permissions instructions>"}]},
        user("<environment_context><cwd>/repo</cwd></environment_context>"),
        user("add hello.txt and check the docs"),
        thought("gAAAA-v1"), shell("call_s1"), shelled("call_s1"),
        thought("gAAAA-v2"), patch("call_p1"), patched("call_p1"),
        thought("gAAAA-v3"),
        {"type": "web_search_call", "status": "completed",
         "action": {"type": "search", "query": "lark grammar"}},
        said("Added hello.txt."), user("thanks")]},
    # An Agents SDK handoff as to_input_list() writes it, the next agent's call after it.
    "Agents SDK: a handoff, then the next agent's tool call": {
        "tools": FN, "input": [
            {"role": "user", "content": "I want a refund"},
            call("call_h1", "transfer_to_refund_agent", item_id="fc_h1"),
            output("call_h1", '{"assistant": "Refund Agent"}'),
            said("Let me look up your order.", "msg_r1"),
            call("call_r1", arguments='{"path":"orders.json"}', item_id="fc_r1"),
            output("call_r1", [{"type": "input_text", "text": "order 42: paid"}]),
            {"role": "user", "content": "and?"}]},
    # NousResearch/hermes-agent#106722: a reasoning-only turn replayed with an empty
    # assistant message after it (OpenAI wants an item after the reasoning).
    "hermes-agent: a reasoning-only turn replayed with an empty assistant message": {
        **CODEX, "input": [
            user("think about it"), thought("gAAAA-h1"),
            {"role": "assistant", "content": ""}, user("and now?")]},
    "a reasoning-only turn whose message holds one empty output_text": {
        **CODEX, "input": [
            user("think about it"), thought("gAAAA-h2", "rs_h2"),
            said("", "msg_h2"), user("and now?")]},
    # PydanticAI / Vercel AI SDK: easy messages with string content beside part lists.
    "PydanticAI: easy string messages beside part lists": {
        "tools": FN, "input": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "input_text", "text": "what is in this picture?"},
                {"type": "input_image", "image_url": "https://example.com/cat.png",
                 "detail": "auto"}]},
            {"role": "assistant", "content": "A cat."},
            {"role": "user", "content": "read a.py"},
            call("call_1"), output("call_1", "print('hi')"),
            {"role": "user", "content": "thanks"}]},
}


@pytest.mark.parametrize("name", list(RESPONSES_VALID))
async def test_valid_responses_framework_history_arrives_as_sent(
        gateway_factory: GatewayFactory, name: str) -> None:
    async with FakeResponses(api_key="upstream-openai-key") as fake:
        gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
        await assert_arrives_as_sent(gw, f"{gw.base_url}/responses",
                                     {"model": GPT, **RESPONSES_VALID[name]}, OPENAI_AUTH, fake)


async def test_agents_sdk_continuation_with_only_the_new_output(
        gateway_factory: GatewayFactory) -> None:
    # The Agents SDK with previous_response_id sends only what is new: the tool's output.
    # It goes as sent, and the answer continues the stored response.
    async with FakeResponses(api_key="upstream-openai-key") as fake:
        gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            first = await c.responses.create(model=GPT, tools=FN,  # type: ignore[arg-type]
                                             input="read a.py TOOL")
            made = first.output[0]
            assert made.type == "function_call"
            body = {"model": GPT, "tools": FN, "previous_response_id": first.id,
                    "input": [output(made.call_id, "print('hi')")]}
            raw = orjson.dumps(body)
            async with httpx.AsyncClient() as h:
                answer = await h.post(f"{gw.base_url}/responses", content=raw, headers={
                    **OPENAI_AUTH, "content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert "x-gateway-repairs" not in answer.headers
    assert fake.requests[-1].raw == raw
    assert "print('hi')" in answer.json()["output"][0]["content"][0]["text"]


async def test_a_continuation_sending_the_stored_call_again_beside_its_output(
        gateway_factory: GatewayFactory) -> None:
    # MacPaw/OpenAI#432: with previous_response_id, the client sends the response's
    # function_call again (its fc_ id) with the output: "Duplicate item found". The call the
    # stored response holds is not sent twice; the output reaches the model.
    async with FakeResponses(api_key="upstream-openai-key") as fake:
        gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            first = await c.responses.create(model=GPT, tools=FN,  # type: ignore[arg-type]
                                             input="read a.py TOOL")
            made = first.output[0].model_dump(exclude_none=True)
            assert made["type"] == "function_call" and made["id"].startswith("fc_")
            async with httpx.AsyncClient() as direct:
                refused = await direct.post(
                    f"{fake.base_url}/v1/responses",
                    headers={"authorization": "Bearer upstream-openai-key"},
                    json={"model": GPT, "tools": FN, "previous_response_id": first.id,
                          "input": [made, output(made["call_id"], "print('hi')")]})
            assert "Duplicate item found with id" in refused.json()["error"]["message"]
            raw = await c.responses.with_raw_response.create(
                model=GPT, tools=FN, previous_response_id=first.id,  # type: ignore[arg-type]
                input=[made, output(made["call_id"], "print('hi')")])  # type: ignore[list-item]
        sent = fake.requests[-1].body
    assert "duplicate_item_dropped" in raw.headers["x-gateway-repairs"]
    assert "print('hi')" in raw.parse().output_text
    assert sent["input"] == [output(made["call_id"], "print('hi')")]


async def test_claude_code_streams_the_interrupted_session(
        gateway_factory: GatewayFactory) -> None:
    # Claude Code streams every turn: the repaired history's answer streams back whole.
    case = MESSAGES["Claude Code: Esc after a thinking turn's tool call, thinking on"]
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c, c.messages.stream(
                model=CLAUDE, max_tokens=64, **case.broken) as stream:  # type: ignore[arg-type]
            final = await stream.get_final_message()
            repairs = stream.response.headers["x-gateway-repairs"]
        accepted = fake.requests[-1].body
    assert len(fake.requests) == 1
    assert final.stop_reason == "end_turn" and final.content[-1].type == "text"
    assert repairs == "tool_result_synthesized=1"
    the_signed_thinking_kept_on(accepted)


async def test_codex_streams_the_interrupted_patch(gateway_factory: GatewayFactory) -> None:
    # Codex streams every turn: the Ctrl-C'd apply_patch is answered, the reasoning it was
    # made with goes as sent, and the stream ends with response.completed.
    case = RESPONSES["Codex: Ctrl-C during a freeform apply_patch, stateless with encrypted "
                     "reasoning"]
    async with FakeResponses(api_key="upstream-openai-key") as fake:
        gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            raw = await c.responses.with_raw_response.create(
                model=GPT, stream=True, **case.broken)
            events = [event.type async for event in raw.parse()]
        accepted = fake.requests[-1].body["input"]
    assert events[0] == "response.created" and events[-1] == "response.completed"
    assert "response.output_text.delta" in events
    assert raw.headers["x-gateway-repairs"] == "tool_result_synthesized=1"
    the_patch_answered_its_own_way(accepted)


REUSED_IDS = {
    "messages": MESSAGES["Roo/Kilo: a tool id reused by a later turn's different call"].broken,
    "messages, parallel": MESSAGES["Claude Code: two parallel calls under one id, each "
                                   "answered"].broken,
    "responses": RESPONSES["LangGraph: call ids reused on every turn, no item ids"].broken,
    "responses, parallel": RESPONSES["Agents SDK on a Gemini backend: two parallel calls under "
                                     "one call id"].broken,
}


@pytest.mark.parametrize("name", list(REUSED_IDS))
async def test_reused_ids_reach_a_chat_only_model_each_result_with_its_call(
        gateway_factory: GatewayFactory, name: str) -> None:
    # The same histories to a model that speaks only Chat Completions (the strict referee):
    # each tool message answers the call that made it, under an id of its own.
    async with Referee(rules="strict") as referee:
        model = CLAUDE if name.startswith("messages") else GPT
        gw = await gateway_factory({
            "model_list": [{"model_name": model, "litellm_params": {
                "model": "hosted_vllm/referee", "api_base": referee.base_url,
                "api_key": "k"}}],
            "gateway": {"api_keys": ["client-key"]}})
        if model == CLAUDE:
            answer, _ = await _send_messages(gw.root, {"model": CLAUDE, "max_tokens": 64,
                                                       **REUSED_IDS[name]}, {})
            assert answer.content[0].type == "text"
        else:
            async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                          max_retries=0) as c:
                done_ = await c.responses.create(model=GPT, **REUSED_IDS[name])
            assert done_.status == "completed"
        chat = orjson.loads(referee.requests[-1].body)["messages"]
    calls = {call["id"]: orjson.loads(call["function"]["arguments"])
             for m in chat if m["role"] == "assistant" for call in m.get("tool_calls") or ()}
    answers = {m["tool_call_id"]: m["content"] for m in chat if m["role"] == "tool"}
    assert len(calls) == 2 and set(answers) == set(calls)
    paths = {answers[i]: next(iter(args.values())) for i, args in calls.items()}
    assert paths == {"A": "a.py", "B": "b.py"}


async def test_a_reasoning_only_turn_reaches_a_chat_only_model(
        gateway_factory: GatewayFactory) -> None:
    # The same history to a model that speaks only Chat Completions: answered, the reasoning
    # and its empty placeholder left out (a chat model cannot read them).
    body = RESPONSES_VALID["hermes-agent: a reasoning-only turn replayed with an empty "
                           "assistant message"]
    async with Referee(rules="strict") as referee:
        gw = await gateway_factory({
            "model_list": [{"model_name": GPT, "litellm_params": {
                "model": "hosted_vllm/referee", "api_base": referee.base_url,
                "api_key": "k"}}],
            "gateway": {"api_keys": ["client-key"]}})
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            answer = await c.responses.create(model=GPT, **body)
        chat = orjson.loads(referee.requests[-1].body)["messages"]
    assert answer.status == "completed" and answer.output_text
    assert all(m["role"] in ("system", "user") for m in chat)
    assert "and now?" in orjson.dumps(chat).decode()


async def test_an_item_reference_to_a_stored_call_goes_as_sent(
        gateway_factory: GatewayFactory) -> None:
    # The Agents SDK / Vercel AI SDK with store on refer to the model's stored call by an
    # item_reference and send only its output: valid, so it goes byte for byte.
    async with FakeResponses(api_key="upstream-openai-key") as fake:
        gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            first = await c.responses.create(model=GPT, tools=FN,  # type: ignore[arg-type]
                                             input="read a.py TOOL")
        made = first.output[0]
        assert made.type == "function_call"
        await assert_arrives_as_sent(
            gw, f"{gw.base_url}/responses",
            {"model": GPT, "tools": FN, "input": [
                {"role": "user", "content": "read a.py TOOL"},
                {"type": "item_reference", "id": made.id},
                output(made.call_id, "print('hi')")]}, OPENAI_AUTH, fake)
