"""Held-out wire situations, seventh set, Messages only: what agents that use the newer
parts of the API send. MCP connector turns and code execution cut by a trimmer, a tool's
call answered by several blocks under the interleaved-thinking beta sent again without
the beta header, an assistant turn that is only (redacted) thinking, a prefill of only
thinking, tool ids written in other scripts, a turn of a hundred parallel calls deep in a
two-hundred-turn session, breakpoints placed over tools, system and a tool's screenshot,
settings thinking refuses (``top_k``, a forced tool), a client tool named like a server
tool; the same histories counted with ``count_tokens`` and streamed.

Each broken history is refused by the native fake with the API's words and answered
through the gateway (the official SDK) with ``x-gateway-repairs`` naming the repair; what
the upstream finally accepted is checked where the repair's meaning matters, and sending
that again repairs nothing. Valid neighbours arrive byte for byte, unreported; what no
repair can make sense of gets a 4xx in the Messages error shape.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from gateway.projection import project
from gateway.projection.exchanges import SYNTHETIC_TOOL_RESULT_TEXT
from tests.conftest import GatewayFactory
from tests.fakes.anthropic_server import FakeAnthropic
from tests.wires.test_wire_heldout import PNG, WEB_TOOLS, redacted
from tests.wires.test_wire_rules import _messages_round
from tests.wires.test_wire_situations import (
    CACHE,
    CACHE_1H,
    CLAUDE,
    THINKING_ON,
    TOOLS,
    Situation,
    am,
    assert_arrives_as_sent,
    native_config,
    text,
    think,
    um,
)

ANTHROPIC_AUTH = {"x-api-key": "client-key", "anthropic-version": "2023-06-01"}
INTERLEAVED = "interleaved-thinking-2025-05-14"
MCP_BETA = "mcp-client-2025-04-04"
MCP_SERVERS = [{"type": "url", "url": "https://mcp.deepwiki.com/mcp", "name": "deepwiki"}]
CODE_TOOLS = [{"type": "code_execution_20250825", "name": "code_execution"}]


@dataclass
class Case:
    """A situation, and what must hold of what the upstream finally accepted."""

    situation: Situation
    check: Callable[[dict[str, Any]], None] | None = None


def read(tool_id: str, path: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {"path": path}}


def answer(tool_id: str, output: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": output, **extra}


def image(data: str = PNG, **extra: Any) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                        "data": data}, **extra}


def mcp_use(tool_id: str) -> dict[str, Any]:
    return {"type": "mcp_tool_use", "id": tool_id, "name": "ask_question",
            "server_name": "deepwiki", "input": {"question": "what is it?"}}


def mcp_result(tool_id: str) -> dict[str, Any]:
    return {"type": "mcp_tool_result", "tool_use_id": tool_id, "is_error": False,
            "content": [text("a wiki answer")]}


def code_use(tool_id: str) -> dict[str, Any]:
    return {"type": "server_tool_use", "id": tool_id, "name": "bash_code_execution",
            "input": {"command": "wc -l data.csv"}}


def code_result(tool_id: str) -> dict[str, Any]:
    return {"type": "bash_code_execution_tool_result", "tool_use_id": tool_id, "content": {
        "type": "bash_code_execution_result", "stdout": "42 data.csv\n", "stderr": "",
        "return_code": 0, "content": []}}


def python_result(tool_id: str) -> dict[str, Any]:
    return {"type": "code_execution_tool_result", "tool_use_id": tool_id, "content": {
        "type": "code_execution_result", "stdout": "2\n", "stderr": "", "return_code": 0,
        "content": []}}


def sdk_args(method: Any, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as keyword arguments of an SDK method: the fields it names as parameters,
    the rest (``mcp_servers``, ``context_management``, ``top_k``) in ``extra_body``, as a
    client of the beta features passes them."""
    named = set(inspect.signature(method).parameters)
    return {**{k: v for k, v in body.items() if k in named},
            "extra_body": {k: v for k, v in body.items() if k not in named}}


async def run_case(gateway_factory: GatewayFactory, case: Situation) -> dict[str, Any]:
    """The broken history is refused by the native fake with the API's words, then
    answered through the gateway in one attempt with its repairs reported; returns what
    the upstream accepted."""
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        body = {"model": CLAUDE, "max_tokens": 64, **case.broken}
        async with httpx.AsyncClient() as direct:
            refused = await direct.post(f"{fake.base_url}/v1/messages", json=body, headers={
                "x-api-key": "upstream-anthropic-key", "anthropic-version": "2023-06-01"})
        assert refused.status_code == 400
        assert case.refusal in refused.json()["error"]["message"]
        before = len(fake.requests)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            create = c.messages.with_raw_response.create
            raw = await create(**sdk_args(c.messages.create, body))
        said = await raw.parse()
        assert said.content and said.content[0].type in ("text", "tool_use")
        repairs = raw.headers["x-gateway-repairs"]
        for kind in case.repairs:
            assert kind in repairs
        assert len(fake.requests[before:]) == 1
        sent: dict[str, Any] = fake.requests[-1].body
        return sent


PTC_TOOLS = [*CODE_TOOLS, {**TOOLS[0], "allowed_callers": ["code_execution_20250825"]}]


def from_code(tool_id: str, run: str = "srvtoolu_c1") -> dict[str, Any]:
    """A client tool called from a code run (programmatic tool calling)."""
    return {**read(tool_id, "a"), "caller": {"type": "code_execution_20250825",
                                              "tool_id": run}}


def blocks_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in body["messages"] for b in (
        m["content"] if isinstance(m["content"], list) else [text(m["content"])])]


# A 200-turn session whose last tool turn made 100 parallel calls; the trimmer that kept
# the session short lost the output of call 57 (the others came back in another order).
WIDE = [read(f"toolu_{n:03d}", f"f{n}.py") for n in range(100)]
LONG_SESSION = [m for n in range(50) for m in (
    um(f"step {n}"), am(read(f"toolu_s{n}", f"s{n}.py")), um(answer(f"toolu_s{n}", f"S{n}")),
    am(text(f"done {n}")))]
WIDE_TURN = [*LONG_SESSION, um("read them all"), am(*WIDE), um(*[
    answer(f"toolu_{n:03d}", f"F{n}") for n in reversed(range(100)) if n != 57])]


# -- what the upstream accepted ------------------------------------------------------------


def the_code_result_gone_the_words_kept(body: dict[str, Any]) -> None:
    assert body["messages"][1] == am(text("The file has 42 lines."))
    assert body["messages"][2:] == [um("thanks")]


def the_unanswered_run_gone_the_rest_kept(body: dict[str, Any]) -> None:
    assert body["messages"][1] == am(text("Let me count."), text("It has 42 lines."))
    assert body["messages"][3] == am(code_use("srvtoolu_c2"), code_result("srvtoolu_c2"),
                                     text("Now 43."))


def the_mcp_result_gone_the_call_kept(body: dict[str, Any]) -> None:
    assert body["messages"][1] == am(mcp_use("mcptoolu_1"), mcp_result("mcptoolu_1"),
                                     text("it says"))
    assert body["messages"][3] == am(text("still the same"))
    assert body["mcp_servers"] == MCP_SERVERS


def thinking_first_the_calls_in_order(body: dict[str, Any]) -> None:
    turn = body["messages"][1]["content"]
    assert [b["type"] for b in turn] == ["thinking", "thinking", "tool_use", "tool_use"]
    assert [b["id"] for b in turn[2:]] == ["t1", "t2"]
    assert body["thinking"] == THINKING_ON


def the_thinking_only_turn_gone(body: dict[str, Any]) -> None:
    assert body["messages"] == [um("hi"), um("are you there?")]


def the_thinking_prefill_gone(body: dict[str, Any]) -> None:
    assert body["messages"] == [um("plan the migration")]
    assert body["thinking"] == THINKING_ON


def ascii_ids_each_paired(body: dict[str, Any]) -> None:
    calls = [b for b in blocks_of(body) if b["type"] == "tool_use"]
    outputs = [b for b in blocks_of(body) if b["type"] == "tool_result"]
    ids = [c["id"] for c in calls]
    assert len(set(ids)) == 3 and all(re.fullmatch(r"[a-zA-Z0-9_-]+", x) for x in ids)
    assert [(c["input"]["path"], o["tool_use_id"], o["content"]) for c, o in zip(
        calls, outputs, strict=True)] == [("a", ids[0], "A"), ("b", ids[1], "B"),
                                          ("c", ids[2], "C")]


def the_lost_output_stood_in_for(body: dict[str, Any]) -> None:
    assert body["messages"][:-1] == WIDE_TURN[:-1]
    last = body["messages"][-1]["content"]
    by_id = {b["tool_use_id"]: b["content"] for b in last}
    assert len(last) == 100 and by_id["toolu_057"] == SYNTHETIC_TOOL_RESULT_TEXT
    assert by_id["toolu_003"] == "F3"


def at_most_four_breakpoints_the_latest_kept(body: dict[str, Any]) -> None:
    raw = orjson.dumps(body).decode()
    assert raw.count('"cache_control"') == 4
    # The breakpoint of the newest turn is the one a client's next call reads from.
    assert body["messages"][-1]["content"][-1]["cache_control"] == CACHE


def the_cleared_result_answered(body: dict[str, Any]) -> None:
    assert body["context_management"] == CLEAR_EDITS
    assert body["messages"][4:] == [um(answer("t2", SYNTHETIC_TOOL_RESULT_TEXT)), um("go on")]


def the_run_kept_the_call_answered(body: dict[str, Any]) -> None:
    assert body["messages"][1] == am(code_use("srvtoolu_c1"), from_code("toolu_1"))
    assert body["messages"][2:] == [um(answer("toolu_1", SYNTHETIC_TOOL_RESULT_TEXT)),
                                    um("go on")]


def the_run_renamed_everywhere(body: dict[str, Any]) -> None:
    run, call = body["messages"][1]["content"]
    assert re.fullmatch(r"srvtoolu_[a-zA-Z0-9_]+", run["id"])
    assert call["caller"] == {"type": "code_execution_20250825", "tool_id": run["id"]}
    assert body["messages"][3]["content"][0]["tool_use_id"] == run["id"]
    assert body["messages"][2] == um(answer("toolu_1", "A"))


CLEAR_EDITS = {"edits": [{"type": "clear_tool_uses_20250919",
                          "trigger": {"type": "input_tokens", "value": 30000},
                          "keep": {"type": "tool_uses", "value": 3}}]}

MESSAGES: dict[str, Case] = {
    # A trimmer that keeps an assistant turn's words and drops its "tool" blocks cut the
    # server_tool_use of a code run and kept its result.
    "a code execution result whose call a trimmer cut": Case(Situation(
        {"tools": CODE_TOOLS, "container": "container_011", "messages": [
            um("how long is data.csv?"),
            am(code_result("srvtoolu_c1"), text("The file has 42 lines.")), um("thanks")]},
        ("orphan_tool_result_dropped",),
        "unexpected `tool_use_id` found in `bash_code_execution_tool_result` blocks"),
        the_code_result_gone_the_words_kept),
    # The other way round: the run's result was cut (it held a large stdout), its call kept.
    "a code run whose result a trimmer cut, in an earlier turn": Case(Situation(
        {"tools": CODE_TOOLS, "messages": [
            um("how long is data.csv?"),
            am(text("Let me count."), code_use("srvtoolu_c1"), text("It has 42 lines.")),
            um("and after the append?"),
            am(code_use("srvtoolu_c2"), code_result("srvtoolu_c2"), text("Now 43.")),
            um("thanks")]},
        ("server_tool_use_dropped",),
        "bash_code_execution tool use with id srvtoolu_c1 was found without a corresponding"),
        the_unanswered_run_gone_the_rest_kept),
    # Goose / the MCP connector: a later turn's copy of an MCP result lost its call.
    "an MCP connector result left in a later turn without its call": Case(Situation(
        {"mcp_servers": MCP_SERVERS, "messages": [
            um("ask the wiki"), am(mcp_use("mcptoolu_1"), mcp_result("mcptoolu_1"),
                                   text("it says")),
            um("ask again"), am(mcp_result("mcptoolu_1"), text("still the same")),
            um("ok")]},
        ("orphan_tool_result_dropped",),
        "unexpected `tool_use_id` found in `mcp_tool_result` blocks"),
        the_mcp_result_gone_the_call_kept),
    # Claude Code answered two calls with interleaved thinking between them; a custom loop
    # replaying the session sends it without the beta header.
    "interleaved thinking between two calls, sent without the beta header": Case(Situation(
        {"thinking": THINKING_ON, "tools": TOOLS, "messages": [
            um("read a and b"), am(think("a first"), read("t1", "a"), think("then b"),
                                   read("t2", "b")),
            um(answer("t1", "A"), answer("t2", "B"))]},
        ("thinking_block_moved",), "`thinking` blocks must come before any other block"),
        thinking_first_the_calls_in_order),
    # A stream cut after the redacted block: the assistant turn holds nothing else.
    "an assistant turn of only redacted thinking, mid-session": Case(Situation(
        {"messages": [um("hi"), am(redacted()), um("are you there?")]},
        ("thinking_block_dropped",), "The final block in an assistant message cannot be"),
        the_thinking_only_turn_gone),
    # A prefill written with thinking on: the API refuses thinking as the final block.
    "a final assistant turn of only a thinking block, thinking on": Case(Situation(
        {"thinking": THINKING_ON, "messages": [um("plan the migration"),
                                               am(think("first the schema"))]},
        ("thinking_block_dropped",), "The final block in an assistant message cannot be"),
        the_thinking_prefill_gone),
    # Models naming calls in their own script or with an emoji; Cline keeps them as given.
    "tool ids in Cyrillic, with an emoji and a space": Case(Situation(
        {"tools": TOOLS, "messages": [
            um("read a, b and c"), am(read("вызов_1", "a"), read("call_🔧", "b"),
                                      read("call 3", "c")),
            um(answer("вызов_1", "A"), answer("call_🔧", "B"), answer("call 3", "C"))]},
        ("tool_id_rewritten",), "String should match pattern"), ascii_ids_each_paired),
    "a hundred parallel calls deep in a long session, one output lost": Case(Situation(
        {"tools": TOOLS, "messages": WIDE_TURN},
        ("tool_result_synthesized",), "ids were found without `tool_result` blocks"),
        the_lost_output_stood_in_for),
    # A LangChain cache helper marks the tools, the system and every turn; the SDK's own
    # example marks a tool's screenshot too.
    "six breakpoints over tools, system, a screenshot and the turns": Case(Situation(
        {"tools": [{**TOOLS[0], "cache_control": CACHE}],
         "system": [text("You are a coding agent.", cache_control=CACHE)],
         "messages": [
             um(text("shoot", cache_control=CACHE)), am(read("t1", "screen")),
             um(answer("t1", [image(cache_control=CACHE), text("the screen")])),
             am(text("A login form.", cache_control=CACHE)),
             um(text("fill it", cache_control=CACHE))]},
        ("cache_breakpoint_removed",), "A maximum of 4 blocks with cache_control"),
        at_most_four_breakpoints_the_latest_kept),
    # Claude Code's context editing on, and a trimmer cut a result the edit would clear.
    "context editing on, a result a trimmer cut": Case(Situation(
        {"tools": TOOLS, "context_management": CLEAR_EDITS, "messages": [
            um("read a then b"), am(read("t1", "a")), um(answer("t1", "A")),
            am(read("t2", "b")), um("go on")]},
        ("tool_result_synthesized",), "ids were found without `tool_result` blocks"),
        the_cleared_result_answered),
    # Programmatic tool calling: the run's call waits for its result in a later assistant
    # message; the trimmer lost the client's output of the call made from the run.
    "a call made from a code run, its output lost": Case(Situation(
        {"tools": PTC_TOOLS, "container": "container_011", "messages": [
            um("read a from code"), am(code_use("srvtoolu_c1"), from_code("toolu_1")),
            um("go on")]},
        ("tool_result_synthesized",), "ids were found without `tool_result` blocks"),
        the_run_kept_the_call_answered),
    # A relay that wrote ids its own way renamed the code run "srvtoolu-c1".
    "a code run's id written with a hyphen, a client call made from it": Case(Situation(
        {"tools": PTC_TOOLS, "container": "container_011", "messages": [
            um("read a from code"),
            am(code_use("srvtoolu-c1"), from_code("toolu_1", "srvtoolu-c1")),
            um(answer("toolu_1", "A")), am(code_result("srvtoolu-c1"), text("It says A.")),
            um("thanks")]},
        ("tool_id_rewritten",), "server_tool_use.id: String should match pattern"),
        the_run_renamed_everywhere),
    "thinking on, a final assistant turn of only redacted thinking": Case(Situation(
        {"thinking": THINKING_ON, "messages": [um("plan the migration"), am(redacted())]},
        ("thinking_block_dropped",), "The final block in an assistant message cannot be"),
        the_thinking_prefill_gone),
}


@pytest.mark.parametrize("name", list(MESSAGES))
async def test_messages_heldout(gateway_factory: GatewayFactory, name: str) -> None:
    case = MESSAGES[name]
    sent = await run_case(gateway_factory, case.situation)
    if case.check is not None:
        case.check(sent)


@pytest.mark.parametrize("name", list(MESSAGES))
def test_a_repaired_history_needs_no_repair_again(name: str) -> None:
    # The client's body is never mutated; what was sent, sent again, changes nothing.
    situation = MESSAGES[name].situation
    body = orjson.loads(orjson.dumps({"model": CLAUDE, "max_tokens": 64, **situation.broken}))
    before = copy.deepcopy(body)
    sent, kinds = _messages_round(body, situation.refusal if situation.strict else None)
    assert body == before
    assert set(situation.repairs) <= kinds
    again, more = _messages_round(orjson.loads(orjson.dumps(sent)))
    assert more == set() and again == sent


MESSAGES_VALID: dict[str, dict[str, Any]] = {
    "an MCP connector turn, then the user": {"mcp_servers": MCP_SERVERS, "messages": [
        um("ask the wiki"), am(mcp_use("mcptoolu_1"), mcp_result("mcptoolu_1"),
                               text("it says")), um("thanks")]},
    "a Python run and a bash run in one turn, in a container": {
        "tools": CODE_TOOLS, "container": "container_011", "messages": [
            um("compute, then count"),
            am({**code_use("srvtoolu_p1"), "name": "code_execution",
                "input": {"code": "print(1+1)"}}, python_result("srvtoolu_p1"),
               code_use("srvtoolu_b1"), code_result("srvtoolu_b1"), text("2 and 42.")),
            um("thanks")]},
    # Programmatic tool calling: the client's tool called from the code run.
    "a client call made from a code run (caller), answered": {
        "tools": PTC_TOOLS, "container": "container_011", "messages": [
            um("read a from code"), am(code_use("srvtoolu_c1"), from_code("toolu_1")),
            um(answer("toolu_1", "A"))]},
    "a client call made from a code run, then the run's result and the answer": {
        "tools": PTC_TOOLS, "container": "container_011", "messages": [
            um("read a from code"), am(code_use("srvtoolu_c1"), from_code("toolu_1")),
            um(answer("toolu_1", "A")), am(code_result("srvtoolu_c1"), text("It says A.")),
            um("thanks")]},
    "text citing a document the trimmer since removed": {"messages": [
        um("what colour is grass?"),
        am(text("Green.", citations=[{
            "type": "char_location", "cited_text": "The grass is green.", "document_index": 0,
            "document_title": "Facts", "start_char_index": 0, "end_char_index": 19}])),
        um("and the sky?")]},
    "search results in a tool result, cited in the answer": {"tools": TOOLS, "messages": [
        um("how long do refunds take?"), am(read("t1", "kb")),
        um(answer("t1", [{"type": "search_result", "source": "https://example.com/kb/1",
                          "title": "Refunds", "content": [text("Refunds take 30 days.")],
                          "citations": {"enabled": True}}])),
        am(text("30 days.", citations=[{
            "type": "search_result_location", "source": "https://example.com/kb/1",
            "title": "Refunds", "cited_text": "Refunds take 30 days.",
            "search_result_index": 0, "start_block_index": 0, "end_block_index": 1}])),
        um("thanks")]},
    "a tool's screenshot and caption, the breakpoint on the image": {
        "tools": TOOLS, "messages": [
            um("shoot"), am(read("t1", "screen")),
            um(answer("t1", [image(cache_control=CACHE), text("the screen")]))]},
    "the same image sent twice": {"messages": [
        um(image(), text("this")), am(text("A dot.")), um(image(), text("and again?"))]},
    "an hour-long system breakpoint before a five-minute one in the turns": {
        "system": [text("You are a coding agent.", cache_control=CACHE_1H)],
        "messages": [um(text("hi", cache_control=CACHE)), am(text("hello")), um("go")]},
    "no parallel calls asked, one call per turn": {
        "tools": TOOLS, "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "messages": [um("read a then b"), am(read("t1", "a")), um(answer("t1", "A")),
                     am(read("t2", "b")), um(answer("t2", "B"))]},
    "thinking on, top_p 0.95 and a temperature of 1": {
        "thinking": THINKING_ON, "top_p": 0.95, "temperature": 1,
        "messages": [um("hi")]},
}


@pytest.mark.parametrize("name", list(MESSAGES_VALID))
async def test_valid_messages_arrive_as_sent(gateway_factory: GatewayFactory,
                                             name: str) -> None:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        await assert_arrives_as_sent(gw, f"{gw.root}/v1/messages",
                                     {"model": CLAUDE, "max_tokens": 64,
                                      **MESSAGES_VALID[name]}, ANTHROPIC_AUTH, fake)


async def test_interleaved_thinking_with_a_middle_block_trimmed_arrives_as_sent(
        gateway_factory: GatewayFactory) -> None:
    # Three calls with thinking between them (the beta); a trimmer dropped the middle
    # thinking block. What is left is still in a valid order: nothing is moved.
    turn = am(think("a first"), read("t1", "a"), read("t2", "b"), think("then c"),
              read("t3", "c"))
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        await assert_arrives_as_sent(
            gw, f"{gw.root}/v1/messages",
            {"model": CLAUDE, "max_tokens": 64, "thinking": THINKING_ON, "tools": TOOLS,
             "messages": [um("read a, b, c"), turn,
                          um(answer("t1", "A"), answer("t2", "B"), answer("t3", "C"))]},
            {**ANTHROPIC_AUTH, "anthropic-beta": INTERLEAVED}, fake)


MESSAGES_REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    # quarkiverse/quarkus-langchain4j#1812, LibreChat#6023: a default top_k left on.
    "thinking on with top_k": (
        {"thinking": THINKING_ON, "top_k": 40, "messages": [um("hi")]},
        "`top_k` must be unset when thinking is enabled."),
    "thinking on with a named tool forced": (
        {"thinking": THINKING_ON, "tools": TOOLS,
         "tool_choice": {"type": "tool", "name": "read_file"},
         "messages": [um("read a"), am(think("plan"), read("t1", "a")),
                      um(answer("t1", "A"))]},
        "Thinking may not be enabled when tool_choice forces tool use."),
    # A client tool called web_search beside the server tool of that name.
    "a client tool named like the server tool beside it": (
        {"tools": [*WEB_TOOLS, {**TOOLS[0], "name": "web_search"}],
         "messages": [um("weather?")]},
        "tools: Tool names must be unique."),
}


@pytest.mark.parametrize("name", list(MESSAGES_REFUSED))
async def test_what_no_repair_fixes_is_a_clear_client_error(gateway_factory: GatewayFactory,
                                                             name: str) -> None:
    given, words = MESSAGES_REFUSED[name]
    body = {"model": CLAUDE, "max_tokens": 64, **given}
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            with pytest.raises(anthropic.BadRequestError) as refused:
                await c.post("/v1/messages", body=body, cast_to=httpx.Response)
            with pytest.raises(anthropic.BadRequestError) as streamed:
                async with c.messages.stream(**sdk_args(c.messages.create, body)) as stream:
                    await stream.get_final_message()
            with pytest.raises(anthropic.BadRequestError) as counted:
                await c.messages.count_tokens(**sdk_args(c.messages.count_tokens, {
                    k: v for k, v in body.items() if k != "max_tokens"}))
    for error in (refused.value, streamed.value, counted.value):
        assert error.status_code == 400
        said = error.body
        assert isinstance(said, dict) and said["type"] == "error"
        assert said["error"]["type"] == "invalid_request_error"
        assert words in said["error"]["message"]
        assert "Traceback" not in error.response.text
    assert len(fake.requests) <= 3  # each refused once, never retried as if repairable


# -- streamed and counted ------------------------------------------------------------------


STREAMED = {
    "a hundred parallel calls deep in a long session, one output lost":
        "tool_result_synthesized=1",
    "interleaved thinking between two calls, sent without the beta header":
        "thinking_block_moved=1",
    "a call made from a code run, its output lost": "tool_result_synthesized=1",
    "an MCP connector result left in a later turn without its call":
        "orphan_tool_result_dropped=1",
}


@pytest.mark.parametrize("name", list(STREAMED))
async def test_a_repaired_history_streamed_is_sent_once_and_answered(
        gateway_factory: GatewayFactory, name: str) -> None:
    case = MESSAGES[name]
    body = {"model": CLAUDE, "max_tokens": 64, **case.situation.broken}
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c, c.messages.stream(
                **sdk_args(c.messages.create, body)) as stream:
            final = await stream.get_final_message()
            repairs = stream.response.headers["x-gateway-repairs"]
    assert len(fake.requests) == 1 and fake.requests[0].body["stream"] is True
    assert repairs == STREAMED[name]
    assert final.content and final.content[0].type in ("text", "tool_use")
    assert case.check is not None
    case.check(fake.requests[0].body)


@pytest.mark.parametrize("name", list(MESSAGES))
async def test_count_tokens_counts_the_repaired_history(gateway_factory: GatewayFactory,
                                                        name: str) -> None:
    # Claude Code counts before it sends: a history the call repairs is counted repaired,
    # with the same repairs reported, and counts what the call then sends.
    situation = MESSAGES[name].situation
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            counted = await c.messages.with_raw_response.count_tokens(**sdk_args(
                c.messages.count_tokens, {"model": CLAUDE, **situation.broken}))
            await c.messages.create(**sdk_args(c.messages.create, {
                "model": CLAUDE, "max_tokens": 64, **situation.broken}))
    assert (await counted.parse()).input_tokens > 0
    for kind in situation.repairs:
        assert kind in counted.headers["x-gateway-repairs"]
    assert fake.requests[0].path == "/v1/messages/count_tokens"
    assert fake.requests[0].body["messages"] == fake.requests[-1].body["messages"]


def test_parallel_results_in_another_order_with_one_missing_report_only_its_stand_in() -> None:
    # The same rule on chat messages (every wire lays results out with it): the results the
    # client has stay in its order, the missing call's stand-in takes that call's slot.
    calls = [{"id": f"call_{n}", "type": "function",
              "function": {"name": "read_file", "arguments": "{}"}} for n in range(4)]
    history = [{"role": "user", "content": "read them"},
               {"role": "assistant", "content": None, "tool_calls": calls},
               *[{"role": "tool", "tool_call_id": f"call_{n}", "content": str(n)}
                 for n in (3, 2, 0)], {"role": "user", "content": "go on"}]
    projected = project(history)
    assert [a.kind for a in projected.anomalies] == ["tool_result_synthesized"]
    assert [m.get("tool_call_id") for m in projected.messages[2:6]] == [
        "call_3", "call_1", "call_2", "call_0"]
    assert projected.messages[3]["content"] == SYNTHETIC_TOOL_RESULT_TEXT
    assert project(projected.messages).anomalies == ()


# -- nothing left to send: a clear 400 that says why (the Responses wire's twin) ------------

@pytest.mark.parametrize("given", [
    pytest.param([um({"type": "tool_result", "tool_use_id": "toolu_trimmed",
                      "content": "42"})], id="a lone result whose call was trimmed"),
    pytest.param([um(text("  ")), am(text("")), um(text("\n"))], id="only blank turns"),
])
async def test_messages_of_nothing_sendable_are_a_clear_400(
        gateway_factory: GatewayFactory, given: list[Any]) -> None:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            with pytest.raises(anthropic.BadRequestError) as refused:
                await c.messages.create(model=CLAUDE, max_tokens=64,
                                        messages=given)  # type: ignore[arg-type]
        error = refused.value.body
        assert isinstance(error, dict) and error["type"] == "error"
        said = error["error"]["message"]
        assert "none of its" in said and "at least one message is required" not in said
        assert "_dropped=" in said  # what was left out, by repair
        assert not fake.requests  # nothing went upstream
