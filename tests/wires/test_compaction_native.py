"""The ladder's compaction step serves the native wires: an Anthropic history that
overflows the upstream window is summarized and the compacted history, rebuilt as Messages
API turns, is accepted by the (strict) fake Anthropic API."""

from __future__ import annotations

from typing import Any

import anthropic
import openai

from gateway.compaction import SUMMARY_PREFIX
from gateway.compaction.summary_request import DEFAULT_INSTRUCTIONS
from tests.conftest import GatewayFactory
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import Canned
from tests.fakes.responses_server import FakeResponses, responses_error


def long_history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"task {i}: " + "explain the code " * 30})
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{i}", "name": "read_file", "input": {"n": i}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "x = 1\n" * 80}]})
        messages.append({"role": "assistant", "content": f"done with task {i}"})
    messages.append({"role": "user", "content": "and now the last step"})
    return messages


async def test_overflow_compacts_into_a_valid_messages_history(
    gateway_factory: GatewayFactory,
) -> None:
    async with FakeAnthropic(context_window=1500) as fake:
        # The fake's own answers echo the request, which a summary's small output budget
        # (sized from the 1,500-token window the refusal states) would cut off: the summary
        # call gets a real summary instead.
        fake.script(
            Canned(400, {"type": "error", "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 4184 tokens > 1500 maximum"}}),
            Canned(200, {"id": "msg_summary", "type": "message", "role": "assistant",
                         "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
                         "stop_sequence": None,
                         "content": [{"type": "text", "text": "## Task\nExplain the code of "
                                      "tasks 0-7; the last step is still open."}],
                         "usage": {"input_tokens": 600, "output_tokens": 20}}))
        gw = await gateway_factory({
            "model_list": [{"model_name": "claude", "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5", "api_base": fake.base_url,
                "api_key": "k"}, "model_info": {"max_input_tokens": 200000}}],
        })
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as c:
            raw = await c.messages.with_raw_response.create(
                model="claude", max_tokens=64, messages=long_history(8),
                tools=[{"name": "read_file", "input_schema": {"type": "object"}}],
                extra_headers={"x-session-id": "wire-compaction"})
            message = await raw.parse()
    assert message.content[0].text  # type: ignore[union-attr]
    assert set(raw.headers["x-gateway-recovery"].split(",")) == {"compact"}
    assert raw.headers["x-gateway-compaction"].startswith("summarized")
    last = fake.requests[-1].body
    texts = [b.get("text", "") for m in last["messages"] for b in (
        [{"text": m["content"]}] if isinstance(m["content"], str) else m["content"])]
    assert any(t.startswith(SUMMARY_PREFIX) for t in texts)  # the summary went up
    assert all(m["role"] == "user" for m in last["messages"])
    assert last["tools"][0]["name"] == "read_file"


async def test_a_model_served_only_at_responses_is_summarized_there(
    gateway_factory: GatewayFactory,
) -> None:
    # gpt-5-codex is served at /responses alone (litellm's map: mode "responses"): a summary
    # asked over Chat Completions would be refused, and the history only trimmed.
    async with FakeResponses(api_key="upstream-openai-key") as fake:
        # (the fake's own answers echo the request: the summary call gets a real summary)
        fake.script(responses_error(400, "Your input exceeds the context window of this model. "
                                         "Please adjust your input and try again.",
                                    code="context_length_exceeded"),
                    Canned(200, {"id": "resp_summary", "object": "response",
                                 "created_at": 1700000000, "status": "completed",
                                 "model": "gpt-5-codex", "output": [{
                                     "type": "message", "id": "msg_summary",
                                     "status": "completed", "role": "assistant",
                                     "content": [{"type": "output_text", "annotations": [],
                                                  "text": "## Task\nExplain the parser, "
                                                          "steps 0-8."}]}]}))
        gw = await gateway_factory({
            "model_list": [{"model_name": "codex", "litellm_params": {
                "model": "openai/gpt-5-codex", "api_base": f"{fake.base_url}/v1",
                "api_key": "upstream-openai-key"}, "model_info": {"max_input_tokens": 3000}}],
        })
        items = [{"role": "user" if i % 2 == 0 else "assistant",
                  "content": f"step {i}: " + "explain the parser " * 40} for i in range(9)]
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as c:
            raw = await c.responses.with_raw_response.create(
                model="codex", input=items,  # type: ignore[arg-type]
                extra_headers={"x-session-id": "codex-compaction"})
        assert raw.parse().output_text
    assert raw.headers["x-gateway-compaction"].startswith("summarized")
    summaries = [r.body for r in fake.requests if r.body.get("instructions")
                 == DEFAULT_INSTRUCTIONS]
    assert len(summaries) == 1 and summaries[0]["store"] is False
    assert "<transcript>" in summaries[0]["input"][0]["content"]
    assert all(r.path.endswith("/v1/responses") for r in fake.requests)
