"""Held-out overflow, fourth round: refusals worded as the field words them and not yet
seen (OpenRouter's wrapped provider errors, SGLang, GitHub Models, Gemini's list-wrapped
errors, vLLM's newer counts, Zhipu, a plain-text proxy), and situations agents meet on all
three wires: a window that shrinks between turns, summarizers that are slow, refuse, answer
nothing or a summary too big to send, a store that breaks mid-session, a newest turn bigger
than the window, huge single tool results, documents and images, overflow on streams,
``previous_response_id`` on a chat-only model, parallel tool calls at the cut, and two
requests of one session overflowing at once. Each asserts what the agent notices: an
answer with the compaction in the headers (or a clear error in its wire's format, in
time), a history its upstream accepts as valid, and an archive holding what was removed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from tests.compaction.conftest import Session, agent_turn, compaction_header
from tests.compaction.test_overflow_heldout import (
    CONFIGURED,
    TRUE_WINDOW,
    huge_text,
    last_answered,
    messages_history,
    model_card,
    phrased_config,
    responses_history,
    translated_config,
)
from tests.conftest import GatewayFactory, model_entry
from tests.fakes.llamacpp_server import prompt_tokens
from tests.fakes.phrased_overflow import PHRASINGS, PhrasedServer

BOUND = 60  # seconds: every request of these cases ends well before this (never a hang)


def _nested(message: str) -> str:
    return json.dumps({"error": {"message": message, "type": "Bad Request", "code": 400}})


# Wordings of the field (status, body) for a prompt of t tokens against a window of w, and
# whether the wording states the window.
FIELD_PHRASINGS: dict[str, tuple[Any, bool]] = {
    # OpenRouter relaying a provider's refusal: the words are in metadata.raw, a JSON string
    "openrouter_raw": (lambda w, t: (400, {"error": {
        "message": "Provider returned error", "code": 400, "metadata": {
            "raw": _nested(f"This model's maximum context length is {w} tokens. However, "
                           f"your messages resulted in {t} tokens. Please reduce the length "
                           "of the messages."),
            "provider_name": "Nvidia", "is_byok": False, "provider_error_code": "400"}}}),
        True),
    # OpenRouter's own check, counting tool input and the output budget apart
    "openrouter_parts": (lambda w, t: (400, {"error": {
        "message": f"This endpoint's maximum context length is {w} tokens. However, you "
                   f"requested about {t} tokens ({t - 40} of text input, 40 of tool input, "
                   "0 in the output). Please reduce the length of either one, or use the "
                   "context-compression plugin to compress your prompt automatically.",
        "code": 400, "metadata": {"provider_name": None}}}), True),
    # A router in front (claude-code-router style) wrapping OpenRouter's body as text
    "router_wrapped": (lambda w, t: (400, {"error": {
        "message": "Error from provider: " + json.dumps({"error": {
            "message": f"This endpoint's maximum context length is {w} tokens. However, you "
                       f"requested about {t} tokens ({t} of text input). Please reduce the "
                       "length of either one, or use the \"middle-out\" transform to "
                       "compress your prompt automatically.", "code": 400,
            "metadata": {"provider_name": None}}}),
        "type": "api_error", "code": "provider_response_error"}}), True),
    # SGLang's OpenAI-compatible server
    "sglang": (lambda w, t: (400, {
        "object": "error", "message": f"The input ({t} tokens) is longer than the model's "
                                      f"context length ({w} tokens).",
        "type": "BadRequestError", "param": None, "code": 400}), True),
    # SGLang's scheduler check
    "sglang_allowed": (lambda w, t: (400, {
        "object": "error", "message": f"Input length ({t} tokens) exceeds the maximum "
                                      f"allowed length ({w} tokens).",
        "type": "BadRequestError", "param": None, "code": 400}), True),
    # GitHub Models (Azure AI inference): a 413 naming the window in tokens
    "github_models": (lambda w, t: (413, {"error": {
        "code": "tokens_limit_reached",
        "message": f"Request body too large for gpt-4o model. Max size: {w} tokens.",
        "details": f"Request body too large for gpt-4o model. Max size: {w} tokens."}}),
        True),
    # Gemini's OpenAI-compatible endpoint: the error object wrapped in a list
    "gemini_list": (lambda w, t: (400, [{"error": {
        "code": 400, "status": "INVALID_ARGUMENT",
        "message": f"The input token count ({t}) exceeds the maximum number of tokens "
                   f"allowed ({w})."}}]), True),
    # vLLM 0.10 and later
    "vllm_new": (lambda w, t: (400, {"error": {
        "message": f"This model's maximum context length is {w} tokens. However, your "
                   f"request has {t} input tokens. Please reduce the length of the input "
                   "messages.", "type": "BadRequestError", "param": None, "code": 400}}),
        True),
    # Zhipu (GLM): a code and no numbers
    "zhipu": (lambda w, t: (400, {"error": {"code": "1261",
                                            "message": "Prompt exceeds max length"}}), False),
    # A proxy that answers with the provider's words as plain text
    "plain_text": (lambda w, t: (400, f"prompt is too long: {t} tokens > {w} maximum"), True),
}


class FieldServer(PhrasedServer):
    """A phrased server whose refusal may be plain text (not JSON)."""

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web
        answer = await super()._chat(request)
        if isinstance(answer, web.Response) and answer.status != 200 and \
                self.phrasing == "plain_text":
            text = json.loads(answer.body)  # type: ignore[arg-type]
            return web.Response(status=answer.status, text=text, content_type="text/plain")
        return answer


@pytest.fixture
def field_phrasings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, (phrasing, _) in FIELD_PHRASINGS.items():
        monkeypatch.setitem(PHRASINGS, name, lambda w, t, p=phrasing: (*p(w, t), {}))


@pytest.mark.usefixtures("field_phrasings")
@pytest.mark.parametrize("phrasing", sorted(FIELD_PHRASINGS))
async def test_a_field_wording_of_overflow_is_compacted_and_answered(
    gateway_factory: GatewayFactory, phrasing: str,
) -> None:
    async with FieldServer(phrasing, window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id=f"field-{phrasing}")
        s.history.extend(turn for i in range(10) for turn in agent_turn(i, lines=60))
        assert prompt_tokens(s.history) > TRUE_WINDOW
        first = await asyncio.wait_for(s.send(), BOUND)  # answered, never the 400
        header = compaction_header(first)
        assert header is not None and header[0] in ("summarized", "trimmed"), header
        for i in range(10, 13):
            await asyncio.wait_for(s.send(agent_turn(i, lines=60)), BOUND)
        answered = [b for b, status in server.chats() if status == 200]
        assert len(answered) == 4
        assert all(prompt_tokens(b["messages"]) <= TRUE_WINDOW for b in answered)
        card = await model_card(gw)
        assert card["context_window_source"] == "learned", card
        if FIELD_PHRASINGS[phrasing][1]:
            assert card["context_window"] == TRUE_WINDOW, card
        else:
            assert TRUE_WINDOW <= card["context_window"] < CONFIGURED, card


# --- helpers for the situations ---------------------------------------------------------

async def archive_text(gw: Any, session_id: str) -> str:
    """The session's archive (everything compaction removed), as one text."""
    url = f"{gw.root}/v1/gateway/sessions/{session_id}/archive?from=1&to=5000"
    async with aiohttp.ClientSession() as http, \
            http.get(url, headers={"Authorization": "Bearer c"}) as r:
        assert r.status == 200, await r.text()
        return json.dumps(await r.json())


def keyed_config(server: PhrasedServer, **recovery: Any) -> dict[str, Any]:
    """A chat-only upstream behind the gateway, with the client key ``c`` (so the session's
    archive can be read by its owner)."""
    raw = translated_config(server, **recovery)
    raw["gateway"] = {"api_keys": ["c"]}
    return raw


def assert_chat_valid(messages: list[dict[str, Any]]) -> None:
    """Every tool result answers a call of the assistant message before it, and every call
    of an assistant message is answered right after it (what strict chat upstreams check)."""
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, message
            open_calls.discard(message["tool_call_id"])
            continue
        assert not open_calls, f"unanswered calls {open_calls} before {message}"
        if message["role"] == "assistant":
            open_calls = {c["id"] for c in message.get("tool_calls") or []}
    assert not open_calls, f"unanswered calls {open_calls} at the end"


class SummaryServer(PhrasedServer):
    """A phrased server whose summary requests get :attr:`summary` (status, JSON body)."""

    summary: tuple[int, Any] = (200, {})

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web
        body = json.loads(await request.read())
        from tests.fakes.llamacpp_server import LlamaCppServer
        if LlamaCppServer.is_summary(body) and prompt_tokens(body["messages"]) <= self.window:
            self.requests.append((body, self.summary[0]))
            return web.json_response(self.summary[1], status=self.summary[0])
        request._read_bytes = json.dumps(body).encode()  # (read again by the parent)
        return await super()._chat(request)


def _completion(content: str, finish_reason: str = "stop") -> dict[str, Any]:
    return {"id": "chatcmpl-s", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": finish_reason,
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


SUMMARIZERS = {
    # a summary longer than the whole window: sending it would overflow again
    "summary_bigger_than_window": (200, _completion("## Task\n" + huge_text(9_000))),
    # the summarizer model refuses the request on policy grounds
    "policy_refusal": (400, {"error": {
        "message": "Invalid prompt: your prompt was flagged as potentially violating our "
                   "usage policy.", "type": "invalid_request_error", "param": None,
        "code": "invalid_prompt"}}),
    # cut off at its max_tokens, mid-sentence
    "cut_at_length": (200, _completion("## Task\nRead the modules and", "length")),
    # the summarizer overflows itself, in its own words
    "summary_overflows": (400, {"error": {
        "message": "This model's maximum context length is 1000 tokens. However, your "
                   "messages resulted in 4000 tokens.", "type": "invalid_request_error",
        "param": "messages", "code": "context_length_exceeded"}}),
}


@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
@pytest.mark.parametrize("case", sorted(SUMMARIZERS))
async def test_a_summarizer_answering_badly_still_gets_the_agent_an_answer(
    gateway_factory: GatewayFactory, case: str, wire: str,
) -> None:
    async with SummaryServer("openai", window=2_000) as server:
        server.summary = SUMMARIZERS[case]
        gw = await gateway_factory(keyed_config(server))
        sid = f"summarizer-{case}-{wire}"
        reply = await asyncio.wait_for(send_on(gw, wire, sid, turns=10), BOUND)
        assert reply.headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        sent = last_answered(server)
        assert prompt_tokens(sent["messages"]) <= 2_000
        assert_chat_valid(sent["messages"])
        assert "module_0.py" in await archive_text(gw, sid)  # nothing lost silently


async def send_on(gw: Any, wire: str, sid: str, *, turns: int, stream: bool = False,
                  extra: list[dict[str, Any]] | None = None) -> Any:
    """Send an agent history of ``turns`` steps on ``wire``; assert the answer; the raw
    response (its headers)."""
    headers = {"x-session-id": sid}
    if wire == "messages":
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            messages = messages_history(turns) + (extra or [])
            if stream:
                async with claude.messages.stream(
                        model="demo", max_tokens=64, messages=messages,  # type: ignore[arg-type]
                        extra_headers=headers) as events:
                    text = await events.get_final_text()
                    assert text == "Done.", text
                    return events.response
            reply: Any = await claude.messages.with_raw_response.create(
                model="demo", max_tokens=64, messages=messages,  # type: ignore[arg-type]
                extra_headers=headers)
            assert (await reply.parse()).content[0].text == "Done."
            return reply
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
        if wire == "responses":
            items = responses_history(turns) + (extra or [])
            if stream:
                async with gpt.responses.with_streaming_response.create(
                        model="demo", input=items, stream=True,  # type: ignore[arg-type]
                        extra_headers=headers) as raw:
                    body = (await raw.read()).decode()
                    assert "response.completed" in body and "Done." in body, body
                    return raw
            reply = await gpt.responses.with_raw_response.create(
                model="demo", input=items, extra_headers=headers)  # type: ignore[arg-type]
            assert reply.parse().output_text == "Done."
            return reply
        history = [m for i in range(turns) for m in agent_turn(i, lines=60)] + (extra or [])
        if stream:
            async with gpt.chat.completions.with_streaming_response.create(
                    model="demo", messages=history, stream=True,  # type: ignore[arg-type]
                    extra_headers=headers) as raw:
                body = (await raw.read()).decode()
                assert "Done." in body and "[DONE]" in body, body
                return raw
        reply = await gpt.chat.completions.with_raw_response.create(
            model="demo", messages=history, extra_headers=headers)  # type: ignore[arg-type]
        assert reply.parse().choices[0].message.content == "Done."
        return reply


@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
async def test_an_overflowing_stream_is_compacted_and_streamed_on_every_wire(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    async with PhrasedServer("vllm_v1", window=2_000,
                             refuse_in_stream=True) as server:
        gw = await gateway_factory(keyed_config(server))
        sid = f"stream-{wire}"
        raw = await asyncio.wait_for(send_on(gw, wire, sid, turns=10, stream=True), BOUND)
        assert raw.headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        sent = last_answered(server)
        assert sent.get("stream") is True
        assert prompt_tokens(sent["messages"]) <= 2_000
        assert_chat_valid(sent["messages"])


@pytest.mark.usefixtures("field_phrasings")
# --- one message bigger than the window, huge tool results, media ----------------------

async def test_a_streamed_chat_turn_alone_bigger_than_the_window_is_answered(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("vllm_new",
                             window=2_000, refuse_in_stream=True) as server:
        gw = await gateway_factory(keyed_config(server))
        paste = {"role": "user", "content": "why does this fail?\n" + huge_text(6_000)}
        raw = await asyncio.wait_for(send_on(gw, "chat", "huge-turn-stream", turns=2,
                                             stream=True, extra=[paste]), BOUND)
        assert raw.headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        sent = last_answered(server)
        assert prompt_tokens(sent["messages"]) <= 2_000
        # The newest turn is still the user's (a part of it that fits), not dropped.
        assert sent["messages"][-1]["role"] == "user" or "why does this fail" in str(sent)
        assert "why does this fail" in await archive_text(gw, "huge-turn-stream")


@pytest.mark.usefixtures("field_phrasings")
@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
async def test_one_huge_tool_result_mid_history_is_folded_and_archived(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    marker = "UNIQUE-LOG-LINE-7f3a"
    log = f"{marker}\n" + huge_text(5_000)
    async with PhrasedServer("sglang_allowed",
                             window=3_000) as server:
        gw = await gateway_factory(keyed_config(server))
        sid = f"huge-tool-{wire}"
        if wire == "chat":
            extra: list[dict[str, Any]] = [
                {"role": "user", "content": "run the build"},
                {"role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_build", "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "make"}'}}]},
                {"role": "tool", "tool_call_id": "call_build", "content": log},
                {"role": "assistant", "content": "The build failed in module foo."},
                {"role": "user", "content": "fix foo then"}]
        elif wire == "messages":
            extra = [
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_build",
                                                   "name": "bash", "input": {"cmd": "make"}}]},
                {"role": "user", "content": [{"type": "tool_result",
                                              "tool_use_id": "toolu_build", "content": log}]},
                {"role": "assistant", "content": "The build failed in module foo."},
                {"role": "user", "content": "fix foo then"}]
        else:
            extra = [
                {"type": "function_call", "call_id": "call_build", "name": "bash",
                 "arguments": '{"cmd": "make"}'},
                {"type": "function_call_output", "call_id": "call_build", "output": log},
                {"role": "assistant", "content": "The build failed in module foo."},
                {"role": "user", "content": "fix foo then"}]
        reply = await asyncio.wait_for(send_on(gw, wire, sid, turns=2, extra=extra), BOUND)
        assert compaction_header(reply) is not None
        sent = last_answered(server)
        assert prompt_tokens(sent["messages"]) <= 3_000
        assert_chat_valid(sent["messages"])
        assert "fix foo then" in str(sent["messages"][-3:])
        assert marker in await archive_text(gw, sid)  # the whole log is kept, readable


def png_data_url(side: int, shade: int) -> str:
    from tests.compaction.test_overflow_heldout import png_data_url as make
    return make(side, shade)


@pytest.mark.usefixtures("field_phrasings")
@pytest.mark.parametrize("wire", ["messages", "responses"])
async def test_images_making_up_most_of_an_overflowing_agent_history_are_answered(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    async with PhrasedServer("gemini_list",
                             window=2_500) as server:
        gw = await gateway_factory(keyed_config(server))
        sid = f"images-{wire}"
        extra: list[dict[str, Any]] = []
        for i in range(6):
            url = png_data_url(64, i * 30)
            if wire == "messages":
                data = url.split(",", 1)[1]
                extra += [{"role": "user", "content": [
                    {"type": "text", "text": f"screen {i}: what changed?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": data}}]},
                          {"role": "assistant", "content": f"Screen {i} shows a dialog."}]
            else:
                extra += [{"role": "user", "content": [
                    {"type": "input_text", "text": f"screen {i}: what changed?"},
                    {"type": "input_image", "image_url": url}]},
                          {"role": "assistant", "content": f"Screen {i} shows a dialog."}]
        extra.append({"role": "user", "content": "and which screen had the error?"})
        reply = await asyncio.wait_for(send_on(gw, wire, sid, turns=4, extra=extra), BOUND)
        assert compaction_header(reply) is not None
        sent = last_answered(server)
        assert prompt_tokens(sent["messages"]) <= 2_500
        assert_chat_valid(sent["messages"])


@pytest.mark.usefixtures("field_phrasings")
# --- parallel tool calls at the cut point ----------------------------------------------

@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
async def test_parallel_tool_calls_at_the_cut_point_stay_paired(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    async with PhrasedServer("openrouter_parts", window=2_000) as server:
        gw = await gateway_factory(keyed_config(server))
        sid = f"parallel-{wire}"
        names = [f"module_{n}.py" for n in range(3)]
        if wire == "chat":
            extra: list[dict[str, Any]] = [
                {"role": "user", "content": "read all three modules at once"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_p{n}", "type": "function", "function": {
                        "name": "read_file", "arguments": json.dumps({"path": p})}}
                    for n, p in enumerate(names)]},
                *({"role": "tool", "tool_call_id": f"call_p{n}", "content": huge_text(400)}
                  for n in range(3))]
        elif wire == "messages":
            extra = [
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": f"toolu_p{n}", "name": "read_file",
                     "input": {"path": p}} for n, p in enumerate(names)]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_p{n}",
                     "content": huge_text(400)} for n in range(3)]}]
        else:
            extra = [*({"type": "function_call", "call_id": f"call_p{n}", "name": "read_file",
                        "arguments": json.dumps({"path": p})} for n, p in enumerate(names)),
                     *({"type": "function_call_output", "call_id": f"call_p{n}",
                        "output": huge_text(400)} for n in range(3))]
        reply = await asyncio.wait_for(send_on(gw, wire, sid, turns=10, extra=extra), BOUND)
        assert compaction_header(reply) is not None
        sent = last_answered(server)
        assert prompt_tokens(sent["messages"]) <= 2_000
        assert_chat_valid(sent["messages"])
        # The calls in flight are the current turn: all three with their results, or none.
        ids = {c["id"] for m in sent["messages"] for c in m.get("tool_calls") or []
               if c["id"].endswith(("p0", "p1", "p2"))}
        assert len(ids) in (0, 3), ids


# --- a window that shrinks between turns: the fallback deployment is smaller -----------

class FlakyServer(PhrasedServer):
    """A phrased server that answers 503 (overloaded) to everything while :attr:`down`."""

    down: bool = False

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web
        if self.down:
            self.requests.append(({"messages": []}, 503))
            return web.json_response({"error": {
                "message": "The engine is currently overloaded, please try again later",
                "type": "server_error", "param": None, "code": None}}, status=503)
        return await super()._chat(request)


async def test_a_fallback_deployment_with_a_smaller_window_gets_a_compacted_history(
    gateway_factory: GatewayFactory,
) -> None:
    async with FlakyServer("openai", window=60_000) as big, \
            PhrasedServer("anthropic", window=2_500) as small:
        gw = await gateway_factory({
            "model_list": [
                model_entry("smart", big.base_url, model="openai/phrased",
                            max_input_tokens=CONFIGURED),
                model_entry("small", small.base_url, model="openai/phrased-mini",
                            max_input_tokens=CONFIGURED)],
            "router_settings": {"fallbacks": [{"smart": ["small"]}]},
            "compaction": {"reserved_context_size": 0, "recall": False},
            "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
        })
        s = Session(gw, session_id="shrinks-on-fallback", model="smart")
        s.history.extend(m for i in range(8) for m in agent_turn(i, lines=40))
        first = await asyncio.wait_for(s.send(), BOUND)
        assert compaction_header(first) is None  # the big window takes it whole
        big.down = True  # the big deployment goes down between turns
        second = await asyncio.wait_for(s.send(agent_turn(8, lines=40)), BOUND)
        assert second.headers["x-gateway-model-used"] == "small", second.headers
        assert compaction_header(second) is not None, second.headers
        sent = [b for b, status in small.chats() if status == 200][-1]
        assert prompt_tokens(sent["messages"]) <= 2_500
        assert_chat_valid(sent["messages"])


# --- previous_response_id on a chat-only model --------------------------------------------

async def test_a_continued_responses_chain_on_a_chat_only_model_that_overflows_is_compacted(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("openai", window=2_500) as server:
        gw = await gateway_factory(keyed_config(server))
        headers = {"x-session-id": "chain-on-chat"}
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            answer = await gpt.responses.create(model="demo", input=responses_history(3),  # type: ignore[arg-type]
                                                extra_headers=headers)
            assert answer.output_text == "Done."
            for i in range(3, 9):  # each turn sends only what is new
                reply = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                    model="demo", previous_response_id=answer.id, extra_headers=headers,
                    input=responses_history(i + 1)[-5:]),  # type: ignore[arg-type]
                    BOUND)
                answer = reply.parse()
                assert answer.output_text == "Done."
        assert any(compaction_header(r) for r in [reply]), reply.headers
        sent = last_answered(server)
        assert prompt_tokens(sent["messages"]) <= 2_500
        assert_chat_valid(sent["messages"])


# --- two requests of one session overflowing at once ---------------------------------------

@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
async def test_two_requests_of_one_session_overflowing_at_once_are_both_answered(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    async with PhrasedServer("openai", window=2_000) as server:
        gw = await gateway_factory(keyed_config(server))
        sid = f"concurrent-{wire}"
        first, second = await asyncio.wait_for(asyncio.gather(
            send_on(gw, wire, sid, turns=10), send_on(gw, wire, sid, turns=10)), BOUND)
        for reply in (first, second):
            assert compaction_header(reply) is not None, reply.headers
        for body, status in server.chats():
            if status == 200:
                assert prompt_tokens(body["messages"]) <= 2_000
                assert_chat_valid(body["messages"])
        archived = json.loads(await archive_text(gw, sid))["messages"]
        # Archived once: the two compactions never wrote the same lines twice.
        texts = [json.dumps(m, sort_keys=True) for m in archived]
        assert len(texts) == len(set(texts)) == {"chat": 30}.get(wire, 41), len(texts)
        assert "module_0.py" in json.dumps(archived)


# --- no compaction can help: a clear error in the wire's format, in time -----------------

@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
async def test_a_system_prompt_bigger_than_the_window_ends_in_a_clear_error(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    system = "You follow these rules.\n" + huge_text(4_000)
    async with PhrasedServer("openai", window=2_000) as server:
        gw = await gateway_factory(keyed_config(server))
        headers = {"x-session-id": f"system-too-big-{wire}"}
        if wire == "messages":
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                                max_retries=0) as claude:
                with pytest.raises(anthropic.APIStatusError) as caught:
                    await asyncio.wait_for(claude.messages.create(
                        model="demo", max_tokens=64, system=system, extra_headers=headers,
                        messages=messages_history(3)), BOUND)  # type: ignore[arg-type]
            body = caught.value.body
            assert isinstance(body, dict) and body["type"] == "error", body
            assert "maximum context length" in body["error"]["message"]
        else:
            async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                          max_retries=0) as gpt:
                with pytest.raises(openai.APIStatusError) as refused:
                    if wire == "chat":
                        await asyncio.wait_for(gpt.chat.completions.create(
                            model="demo", extra_headers=headers, messages=[
                                {"role": "system", "content": system},
                                *(m for i in range(3) for m in agent_turn(i))]), BOUND)
                    else:
                        await asyncio.wait_for(gpt.responses.create(
                            model="demo", instructions=system, extra_headers=headers,
                            input=responses_history(3)), BOUND)  # type: ignore[arg-type]
            assert "maximum context length" in refused.value.message
            assert isinstance(refused.value.body, dict) and "message" in refused.value.body
        assert 400 <= (caught if wire == "messages" else refused).value.status_code < 600
        assert len(server.requests) <= 25, "bounded"


@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
async def test_with_compaction_off_the_overflow_is_the_providers_error_in_the_wires_format(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    async with PhrasedServer("openai", window=2_000) as server:
        raw = keyed_config(server)
        raw["compaction"]["enabled"] = False
        gw = await gateway_factory(raw)
        with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as caught:
            await asyncio.wait_for(send_on(gw, wire, f"off-{wire}", turns=10), BOUND)
        assert caught.value.status_code == 400
        assert "maximum context length is 2000" in str(caught.value)
        assert all(status != 200 for _, status in server.requests)


# --- refusals in unusual envelopes: a 200 carrying the error, a 500 that is an overflow ---

class EnvelopeServer(PhrasedServer):
    """A phrased server whose overflow refusal comes with :attr:`status` instead of 400
    (OpenRouter relays some provider errors in a 200 body; proxies turn them into 500s)."""

    status: int = 200

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web
        answer = await super()._chat(request)
        if isinstance(answer, web.Response) and answer.status == 400:
            self.requests[-1] = (self.requests[-1][0], self.status)
            return web.Response(status=self.status, body=answer.body,
                                content_type="application/json")
        return answer


@pytest.mark.parametrize("status", [200, 500])
@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
async def test_an_overflow_in_an_odd_status_is_still_compacted(
    gateway_factory: GatewayFactory, wire: str, status: int,
) -> None:
    async with EnvelopeServer("openrouter", window=2_000) as server:
        server.status = status
        gw = await gateway_factory(keyed_config(server))
        reply = await asyncio.wait_for(send_on(gw, wire, f"odd-{status}-{wire}", turns=10),
                                       BOUND)
        assert compaction_header(reply) is not None, reply.headers
        sent = last_answered(server)
        assert prompt_tokens(sent["messages"]) <= 2_000


# --- the session store dies mid-session ---------------------------------------------------

@pytest.mark.parametrize("wire", ["messages", "responses"])
async def test_a_redis_that_dies_mid_session_still_answers_overflows(
    gateway_factory: GatewayFactory, tmp_path: Any, wire: str,
) -> None:
    import redis.asyncio as aioredis

    from tests.sessions.conftest import run_redis_server
    with run_redis_server(tmp_path) as url:
        async with PhrasedServer("openai", window=2_000) as server:
            raw = keyed_config(server, deadline=6.0)
            raw["sessions"] = {"data_dir": str(tmp_path / "data"), "redis_url": url}
            gw = await gateway_factory(raw)
            sid = f"redis-dies-{wire}"
            first = await asyncio.wait_for(send_on(gw, wire, sid, turns=10), BOUND)
            assert compaction_header(first) is not None
            client = aioredis.from_url(url)
            try:
                await client.shutdown(nosave=True)
            except Exception:  # (the server hangs up while shutting down)
                pass
            finally:
                await client.aclose()
            later = await asyncio.wait_for(send_on(gw, wire, sid, turns=14), BOUND)
            assert later.headers["x-gateway-compaction"].endswith("unstored"), later.headers
            assert prompt_tokens(last_answered(server)["messages"]) <= 2_000


# --- a summarizer slower than the deadline on a Responses stream ------------------------------

async def test_a_slow_summarizer_on_a_responses_stream_is_trimmed_in_time(
    gateway_factory: GatewayFactory,
) -> None:
    hold = asyncio.Event()
    async with PhrasedServer("openai", window=2_000, summary_hold=hold) as server:
        raw = keyed_config(server, deadline=3.0)
        raw["compaction"]["summary_time_share"] = 0.3
        gw = await gateway_factory(raw)
        try:
            reply = await asyncio.wait_for(
                send_on(gw, "responses", "slow-resp-stream", turns=10, stream=True), 30)
        finally:
            hold.set()
        assert reply.headers["x-gateway-compaction"].startswith("trimmed")
        assert "x-gateway-compaction-summary-failed" in reply.headers
        assert prompt_tokens(last_answered(server)["messages"]) <= 2_000


# --- documents making up most of a Messages history -------------------------------------------

@pytest.mark.usefixtures("field_phrasings")
async def test_documents_making_up_most_of_a_messages_history_are_answered(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("sglang", window=2_500) as server:
        gw = await gateway_factory(keyed_config(server))
        extra: list[dict[str, Any]] = []
        for i in range(4):
            extra += [{"role": "user", "content": [
                {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                                "data": f"SPEC-{i}\n" + huge_text(1_200)},
                 "title": f"spec_{i}.txt"},
                {"type": "text", "text": f"summarize spec {i}"}]},
                      {"role": "assistant", "content": f"Spec {i} is about handlers."}]
        extra.append({"role": "user", "content": "which spec names the timeout?"})
        reply = await asyncio.wait_for(
            send_on(gw, "messages", "documents", turns=2, extra=extra), BOUND)
        assert compaction_header(reply) is not None
        sent = last_answered(server)
        assert prompt_tokens(sent["messages"]) <= 2_500
        assert "which spec names the timeout" in json.dumps(sent["messages"][-3:])
        assert "SPEC-0" in await archive_text(gw, "documents")


# --- native Messages: parallel tool_use at the cut, a huge newest turn, the output budget ---

def _parallel_tail() -> list[dict[str, Any]]:
    """The agent mid tool loop: signed thinking and three parallel tool_use blocks, their
    three results (the last carrying a cache breakpoint)."""
    from tests.fakes.anthropic_rules import sign_thinking
    thought = "I will read the three modules at once."
    results = [{"type": "tool_result", "tool_use_id": f"toolu_par{n}",
                "content": f"module {n}: " + "def f(): pass\n" * 60} for n in range(3)]
    results[-1]["cache_control"] = {"type": "ephemeral"}
    return [
        {"role": "user", "content": "read module_a, module_b and module_c"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": thought, "signature": sign_thinking(thought)},
            *({"type": "tool_use", "id": f"toolu_par{n}", "name": "read_file",
               "input": {"path": f"module_{n}.py"}} for n in range(3))]},
        {"role": "user", "content": results}]


@pytest.mark.parametrize("stream", [False, True])
async def test_native_parallel_tool_use_with_thinking_at_the_cut_stays_valid(
    gateway_factory: GatewayFactory, stream: bool,
) -> None:
    from tests.compaction.test_overflow_heldout_3 import (
        READ_FILE,
        SYSTEM,
        WindowedAnthropic,
        claude_config,
        thinking_history,
    )
    async with WindowedAnthropic(window=3_000) as fake:
        gw = await gateway_factory(claude_config(fake.base_url))
        history = thinking_history(10, ends_in_tool_result=False)[:-1] + _parallel_tail()
        history[0]["content"][0].pop("cache_control", None)
        kwargs: dict[str, Any] = {
            "model": "claude", "max_tokens": 2_048, "system": SYSTEM, "tools": [READ_FILE],
            "thinking": {"type": "enabled", "budget_tokens": 1_024},
            "extra_headers": {"x-session-id": f"native-parallel-{stream}",
                              "anthropic-beta": "interleaved-thinking-2025-05-14"}}
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            if stream:
                async with claude.messages.stream(messages=history, **kwargs) as events:
                    text = "".join([t async for t in events.text_stream])
                    headers = events.response.headers
            else:
                raw = await asyncio.wait_for(claude.messages.with_raw_response.create(
                    messages=history, **kwargs), BOUND)
                message = await raw.parse()
                text = "".join(b.text for b in message.content if b.type == "text")
                headers = raw.headers
        assert text
        assert headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        sent = fake.accepted()[-1]  # the strict fake validated it (pairs, thinking, order)
        uses = [b["id"] for m in sent["messages"] if isinstance(m["content"], list)
                for b in m["content"] if b.get("type") == "tool_use"
                and b["id"].startswith("toolu_par")]
        # The calls in flight are kept with their results, or folded into the summary with
        # the rest of the tool traffic (SPEC 4.2): never some of them.
        assert sorted(uses) in ([], ["toolu_par0", "toolu_par1", "toolu_par2"]), uses


async def test_a_native_messages_turn_alone_bigger_than_the_window_is_answered(
    gateway_factory: GatewayFactory,
) -> None:
    from tests.compaction.test_overflow_heldout_3 import WindowedAnthropic, claude_config
    async with WindowedAnthropic(window=2_000) as fake:
        gw = await gateway_factory(claude_config(fake.base_url))
        log = {"role": "user", "content": "here is the log:\n" + huge_text(6_000)}
        history = [*messages_history(4)[:-1], log]
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            raw = await asyncio.wait_for(claude.messages.with_raw_response.create(
                model="claude", max_tokens=256, messages=history,  # type: ignore[arg-type]
                extra_headers={"x-session-id": "native-huge-turn"}), BOUND)
            assert (await raw.parse()).content
        assert raw.headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        # The newest turn is kept as its start and its end, cut in the middle (marked); the
        # summary covers the rest.
        sent = json.dumps(fake.accepted()[-1]["messages"], ensure_ascii=False)
        assert "[…]" in sent, sent[:2000]
        assert "error in module foo." in sent
        assert "here is the log" in sent  # its ask, at its start, is kept too


@pytest.mark.parametrize("wire", ["messages", "responses"])
async def test_a_native_output_budget_that_fills_the_window_is_answered(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    # The history fits; with the client's max_tokens it does not ("input length and
    # `max_tokens` exceed context limit: X + Y > W", or OpenAI's words on Responses).
    from tests.compaction.test_overflow_heldout_3 import (
        WindowedAnthropic,
        WindowedResponses,
        claude_config,
        gpt_config,
    )
    from tests.fakes.anthropic_server import anthropic_error
    from tests.fakes.native_base import rough_tokens
    from tests.fakes.responses_server import responses_error

    class Budgeted(WindowedAnthropic):
        async def _messages(self, request: Any) -> Any:
            body = json.loads(await request.read())
            size = rough_tokens([body.get("tools"), body.get("system"), body["messages"]])
            if size <= self.context_window < size + int(body.get("max_tokens") or 0):
                await self.record(request)
                return anthropic_error(400, "input length and `max_tokens` exceed context "
                                       f"limit: {size} + {body['max_tokens']} > "
                                       f"{self.context_window}, decrease input length or "
                                       "`max_tokens` and try again").response()
            request._read_bytes = json.dumps(body).encode()
            return await super()._messages(request)

    class BudgetedResponses(WindowedResponses):
        async def _responses(self, request: Any) -> Any:
            body = json.loads(await request.read())
            size = rough_tokens([body.get("instructions"), body.get("tools"),
                                 body.get("input")])
            wanted = int(body.get("max_output_tokens") or 0)
            if size <= self.window < size + wanted:
                await self.record(request)
                self.verdicts.append((body, 400))
                return responses_error(400, f"This model's maximum context length is "
                                       f"{self.window} tokens. However, you requested "
                                       f"{size + wanted} tokens ({size} in the messages, "
                                       f"{wanted} in the completion). Please reduce the "
                                       "length of the messages or completion.",
                                       code="context_length_exceeded").response()
            request._read_bytes = json.dumps(body).encode()
            return await super()._responses(request)

    if wire == "messages":
        async with Budgeted(window=8_000) as fake:
            gw = await gateway_factory(claude_config(fake.base_url))
            history = messages_history(6)
            assert rough_tokens([history]) < 8_000 - 1_024
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                                max_retries=0) as claude:
                raw = await asyncio.wait_for(claude.messages.with_raw_response.create(
                    model="claude", max_tokens=16_000, messages=history,  # type: ignore[arg-type]
                    extra_headers={"x-session-id": "native-budget"}), BOUND)
                assert (await raw.parse()).content
            sent = fake.accepted()[-1]
            assert rough_tokens([sent["messages"]]) + sent["max_tokens"] <= 8_000
    else:
        async with BudgetedResponses(window=8_000) as up:
            gw = await gateway_factory(gpt_config(up.base_url))
            async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                          max_retries=0) as gpt:
                raw = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                    model="gpt", input=responses_history(6), max_output_tokens=32_000,  # type: ignore[arg-type]
                    extra_headers={"x-session-id": "native-budget-resp"}), BOUND)
                assert raw.parse().output
            sent = up.accepted()[-1]
            assert rough_tokens([sent["input"]]) + sent["max_output_tokens"] <= 8_000
    assert raw.headers["x-gateway-compaction"].startswith("output_lowered"), raw.headers


def test_anthropics_sum_wording_lowers_the_budget_only_when_no_history_fits() -> None:
    from gateway.recovery.output_budget import fit_output_budget
    refused = ("input length and `max_tokens` exceed context limit: 1,500 + 32,000 > 8,000, "
               "decrease input length or `max_tokens` and try again")
    fit = fit_output_budget([refused])
    assert fit is not None and (fit.window, fit.prompt, fit.budget) == (8_000, 1_500, 32_000)
    assert fit.lowered == 8_000 - 1_500 - 16
    # A budget leaving room for a history: compaction is the rung, the budget stays.
    assert fit_output_budget(["input length and `max_tokens` exceed context limit: "
                              "190000 + 8192 > 200000"]) is None


async def test_native_parallel_function_calls_at_the_cut_stay_paired(
    gateway_factory: GatewayFactory,
) -> None:
    from tests.compaction.test_overflow_heldout_3 import WindowedResponses, gpt_config
    async with WindowedResponses(window=2_000) as up:
        gw = await gateway_factory(gpt_config(up.base_url))
        items = [
            *responses_history(10)[:-1],
            {"role": "user", "content": "read all three at once"},
            *({"type": "function_call", "call_id": f"call_par{n}", "name": "read_file",
               "arguments": json.dumps({"path": f"m{n}.py"})} for n in range(3)),
            *({"type": "function_call_output", "call_id": f"call_par{n}",
               "output": "def f(): pass\n" * 40} for n in range(3))]
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            raw = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                model="gpt", input=items, tools=[{  # type: ignore[arg-type]
                    "type": "function", "name": "read_file", "parameters": {
                        "type": "object", "properties": {"path": {"type": "string"}}}}],
                extra_headers={"x-session-id": "native-parallel-resp"}), BOUND)
            assert raw.parse().output
        assert raw.headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        sent = up.accepted()[-1]["input"]
        calls = {i["call_id"] for i in sent if i.get("type") == "function_call"}
        outputs = {i["call_id"] for i in sent if i.get("type") == "function_call_output"}
        assert calls == outputs, (calls, outputs)
        assert len(calls & {"call_par0", "call_par1", "call_par2"}) in (0, 3)


def test_the_newest_message_cut_by_the_tail_keeps_its_ask_and_its_end() -> None:
    from gateway.compaction.kept import TRUNCATION_MARK, select_kept_user_messages

    def words(messages: Any) -> int:
        return sum(len(str(m["content"]).split()) for m in messages)

    older = [{"role": "user", "content": f"ask {i} " + "word " * 900} for i in range(3)]
    newest = {"role": "user", "content": "why does the build fail? "
              + " ".join(f"line{n}" for n in range(40_000)) + " END-OF-LOG"}
    kept = select_kept_user_messages([*older, newest], words)
    last = kept.tail[-1]["content"]
    assert last.startswith("why does the build fail?") and last.endswith("END-OF-LOG")
    assert last.count(TRUNCATION_MARK) == 1
    assert words(kept.tail) <= 18_000
    # As one text part (Messages, Responses) too.
    parted = {"role": "user", "content": [{"type": "text", "text": newest["content"]}]}
    kept = select_kept_user_messages([*older, parted], words)
    text = kept.tail[-1]["content"][0]["text"]
    assert text.startswith("why does the build fail?") and text.endswith("END-OF-LOG")
