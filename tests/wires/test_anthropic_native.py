"""/v1/messages natively to an Anthropic upstream, through the official anthropic SDK.

The upstream is the fake Anthropic API (tests/fakes), which refuses broken histories with
the real error texts; the gateway must get every broken history accepted, report what it
repaired, and send valid ones (signed thinking blocks included) exactly as they came.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import orjson
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error

TOOLS = [{"name": "read_file", "description": "read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]


def use(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {"path": "a"}}


def result(tool_id: str, text: str = "contents") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": text}


def thinking(text: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": sign_thinking(text)}


BROKEN: dict[str, tuple[list[dict[str, Any]], str]] = {
    "cancelled call": (
        [{"role": "user", "content": "read a"},
         {"role": "assistant", "content": [use("toolu_1")]},
         {"role": "user", "content": "never mind, say hi"}],
        "tool_result_synthesized"),
    "orphan result": (
        [{"role": "user", "content": "hi"},
         {"role": "assistant", "content": "hello"},
         {"role": "user", "content": [result("toolu_gone"), {"type": "text", "text": "go"}]}],
        "orphan_tool_result_dropped"),
    "reordered results": (
        [{"role": "user", "content": "read both"},
         {"role": "assistant", "content": [use("toolu_1"), use("toolu_2")]},
         {"role": "user", "content": [{"type": "text", "text": "here"}, result("toolu_2"),
                                      result("toolu_1")]}],
        "tool_result_reordered"),
    "empty turn": (
        [{"role": "user", "content": "hi"},
         {"role": "assistant", "content": [{"type": "text", "text": "  "}]},
         {"role": "user", "content": "again"}],
        "empty_content_dropped"),
    "duplicate id": (
        [{"role": "user", "content": "read"},
         {"role": "assistant", "content": [use("toolu_1")]},
         {"role": "user", "content": [result("toolu_1")]},
         {"role": "assistant", "content": [use("toolu_1")]},
         {"role": "user", "content": [result("toolu_1")]}],  # a copy: answered alike
        "duplicate_tool_call_deduped"),
    "leading assistant": (
        [{"role": "assistant", "content": "I was saying"},
         {"role": "user", "content": "hi"}],
        "leading_non_user_dropped"),
}


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, fake: FakeAnthropic) -> RunningGateway:
    return await gateway_factory({
        "model_list": [{"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5", "api_base": fake.base_url,
            "api_key": "upstream-anthropic-key"}}],
        "gateway": {"api_keys": ["client-key"]},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
    })


def client(gw: RunningGateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key", max_retries=0)


@pytest.mark.parametrize("case", list(BROKEN))
async def test_broken_history_is_accepted_and_reported(
    gw: RunningGateway, fake: FakeAnthropic, case: str
) -> None:
    messages, kind = BROKEN[case]
    async with client(gw) as c:
        raw = await c.messages.with_raw_response.create(
            model="claude", max_tokens=64, messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    message = (await raw.parse())
    assert message.content[0].type == "text"
    assert kind in raw.headers["x-gateway-repairs"]
    sent = fake.requests[-1]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == "upstream-anthropic-key"
    assert "client-key" not in sent.raw.decode()
    assert sent.body["model"] == "claude-sonnet-4-5"
    if case in ("duplicate id", "leading assistant"):  # refused first, then strict
        assert raw.headers["x-gateway-recovery"] == "strict"
        assert fake.requests[-2].body["messages"] != sent.body["messages"]


async def test_bearer_auth_like_coding_agents(gw: RunningGateway, fake: FakeAnthropic) -> None:
    async with anthropic.AsyncAnthropic(base_url=gw.root, auth_token="client-key",
                                        max_retries=0) as c:
        message = await c.messages.create(model="claude", max_tokens=8,
                                          messages=[{"role": "user", "content": "hi"}])
    assert message.content[0].text == "you said: hi"  # type: ignore[union-attr]
    sent = fake.requests[-1].headers
    assert "authorization" not in sent and sent["x-api-key"] == "upstream-anthropic-key"


async def test_valid_history_with_thinking_arrives_unchanged(
    gw: RunningGateway, fake: FakeAnthropic
) -> None:
    signed = thinking("let me read the file first")
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "read a",
                                      "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [signed, {"type": "text", "text": "reading"},
                                          use("toolu_1")]},
        {"role": "user", "content": [result("toolu_1"), {"type": "text", "text": "next?"}]},
    ]
    async with client(gw) as c:
        raw = await c.messages.with_raw_response.create(
            model="claude", max_tokens=64, messages=messages, tools=TOOLS,  # type: ignore[arg-type]
            extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
    assert "x-gateway-repairs" not in raw.headers
    sent = fake.requests[-1]
    assert sent.body["messages"] == messages
    assert orjson.dumps(signed) in sent.raw
    assert sent.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert sent.headers["anthropic-version"]


async def test_each_request_passes_its_own_version_and_beta_headers(
    gw: RunningGateway, fake: FakeAnthropic
) -> None:
    # Senders are built once per deployment and headers: one client's beta features must
    # never reach the upstream with another client's request.
    asks = [{"anthropic-beta": "interleaved-thinking-2025-05-14"}, {},
            {"anthropic-beta": "context-1m-2025-08-07", "anthropic-version": "2023-01-01"},
            {"anthropic-beta": "interleaved-thinking-2025-05-14"},
            {"anthropic-version": "2023-06-01"}]
    async with client(gw) as c:
        for headers in asks:
            await c.messages.create(model="claude", max_tokens=8, extra_headers=headers,
                                    messages=[{"role": "user", "content": "hi"}])
    sent = [r.headers for r in fake.requests[-len(asks):]]
    assert [h.get("anthropic-beta") for h in sent] == [a.get("anthropic-beta") for a in asks]
    versions = [h["anthropic-version"] for h in sent]  # (the SDK's own, unless overridden)
    assert versions[2:] == ["2023-01-01", versions[0], "2023-06-01"]
    assert versions[0] == versions[1] != "2023-01-01"
    assert all(h["x-api-key"] == "upstream-anthropic-key" for h in sent)


@pytest.mark.parametrize("ttl", [[], {}, 5, None, "2h"])
@pytest.mark.parametrize("where", ["message", "system"])
async def test_a_breakpoint_with_a_ttl_of_another_type_is_repaired(
    gw: RunningGateway, fake: FakeAnthropic, ttl: Any, where: str
) -> None:
    # (a list or an object could not be looked up among the known ttls: that was a 500)
    mark = {"type": "ephemeral", "ttl": ttl}
    block: Any = {"type": "text", "text": "hi"}
    system: Any = [{"type": "text", "text": "be brief", "cache_control": mark}]
    if where == "message":
        block, system = {**block, "cache_control": mark}, anthropic.NOT_GIVEN
    async with client(gw) as c:
        raw = await c.messages.with_raw_response.create(
            model="claude", max_tokens=8, system=system,
            messages=[{"role": "user", "content": [block]}])
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-repairs"]
    sent = fake.requests[-1].body
    marks = [b["cache_control"] for b in [*(sent.get("system") or []),
                                          *sent["messages"][0]["content"]]
             if "cache_control" in b]
    assert all(m.get("ttl", "5m") in ("5m", "1h") for m in marks)


async def test_repair_next_to_a_signed_thinking_block_keeps_it_intact(
    gw: RunningGateway, fake: FakeAnthropic
) -> None:
    signed = thinking("two files to read")
    messages = [
        {"role": "user", "content": "read a and b"},
        {"role": "assistant", "content": [signed, use("toolu_1"), use("toolu_2")]},
        {"role": "user", "content": [result("toolu_2")]},  # toolu_1 was cancelled
    ]
    async with client(gw) as c:
        raw = await c.messages.with_raw_response.create(
            model="claude", max_tokens=64, messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    assert raw.headers["x-gateway-repairs"] == "tool_result_synthesized=1"
    sent = fake.requests[-1].body["messages"]
    assert sent[1] == messages[1]  # the assistant turn, thinking and signature as they were
    results = [b for m in sent[2:] for b in m["content"] if b["type"] == "tool_result"]
    assert [b["tool_use_id"] for b in results] == ["toolu_1", "toolu_2"]


async def test_stream_through_the_sdk(gw: RunningGateway, fake: FakeAnthropic) -> None:
    messages, _ = BROKEN["cancelled call"]
    async with client(gw) as c, c.messages.stream(
        model="claude", max_tokens=64, messages=messages, tools=TOOLS,  # type: ignore[arg-type]
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    # The synthesized result went up (merged into the user turn) and the answer streamed.
    assert text.startswith("tool results: Tool result is not available")
    assert text.endswith("you said: never mind, say hi")
    assert final.stop_reason == "end_turn"
    assert fake.requests[-1].body["stream"] is True


async def test_count_tokens_counts_the_repaired_history(
    gw: RunningGateway, fake: FakeAnthropic
) -> None:
    messages, _ = BROKEN["orphan result"]
    async with client(gw) as c:
        raw = await c.messages.with_raw_response.count_tokens(
            model="claude", messages=messages)  # type: ignore[arg-type]
    assert (await raw.parse()).input_tokens > 0
    assert raw.headers["x-gateway-repairs"] == "orphan_tool_result_dropped=1"
    assert fake.requests[-1].path == "/v1/messages/count_tokens"


async def test_errors_come_back_in_anthropic_shape(
    gw: RunningGateway, fake: FakeAnthropic
) -> None:
    async with client(gw) as c:
        with pytest.raises(anthropic.NotFoundError) as missing:
            await c.messages.create(model="nope", max_tokens=8,
                                    messages=[{"role": "user", "content": "hi"}])
        assert missing.value.body["type"] == "error"  # type: ignore[index]
        assert "nope" in missing.value.message
        fake.script(anthropic_error(401, "invalid x-api-key", "authentication_error"))
        with pytest.raises(anthropic.AuthenticationError) as refused:
            await c.messages.create(model="claude", max_tokens=8,
                                    messages=[{"role": "user", "content": "hi"}])
        assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="wrong",
                                        max_retries=0) as bad:
        with pytest.raises(anthropic.AuthenticationError) as unauthorized:
            await bad.messages.create(model="claude", max_tokens=8,
                                      messages=[{"role": "user", "content": "hi"}])
    assert unauthorized.value.body["type"] == "error"  # type: ignore[index]


async def test_bad_body_is_a_clear_400(gw: RunningGateway) -> None:
    async with client(gw) as c:
        with pytest.raises(anthropic.BadRequestError) as bad:
            await c.messages.create(model="claude", max_tokens=8,
                                    messages=[{"role": "tool", "content": "x"}])  # type: ignore[list-item]
    assert "messages.0.role" in bad.value.message


async def test_transient_overload_is_retried(gw: RunningGateway, fake: FakeAnthropic) -> None:
    fake.script(anthropic_error(529, "Overloaded", "overloaded_error"))
    async with client(gw) as c:
        raw = await c.messages.with_raw_response.create(
            model="claude", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert (await raw.parse()).content[0].text == "you said: hi"  # type: ignore[union-attr]
    assert raw.headers["x-gateway-recovery"] == "retry"


async def test_litellm_only_fields_never_reach_the_provider(
    gw: RunningGateway, fake: FakeAnthropic
) -> None:
    # Anthropic refuses unknown top-level fields: LiteLLM proxy controls are consumed.
    async with client(gw) as c:
        message = await c.messages.create(
            model="claude", max_tokens=8, messages=[{"role": "user", "content": "hi"}],
            extra_body={"mock_response": "not from the model", "tags": ["team-a"],
                        "caching": True, "fallbacks": []})
    assert message.content[0].text == "you said: hi"  # type: ignore[union-attr]
    sent = fake.requests[-1].body
    assert not {"mock_response", "tags", "caching", "fallbacks"} & set(sent)


async def test_a_system_message_alone_is_a_clear_400(gw: RunningGateway,
                                                     fake: FakeAnthropic) -> None:
    # Lifted into the top-level system, it leaves no message: said here, in the wire's own
    # shape, naming the repair (the provider would say "at least one message is required"
    # of a list the client never sent).
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                        max_retries=0) as c:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await c.messages.create(model="claude", max_tokens=8, messages=[
                {"role": "system", "content": "be brief"}])  # type: ignore[list-item]
    error = refused.value.body
    assert isinstance(error, dict) and error["type"] == "error"
    assert "system_message_lifted=1" in error["error"]["message"]
    assert not fake.requests
