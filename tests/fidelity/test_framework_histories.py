"""Chat Completions histories in the shapes agent frameworks write them, never seen before.

The shapes follow what each framework's OpenAI adapter puts on the wire (AutoGen/AG2,
CrewAI, LlamaIndex, smolagents, Semantic Kernel, Haystack, DSPy, Mastra, LangGraph,
Letta, Cline/Roo/Continue/Aider, Claude Code through LiteLLM), with their quirks: ``name``
on messages, the legacy ``function`` role, ``refusal``, ``audio`` ids, ``developer``, tool
results as text parts, odd ``arguments``, ids reused across turns, prefills, media parts,
extension fields. The upstream is the referee enforcing OpenAI's own rules.

- A valid history reaches the upstream as the client's own bytes (only ``model`` spliced),
  with no ``x-gateway-repairs``.
- A broken one is answered ``200``: the repairs are named in ``x-gateway-repairs``, the
  upstream got a shape its rules accept, no user text was lost, and the fields the repair
  did not concern (top-level and per message) arrived as sent. Against the referee's
  strict rules (Anthropic-style role rules) the ladder's strict rung finishes the job.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.projection import SYNTHETIC_TOOL_RESULT_TEXT, project
from gateway.referee import Referee
from gateway.referee.rules import find_problem
from tests.conftest import GatewayFactory, RunningGateway, model_entry

UPSTREAM_KEY = "upstream-secret-key-frameworks"
UPSTREAM_MODEL = "referee"
Msg = dict[str, Any]


def call(cid: str, name: str, arguments: str) -> Msg:
    """One tool call as every OpenAI adapter writes it."""
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.fixture(params=["openai", "strict"])
async def referee(request: pytest.FixtureRequest) -> AsyncIterator[Referee]:
    async with Referee(rules=request.param, style="openai", require_auth=UPSTREAM_KEY) as ref:
        yield ref


@pytest.fixture
async def openai_referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai", require_auth=UPSTREAM_KEY) as ref:
        yield ref


async def _gateway(factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await factory({
        "model_list": [model_entry("agent", referee.base_url, model=f"openai/{UPSTREAM_MODEL}",
                                   api_key=UPSTREAM_KEY)],
    })


# --------------------------------------------------------------------------------------
# Valid histories: the upstream gets the client's bytes.
# --------------------------------------------------------------------------------------

VALID: dict[str, Msg] = {
    # AutoGen 0.4 (autogen-ext OpenAIChatCompletionClient): a group chat; every message
    # carries its source as `name`, an assistant turn holds its thought and its calls, and
    # a FunctionExecutionResultMessage becomes one tool message per result.
    "autogen-0.4 group chat with thought and calls": {
        "messages": [
            {"role": "system", "content": "You are the planner. Reply TERMINATE when done."},
            {"role": "user", "content": "Plan a trip to Lisbon.", "name": "user"},
            {"role": "assistant", "content": "I will look up flights and hotels.",
             "name": "planner"},
            {"role": "assistant", "content": "Searching both at once.", "name": "travel_agent",
             "tool_calls": [call("call_A1", "search_flights", '{"to": "LIS"}'),
                            call("call_A2", "search_hotels", '{"city": "Lisbon"}')]},
            {"role": "tool", "content": "TP 123 at 9:40", "tool_call_id": "call_A1"},
            {"role": "tool", "content": "Hotel Avenida, 120 EUR", "tool_call_id": "call_A2"},
            {"role": "assistant", "content": "Flight TP 123, Hotel Avenida.",
             "name": "travel_agent"},
            {"role": "user", "content": "Looks good.", "name": "critic"},
        ],
        "model": "agent", "temperature": 0, "parallel_tool_calls": True,
        "tools": [{"type": "function", "function": {
            "name": n, "description": n, "parameters": {"type": "object", "properties": {}}}}
            for n in ("search_flights", "search_hotels")],
    },
    # AG2 / AutoGen 0.2 with legacy functions: `function_call` on the assistant, the result
    # as a `function` role message with the function's name.
    "ag2 legacy function_call and function role": {
        "messages": [
            {"content": "You are a helpful AI assistant.", "role": "system"},
            {"content": "What's 3 ** 7?", "role": "user", "name": "user_proxy"},
            {"content": None, "role": "assistant", "name": "assistant",
             "function_call": {"name": "python", "arguments": '{"cell": "3 ** 7"}'}},
            {"content": "2187", "role": "function", "name": "python"},
            {"content": "3 ** 7 = 2187. TERMINATE", "role": "assistant", "name": "assistant"},
        ],
        "model": "agent",
        "functions": [{"name": "python", "parameters": {"type": "object", "properties": {
            "cell": {"type": "string"}}}}],
    },
    # CrewAI (LiteLLM underneath, ReAct in text): the observation comes back as a user
    # message; a user message right after another one is valid on OpenAI.
    "crewai react in text": {
        "messages": [
            {"role": "system", "content": "You are Senior Researcher. You're a seasoned..."},
            {"role": "user", "content": "\nCurrent Task: find the latest AI news\n\nBegin!"},
            {"role": "assistant", "content": "Thought: I should search.\nAction: Search the "
             "internet\nAction Input: {\"search_query\": \"AI news\"}"},
            {"role": "user", "content": "Observation: 1. OpenAI ..."},
            {"role": "user", "content": "Now it's time you MUST give your absolute best "
             "final answer."},
        ],
        "model": "agent", "stop": ["\nObservation:"], "stream": False,
    },
    # LlamaIndex FunctionAgent: `content: ""` beside tool calls, the tool result carries
    # the tool's name too; a developer message from an o-series system prompt.
    "llamaindex function agent": {
        "messages": [
            {"role": "developer", "content": "You are a calculator agent."},
            {"role": "user", "content": "What is 20+(2*4)?"},
            {"role": "assistant", "content": "", "tool_calls": [
                call("call_li_1", "multiply", '{"a": 2, "b": 4}')]},
            {"role": "tool", "content": "8", "name": "multiply", "tool_call_id": "call_li_1"},
            {"role": "assistant", "content": "", "tool_calls": [
                call("call_li_2", "add", '{"a": 20, "b": 8}')]},
            {"role": "tool", "content": "28", "name": "add", "tool_call_id": "call_li_2"},
        ],
        "model": "agent", "reasoning_effort": "low", "store": False,
    },
    # Semantic Kernel: plugin-qualified function names, the author name on the assistant,
    # the ids OpenAI made; FunctionChoiceBehavior sends parallel_tool_calls.
    "semantic kernel plugins": {
        "messages": [
            {"role": "system", "content": "Answer questions about the menu."},
            {"role": "user", "content": "What is the special soup?"},
            {"role": "assistant", "name": "Host", "content": None, "tool_calls": [
                call("call_sk_9f", "MenuPlugin-GetSpecials", "{}")]},
            {"role": "tool", "tool_call_id": "call_sk_9f",
             "content": "Special Soup: Clam Chowder\nSpecial Salad: Cobb Salad"},
            {"role": "assistant", "name": "Host", "content": "Clam Chowder."},
            {"role": "user", "content": "How much is it?"},
        ],
        "model": "agent", "parallel_tool_calls": False, "tool_choice": "auto",
        "tools": [{"type": "function", "function": {
            "name": "MenuPlugin-GetSpecials", "description": "Specials",
            "parameters": {"type": "object", "properties": {}, "required": []}}}],
    },
    # Haystack: an assistant message that only calls tools has no `content` key at all.
    "haystack tool calls without content key": {
        "messages": [
            {"role": "user", "content": "What's the weather in Berlin and Paris?"},
            {"role": "assistant", "tool_calls": [
                call("call_h1", "weather", '{"city": "Berlin"}'),
                call("call_h2", "weather", '{"city": "Paris"}')]},
            {"role": "tool", "content": "sunny, 21", "tool_call_id": "call_h1"},
            {"role": "tool", "content": "rain, 14", "tool_call_id": "call_h2"},
        ],
        "model": "agent",
    },
    # DSPy ChatAdapter: field markers in plain text, few-shot demos as user/assistant pairs.
    "dspy chat adapter demos": {
        "messages": [
            {"role": "system", "content": "Your input fields are:\n1. `question` (str)\n"
             "Your output fields are:\n1. `answer` (str)"},
            {"role": "user", "content": "[[ ## question ## ]]\n2+2?"},
            {"role": "assistant", "content": "[[ ## answer ## ]]\n4\n\n[[ ## completed ## ]]"},
            {"role": "user", "content": "[[ ## question ## ]]\nCapital of France?\n\nRespond "
             "with the corresponding output fields, starting with the field `[[ ## answer ## "
             "]]`, and then ending with the marker for `[[ ## completed ## ]]`."},
        ],
        "model": "agent", "temperature": 0.0, "max_tokens": 4000, "n": 1,
    },
    # Letta/MemGPT: inner thoughts as content beside `send_message`, heartbeat arguments,
    # JSON strings as user and tool content.
    "letta inner thoughts and heartbeats": {
        "messages": [
            {"role": "system", "content": "You are Letta, the latest version of ..."},
            {"role": "user", "content": '{"type": "user_message", "message": "hi", '
             '"time": "2026-12-01 09:00:00 PM UTC+0000"}'},
            {"role": "assistant", "content": "User greeted me. Replying warmly.",
             "tool_calls": [call("message-4f1c", "send_message",
                                 '{"message": "Hello!", "request_heartbeat": false}')]},
            {"role": "tool", "content": '{"status": "OK", "message": "None", '
             '"time": "2026-12-01 09:00:01 PM UTC+0000"}', "tool_call_id": "message-4f1c"},
            {"role": "user", "content": '{"type": "heartbeat", "reason": "[This is an '
             'automated system message hidden from the user] Function called using '
             'request_heartbeat=true, returning control"}'},
        ],
        "model": "agent", "tool_choice": "required", "user": "user-00000000",
    },
    # Aider on DeepSeek: "Ok." acknowledgements and a final assistant prefill marked with
    # DeepSeek's `prefix` (an unknown field to OpenAI's schema, and a valid prefill).
    "aider prefill with prefix": {
        "messages": [
            {"role": "system", "content": "Act as an expert software developer."},
            {"role": "user", "content": "I have *added these files to the chat*: app.py"},
            {"role": "assistant", "content": "Ok."},
            {"role": "user", "content": "Rename main to run."},
            {"role": "assistant", "content": "app.py\n```python\n<<<<<<< SEARCH\n",
             "prefix": True},
        ],
        "model": "agent", "stream": False, "temperature": 0,
    },
    # Cline / Roo with native tools: tool results as text parts, `cache_control` on the
    # parts OpenRouter forwards to Anthropic, environment details in the user turn.
    "roo native tools with text-part results and cache_control": {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "You are Roo.",
                                            "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": [
                {"type": "text", "text": "<task>\nfix the test\n</task>"},
                {"type": "text", "text": "<environment_details>\n# cwd: /repo\n"
                 "</environment_details>", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": "", "tool_calls": [
                call("toolu_01Abc", "read_file", '{"path": "tests/test_app.py"}')]},
            {"role": "tool", "tool_call_id": "toolu_01Abc", "content": [
                {"type": "text", "text": "1 | def test_run():"},
                {"type": "text", "text": "2 |     assert run() == 0"}]},
        ],
        "model": "agent", "stream": False,
    },
    # Continue: screenshots with `detail`, a PDF as a file part, a voice note.
    "continue media parts": {
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Why does this render wrong?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png",
                                                    "detail": "high"}},
                {"type": "image_url", "image_url": {
                    "url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
                {"type": "file", "file": {"filename": "spec.pdf",
                                          "file_data": "data:application/pdf;base64,JVBERi0="}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
            ]},
        ],
        "model": "agent",
    },
    # openai-python: `message.model_dump()` appended as is (every field, nulls included),
    # an audio reply referenced by id and a refusal.
    "openai-python model_dump with audio and refusal": {
        "messages": [
            {"role": "user", "content": "Say hi out loud."},
            {"content": None, "refusal": None, "role": "assistant", "annotations": [],
             "audio": {"id": "audio_6747a0e1"}, "function_call": None, "tool_calls": None},
            {"role": "user", "content": "Now tell me how to pick a lock."},
            {"content": None, "refusal": "I'm sorry, I can't help with that.",
             "role": "assistant"},
            {"role": "user", "content": "Fine. What's the weather?"},
        ],
        "model": "agent", "modalities": ["text", "audio"],
        "audio": {"voice": "alloy", "format": "wav"},
    },
    # A provider that numbers calls per turn (call_0, call_1 ...): the same ids in two
    # turns, each answered in its own turn, is valid on OpenAI.
    "call ids reused across turns": {
        "messages": [
            {"role": "user", "content": "ls"},
            {"role": "assistant", "content": None, "tool_calls": [
                call("call_0", "sh", '{"c":"ls"}')]},
            {"role": "tool", "tool_call_id": "call_0", "content": "a.txt"},
            {"role": "user", "content": "cat it"},
            {"role": "assistant", "content": None, "tool_calls": [
                call("call_0", "sh", '{"c":"cat a.txt"}')]},
            {"role": "tool", "tool_call_id": "call_0", "content": "hello"},
        ],
        "model": "agent",
    },
    # A weak model's calls kept in the history: empty arguments and arguments that are not
    # JSON (Python repr). OpenAI takes any string there.
    "empty and non-json arguments": {
        "messages": [
            {"role": "user", "content": "what time is it, and the date?"},
            {"role": "assistant", "content": None, "tool_calls": [
                call("call_t", "now", ""), call("call_d", "today", "{'tz': 'UTC'}")]},
            {"role": "tool", "tool_call_id": "call_t", "content": "21:00"},
            {"role": "tool", "tool_call_id": "call_d", "content": "Tuesday"},
        ],
        "model": "agent",
    },
    # Parallel results in the order the tools finished, right after their calls (Mastra /
    # the AI SDK write results as they arrive).
    "mastra parallel results in finishing order": {
        "messages": [
            {"role": "system", "content": "You are a weather agent."},
            {"role": "user", "content": "Compare Oslo and Rome."},
            {"role": "assistant", "content": "", "tool_calls": [
                call("call_o", "weatherTool", '{"location":"Oslo"}'),
                call("call_r", "weatherTool", '{"location":"Rome"}')]},
            {"role": "tool", "tool_call_id": "call_r", "content": '{"temp":24}'},
            {"role": "tool", "tool_call_id": "call_o", "content": '{"temp":3}'},
        ],
        "model": "agent", "stream": True, "stream_options": {"include_usage": True},
    },
    # Claude Code through LiteLLM's Anthropic adapter: system as cached text parts,
    # thinking kept as `thinking_blocks` / `reasoning_content`, text beside the calls.
    "claude code through litellm": {
        "messages": [
            {"role": "system", "content": [
                {"type": "text", "text": "You are Claude Code, Anthropic's official CLI.",
                 "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": [{"type": "text", "text": "run the tests"}]},
            {"role": "assistant", "content": "I'll run them.",
             "reasoning_content": "Use Bash.",
             "thinking_blocks": [{"type": "thinking", "thinking": "Use Bash.",
                                  "signature": "EqQBCkYIBxgCKkA"}],
             "tool_calls": [call("toolu_01XyZ", "Bash", '{"command": "pytest -q"}')]},
            {"role": "tool", "tool_call_id": "toolu_01XyZ", "content": "3 passed"},
            {"role": "user", "content": [{"type": "text", "text": "<system-reminder>todo list "
                                          "is empty</system-reminder>",
                                          "cache_control": {"type": "ephemeral"}}]},
        ],
        "model": "agent", "max_tokens": 32000, "metadata": {"user_id": "session_1"},
    },
    # Agents SDK / OpenAI SDK request options a gateway must not touch.
    "request options pass through": {
        "messages": [
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": "hi"},
        ],
        "model": "agent", "prompt_cache_key": "tenant-42:thread-7", "store": True,
        "metadata": {"workflow": "triage", "run": "7"}, "reasoning_effort": "minimal",
        "service_tier": "auto", "safety_identifier": "u-123", "verbosity": "low",
        "x_vendor_extension": {"nested": [1, 2.5, None, True, "é"]},
    },
    # LangGraph after an interrupt: the graph resumed with Command(resume=...) and the
    # tool node appended the reviewed call's result in place.
    "langgraph resumed interrupt": {
        "messages": [
            {"role": "user", "content": "book the 9:40 flight"},
            {"role": "assistant", "content": "", "tool_calls": [
                call("call_lg", "book_flight", '{"flight": "TP123"}')]},
            {"role": "tool", "content": "Booked (approved by human reviewer).",
             "tool_call_id": "call_lg", "name": "book_flight"},
            {"role": "assistant", "content": "Done: TP 123 is booked."},
            {"role": "user", "content": "thanks"},
        ],
        "model": "agent",
    },
    # smolagents ToolCallingAgent: the tool call is written as text and the observation
    # comes back as a user message; consecutive assistant messages in a multi-agent run.
    "smolagents text tool calls": {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "You are an expert "
                                            "assistant who can solve any task using tool "
                                            "calls."}]},
            {"role": "user", "content": [{"type": "text", "text": "New task:\nHow many "
                                          "seconds in a day?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Calling tools:\n"
                                               "[{'id': 'call_1', 'type': 'function', "
                                               "'function': {'name': 'python_interpreter', "
                                               "'arguments': '24*3600'}}]"}]},
            {"role": "user", "content": [{"type": "text", "text": "Call id: call_1\n"
                                          "Observation:\n86400"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Final answer: 86400"}]},
            {"role": "assistant", "content": "(manager) forwarding the answer."},
        ],
        "model": "agent", "stop": ["Observation:", "Calling tools:"],
    },
}


@pytest.mark.parametrize("case", list(VALID))
def test_valid_cases_are_valid_on_openai_and_project_unchanged(case: str) -> None:
    body = {**VALID[case], "model": UPSTREAM_MODEL}
    assert find_problem(body, "openai") is None
    projection = project(body["messages"])
    assert projection.anomalies == ()
    assert projection.messages == body["messages"]


@pytest.mark.parametrize("spaced", [False, True], ids=["compact", "spaced-model-last"])
@pytest.mark.parametrize("case", list(VALID))
async def test_valid_history_reaches_the_upstream_byte_for_byte(
    gateway_factory: GatewayFactory, openai_referee: Referee, case: str, spaced: bool,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee)
    body = VALID[case]
    if spaced:
        # Python's json.dumps (requests, hand-written clients): spaces, non-ASCII escaped,
        # and the model last, where the gateway splices the upstream's name into the
        # client's own bytes. (With the model elsewhere the body goes compact: the same
        # values in the same order.)
        body = {**{k: v for k, v in body.items() if k != "model"}, "model": "agent"}
        raw = json.dumps(body).encode()
        expected = raw.replace(b'"model": "agent"}', b'"model": "referee"}')
    else:
        raw = orjson.dumps(body)
        expected = orjson.dumps({**body, "model": UPSTREAM_MODEL})
    async with httpx.AsyncClient(timeout=30) as http:
        resp = await http.post(f"{gw.base_url}/chat/completions", content=raw,
                               headers={"content-type": "application/json",
                                        "authorization": "Bearer client-key"})
        await resp.aread()
    assert resp.status_code == 200, resp.text
    assert "x-gateway-repairs" not in resp.headers
    assert resp.headers.get("x-gateway-attempts") == "1"
    received = openai_referee.requests[-1]
    assert received.status == 200
    assert received.body == expected


# --------------------------------------------------------------------------------------
# Broken histories: accepted, the repair named, the upstream gets a valid shape.
# --------------------------------------------------------------------------------------

# name -> (messages, the repairs project() names, request fields to send besides them)
BROKEN: dict[str, tuple[list[Msg], set[str], dict[str, Any]]] = {
    # LangGraph human-in-the-loop: the reviewer rejected one of two parallel calls; the
    # graph resumed with a user message and never wrote the rejected call's result.
    "langgraph interrupt rejected one parallel call": (
        [{"role": "user", "content": "refund order 7 and email the customer"},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_refund", "refund", '{"order": 7}'),
             call("call_email", "email", '{"to": "c@example.com"}')]},
         {"role": "tool", "content": "email sent", "tool_call_id": "call_email",
          "name": "email"},
         {"role": "user", "content": "Do NOT refund; the reviewer rejected it."}],
        {"tool_result_synthesized"}, {}),
    # LangGraph resumed after an interrupt: the user's answer was appended before the
    # interrupted tool node wrote its result.
    "langgraph resume wrote the result after the user's answer": (
        [{"role": "user", "content": "delete the staging db"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_del", "drop_db", '{"db": "staging"}')]},
         {"role": "user", "content": "yes, approved"},
         {"role": "tool", "content": "dropped", "tool_call_id": "call_del"}],
        {"tool_result_reordered"}, {}),
    # Cline: the user pressed Cancel while the tool ran; the next turn is a new message.
    "cline cancelled call mid history": (
        [{"role": "system", "content": "You are Cline."},
         {"role": "user", "content": [{"type": "text", "text": "<task>run the build</task>"}]},
         {"role": "assistant", "content": "Running the build.", "tool_calls": [
             call("toolu_bld", "execute_command", '{"command": "make", '
                  '"requires_approval": false}')]},
         {"role": "user", "content": [{"type": "text", "text": "[TASK RESUMPTION] This task "
                                       "was interrupted 2 minutes ago."}]}],
        {"tool_result_synthesized"}, {"parallel_tool_calls": False}),
    # Roo: the history ends on a call the client is still running (a checkpoint save).
    "roo cancelled call at the end": (
        [{"role": "user", "content": "apply the diff"},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_apply", "apply_diff", '{"path": "a.py", "diff": "..."}')]}],
        {"tool_result_synthesized"}, {"stream": True, "stream_options": {"include_usage": True}}),
    # Continue: the user typed while two tools ran; results landed after the new message.
    "continue parallel results interleaved with user messages": (
        [{"role": "user", "content": "grep TODO and list files"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_g", "grep", '{"q": "TODO"}'), call("call_l", "ls", "{}")]},
         {"role": "tool", "content": "app.py:3: TODO", "tool_call_id": "call_g"},
         {"role": "user", "content": "also check tests/"},
         {"role": "tool", "content": "app.py\ntests/", "tool_call_id": "call_l"},
         {"role": "user", "content": "and hurry"}],
        {"tool_result_reordered"}, {}),
    # Letta retried a step and wrote the tool result twice; ids restart per turn.
    "letta duplicate result with ids reused across turns": (
        [{"role": "user", "content": "remember my cat is Tom"},
         {"role": "assistant", "content": "Storing it.", "tool_calls": [
             call("call_0", "core_memory_append", '{"label": "human", "content": "cat Tom"}')]},
         {"role": "tool", "content": '{"status": "OK"}', "tool_call_id": "call_0"},
         {"role": "tool", "content": '{"status": "OK", "retry": 1}', "tool_call_id": "call_0"},
         {"role": "user", "content": "and my dog is Rex"},
         {"role": "assistant", "content": "Storing that too.", "tool_calls": [
             call("call_0", "core_memory_append", '{"label": "human", "content": "dog Rex"}')]},
         {"role": "tool", "content": '{"status": "OK"}', "tool_call_id": "call_0"}],
        {"duplicate_tool_result_dropped"}, {}),
    # A reused id whose second call was cancelled: the result in the history answers the
    # first turn only, so the second call gets the synthetic result.
    "reused id with the later call cancelled": (
        [{"role": "user", "content": "ls"},
         {"role": "assistant", "content": None, "tool_calls": [call("call_0", "sh", '{"c":"ls"}')]},
         {"role": "tool", "tool_call_id": "call_0", "content": "a.txt"},
         {"role": "user", "content": "rm it"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_0", "sh", '{"c":"rm a.txt"}')]},
         {"role": "user", "content": "wait, don't"}],
        {"tool_result_synthesized"}, {}),
    # Mastra memory recall sorted two messages with the same timestamp the wrong way: the
    # result comes before its call.
    "mastra result before its call": (
        [{"role": "user", "content": "what's the weather in Oslo?"},
         {"role": "tool", "tool_call_id": "call_w", "content": '{"temp": 3}'},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_w", "weatherTool", '{"location": "Oslo"}')]},
         {"role": "user", "content": "and tomorrow?"}],
        {"orphan_tool_result_dropped", "tool_result_synthesized"}, {}),
    # LangChain trim_messages cut the AIMessage that made the call, leaving its result.
    "langchain trimmed history leaves an orphan result": (
        [{"role": "system", "content": "You are helpful."},
         {"role": "tool", "content": "Oslo: 717,000", "tool_call_id": "call_trimmed"},
         {"role": "assistant", "content": "Oslo has about 717,000 inhabitants."},
         {"role": "user", "content": "And Bergen?"}],
        {"orphan_tool_result_dropped"}, {}),
    # AG2 group chat: a speaker replied with nothing; the manager kept the empty turn.
    "ag2 empty speaker turn": (
        [{"role": "system", "content": "Group chat."},
         {"role": "user", "content": "Write a haiku.", "name": "Admin"},
         {"role": "assistant", "content": "", "name": "Critic"},
         {"role": "assistant", "content": "Autumn moonlight—", "name": "Poet"},
         {"role": "user", "content": "Critic, your turn.", "name": "Admin"}],
        {"empty_content_dropped"}, {}),
    # AG2's user proxy with no human input answers with an empty message; legacy
    # function_call / function role around it stay as sent.
    "ag2 empty user proxy reply after a function call": (
        [{"content": "What's 3 ** 7?", "role": "user", "name": "user_proxy"},
         {"content": None, "role": "assistant", "name": "assistant",
          "function_call": {"name": "python", "arguments": '{"cell": "3 ** 7"}'}},
         {"content": "2187", "role": "function", "name": "python"},
         {"content": "3 ** 7 = 2187.", "role": "assistant", "name": "assistant"},
         {"content": "", "role": "user", "name": "user_proxy"}],
        {"empty_content_dropped"}, {}),
    # AutoGen 0.4: the run was cancelled (CancellationToken) before the tools returned;
    # the thought stays with the calls.
    "autogen cancelled tool execution": (
        [{"role": "user", "content": "summarise both files", "name": "user"},
         {"role": "assistant", "content": "Reading both files.", "name": "reader",
          "tool_calls": [call("call_f1", "read", '{"p": "a.md"}'),
                         call("call_f2", "read", '{"p": "b.md"}')]},
         {"role": "user", "content": "stop, just a.md", "name": "user"}],
        {"tool_result_synthesized"}, {}),
    # An SDK that defaults `tool_calls` to an empty list on a text-less assistant turn.
    "semantic kernel empty tool_calls with null content": (
        [{"role": "user", "content": "hi"},
         {"role": "assistant", "content": None, "tool_calls": [], "name": "Host"},
         {"role": "user", "content": "anyone there?"}],
        {"empty_content_dropped"}, {}),
    # Roo: an MCP tool returned an empty text part beside its output.
    "roo tool result with a blank text part": (
        [{"role": "user", "content": "query the db"},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_mcp", "use_mcp_tool", '{"server": "pg", "tool": "query"}')]},
         {"role": "tool", "tool_call_id": "call_mcp", "content": [
             {"type": "text", "text": ""}, {"type": "text", "text": "3 rows"}]},
         {"role": "user", "content": "thanks"}],
        {"empty_content_dropped"}, {}),
    # A tool that returned only whitespace parts: the result says it was empty.
    "tool result of only blank text parts": (
        [{"role": "user", "content": "clear the cache"},
         {"role": "assistant", "content": None, "tool_calls": [call("call_c", "clear", "{}")]},
         {"role": "tool", "tool_call_id": "call_c", "content": [{"type": "text", "text": " "}]},
         {"role": "user", "content": "done?"}],
        {"empty_content_dropped", "tool_result_rendered"}, {}),
    # Mastra / AI SDK: a tool that returned undefined; the result's content is null.
    "tool result with null content": (
        [{"role": "user", "content": "ping"},
         {"role": "assistant", "content": "", "tool_calls": [call("call_p", "ping", "{}")]},
         {"role": "tool", "tool_call_id": "call_p", "content": None},
         {"role": "user", "content": "and?"}],
        {"tool_result_rendered"}, {}),
    # DSPy with an empty instructions field: a blank developer message.
    "blank developer message": (
        [{"role": "developer", "content": "   "},
         {"role": "user", "content": "[[ ## question ## ]]\n2+2?"}],
        {"empty_content_dropped"}, {"reasoning_effort": "low"}),
    # Claude Code through LiteLLM: the user turn held [text, tool_result]; the adapter
    # wrote the text first, so the result is separated from its call.
    "claude code through litellm text before tool result": (
        [{"role": "system", "content": "You are Claude Code."},
         {"role": "user", "content": "read README"},
         {"role": "assistant", "content": "Reading.", "tool_calls": [
             call("toolu_01R", "Read", '{"file_path": "/repo/README.md"}')]},
         {"role": "user", "content": [{"type": "text", "text": "<system-reminder>The user "
                                       "opened README.md</system-reminder>"}]},
         {"role": "tool", "tool_call_id": "toolu_01R", "content": "# Project"}],
        {"tool_result_reordered"}, {"max_tokens": 32000, "metadata": {"user_id": "u_1"}}),
    # Aider: an empty assistant placeholder left at the end (a cancelled completion).
    "aider empty final assistant": (
        [{"role": "system", "content": "Act as an expert software developer."},
         {"role": "user", "content": "add a docstring"},
         {"role": "assistant", "content": ""}],
        {"empty_content_dropped"}, {}),
    # openai-python model_dump() of an empty completion (content "" and every field null).
    "model_dump of an empty completion": (
        [{"role": "user", "content": "hello?"},
         {"content": "", "refusal": None, "role": "assistant", "annotations": [],
          "audio": None, "function_call": None, "tool_calls": None},
         {"role": "user", "content": "hello??"}],
        {"empty_content_dropped"}, {}),
    # Everything at once, as a long-running coding agent's history ends up.
    "coding agent after a crash and a resume": (
        [{"role": "system", "content": "You are a coding agent."},
         {"role": "tool", "tool_call_id": "call_old", "content": "stale"},
         {"role": "user", "content": "fix the bug"},
         {"role": "assistant", "content": "Looking.", "tool_calls": [
             call("call_r1", "read", '{"p": "a.py"}'), call("call_r2", "read", '{"p": "b.py"}')]},
         {"role": "tool", "tool_call_id": "call_r2", "content": "b"},
         {"role": "user", "content": "(resumed)"},
         {"role": "tool", "tool_call_id": "call_r1", "content": "a"},
         {"role": "tool", "tool_call_id": "call_r1", "content": "a again"},
         {"role": "assistant", "content": " "},
         {"role": "user", "content": "go on"},
         {"role": "assistant", "content": None, "tool_calls": [call("call_w", "write", "{}")]}],
        {"orphan_tool_result_dropped", "tool_result_reordered", "duplicate_tool_result_dropped",
         "empty_content_dropped", "tool_result_synthesized"}, {}),
}

# Top-level fields every broken request carries too: they reach the upstream as sent.
EXTRA_FIELDS: dict[str, Any] = {
    "metadata": {"framework": "test"}, "store": False, "prompt_cache_key": "thread-1",
    "x_vendor_extension": {"keep": [1, None]},
}


def _user_texts(messages: list[Msg]) -> list[str]:
    out: list[str] = []
    for m in messages:
        if m.get("role") != "user":
            continue
        content = m.get("content")
        parts = [content] if isinstance(content, str) else [
            p.get("text", "") for p in content or [] if isinstance(p, dict)]
        out.extend(t for t in parts if isinstance(t, str) and t.strip())
    return out


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_cases_are_refused_by_openai_and_projected_valid(case: str) -> None:
    messages, kinds, _ = BROKEN[case]
    # Refused by a strict provider (OpenAI itself takes some of these, e.g. empty text).
    assert find_problem({"model": "m", "messages": messages}, "strict") is not None
    projection = project(messages)
    assert set(projection.counts()) == kinds
    assert find_problem({"model": "m", "messages": projection.messages}, "openai") is None
    assert project(projection.messages).anomalies == ()


async def answered(gw: RunningGateway, messages: list[Any], stream: bool,
                   extra: dict[str, Any]) -> tuple[Any, str]:
    """One request through the openai SDK (``extra``: body fields of the client's): the raw
    response and the answer's text (a stream read to its end)."""
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="agent", messages=messages, stream=stream, extra_body=extra)  # type: ignore[call-overload]
        answer = raw.parse()
        if stream:
            return raw, "".join([chunk.choices[0].delta.content or "" async for chunk in answer
                                 if chunk.choices])
        return raw, answer.choices[0].message.content or ""


@pytest.mark.parametrize("case", list(BROKEN))
async def test_broken_history_is_accepted_with_the_repair_named(
    gateway_factory: GatewayFactory, referee: Referee, case: str,
) -> None:
    gw = await _gateway(gateway_factory, referee)
    messages, kinds, params = BROKEN[case]
    stream = bool(params.get("stream"))
    extra = {**EXTRA_FIELDS, **{k: v for k, v in params.items() if k not in ("stream",)}}
    raw, text = await answered(gw, messages, stream, extra)
    assert text
    reported = {item.split("=")[0] for item in raw.headers["x-gateway-repairs"].split(",")}
    if "x-gateway-recovery" in raw.headers:
        # A strict upstream refused project()'s output: the strict rung's repairs are named.
        assert referee.config.rules == "strict"
        assert raw.headers["x-gateway-recovery"].startswith("strict")
    else:
        assert kinds <= reported
    sent = referee.requests[-1]
    assert sent.status == 200
    body = sent.json()
    assert find_problem(body, referee.config.rules) is None
    for key, value in {**EXTRA_FIELDS, **params}.items():
        assert body[key] == value, key
    upstream_text = "\n\n".join(_user_texts(body["messages"]))
    for text in _user_texts(messages):
        assert text in upstream_text
    # Messages no repair concerned keep their fields (names, extension fields) as sent.
    assert [m for m in messages if m.get("role") == "system"] == [
        m for m in body["messages"] if m.get("role") == "system"]


async def test_a_cancelled_call_gets_the_exact_synthetic_text(
    gateway_factory: GatewayFactory, openai_referee: Referee,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee)
    messages, _, _ = BROKEN["autogen cancelled tool execution"]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as client:
        await client.chat.completions.create(model="agent", messages=messages)  # type: ignore[arg-type]
    sent = openai_referee.requests[-1].json()["messages"]
    assert sent[1] == messages[1]  # the thought and the calls, the name kept
    assert sent[2:4] == [
        {"role": "tool", "tool_call_id": cid, "content": SYNTHETIC_TOOL_RESULT_TEXT}
        for cid in ("call_f1", "call_f2")]
    assert sent[4] == messages[2]


# --------------------------------------------------------------------------------------
# Refused by OpenAI only: the strict rung repairs what project() leaves as sent.
# --------------------------------------------------------------------------------------

# name -> (messages, the repairs the strict rung names, what the upstream gets instead)
REFUSED_BY_OPENAI: dict[str, tuple[list[Msg], set[str], dict[int, Msg]]] = {
    # Semantic Kernel ChatCompletionAgent with a display name (semantic-kernel #9340).
    "semantic kernel agent name with a space": (
        [{"role": "system", "content": "Moderate the debate.", "name": "Debate Moderator"},
         {"role": "user", "content": "Start."},
         {"role": "assistant", "content": "Opening statements, please.",
          "name": "Debate Moderator"},
         {"role": "user", "content": "Go."}],
        {"message_name_rewritten"},
        {0: {"role": "system", "content": "Moderate the debate.", "name": "Debate_Moderator"},
         2: {"role": "assistant", "content": "Opening statements, please.",
             "name": "Debate_Moderator"}}),
    # AutoGen 0.2 / FastAgency: a user proxy named with a space and an accented agent.
    "autogen user proxy and accented agent names": (
        [{"role": "user", "content": "Plan the launch.", "name": "UserProxy Agent"},
         {"role": "assistant", "content": "D'accord.", "name": "Élodie"},
         {"role": "user", "content": "Go on.", "name": "UserProxy Agent"}],
        {"message_name_rewritten"},
        {0: {"role": "user", "content": "Plan the launch.", "name": "UserProxy_Agent"},
         1: {"role": "assistant", "content": "D'accord.", "name": "Elodie"}}),
    # langchain-azure-ai (AzureAIChatCompletionsModel) writes tool calls without "type"
    # (langchain-azure #35), replayed to an OpenAI deployment.
    "langchain-azure tool calls without type": (
        [{"role": "user", "content": "use the dummy tool"},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "call_az1", "function": {"name": "dummy_tool",
                                             "arguments": '{"query": "x"}'}}]},
         {"role": "tool", "content": "x", "tool_call_id": "call_az1"},
         {"role": "user", "content": "again"}],
        {"tool_call_type_added"},
        {1: {"role": "assistant", "content": None, "tool_calls": [call(
            "call_az1", "dummy_tool", '{"query": "x"}')]}}),
}


@pytest.mark.parametrize("case", list(REFUSED_BY_OPENAI))
async def test_what_only_openai_refuses_is_repaired_on_the_strict_rung(
    gateway_factory: GatewayFactory, openai_referee: Referee, case: str,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee)
    messages, kinds, replaced = REFUSED_BY_OPENAI[case]
    assert project(messages).anomalies == ()  # valid elsewhere: nothing up front
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="agent", messages=messages, extra_body=EXTRA_FIELDS)  # type: ignore[arg-type]
    assert raw.parse().choices[0].message.content
    assert kinds <= {item.split("=")[0] for item in raw.headers["x-gateway-repairs"].split(",")}
    assert raw.headers["x-gateway-recovery"] == "strict"
    first, last = openai_referee.requests[-2:]
    assert (first.status, last.status) == (400, 200)
    assert first.json()["messages"] == messages  # tried as sent first
    sent = last.json()
    for key, value in EXTRA_FIELDS.items():
        assert sent[key] == value
    for index, message in replaced.items():
        assert message in sent["messages"], index
    assert find_problem(sent, "openai") is None


PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQ"
       "DwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


@pytest.mark.parametrize("tail", ["user", "end"])
async def test_a_screenshot_in_a_tool_result_reaches_the_model_in_a_user_turn(
    gateway_factory: GatewayFactory, openai_referee: Referee, tail: str,
) -> None:
    # OpenHands / Roo / a Playwright MCP server through LiteLLM: the screenshot is in the
    # tool result (valid on Anthropic); OpenAI refuses it there. The strict rung moves it
    # to the user turn instead of the media rung stripping it.
    gw = await _gateway(gateway_factory, openai_referee)
    screenshot = {"type": "image_url", "image_url": {"url": PNG, "detail": "high"}}
    messages: list[Msg] = [
        {"role": "user", "content": "open example.com and describe it"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("call_nav", "browser_navigate", '{"url": "https://example.com"}'),
            call("call_shot", "browser_take_screenshot", "{}")]},
        {"role": "tool", "tool_call_id": "call_nav", "content": "Navigated."},
        {"role": "tool", "tool_call_id": "call_shot", "content": [
            {"type": "text", "text": "Took the screenshot."}, screenshot]},
    ]
    if tail == "user":
        messages.append({"role": "user", "content": "what is on it?"})
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="agent", messages=messages)  # type: ignore[arg-type]
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert "tool_media_moved=1" in raw.headers["x-gateway-repairs"]
    first, last = openai_referee.requests[-2:]
    assert (first.status, last.status) == (400, 200)
    assert first.json()["messages"] == messages  # tried as sent first
    sent = last.json()["messages"]
    assert sent[:3] == messages[:3]
    assert sent[3]["role"] == "tool" and screenshot not in sent[3]["content"]
    assert sent[4]["role"] == "user" and screenshot in sent[4]["content"]  # the image is kept
    if tail == "user":
        assert sent[4]["content"][-1] == {"type": "text", "text": "what is on it?"}
        assert len(sent) == 5


async def test_refusal_and_audio_turns_are_readable_on_a_strict_upstream(
    gateway_factory: GatewayFactory,
) -> None:
    # The gpt-4o-audio conversation of the valid corpus, sent to an Anthropic-style
    # upstream: the refusal becomes the turn's text, the audio-only turn (an id only
    # OpenAI resolves) goes, and the user turns around it merge.
    body = VALID["openai-python model_dump with audio and refusal"]
    async with Referee(rules="strict", style="openai", require_auth=UPSTREAM_KEY) as ref:
        gw = await _gateway(gateway_factory, ref)
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
            raw = await c.chat.completions.with_raw_response.create(
                model="agent", messages=body["messages"])
        assert raw.headers["x-gateway-recovery"] == "strict"
        reported = raw.headers["x-gateway-repairs"]
        assert "refusal_moved_to_content=1" in reported
        assert "empty_content_dropped=1" in reported
        sent = ref.requests[-1].json()["messages"]
        assert ref.requests[-1].status == 200
    assert sent == [
        {"role": "user", "content": "Say hi out loud.\n\nNow tell me how to pick a lock."},
        {**body["messages"][3], "content": "I'm sorry, I can't help with that."},
        {"role": "user", "content": "Fine. What's the weather?"}]


async def test_the_dry_run_shows_what_the_strict_rung_would_change(
    gateway_factory: GatewayFactory, openai_referee: Referee,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee)
    messages = [*REFUSED_BY_OPENAI["semantic kernel agent name with a space"][0],
                *BROKEN["ag2 empty user proxy reply after a function call"][0][1:4]]
    async with httpx.AsyncClient(timeout=30) as http:
        plain = (await http.post(f"{gw.root}/v1/gateway/project",
                                 json={"model": "agent", "messages": messages})).json()
        strict = (await http.post(f"{gw.root}/v1/gateway/project?strict=true",
                                  json={"model": "agent", "messages": messages})).json()
    assert plain["anomalies"] == []
    kinds = {a["kind"] for a in strict["anomalies"]}
    assert {"message_name_rewritten", "function_call_converted"} <= kinds
    assert find_problem({"model": "m", "messages": strict["messages"]}, "strict") is None
    assert not openai_referee.requests  # no upstream called
