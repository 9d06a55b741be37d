"""Held-out overflow, third round: context overflow as agents meet it on all three wires.

Signed thinking blocks, tool pairs and cache breakpoints across the compaction boundary of a
Messages history; encrypted reasoning and function-call pairs of a ``store: false`` Responses
input, and a history held upstream (``previous_response_id``); a summarizer that is the same
overloaded model; images in what is summarized; the recall tool in a small window; a client
that edits an earlier turn of a compacted session; two conversations that start alike; a
window learned for one deployment while an alias routes to a bigger one. The upstreams are
strict fakes that refuse over their window in the provider's own words; every case asserts
what the agent notices: an answer (or a clear error), the compaction headers, a request its
upstream accepted as valid, and a next turn that still works.
"""

from __future__ import annotations

import asyncio
import base64
import io
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web
from PIL import Image

from tests.compaction.conftest import Session, agent_turn, compaction_header
from tests.compaction.test_overflow_heldout import (
    CONFIGURED,
    file_text,
    last_answered,
    model_card,
    phrased_config,
)
from tests.conftest import GatewayFactory, model_entry
from tests.factories import image_part, text_part, user
from tests.fakes.anthropic_rules import as_blocks, sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.llamacpp_server import LlamaCppServer, prompt_tokens
from tests.fakes.native_base import rough_tokens
from tests.fakes.native_overflow import RESPONSES_OVERFLOW, is_summary
from tests.fakes.phrased_overflow import PhrasedServer
from tests.fakes.responses_server import OWN_ENCRYPTION, FakeResponses, responses_error

SUMMARY = "## Task\nExplain the modules one by one.\n\n## Next Steps\nThe last step."
BOUND = 60  # seconds: any request of these cases ends well before this (never a hang)


def _summary_message(model: str) -> dict[str, Any]:
    return {"id": "msg_summary", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": SUMMARY}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 20}}


class WindowedAnthropic(FakeAnthropic):
    """The strict fake Anthropic API (its window refusal: "prompt is too long: N tokens > M
    maximum"), whose summary requests get a short summary, or Anthropic's 529 ``overloaded``
    every time when :attr:`overloaded`."""

    def __init__(self, window: int, *, overloaded: bool = False) -> None:
        super().__init__(context_window=window)
        self.overloaded = overloaded
        self.summaries: list[dict[str, Any]] = []

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        if is_summary(body):
            await self.record(request)
            self.summaries.append(body)
            if self.overloaded:
                return anthropic_error(529, "Overloaded", "overloaded_error").response()
            return web.json_response(_summary_message(body["model"]))
        return await super()._messages(request)

    def accepted(self) -> list[dict[str, Any]]:
        """The client requests (not summaries) that were answered, as the fake read them."""
        return [r.body for r in self.requests if not is_summary(r.body) and r.path ==
                "/v1/messages" and r.body is not None and self._valid(r.body)]

    def _valid(self, body: dict[str, Any]) -> bool:
        from tests.fakes.anthropic_rules import validate_messages_request
        from tests.fakes.native_base import RequestRefused
        try:
            validate_messages_request(body)
        except RequestRefused:
            return False
        return rough_tokens([body.get("tools"), body.get("system"),
                             body["messages"]]) <= self.context_window


class WindowedResponses(FakeResponses):
    """The strict fake Responses API with a context window (OpenAI's refusal: "Your input
    exceeds the context window of this model", ``context_length_exceeded``), counting what a
    ``previous_response_id`` holds upstream too; its summary requests get a short summary."""

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = window
        self.summaries: list[dict[str, Any]] = []
        self.verdicts: list[tuple[dict[str, Any], int]] = []

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        if is_summary(body):
            await self.record(request)
            self.summaries.append(body)
            return web.json_response({
                "id": "resp_summary", "object": "response", "created_at": 1700000000,
                "status": "completed", "model": body.get("model"), "output": [{
                    "type": "message", "id": "msg_summary", "status": "completed",
                    "role": "assistant", "content": [{"type": "output_text", "annotations": [],
                                                      "text": SUMMARY}]}]})
        items = body.get("input") or []
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items
        conversation = body.get("conversation")
        conversation = conversation.get("id") if isinstance(conversation, dict) else conversation
        held = (self.stored.get(str(body.get("previous_response_id")), [])
                + self.conversations.get(str(conversation), []))
        size = rough_tokens([body.get("instructions"), body.get("tools"), held, items])
        if size > self.window:
            await self.record(request)
            self.verdicts.append((body, 400))
            return responses_error(400, RESPONSES_OVERFLOW,
                                   code="context_length_exceeded").response()
        answer = await super()._responses(request)
        self.verdicts.append((body, answer.status))
        return answer

    def accepted(self) -> list[dict[str, Any]]:
        return [b for b, status in self.verdicts if status == 200]

    def _routes(self, app: web.Application) -> None:
        super()._routes(app)
        app.router.add_post("/v1/chat/completions", self._summary_chat)

    async def _summary_chat(self, request: web.Request) -> web.Response:
        """Chat Completions, where the gateway asks this model for its summaries."""
        body = orjson.loads(await request.read())
        await self.record(request)
        self.summaries.append(body)
        return web.json_response({
            "id": "chatcmpl-summary", "object": "chat.completion", "created": 0,
            "model": body.get("model"), "choices": [{"index": 0, "finish_reason": "stop",
                                                     "message": {"role": "assistant",
                                                                 "content": SUMMARY}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})


def claude_config(base_url: str, **compaction: Any) -> dict[str, Any]:
    return {
        "model_list": [{"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5", "api_base": base_url, "api_key": "k"},
            "model_info": {"max_input_tokens": 200_000}}],
        "compaction": {"reserved_context_size": 0, "recall": False, **compaction},
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
    }


def gpt_config(base_url: str, **compaction: Any) -> dict[str, Any]:
    return {
        "model_list": [{"model_name": "gpt", "litellm_params": {
            "model": "openai/gpt-5", "api_base": f"{base_url}/v1", "api_key": "k"},
            "model_info": {"max_input_tokens": 200_000, "responses_api": True}}],
        "compaction": {"reserved_context_size": 0, "recall": False, **compaction},
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
    }


# --- Messages: signed thinking, tool pairs and cache breakpoints across the boundary --------

READ_FILE = {"name": "read_file", "description": "Read a file of the repository.",
             "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
             "cache_control": {"type": "ephemeral"}}
SYSTEM = [{"type": "text", "text": "You are a careful coding agent.",
           "cache_control": {"type": "ephemeral"}}]


def thinking_turn(i: int) -> list[dict[str, Any]]:
    """One agent step with extended thinking: ask, signed thinking + tool_use, result,
    signed thinking + conclusion."""
    thought = f"I should read module_{i}.py before answering."
    after = f"module_{i}.py defines the handlers, so I can answer."
    return [
        {"role": "user", "content": [{"type": "text", "text": f"task {i}: explain module_{i}"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": thought, "signature": sign_thinking(thought)},
            {"type": "tool_use", "id": f"toolu_{i:04d}", "name": "read_file",
             "input": {"path": f"module_{i}.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i:04d}",
                                      "content": file_text(i)}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": after, "signature": sign_thinking(after)},
            {"type": "text", "text": f"module_{i} defines handlers."}]},
    ]


def thinking_history(turns: int, *, ends_in_tool_result: bool) -> list[dict[str, Any]]:
    out = [m for i in range(turns) for m in thinking_turn(i)]
    out[1]["content"].insert(0, {"type": "redacted_thinking", "data": "EncryptedRedactedData"})
    out[0]["content"][0]["cache_control"] = {"type": "ephemeral"}
    if ends_in_tool_result:  # the agent is mid tool loop: the last turn answers a call
        out.extend(thinking_turn(turns)[:3])
        out[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    else:
        out.append({"role": "user", "content": [{"type": "text", "text": "and the last step",
                                                 "cache_control": {"type": "ephemeral"}}]})
    return out


def breakpoints(value: Any) -> list[dict[str, Any]]:
    """The blocks carrying a cache_control breakpoint, anywhere in ``value``."""
    if isinstance(value, dict):
        here = [value] if isinstance(value.get("cache_control"), dict) else []
        return here + [b for k, v in value.items() if k != "cache_control"
                       for b in breakpoints(v)]
    if isinstance(value, list):
        return [b for v in value for b in breakpoints(v)]
    return []


def assert_thinking_whole(sent: dict[str, Any], original: list[dict[str, Any]]) -> None:
    """Every thinking block sent is one of the client's, byte for byte, still first in its
    assistant turn with the turn's other blocks: kept whole or dropped, never edited."""
    theirs = {orjson.dumps(m["content"]) for m in original if m["role"] == "assistant"}
    for message in sent["messages"]:
        blocks = as_blocks(message["content"])
        if any(b.get("type") in ("thinking", "redacted_thinking") for b in blocks):
            assert message["role"] == "assistant"
            assert orjson.dumps(message["content"]) in theirs, message


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("ends_in_tool_result", [False, True])
async def test_a_thinking_history_with_tool_pairs_and_breakpoints_compacts_wire_valid(
    gateway_factory: GatewayFactory, ends_in_tool_result: bool, stream: bool,
) -> None:
    async with WindowedAnthropic(window=3_000) as fake:
        gw = await gateway_factory(claude_config(fake.base_url))
        history = thinking_history(10, ends_in_tool_result=ends_in_tool_result)
        assert rough_tokens([SYSTEM, [READ_FILE], history]) > 3_000
        assert len(breakpoints([SYSTEM, [READ_FILE], history])) == 4  # the most allowed
        headers = {"x-session-id": f"thinking-{ends_in_tool_result}-{stream}",
                   "anthropic-beta": "interleaved-thinking-2025-05-14"}
        kwargs: dict[str, Any] = {
            "model": "claude", "max_tokens": 2_048, "system": SYSTEM, "tools": [READ_FILE],
            "thinking": {"type": "enabled", "budget_tokens": 1_024}, "extra_headers": headers}
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            if stream:
                async with claude.messages.stream(messages=history, **kwargs) as events:
                    text = "".join([t async for t in events.text_stream])
                    raw_headers = events.response.headers
            else:
                raw = await asyncio.wait_for(claude.messages.with_raw_response.create(
                    messages=history, **kwargs), BOUND)
                message = await raw.parse()
                text = "".join(b.text for b in message.content if b.type == "text")
                raw_headers = raw.headers
            assert text
            how = raw_headers["x-gateway-compaction"].split(";")[0]
            assert how in ("summarized", "trimmed"), raw_headers["x-gateway-compaction"]
            assert raw_headers["x-gateway-context"]
            sent = fake.accepted()[-1]
            assert len(breakpoints([sent.get("system"), sent.get("tools"),
                                    sent["messages"]])) <= 4
            assert_thinking_whole(sent, history)
            assert sent["tools"] == [READ_FILE] and sent["system"] == SYSTEM
            opaque = orjson.dumps(fake.summaries).decode()
            assert "sig-" not in opaque and "EncryptedRedactedData" not in opaque
            # The client's own next turn works on the same session.
            history += [{"role": "assistant", "content": text},
                        {"role": "user", "content": "thanks, go on"}]
            again = await asyncio.wait_for(claude.messages.with_raw_response.create(
                messages=history, **kwargs), BOUND)
            assert (await again.parse()).content
            assert_thinking_whole(fake.accepted()[-1], history)


async def test_a_summarizer_overloaded_like_its_model_trims_a_thinking_history_validly(
    gateway_factory: GatewayFactory,
) -> None:
    # The summary goes to the same overloaded model: Anthropic's 529 on every summary call.
    async with WindowedAnthropic(window=3_000, overloaded=True) as fake:
        gw = await gateway_factory(claude_config(fake.base_url))
        history = thinking_history(10, ends_in_tool_result=True)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            raw = await asyncio.wait_for(claude.messages.with_raw_response.create(
                model="claude", max_tokens=2_048, system=SYSTEM, tools=[READ_FILE],
                messages=history, thinking={"type": "enabled", "budget_tokens": 1_024},
                extra_headers={"x-session-id": "overloaded-summarizer",
                               "anthropic-beta": "interleaved-thinking-2025-05-14"}), BOUND)
            assert (await raw.parse()).content
        assert raw.headers["x-gateway-compaction"].startswith("trimmed")
        assert raw.headers["x-gateway-compaction-summary-failed"]
        assert 1 <= len(fake.summaries) <= 5, "bounded summary attempts"
        assert_thinking_whole(fake.accepted()[-1], history)


def png_b64(shade: int, side: int = 24) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (shade, 40, 200)).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


async def test_screenshots_in_a_compacted_messages_history_never_reach_the_summary(
    gateway_factory: GatewayFactory,
) -> None:
    async with WindowedAnthropic(window=3_000) as fake:
        gw = await gateway_factory(claude_config(fake.base_url))
        images = [png_b64(20 * i) for i in range(8)]
        history: list[dict[str, Any]] = []
        for i, data in enumerate(images):
            history += [
                {"role": "user", "content": [
                    {"type": "text", "text": f"step {i}: this is the screen now"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": data}}]},
                {"role": "assistant", "content": f"The screen shows step {i}. " + "ok " * 600}]
        # A computer-use step: the tool's result is a screenshot.
        shot = png_b64(250)
        images.append(shot)
        history += [
            {"role": "user", "content": "take a screenshot"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_shot",
                                               "name": "screenshot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_shot",
                                          "content": [{"type": "image", "source": {
                                              "type": "base64", "media_type": "image/png",
                                              "data": shot}}]}]},
            {"role": "assistant", "content": "Got it. " + "ok " * 600}]
        history.append({"role": "user", "content": "what changed overall?"})
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            raw = await asyncio.wait_for(claude.messages.with_raw_response.create(
                model="claude", max_tokens=256, messages=history,  # type: ignore[arg-type]
                tools=[{"name": "screenshot", "input_schema": {"type": "object"}}],
                extra_headers={"x-session-id": "screens"}), BOUND)
            assert (await raw.parse()).content
        assert raw.headers["x-gateway-compaction"].startswith("summarized")
        assert fake.summaries
        for summary in fake.summaries:
            text = orjson.dumps(summary).decode()
            assert not any(data[:40] in text for data in images), "no base64 in a summary"
            assert '"image"' not in text
        # The compacted request's summary carries no image data either.
        sent = orjson.dumps(fake.accepted()[-1]["messages"]).decode()
        summary_blocks = [b for m in fake.accepted()[-1]["messages"]
                          for b in as_blocks(m["content"])
                          if "## Context Recovery" in str(b.get("text"))]
        assert summary_blocks and "base64" not in orjson.dumps(summary_blocks).decode()
        assert "what changed overall?" in sent


# --- Responses: encrypted reasoning and function-call pairs, store false; upstream state ---

def reasoning_history(turns: int, *, ends_in_output: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(turns + (1 if ends_in_output else 0)):
        out += [
            {"role": "user", "content": f"task {i}: explain module_{i}.py"},
            {"type": "reasoning", "id": f"rs_{i:04d}", "summary": [],
             "encrypted_content": f"{OWN_ENCRYPTION}-client-{i}"},
            {"type": "function_call", "id": f"fc_{i:04d}", "call_id": f"call_{i}",
             "name": "read_file", "arguments": f'{{"path": "module_{i}.py"}}'},
            {"type": "function_call_output", "call_id": f"call_{i}", "output": file_text(i)},
        ]
        if i < turns:
            out.append({"type": "message", "role": "assistant", "id": f"msg_{i:04d}",
                        "content": [{"type": "output_text", "annotations": [],
                                     "text": f"module_{i} defines handlers."}]})
    if not ends_in_output:
        out.append({"role": "user", "content": "and the last step"})
    return out


TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]


@pytest.mark.parametrize("ends_in_output", [False, True])
async def test_encrypted_reasoning_and_call_pairs_compact_valid_with_store_false(
    gateway_factory: GatewayFactory, ends_in_output: bool,
) -> None:
    async with WindowedResponses(window=3_000) as fake:
        gw = await gateway_factory(gpt_config(fake.base_url))
        items = reasoning_history(10, ends_in_output=ends_in_output)
        assert rough_tokens(items) > 3_000
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            raw = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                model="gpt", input=items, tools=TOOLS, store=False,  # type: ignore[arg-type]
                reasoning={"effort": "low"}, include=["reasoning.encrypted_content"],
                extra_headers={"x-session-id": f"reasoning-{ends_in_output}"}), BOUND)
            answer = raw.parse()
            assert answer.output_text
            assert raw.headers["x-gateway-compaction"].startswith("summarized")
            assert fake.summaries and OWN_ENCRYPTION not in orjson.dumps(
                fake.summaries).decode(), "encrypted reasoning is opaque: never summarized"
            sent = fake.accepted()[-1]
            assert sent["store"] is False
            # Every reasoning item sent is the client's own, whole, before its output item.
            theirs = [i for i in items if i.get("type") == "reasoning"]
            for n, item in enumerate(sent["input"]):
                if item.get("type") == "reasoning":
                    assert item in theirs
                    assert sent["input"][n + 1].get("type") == "function_call"
            # The client's next turn (its answer's output items with it) still works.
            items += [o.model_dump(exclude_none=True) for o in answer.output]
            items.append({"role": "user", "content": "thanks, go on"})
            again = await asyncio.wait_for(gpt.responses.create(
                model="gpt", input=items, tools=TOOLS, store=False,  # type: ignore[arg-type]
                reasoning={"effort": "low"},
                extra_headers={"x-session-id": f"reasoning-{ends_in_output}"}), BOUND)
            assert again.output_text


async def test_a_history_held_upstream_that_overflows_is_compacted_from_the_kept_copy(
    gateway_factory: GatewayFactory,
) -> None:
    # The conversation lives upstream (previous_response_id): the gateway sees only the last
    # turn, but it kept the conversation it relayed; on the overflow it sends that copy,
    # compacted, and the chain goes on from the answer.
    async with WindowedResponses(window=3_000) as fake:
        gw = await gateway_factory(gpt_config(fake.base_url))
        headers = {"x-session-id": "held-upstream"}
        compacted = []
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            previous: str | None = None
            for i in range(14):
                answer = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                    model="gpt", input=f"task {i}: explain this file\n{file_text(i)}",
                    extra_headers=headers,
                    **({"previous_response_id": previous} if previous else {})), BOUND)
                assert answer.parse().output_text
                previous = answer.parse().id
                compacted.append("x-gateway-compaction" in answer.headers)
        assert any(v == 400 for _, v in fake.verdicts), "the window was passed upstream"
        assert any(compacted), "answered by compacting the kept conversation"
        sent = fake.accepted()[compacted.index(True) - len(compacted)]
        assert "previous_response_id" not in sent, "the compacted copy went whole"


async def test_a_history_held_upstream_the_gateway_never_kept_is_refused_clearly(
    gateway_factory: GatewayFactory,
) -> None:
    # The chain was made directly with the provider (or under another key): only the
    # upstream holds it, and when it overflows the client is told what to send instead.
    async with WindowedResponses(window=3_000) as fake:
        gw = await gateway_factory(gpt_config(fake.base_url))
        previous = None
        async with openai.AsyncOpenAI(base_url=f"{fake.base_url}/v1", api_key="k",
                                      max_retries=0) as direct:
            for i in range(20):  # as long as the provider takes it
                try:
                    made = await direct.responses.create(
                        model="gpt-5", input=f"task {i}\n{file_text(i)}",
                        **({"previous_response_id": previous} if previous else {}))
                except openai.BadRequestError:
                    break
                previous = made.id
        assert previous is not None
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            with pytest.raises(openai.BadRequestError) as caught:
                await asyncio.wait_for(gpt.responses.create(
                    model="gpt", input=f"and this one?\n{file_text(99)}",
                    previous_response_id=previous,
                    extra_headers={"x-session-id": "never-kept"}), BOUND)
        error = caught.value.response.json()["error"]
        assert error["param"] == "previous_response_id"
        assert error["code"] == "context_length_exceeded"
        assert "held by the upstream" in error["message"]
        assert "'input'" in error["message"], "it says what to send instead"


# --- Chat: the stream, the same overloaded model, images, recall in a small window --------

class OverloadedSummaries(PhrasedServer):
    """A phrased server whose summary requests get a 429 (``first_only``: only the first)."""

    first_only: bool = False
    refused_summaries: int = 0

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        if LlamaCppServer.is_summary(body) and (
                not self.first_only or self.refused_summaries == 0):
            self.refused_summaries += 1
            self.requests.append((body, 429))
            return web.json_response({"error": {
                "message": "Rate limit reached for requests. Please try again in 0s.",
                "type": "requests", "param": None, "code": "rate_limit_exceeded"}},
                status=429, headers={"retry-after": "0"})
        return await super()._chat(request)


@pytest.mark.parametrize("first_only", [False, True])
async def test_a_chat_stream_whose_summarizer_is_rate_limited_is_answered(
    gateway_factory: GatewayFactory, first_only: bool,
) -> None:
    async with OverloadedSummaries("openai", window=3_000) as server:
        server.first_only = first_only
        gw = await gateway_factory(phrased_config(server))
        history = [m for i in range(8) for m in agent_turn(i, lines=40)]
        assert prompt_tokens(history) > 3_000
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as c:
            raw = await asyncio.wait_for(c.chat.completions.with_raw_response.create(
                model="demo", messages=history, stream=True,  # type: ignore[arg-type]
                extra_headers={"x-session-id": f"rate-limited-{first_only}"}), BOUND)
            text = "".join([chunk.choices[0].delta.content or "" async for chunk in raw.parse()
                            if chunk.choices])
        assert text == "Done."
        how = raw.headers["x-gateway-compaction"].split(";")[0]
        assert how == ("summarized" if first_only else "trimmed"), raw.headers
        if not first_only:
            assert raw.headers["x-gateway-compaction-summary-failed"]
        assert server.refused_summaries <= 5
        assert prompt_tokens(last_answered(server)["messages"]) <= 3_000


def png_data_url(shade: int) -> str:
    return "data:image/png;base64," + png_b64(shade)


async def test_screenshots_in_a_compacted_chat_never_reach_the_summary(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("openai", window=3_000) as server:
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id="chat-screens")
        urls = [png_data_url(30 * i) for i in range(8)]
        for i, url in enumerate(urls):
            turn = agent_turn(i, lines=40)
            turn[0] = user([text_part(f"Step {i}: the screen, fix module_{i}.py"),
                            image_part(url)])
            s.history.extend(turn)
        first = await asyncio.wait_for(s.send(), BOUND)
        assert compaction_header(first) is not None
        summaries = server.summaries()
        assert summaries
        for body, _ in summaries:
            text = orjson.dumps(body).decode()
            assert "base64," not in text and not any(u[30:80] in text for u in urls)
        await asyncio.wait_for(s.send([user("and now?")]), BOUND)


class RecallingServer(PhrasedServer):
    """A model that, offered the recall tool, searches the archive for ``handler_0_7``."""

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        offered = {t.get("function", {}).get("name") for t in body.get("tools") or []}
        if ("context_recall" in offered and not LlamaCppServer.is_summary(body)
                and body["messages"][-1].get("role") != "tool"
                and prompt_tokens(body["messages"]) <= self.window):
            self.requests.append((body, 200))
            call = {"id": "call_recall_1", "type": "function", "function": {
                "name": "context_recall", "arguments": '{"query": "handler_0_7"}'}}
            return web.json_response({
                "id": "chatcmpl-r", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": None, "tool_calls": [call]}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        return await super()._chat(request)


@pytest.mark.parametrize("window", [4_096, 16_000])
async def test_the_recall_tool_after_a_compaction_returns_archived_lines_that_fit(
    gateway_factory: GatewayFactory, window: int,
) -> None:
    async with RecallingServer("openai", window=window) as server:
        raw = phrased_config(server)
        raw["compaction"] = {"reserved_context_size": 0}  # recall on (the default)
        gw = await gateway_factory(raw)
        s = Session(gw, session_id=f"recall-{window}")
        turns = window // 400
        s.history.extend(m for i in range(turns) for m in agent_turn(i, lines=40))
        assert prompt_tokens(s.history) > window
        reply = await asyncio.wait_for(s.send(), BOUND)
        assert reply.parse().choices[0].message.content == "Done."
        assert reply.headers["x-gateway-recall"] == "1"
        follow = [b for b, status in server.chats() if b["messages"][-1].get("role") == "tool"]
        assert follow, "the recall result went back to the model"
        result = follow[-1]["messages"][-1]
        assert result["tool_call_id"] == "call_recall_1"
        assert "handler_0_7" in result["content"], "the archived line itself"
        # The result fits the window: the follow-up was answered, not refused.
        assert [status for b, status in server.chats() if b is follow[-1]] == [200]
        await asyncio.wait_for(s.send([user("thanks")]), BOUND)


# --- Sessions: an edited earlier turn, two conversations that start alike ------------------

async def test_an_edited_earlier_turn_is_not_served_the_stale_compaction(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("openai", window=3_000) as server:
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id="edited")
        s.history.extend(m for i in range(8) for m in agent_turn(i, lines=40))
        await asyncio.wait_for(s.send(), BOUND)
        for i in (8, 9, 10):
            await asyncio.wait_for(s.send(agent_turn(i, lines=10)), BOUND)
        # The client rewrites the ask of turn N-3 (a retried, edited prompt).
        edited = next(n for n, m in enumerate(s.history)
                      if m["role"] == "user" and str(m["content"]).startswith("Step 5:"))
        s.history[edited] = user("Step 5 (EDITED): open module_5_v2.py instead.")
        reply = await asyncio.wait_for(s.send([user("what did step 5 find?")]), BOUND)
        sent = orjson.dumps(last_answered(server)["messages"]).decode()
        assert "EDITED" in sent, "the edited turn is what the model reads"
        assert "Step 5: open module_5.py" not in sent, "never the stale compaction's copy"
        assert compaction_header(reply) is not None
        assert compaction_header(reply)[0] != "reused"  # type: ignore[index]


async def test_two_conversations_starting_alike_never_share_a_compaction(
    gateway_factory: GatewayFactory,
) -> None:
    # No session id: both are recognized by their start, which is the same.
    async with PhrasedServer("openai", window=3_000) as server:
        gw = await gateway_factory(phrased_config(server))
        a = Session(gw, session_id=None)
        b = Session(gw, session_id=None)
        start = [user("Fix the failing tests of this repository.")]
        a.history += start + [m for i in range(8) for m in agent_turn(i, lines=40)]
        b.history += start + [m for i in range(100, 108) for m in agent_turn(i, lines=40)]
        await asyncio.wait_for(a.send(), BOUND)
        await asyncio.wait_for(a.send([user("alpha only: continue")]), BOUND)
        reply = await asyncio.wait_for(b.send([user("beta only: continue")]), BOUND)
        sent = orjson.dumps(last_answered(server)["messages"]).decode()
        assert "beta only" in sent and "Step 107" in sent
        assert "alpha only" not in sent and "Step 7:" not in sent, "nothing of the other one"
        assert compaction_header(reply) is not None
        assert compaction_header(reply)[0] != "reused"  # type: ignore[index]


# --- Windows: learned for one deployment, an alias routed to a bigger one ------------------

async def test_a_window_learned_for_a_small_deployment_never_shrinks_a_bigger_alias(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("openai", window=3_000) as small, \
            PhrasedServer("openai", window=60_000) as big:
        gw = await gateway_factory({
            "model_list": [
                model_entry("fast", small.base_url, model="openai/phrased",
                            max_input_tokens=CONFIGURED),
                model_entry("smart", big.base_url, model="openai/phrased",
                            max_input_tokens=CONFIGURED)],
            "compaction": {"reserved_context_size": 0, "recall": False},
            "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
        })
        history = [m for i in range(8) for m in agent_turn(i, lines=40)]
        fast = Session(gw, session_id="fast", model="fast")
        fast.history.extend(history)
        first = await asyncio.wait_for(fast.send(), BOUND)
        assert compaction_header(first) is not None
        assert (await model_card(gw, "fast"))["context_window"] == 3_000
        # The same history to the alias of the bigger deployment goes as sent, whole.
        smart = Session(gw, session_id="smart", model="smart")
        smart.history.extend(history)
        reply = await asyncio.wait_for(smart.send(), BOUND)
        assert compaction_header(reply) is None, reply.headers
        assert big.chats()[-1][0]["messages"] == smart.history[:-1]
        assert (await model_card(gw, "smart"))["context_window"] == CONFIGURED


async def test_a_window_stated_below_the_configured_one_moves_to_the_bigger_alias(
    gateway_factory: GatewayFactory,
) -> None:
    # "fast" is configured (wrongly) as large as "smart"; its provider states 3,000 tokens.
    # With "smart" as its context-window fallback, the overflow goes there whole (no
    # summary), and later turns go there before being refused again.
    async with PhrasedServer("openai", window=3_000) as small, \
            PhrasedServer("openai", window=60_000) as big:
        gw = await gateway_factory({
            "model_list": [
                model_entry("fast", small.base_url, model="openai/phrased-mini",
                            max_input_tokens=CONFIGURED),
                model_entry("smart", big.base_url, model="openai/phrased",
                            max_input_tokens=CONFIGURED)],
            "router_settings": {"context_window_fallbacks": [{"fast": ["smart"]}]},
            "compaction": {"reserved_context_size": 0, "recall": False},
            "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
        })
        s = Session(gw, session_id="to-the-bigger-alias", model="fast")
        s.history.extend(m for i in range(8) for m in agent_turn(i, lines=40))
        first = await asyncio.wait_for(s.send(), BOUND)
        assert first.headers["x-gateway-model-used"] == "smart", first.headers
        assert compaction_header(first) is None, "the bigger model takes it whole"
        assert big.chats()[-1][0]["messages"] == s.history[:-1]
        refused = len(small.chats())
        second = await asyncio.wait_for(s.send(agent_turn(8, lines=40)), BOUND)
        assert second.headers["x-gateway-model-used"] == "smart"
        assert len(small.chats()) == refused, "the learned window moves it before sending"
        assert (await model_card(gw, "fast"))["context_window"] == 3_000


class RecallingAnthropic(WindowedAnthropic):
    """A Claude that, offered the recall tool after a compaction, searches the archive for
    ``handler_0_7`` before answering."""

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        offered = {t.get("name") for t in body.get("tools") or []}
        last = as_blocks(body["messages"][-1]["content"]) if body.get("messages") else []
        if ("context_recall" in offered and not is_summary(body)
                and not any(b.get("type") == "tool_result" for b in last)):
            await self.record(request)
            return web.json_response({
                "id": "msg_recall", "type": "message", "role": "assistant",
                "model": body["model"], "stop_reason": "tool_use", "stop_sequence": None,
                "content": [{"type": "tool_use", "id": "toolu_recall_1",
                             "name": "context_recall", "input": {"query": "handler_0_7"}}],
                "usage": {"input_tokens": 10, "output_tokens": 5}})
        return await super()._messages(request)


async def test_a_compacted_messages_request_names_no_recall_tool_it_does_not_offer(
    gateway_factory: GatewayFactory,
) -> None:
    # Claude Code against an Anthropic upstream, recall on (the default): the native wire's
    # upstream body carries the client's tools only, so its Context Recovery note must not
    # tell the model to call a `context_recall` tool it was never given (it points at the
    # archive instead); the model, which would call the tool if offered, just answers.
    async with RecallingAnthropic(window=3_000) as fake:
        raw = claude_config(fake.base_url)
        raw["compaction"].pop("recall")
        gw = await gateway_factory(raw)
        history = thinking_history(10, ends_in_tool_result=False)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            reply = await asyncio.wait_for(claude.messages.with_raw_response.create(
                model="claude", max_tokens=2_048, system=SYSTEM, tools=[READ_FILE],
                messages=history, extra_headers={"x-session-id": "recall-messages"}), BOUND)
            message = await reply.parse()
        assert [b.type for b in message.content] == ["text"], message.content
        assert reply.headers["x-gateway-compaction"].startswith("summarized")
        sent = fake.accepted()[-1]
        offered = {t["name"] for t in sent["tools"]}
        note = next(b["text"] for m in sent["messages"] for b in as_blocks(m["content"])
                    if "## Context Recovery" in str(b.get("text")))
        note = note[note.index("## Context Recovery"):]
        assert "context_recall" not in offered and "context_recall" not in note, note
        assert "/v1/gateway/sessions/recall-messages/archive?from=1&to=" in note


async def test_a_streamed_reasoning_history_is_compacted_and_streamed(
    gateway_factory: GatewayFactory,
) -> None:
    async with WindowedResponses(window=3_000) as fake:
        gw = await gateway_factory(gpt_config(fake.base_url))
        items = reasoning_history(10, ends_in_output=False)
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            raw = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                model="gpt", input=items, tools=TOOLS, store=False,  # type: ignore[arg-type]
                reasoning={"effort": "low"}, stream=True,
                extra_headers={"x-session-id": "reasoning-stream"}), BOUND)
            kinds = [event.type async for event in raw.parse()]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
        assert "error" not in kinds and "response.failed" not in kinds
        assert raw.headers["x-gateway-compaction"].startswith("summarized")
        sent = fake.accepted()[-1]
        assert sent["stream"] is True and sent["store"] is False
        assert rough_tokens(sent["input"]) <= 3_000


async def test_a_conversation_held_upstream_that_overflows_is_refused_clearly(
    gateway_factory: GatewayFactory,
) -> None:
    # The Conversations API keeps the items upstream: the gateway has no copy to compact,
    # and says so (what to send instead) rather than relaying "nothing to summarize".
    async with WindowedResponses(window=3_000) as fake:
        gw = await gateway_factory(gpt_config(fake.base_url))
        async with openai.AsyncOpenAI(base_url=f"{fake.base_url}/v1", api_key="k",
                                      max_retries=0) as direct:
            made = await direct.conversations.create(items=[
                {"type": "message", "role": "user", "content": f"file {i}\n{file_text(i)}"}
                for i in range(14)])
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            with pytest.raises(openai.BadRequestError) as caught:
                await asyncio.wait_for(gpt.responses.create(
                    model="gpt", input="and now?", conversation=made.id,
                    extra_headers={"x-session-id": "conversation-held"}), BOUND)
        error = caught.value.response.json()["error"]
        assert error["code"] == "context_length_exceeded", error
        assert error["param"] == "conversation", error
        assert "held by the upstream" in error["message"] and "'input'" in error["message"]
