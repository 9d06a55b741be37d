"""More Chat Completions histories as agent frameworks write them: the frameworks and shapes
tests/fidelity/test_framework_histories.py does not cover.

OpenAI Agents SDK, pydantic-ai, the Vercel AI SDK's OpenAI-compatible provider, LangChain.js
and n8n, Google ADK through LiteLLM, OpenHands, SWE-agent, Goose, Codex CLI in chat mode,
Open WebUI, LibreChat, Dify, Zed, Cursor-style clients, LlamaIndex, Instructor, Semantic
Kernel, smolagents, and sessions begun on Gemini, Claude or DeepSeek through an
OpenAI-compatible proxy and continued on OpenAI. Every request goes through the real
``openai`` SDK; the upstream is the referee (OpenAI's rules, or strict rules with OpenAI- or
Anthropic-style refusals).

- A valid history reaches the upstream as sent (only ``model`` changed), with no
  ``x-gateway-repairs``; fields OpenAI does not define stay.
- A broken one is answered: the repairs are named, the upstream got a shape its rules take,
  the messages no repair concerned arrived as sent, no user text was lost.
- What nothing can make sense of is a 400 in OpenAI's error shape.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from gateway.projection import project, project_strict
from gateway.projection.asks import StrictAsks
from gateway.referee import Referee
from gateway.referee.rules import find_problem
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fidelity.test_framework_histories import answered

UPSTREAM_MODEL = "referee"
Msg = dict[str, Any]


def call(cid: str, name: str, arguments: str) -> Msg:
    """One tool call as OpenAI adapters write it."""
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def canonical(value: Any) -> str:
    """JSON text with key order kept: equal exactly when fields, order and values are."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def _gateway(factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await factory({
        "model_list": [model_entry("agent", referee.base_url, model=f"openai/{UPSTREAM_MODEL}")],
    })


def _client(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key", max_retries=0)


@pytest.fixture
async def openai_referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as ref:
        yield ref


@pytest.fixture(params=[("openai", "openai"), ("strict", "openai"), ("strict", "anthropic")],
                ids=["openai", "strict-openai", "strict-anthropic"])
async def referee(request: pytest.FixtureRequest) -> AsyncIterator[Referee]:
    rules, style = request.param
    async with Referee(rules=rules, style=style) as ref:
        yield ref


# --------------------------------------------------------------------------------------
# Valid histories: the upstream gets them as sent, nothing reported.
# --------------------------------------------------------------------------------------

# name -> (messages, request fields besides them)
VALID: dict[str, tuple[list[Msg], dict[str, Any]]] = {
    # OpenAI Agents SDK (OpenAIChatCompletionsModel) after a handoff: the transfer call and
    # its JSON output, then the second agent's own call, tool_choice naming a function.
    "agents sdk handoff": (
        [{"role": "system", "content": "You are Triage."},
         {"role": "user", "content": "I was charged twice."},
         {"role": "assistant", "tool_calls": [
             call("call_hand", "transfer_to_billing_agent", "{}")]},
         {"role": "tool", "tool_call_id": "call_hand",
          "content": "{\"assistant\": \"Billing agent\"}"},
         {"role": "assistant", "content": "Let me check your invoices.", "tool_calls": [
             call("call_inv", "list_invoices", "{\"customer\": \"c_9\"}")]},
         {"role": "tool", "tool_call_id": "call_inv", "content": "[\"inv_1\", \"inv_1\"]"}],
        {"tool_choice": {"type": "function", "function": {"name": "refund"}},
         "parallel_tool_calls": False,
         "tools": [{"type": "function", "function": {
             "name": n, "parameters": {"type": "object", "properties": {}},
             "strict": True}} for n in ("refund", "list_invoices")]}),
    # pydantic-ai: a retry prompt as the tool result (validation feedback), then the
    # call made again with the same tool and a fresh id.
    "pydantic-ai retry prompt as tool result": (
        [{"role": "system", "content": "Extract the city."},
         {"role": "user", "content": "I live in the capital of France."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_r1", "final_result", "{\"city\": 7}")]},
         {"role": "tool", "tool_call_id": "call_r1", "content": "1 validation errors: "
          "[{\"type\": \"string_type\", \"loc\": [\"city\"], \"msg\": \"Input should be a valid "
          "string\"}]\n\nFix the errors and try again."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_r2", "final_result", "{\"city\": \"Paris\"}")]},
         {"role": "tool", "tool_call_id": "call_r2", "content": "Final result processed."}],
        {}),
    # Gemini's OpenAI-compatible endpoint began the session: its calls carry the thought
    # signature in `extra_content`, which Gemini needs back and OpenAI ignores.
    "gemini thought signatures in extra_content": (
        [{"role": "user", "content": "Check flight AA100."},
         {"role": "assistant", "content": None, "tool_calls": [{
             **call("function-call-1763", "check_flight", "{\"flight\":\"AA100\"}"),
             "extra_content": {"google": {"thought_signature": "CiQBVKhc7pB0+/8="}}}]},
         {"role": "tool", "tool_call_id": "function-call-1763", "content": "on time"},
         {"role": "user", "content": "and AA101?"}],
        {"reasoning_effort": "low"}),
    # DeepSeek-reasoner began it, and the history keeps `reasoning_content` on the turns.
    "deepseek reasoning_content kept": (
        [{"role": "user", "content": "9.11 or 9.8, which is larger?"},
         {"role": "assistant", "content": "9.8", "reasoning_content": "Compare decimals..."},
         {"role": "user", "content": "Why?"}],
        {"temperature": 0.2}),
    # Open WebUI: the reasoning of the previous answer kept inline as a <details> block,
    # the web search's citations as `annotations`, and its own top-level extras.
    "open webui details block and annotations": (
        [{"role": "system", "content": "User context:\n1. likes cats"},
         {"role": "user", "content": "What's new with Rust?"},
         {"role": "assistant", "content": "<details type=\"reasoning\" done=\"true\" "
          "duration=\"2\">\n<summary>Thought for 2 seconds</summary>\n&gt; search\n</details>\n"
          "Rust 1.90 shipped.",
          "annotations": [{"type": "url_citation", "url_citation": {
              "url": "https://blog.rust-lang.org", "title": "Rust Blog", "start_index": 0,
              "end_index": 10}}]},
         {"role": "user", "content": [{"type": "text", "text": "and this?"},
                                      {"type": "image_url",
                                       "image_url": {"url": "https://example.com/x.png"}}]}],
        {"stream_options": {"include_usage": True}, "user": "owui-user-1"}),
    # LibreChat agents: text parts with a custom `tool_call_ids` marker beside the calls.
    "librechat content parts beside calls": (
        [{"role": "user", "content": "search the docs"},
         {"role": "assistant", "content": [{"type": "text", "text": "Searching.",
                                            "tool_call_ids": ["call_lc"]}],
          "tool_calls": [call("call_lc", "file_search", "{\"query\": \"setup\"}")]},
         {"role": "tool", "tool_call_id": "call_lc", "content": "Found setup.md"},
         {"role": "assistant", "content": [{"type": "text", "text": "See setup.md."}]},
         {"role": "user", "content": "thanks", "name": "Jane_Doe"}],
        {}),
    # Zed's agent: a tool the user cancelled gets Zed's own text as its result.
    "zed cancelled tool answered": (
        [{"role": "system", "content": "You are a highly skilled software engineer."},
         {"role": "user", "content": "run the tests"},
         {"role": "assistant", "content": "Running them.", "tool_calls": [
             call("toolu_01ZedA", "terminal", "{\"command\":\"cargo test\",\"cd\":\"zed\"}")]},
         {"role": "tool", "tool_call_id": "toolu_01ZedA",
          "content": "Tool canceled by user"},
         {"role": "user", "content": "just check the build"}],
        {"stream": True}),
    # Instructor in TOOLS mode, a reask: the failed call answered with the validation
    # error, then the model's corrected call (both parallel results present).
    "instructor reask with parallel calls": (
        [{"role": "user", "content": "Extract: Jason is 25, Sarah is 30"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_u1", "User", "{\"name\": \"jason\", \"age\": 25}"),
             call("call_u2", "User", "{\"name\": \"sarah\", \"age\": 30}")]},
         {"role": "tool", "tool_call_id": "call_u1", "name": "User",
          "content": "Validation Error found:\nname must be uppercase\nRecall the function "
          "correctly, fix the errors"},
         {"role": "tool", "tool_call_id": "call_u2", "name": "User",
          "content": "Validation Error found:\nname must be uppercase\nRecall the function "
          "correctly, fix the errors"}],
        {"tool_choice": "required"}),
    # smolagents CodeAgent: code in text, observations as user turns, custom stops.
    "smolagents code agent": (
        [{"role": "system", "content": [{"type": "text", "text": "You are an expert "
                                         "assistant who can solve any task using code."}]},
         {"role": "user", "content": [{"type": "text", "text": "New task:\n2**10?"}]},
         {"role": "assistant", "content": [{"type": "text", "text": "Thought: compute.\n"
                                            "<code>\nprint(2**10)\n</code>"}]},
         {"role": "user", "content": [{"type": "text",
                                       "text": "Observation:\nExecution logs:\n1024\n"}]}],
        {"stop": ["<end_code>", "Observation:", "Calling tools:"]}),
}


@pytest.mark.parametrize("case", list(VALID))
def test_valid_cases_are_valid_on_openai_and_project_unchanged(case: str) -> None:
    messages, params = VALID[case]
    assert find_problem({"model": "m", "messages": messages, **params}, "openai") is None
    projection = project(messages)
    assert projection.anomalies == ()
    assert canonical(projection.messages) == canonical(messages)


@pytest.mark.parametrize("case", list(VALID))
async def test_valid_history_reaches_the_upstream_as_sent(
    gateway_factory: GatewayFactory, openai_referee: Referee, case: str,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee)
    messages, params = VALID[case]
    stream = bool(params.get("stream"))
    extra = {k: v for k, v in params.items() if k != "stream"}
    raw, text = await answered(gw, messages, stream, extra)
    assert text
    assert "x-gateway-repairs" not in raw.headers
    assert raw.headers.get("x-gateway-attempts") == "1"
    (received,) = openai_referee.requests
    assert received.status == 200
    body = received.json()
    assert canonical(body["messages"]) == canonical(messages)  # every field, in order
    assert body["model"] == UPSTREAM_MODEL
    for key, value in extra.items():
        assert body[key] == value, key


# --------------------------------------------------------------------------------------
# Broken histories: answered, the repair named, the upstream gets a shape it takes.
# --------------------------------------------------------------------------------------

# name -> (messages, repairs named up front, indexes of messages that arrive as sent on
# OpenAI's rules, request fields besides them)
BROKEN: dict[str, tuple[list[Msg], set[str], set[int], dict[str, Any]]] = {
    # OpenAI Agents SDK with tool_use_behavior="stop_on_first_tool": the other parallel
    # call never ran, and to_input_list() was reused for the next turn.
    "agents sdk stop on first tool": (
        [{"role": "system", "content": "You are a weather agent."},
         {"role": "user", "content": "Weather in Oslo and Rome?"},
         {"role": "assistant", "tool_calls": [
             call("call_os", "get_weather", "{\"city\":\"Oslo\"}"),
             call("call_ro", "get_weather", "{\"city\":\"Rome\"}")]},
         {"role": "tool", "tool_call_id": "call_os", "content": "3C"},
         {"role": "user", "content": "And Paris?"}],
        {"tool_result_synthesized"}, {0, 1, 2, 3, 4}, {"parallel_tool_calls": True}),
    # pydantic-ai history_processors keeping the last N messages: the window starts on a
    # tool return whose call was cut.
    "pydantic-ai history processor window starts on a tool return": (
        [{"role": "system", "content": "You are a support bot."},
         {"role": "tool", "tool_call_id": "pyd_ai_tool_call_id__lookup",
          "content": "{\"order\": 7, \"status\": \"shipped\"}"},
         {"role": "assistant", "content": "Order 7 has shipped."},
         {"role": "user", "content": "When will it arrive?"}],
        {"orphan_tool_result_dropped"}, {0, 2, 3}, {}),
    # Vercel AI SDK convertToCoreMessages (ai #2178): the tool message lost its
    # tool_call_id; the call before it is the one it answers.
    "vercel ai sdk tool result without tool_call_id": (
        [{"role": "system", "content": "Answer from the knowledge base."},
         {"role": "user", "content": "What is our refund policy?"},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_kb", "searchDB", "{\"query\":\"refund policy\"}")]},
         {"role": "tool", "content": "Refunds within 30 days."},
         {"role": "user", "content": "And for digital goods?"}],
        {"call_id_synthesized"}, {0, 1, 2, 4}, {"stream": True}),
    # LangChain (#22600) with two parallel calls: ToolMessages without tool_call_id, each
    # naming its tool, in the order the tools finished.
    "langchain tool messages without ids name their tool": (
        [{"role": "user", "content": "PO 7: info and status"},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_info", "po_info", "{\"po\": 7}"),
             call("call_stat", "po_status", "{\"po\": 7}")]},
         {"role": "tool", "name": "po_status", "content": "open"},
         {"role": "tool", "name": "po_info", "content": "ACME, 3 items"},
         {"role": "user", "content": "ok"}],
        {"call_id_synthesized"}, {0, 1, 4}, {}),
    # n8n (LangChain.js) with a tool that returned an object: the content is JSON, not text.
    "n8n tool output as an object": (
        [{"role": "system", "content": "You are a helpful assistant"},
         {"role": "user", "content": "Get the row for id 4"},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_n8n", "Google_Sheets", "{\"id\": 4}")]},
         {"role": "tool", "tool_call_id": "call_n8n",
          "content": {"row": 4, "name": "Ada", "tags": ["x"]}},
         {"role": "user", "content": "Thanks"}],
        {"tool_value_serialized"}, {0, 1, 2, 4}, {}),
    # LangChain.js: tool-call arguments kept parsed (an object) in the stored history.
    "langchain.js arguments as an object": (
        [{"role": "user", "content": "add 2 and 3"},
         {"role": "assistant", "content": "", "tool_calls": [
             {"id": "call_add", "type": "function",
              "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
         {"role": "tool", "tool_call_id": "call_add", "content": "5"}],
        {"tool_value_serialized"}, {0, 2}, {}),
    # Google ADK through LiteLLM: parallel function calls of one event written as two
    # assistant messages, the results after both.
    "adk litellm parallel calls split": (
        [{"role": "system", "content": "You are a helpful agent."},
         {"role": "user", "content": "Weather and time in New York?"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("adk-1f2e", "get_weather", "{\"city\": \"New York\"}")]},
         {"role": "assistant", "content": None, "tool_calls": [
             call("adk-3a4b", "get_current_time", "{\"city\": \"New York\"}")]},
         {"role": "tool", "tool_call_id": "adk-1f2e", "content": "{\"status\": \"success\"}"},
         {"role": "tool", "tool_call_id": "adk-3a4b", "content": "{\"time\": \"10:30\"}"}],
        {"tool_result_reordered"}, {0, 1, 2, 3, 4, 5}, {}),
    # OpenHands condenser (LLMSummarizingCondenser) cut the middle: a result whose call
    # was summarised away, and the summary between a call and its result.
    "openhands condenser cut": (
        [{"role": "system", "content": "You are OpenHands agent."},
         {"role": "user", "content": "Fix the failing test."},
         {"role": "tool", "tool_call_id": "toolu_gone", "name": "execute_bash",
          "content": "pytest: 1 failed"},
         {"role": "user", "content": "<CONDENSATION>Ran pytest; 1 failure in "
          "test_app.py</CONDENSATION>"},
         {"role": "assistant", "content": "Opening the file.", "tool_calls": [
             call("toolu_open", "str_replace_editor",
                  "{\"command\": \"view\", \"path\": \"/workspace/test_app.py\"}")]},
         {"role": "tool", "tool_call_id": "toolu_open", "name": "str_replace_editor",
          "content": [{"type": "text", "text": "1\tdef test_x():",
                       "cache_control": {"type": "ephemeral"}}]}],
        {"orphan_tool_result_dropped"}, {0, 1, 3, 4, 5}, {}),
    # SWE-agent after a format error: the requery's assistant text and the error it got
    # back, then the last observation replayed twice (a retried step).
    "swe-agent retried step duplicated the observation": (
        [{"role": "system", "content": "SETTING: You are an autonomous programmer."},
         {"role": "user", "content": "<uploaded_files>/repo</uploaded_files> fix #12"},
         {"role": "assistant", "content": "Let me look.", "tool_calls": [
             call("call_swe", "bash", "{\"command\": \"ls\"}")]},
         {"role": "tool", "tool_call_id": "call_swe", "content": "OBSERVATION:\nsrc tests"},
         {"role": "tool", "tool_call_id": "call_swe", "content": "OBSERVATION:\nsrc tests"},
         {"role": "user", "content": "Your output was not formatted correctly."}],
        {"duplicate_tool_result_dropped"}, {0, 1, 2, 3, 5}, {}),
    # Goose: the session was interrupted while a developer__shell call ran; the user's
    # next message came first.
    "goose interrupted shell call": (
        [{"role": "system", "content": "You are a general-purpose AI agent called goose."},
         {"role": "user", "content": "build it"},
         {"role": "assistant", "content": "Building.", "tool_calls": [
             call("toolu_goose", "developer__shell", "{\"command\": \"cargo build\"}")]},
         {"role": "user", "content": "stop, run the linter instead"}],
        {"tool_result_synthesized"}, {0, 1, 2, 3}, {}),
    # Codex CLI (wire_api = "chat") after Ctrl-C: the shell call is at the very end.
    "codex chat mode interrupted at the end": (
        [{"role": "system", "content": "You are Codex, based on GPT-5."},
         {"role": "user", "content": "list the repo"},
         {"role": "assistant", "content": None, "reasoning": "list files",
          "tool_calls": [call("call_cx", "shell", "{\"command\": [\"ls\", \"-la\"]}")]}],
        {"tool_result_synthesized"}, {0, 1, 2}, {}),
    # Open WebUI native tools sent `tool_calls: []` beside the answer's text.
    "open webui empty tool_calls beside text": (
        [{"role": "user", "content": "hi"},
         {"role": "assistant", "content": "Hello! How can I help?", "tool_calls": []},
         {"role": "user", "content": "tell me a joke"}],
        {"empty_content_dropped"}, {0, 2}, {}),
    # Dify: a file-only query sends an empty text part beside the image.
    "dify empty text part beside an image": (
        [{"role": "system", "content": "Describe images."},
         {"role": "user", "content": [
             {"type": "text", "text": ""},
             {"type": "image_url", "image_url": {"url": "https://example.com/cat.png",
                                                 "detail": "low"}}]}],
        {"empty_content_dropped"}, {0}, {}),
    # Flowise / LibreChat: a cancelled generation saved as an empty assistant turn with
    # null content between two user turns.
    "librechat aborted generation saved empty": (
        [{"role": "user", "content": "write a poem"},
         {"role": "assistant", "content": None},
         {"role": "user", "content": "write a poem (retry)"}],
        {"empty_content_dropped"}, {0, 2}, {}),
    # Semantic Kernel ChatHistorySummarizationReducer: the summary system message went in
    # between a call and its result.
    "semantic kernel summary between a call and its result": (
        [{"role": "system", "content": "You are a planner."},
         {"role": "user", "content": "book a table"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_sk_b", "Booking-Reserve", "{\"people\": 2}")]},
         {"role": "system", "content": "Summary: the user wants dinner for two."},
         {"role": "tool", "tool_call_id": "call_sk_b", "content": "Reserved at 19:00"}],
        {"tool_result_reordered"}, {0, 1, 2, 3, 4}, {}),
    # Instructor (older reask_tools): two parallel calls, only the first answered with
    # the validation error.
    "instructor reask answers only the first call": (
        [{"role": "user", "content": "Extract: Jason is 25, Sarah is 30"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_i1", "User", "{\"name\": \"jason\", \"age\": 25}"),
             call("call_i2", "User", "{\"name\": \"sarah\", \"age\": 30}")]},
         {"role": "tool", "tool_call_id": "call_i1",
          "content": "Validation Error found:\nname must be uppercase"}],
        {"tool_result_synthesized"}, {0, 1, 2}, {}),
    # LlamaIndex AgentWorkflow with two agents sharing memory: the handoff result was
    # written twice, once per agent.
    "llamaindex handoff result written twice": (
        [{"role": "system", "content": "You are the ResearchAgent."},
         {"role": "user", "content": "Write a report on bees."},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_hoff", "handoff", "{\"to_agent\": \"WriteAgent\"}")]},
         {"role": "tool", "tool_call_id": "call_hoff", "name": "handoff",
          "content": "Agent WriteAgent is now handling the request"},
         {"role": "assistant", "content": "Drafting the report."},
         {"role": "tool", "tool_call_id": "call_hoff", "name": "handoff",
          "content": "Agent WriteAgent is now handling the request"},
         {"role": "user", "content": "make it short"}],
        {"duplicate_tool_result_dropped"}, {0, 1, 2, 3, 4, 6}, {}),
    # Cursor-style custom client: the results of three parallel reads in reverse order,
    # one of them twice.
    "cursor-style parallel reads reversed and repeated": (
        [{"role": "user", "content": "read a, b and c"},
         {"role": "assistant", "content": "", "tool_calls": [
             call("r_a", "read_file", "{\"p\":\"a\"}"), call("r_b", "read_file", "{\"p\":\"b\"}"),
             call("r_c", "read_file", "{\"p\":\"c\"}")]},
         {"role": "tool", "tool_call_id": "r_c", "content": "C"},
         {"role": "tool", "tool_call_id": "r_b", "content": "B"},
         {"role": "tool", "tool_call_id": "r_b", "content": "B"},
         {"role": "tool", "tool_call_id": "r_a", "content": "A"}],
        {"duplicate_tool_result_dropped"}, {0, 1, 2, 3, 5}, {}),
    # A session begun on Claude through LiteLLM's OpenAI-compatible proxy, continued on
    # OpenAI: thinking kept in `thinking_blocks`, and the cancelled call's result missing.
    "claude-begun session with thinking and a cancelled call": (
        [{"role": "user", "content": "deploy"},
         {"role": "assistant", "content": "Deploying.",
          "thinking_blocks": [{"type": "thinking", "thinking": "Run deploy.",
                               "signature": "ErUBCkYICBgC"}],
          "reasoning_content": "Run deploy.",
          "tool_calls": [call("toolu_01Dep", "deploy", "{\"env\": \"prod\"}")]},
         {"role": "user", "content": "cancel that; staging first"}],
        {"tool_result_synthesized"}, {0, 1, 2}, {}),
}

EXTRA_FIELDS: dict[str, Any] = {"metadata": {"framework": "test-2"},
                                "x_vendor_extension": {"keep": [1, None, "é"]}}


def _texts(messages: list[Msg], role: str) -> list[str]:
    out: list[str] = []
    for m in messages:
        if m.get("role") != role:
            continue
        content = m.get("content")
        parts = [content] if isinstance(content, str) else [
            p.get("text", "") for p in content if isinstance(p, dict)
        ] if isinstance(content, list) else []
        out.extend(t for t in parts if isinstance(t, str) and t.strip())
    return out


@pytest.mark.parametrize("case", list(BROKEN))
async def test_broken_history_is_answered_with_the_repair_named(
    gateway_factory: GatewayFactory, referee: Referee, case: str,
) -> None:
    gw = await _gateway(gateway_factory, referee)
    messages, kinds, kept, params = BROKEN[case]
    stream = bool(params.get("stream"))
    extra = {**EXTRA_FIELDS, **{k: v for k, v in params.items() if k != "stream"}}
    raw, text = await answered(gw, messages, stream, extra)
    assert text
    reported = {item.split("=")[0] for item in raw.headers["x-gateway-repairs"].split(",")}
    if "x-gateway-recovery" in raw.headers:
        # The strict upstream refused project()'s output: the strict rung's repairs are named.
        assert referee.config.rules == "strict"
        assert raw.headers["x-gateway-recovery"].startswith("strict")
    else:
        assert kinds <= reported
    sent = referee.requests[-1]
    assert sent.status == 200
    body = sent.json()
    assert find_problem(body, referee.config.rules) is None
    for key, value in extra.items():
        assert body[key] == value, key
    # No user text lost; on OpenAI's rules the untouched messages arrive as sent.
    upstream = "\n\n".join(_texts(body["messages"], "user"))
    for text in _texts(messages, "user"):
        assert text in upstream
    if referee.config.rules == "openai":
        assert "x-gateway-recovery" not in raw.headers
        assert raw.headers["x-gateway-attempts"] == "1"
        received = [canonical(m) for m in body["messages"]]
        for index in kept:
            assert canonical(messages[index]) in received, index


def test_the_broken_cases_are_refused_by_a_strict_provider_as_sent() -> None:
    for case, (messages, _, _, _) in BROKEN.items():
        assert find_problem({"model": "m", "messages": messages}, "strict") is not None, case


async def test_a_result_without_its_id_keeps_its_text(
    gateway_factory: GatewayFactory, openai_referee: Referee,
) -> None:
    # The tool's real output answers the call, instead of being dropped as an orphan and
    # replaced by the synthetic "not available" text.
    gw = await _gateway(gateway_factory, openai_referee)
    messages, _, _, _ = BROKEN["langchain tool messages without ids name their tool"]
    async with _client(gw) as client:
        await client.chat.completions.create(model="agent", messages=messages)  # type: ignore[arg-type]
    sent = openai_referee.requests[-1].json()["messages"]
    assert sent[2:4] == [  # in the order they came, each answering the call it names
        {"role": "tool", "name": "po_status", "content": "open", "tool_call_id": "call_stat"},
        {"role": "tool", "name": "po_info", "content": "ACME, 3 items",
         "tool_call_id": "call_info"}]


# --------------------------------------------------------------------------------------
# Mixed providers: what only OpenAI refuses is repaired on the strict rung.
# --------------------------------------------------------------------------------------


async def test_claude_thinking_parts_in_assistant_content_reach_openai_as_text(
    gateway_factory: GatewayFactory, openai_referee: Referee,
) -> None:
    # A session begun on Claude through an OpenAI-compatible proxy that keeps Anthropic's
    # content blocks: `thinking` and `redacted_thinking` parts in the assistant content.
    # OpenAI refuses them ("Invalid value: 'thinking'. Supported values are: 'text' and
    # 'refusal'."); the strict rung drops them and keeps the turn's text.
    gw = await _gateway(gateway_factory, openai_referee)
    messages: list[Msg] = [
        {"role": "user", "content": "Is 1009 prime?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Check divisors up to 31.",
             "signature": "EqQBCkYIBxgC"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            {"type": "text", "text": "Yes, 1009 is prime."}]},
        {"role": "user", "content": "And 1011?"}]
    async with _client(gw) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="agent", messages=messages)  # type: ignore[arg-type]
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert "thinking_part_dropped=1" in raw.headers["x-gateway-repairs"]
    first, last = openai_referee.requests[-2:]
    assert (first.status, last.status) == (400, 200)
    assert first.json()["messages"] == messages  # tried as sent first
    assert last.json()["messages"] == [
        messages[0], {"role": "assistant", "content": [
            {"type": "text", "text": "Yes, 1009 is prime."}]}, messages[2]]


def test_thinking_parts_stay_unless_a_refusal_names_them() -> None:
    # Signed thinking is what Claude needs back (the Messages wire's strict rung, a chat
    # route to Anthropic through LiteLLM): only a refusal of the part type drops it.
    messages: list[Msg] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"}],
         "tool_calls": [call("toolu_1", "f", "{}")]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "r"},
        {"role": "assistant", "content": "done"},
        {"role": "assistant", "content": "really"}]
    kept = project_strict(messages)
    assert kept.messages[1] == messages[1]
    assert "thinking_part_dropped" not in kept.counts()
    dropped = project_strict(messages, asks=StrictAsks(drop_thinking=True))
    assert dropped.messages[1] == {**messages[1], "content": None}
    assert dropped.counts()["thinking_part_dropped"] == 1
    assert find_problem({"model": "m", "messages": dropped.messages}, "strict") is None


# --------------------------------------------------------------------------------------
# Nothing to make sense of: a 400 in OpenAI's error shape.
# --------------------------------------------------------------------------------------

BAD: dict[str, list[Any]] = {
    # smolagents' internal roles sent raw (its role conversion skipped).
    "smolagents tool-call role": [
        {"role": "user", "content": "2+2?"},
        {"role": "tool-call", "content": [{"type": "text", "text": "Calling tools: ..."}]}],
    # A message that is a bare string (a hand-rolled client joined the transcript).
    "message as a string": ["user: hi", {"role": "user", "content": "hi"}],
    # Content as a number.
    "numeric content": [{"role": "user", "content": 42}],
    # A message without a role.
    "message without a role": [{"content": "hello"}],
}


@pytest.mark.parametrize("case", list(BAD))
async def test_nonsense_is_a_clear_400_in_openai_shape(
    gateway_factory: GatewayFactory, openai_referee: Referee, case: str,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee)
    async with _client(gw) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="agent", messages=BAD[case])  # type: ignore[arg-type]
    error = caught.value
    assert error.status_code == 400
    assert isinstance(error.body, dict)
    assert error.body["type"] == "invalid_request_error"
    assert error.body["message"]
    assert set(error.body) >= {"message", "type", "param", "code"}
    assert not openai_referee.requests  # nothing reached the upstream
