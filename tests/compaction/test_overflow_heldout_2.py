"""Held-out overflow, second round: overflow refusals in wordings the gateway was never shown
(providers and local servers of the field), a provider that counts tokens very differently
from the gateway, a refusal caused by the output budget, summarizers that answer nothing
usable, and a session store that breaks mid-session. Every request is still answered by a
compaction or a trim, or fails with an error that says what was tried; never the
provider's raw 400 when a rung could fix it, never a hang.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web

from tests.compaction.conftest import Session, agent_turn, compaction_header
from tests.compaction.test_overflow_heldout import (
    CONFIGURED,
    TRUE_WINDOW,
    last_answered,
    messages_history,
    model_card,
    phrased_config,
    responses_history,
    translated_config,
)
from tests.conftest import GatewayFactory
from tests.factories import user
from tests.fakes.llamacpp_server import LlamaCppServer, prompt_tokens
from tests.fakes.phrased_overflow import PHRASINGS, PhrasedServer


def _openai_shaped(message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": None, **extra}}


OUTPUT_BUDGET = 4096  # what the Anthropic wording adds to the input it names

# Wordings of the field the gateway's tests never used: (status, body, headers) for a
# prompt of t tokens against a window of w; True when the wording states the window.
NEW_PHRASINGS: dict[str, tuple[Any, bool]] = {
    # SambaNova Cloud (its generation-length check)
    "sambanova": (lambda w, t: (400, _openai_shaped(
        f"Requested generation length 1 is not possible! The provided prompt is {t} tokens "
        f"long, so generating 1 tokens requires a sequence length of {t + 1}, but the "
        f"maximum supported sequence length is just {w}!")), True),
    # Alibaba DashScope (Qwen), OpenAI-compatible mode
    "dashscope": (lambda w, t: (400, {"error": {
        "message": f"<400> InternalError.Algo.InvalidParameter: Range of input length should "
                   f"be [1, {w}]", "type": "invalid_request_error", "param": None,
        "code": "invalid_parameter_error"}, "id": "chatcmpl-ds",
        "request_id": "a1b2c3-dashscope"}), True),
    # Anthropic when the input plus max_tokens passes the window
    "anthropic_with_budget": (lambda w, t: (400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": f"input length and `max_tokens` exceed context limit: {t} + "
                   f"{OUTPUT_BUDGET} > {w}, decrease input length or `max_tokens` and try "
                   "again"}}), True),
    # llama.cpp's server (its own error type and the counts as fields)
    "llamacpp": (lambda w, t: (400, {"error": {
        "code": 400, "message": "the request exceeds the available context size, try "
                                "increasing it", "type": "exceed_context_size_error",
        "n_prompt_tokens": t, "n_ctx": w}}), True),
    # Cohere's compatibility API
    "cohere": (lambda w, t: (400, {"message": f"too many tokens: total number of tokens in "
                                              f"the prompt cannot exceed {w} - received {t}. "
                                              "Try using a shorter prompt, or enabling "
                                              "prompt truncating."}), True),
    # LM Studio
    "lmstudio": (lambda w, t: (400, {"error": f"Trying to keep the first {t} tokens when "
                                              f"context the overflows. However, the model is "
                                              f"loaded with context length of only {w} "
                                              "tokens, which is not enough. Try to load the "
                                              "model with a larger context length, or provide "
                                              "a shorter input"}), True),
    # Ollama's OpenAI endpoint with context shift off
    "ollama": (lambda w, t: (400, {"error": {
        "message": "the prompt is longer than the context length currently available to "
                   "the model; shorten the prompt, adjust the context length in settings, or "
                   "use a model with a longer context length", "type": "invalid_request_error",
        "param": None, "code": None}}), False),
    # A gateway in front (Portkey/LiteLLM-style) wrapping the provider's error as text
    "wrapped_proxy": (lambda w, t: (400, {"error": {
        "message": f"litellm.BadRequestError: OpenAIException - Error code: 400 - "
                   f"{{'error': {{'message': \"This model's maximum context length is {w} "
                   f"tokens. However, your messages resulted in {t} tokens.\", 'type': "
                   f"'invalid_request_error', 'param': 'messages', 'code': "
                   f"'context_length_exceeded'}}}}", "type": None, "param": None,
        "code": "400"}}), True),
}


@pytest.fixture
def new_phrasings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, (phrasing, _) in NEW_PHRASINGS.items():
        monkeypatch.setitem(PHRASINGS, name, lambda w, t, p=phrasing: (*p(w, t), {}))


@pytest.mark.usefixtures("new_phrasings")
@pytest.mark.parametrize("phrasing", sorted(NEW_PHRASINGS))
async def test_an_unseen_overflow_wording_is_compacted_and_answered(
    gateway_factory: GatewayFactory, phrasing: str,
) -> None:
    async with PhrasedServer(phrasing, window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id=f"unseen-{phrasing}")
        s.history.extend(turn for i in range(10) for turn in agent_turn(i, lines=60))
        assert prompt_tokens(s.history) > TRUE_WINDOW
        first = await s.send()  # answered, never the provider's 400
        header = compaction_header(first)
        assert header is not None and header[0] in ("summarized", "trimmed"), header
        for i in range(10, 13):
            await s.send(agent_turn(i, lines=60))
        answered = [b for b, status in server.chats() if status == 200]
        assert len(answered) == 4
        assert all(prompt_tokens(b["messages"]) <= TRUE_WINDOW for b in answered)
        card = await model_card(gw)
        assert card["context_window_source"] == "learned", card
        if NEW_PHRASINGS[phrasing][1]:  # the window it names is the one learned
            assert card["context_window"] == TRUE_WINDOW, card
        else:
            assert TRUE_WINDOW <= card["context_window"] < CONFIGURED, card


@pytest.mark.usefixtures("new_phrasings")
@pytest.mark.parametrize("wire", ["messages", "responses"])
async def test_an_unseen_wording_on_a_translated_agent_wire_is_answered(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    async with PhrasedServer("dashscope" if wire == "messages" else "sambanova",
                             window=2_000) as server:
        gw = await gateway_factory(translated_config(server))
        headers = {"x-session-id": f"unseen-{wire}"}
        if wire == "messages":
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                                max_retries=0) as claude:
                reply: Any = await claude.messages.with_raw_response.create(
                    model="demo", max_tokens=64, messages=messages_history(10),  # type: ignore[arg-type]
                    extra_headers=headers)
                assert (await reply.parse()).content[0].text == "Done."  # type: ignore[union-attr]
        else:
            async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                          max_retries=0) as gpt:
                reply = await gpt.responses.with_raw_response.create(
                    model="demo", input=responses_history(10),  # type: ignore[arg-type]
                    extra_headers=headers)
                assert reply.parse().output_text == "Done."
        assert "x-gateway-compaction" in reply.headers
        assert prompt_tokens(last_answered(server)["messages"]) <= 2_000


SCALE = 3  # the provider counts 3 tokens for each of the gateway's (images, a tokenizer)


async def test_a_provider_counting_far_more_tokens_than_the_gateway_is_still_answered(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The refusal's numbers are in the provider's units: its window is larger than what the
    # gateway counts for the whole history, yet the history does not fit.
    monkeypatch.setitem(PHRASINGS, "scaled", lambda w, t: (400, _openai_shaped(
        f"This model's maximum context length is {w * SCALE} tokens. However, your messages "
        f"resulted in {t * SCALE} tokens. Please reduce the length of the messages.",
        code="context_length_exceeded"), {}))
    async with PhrasedServer("scaled", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id="scaled-counts")
        s.history.extend(turn for i in range(10) for turn in agent_turn(i, lines=60))
        first = await s.send()
        assert compaction_header(first) is not None
        for i in range(10, 13):
            await s.send(agent_turn(i, lines=60))
        answered = [b for b, status in server.chats() if status == 200]
        assert len(answered) == 4
        card = await model_card(gw)
        # Whatever it learned, it never took the provider's units for its own.
        assert card["context_window"] <= CONFIGURED, card


async def test_a_refusal_caused_by_the_output_budget_is_answered(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The prompt alone fits; with the client's max_tokens it does not (vLLM's wording).
    monkeypatch.setitem(PHRASINGS, "budget", lambda w, t: (400, {
        "object": "error", "type": "BadRequestError", "param": None, "code": 400,
        "message": f"This model's maximum context length is {w} tokens. However, you "
                   f"requested {t + 3000} tokens ({t} in the messages, 3000 in the "
                   "completion). Please reduce the length of the messages or completion."},
        {}))
    async with PhrasedServer("budget", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        history = [user("hello")]
        history += [turn for i in range(4) for turn in agent_turn(i, lines=60)]
        mine = prompt_tokens(history)
        assert mine < TRUE_WINDOW < mine + 3000
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as c:
            raw = await c.chat.completions.with_raw_response.create(
                model="demo", messages=history, max_tokens=3000,  # type: ignore[arg-type]
                extra_headers={"x-session-id": "budget"})
        assert raw.parse().choices[0].message.content
        sent = last_answered(server)
        assert prompt_tokens(sent["messages"]) + (sent.get("max_tokens") or 0) <= TRUE_WINDOW


class OddSummarizer(PhrasedServer):
    """A phrased server whose summary requests get ``summary`` (status, body, content type)."""

    summary: tuple[int, bytes, str] = (200, b"", "application/json")

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        if LlamaCppServer.is_summary(body) and prompt_tokens(body["messages"]) <= self.window:
            self.requests.append((body, self.summary[0]))
            status, data, ctype = self.summary
            return web.Response(status=status, body=data, content_type=ctype)
        return await super()._chat(request)


def _completion(content: Any) -> bytes:
    import json
    return json.dumps({"id": "chatcmpl-s", "object": "chat.completion", "created": 0,
                       "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant",
                                                              "content": content}}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 0,
                                 "total_tokens": 1}}).encode()


SUMMARIES = {
    "empty_text": (200, _completion(""), "application/json"),
    "null_content": (200, _completion(None), "application/json"),
    "whitespace": (200, _completion("   \n\n  "), "application/json"),
    "html_200": (200, b"<html><body>Service Unavailable</body></html>", "text/html"),
    "truncated_json": (200, _completion("## Task\nsummary")[:40], "application/json"),
    "cut_by_length": (200, _completion("## Task\n")[:-2] + b', "x": 1}', "application/json"),
}


@pytest.mark.parametrize("case", sorted(SUMMARIES))
async def test_a_summarizer_answering_nothing_usable_falls_back_to_a_trim(
    gateway_factory: GatewayFactory, case: str,
) -> None:
    async with OddSummarizer("openai", window=TRUE_WINDOW) as server:
        server.summary = SUMMARIES[case]
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id=f"odd-summary-{case}")
        s.history.extend(turn for i in range(10) for turn in agent_turn(i, lines=60))
        first = await s.send()
        header = compaction_header(first)
        assert header is not None and header[0] == "trimmed", header
        await s.send(agent_turn(10, lines=60))
        sent = last_answered(server)
        assert prompt_tokens(sent["messages"]) <= TRUE_WINDOW
        text = str(sent["messages"])
        assert "<html" not in text and "Service Unavailable" not in text
        assert server.summaries(), "a summary was asked for"


async def test_a_summarizer_slower_than_the_deadline_on_a_chat_stream_is_trimmed(
    gateway_factory: GatewayFactory,
) -> None:
    hold = asyncio.Event()
    async with PhrasedServer("moonshot", window=2_000, summary_hold=hold) as server:
        raw = phrased_config(server)
        raw["recovery"]["deadline"] = 3.0
        raw["compaction"]["summary_time_share"] = 0.3
        gw = await gateway_factory(raw)
        history = [turn for i in range(8) for turn in agent_turn(i, lines=30)]
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as c:
            stream = await asyncio.wait_for(c.chat.completions.create(
                model="demo", messages=history, stream=True,  # type: ignore[arg-type]
                extra_headers={"x-session-id": "slow-chat-stream"}), 30)
            text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream
                            if chunk.choices])
        hold.set()
        assert text == "Done."
        assert prompt_tokens(last_answered(server)["messages"]) <= 2_000


async def test_a_session_store_overwritten_with_garbage_mid_session_still_answers(
    gateway_factory: GatewayFactory, tmp_path: Path,
) -> None:
    async with PhrasedServer("openai", window=TRUE_WINDOW) as server:
        raw = phrased_config(server, sessions={"data_dir": str(tmp_path / "data")})
        raw["recovery"]["deadline"] = 5.0
        gw = await gateway_factory(raw)
        s = Session(gw, session_id="garbage-store")
        s.history.extend(turn for i in range(10) for turn in agent_turn(i, lines=60))
        assert compaction_header(await s.send()) is not None
        # A disk fault (or another program) scribbles over the database file.
        for path in (tmp_path / "data").glob("*.sqlite3*"):
            with path.open("r+b") as f:
                f.write(b"\x00garbage" * 512)
        for i in range(10, 20):  # grows past the window again
            reply = await asyncio.wait_for(s.send(agent_turn(i, lines=60)), 60)
        assert reply.parse().choices[0].message.content == "Done."
        assert all(prompt_tokens(b["messages"]) <= TRUE_WINDOW
                   for b, status in server.chats() if status == 200)
        async with aiohttp.ClientSession() as http, http.get(gw.root + "/healthz") as r:
            assert r.status < 500


async def test_a_refusal_the_ladder_cannot_fix_says_what_was_tried(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The provider refuses every size in an unseen wording: the client gets a clear error
    # naming the overflow and the rungs tried, bounded, never just the provider's text.
    monkeypatch.setitem(PHRASINGS, "always", lambda w, t: (400, _openai_shaped(
        f"Range of input length should be [1, {max(1, t // 10)}]",
        code="invalid_parameter_error"), {}))
    async with PhrasedServer("always", window=1) as server:
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id="always-refused")
        s.history.extend(turn for i in range(4) for turn in agent_turn(i, lines=20))
        async with s.client() as c:
            with pytest.raises(openai.APIStatusError) as caught:
                await asyncio.wait_for(c.chat.completions.create(
                    model="demo", messages=s.history,  # type: ignore[arg-type]
                    extra_headers={"x-session-id": "always-refused"}), 60)
        body = caught.value.response.json()
        assert 400 <= caught.value.status_code < 600
        # What was tried, and that the overflow was recognized as one.
        tried = body["gateway"]
        assert any(a.get("verdict") == "overflow" for a in tried["attempts"]), tried
        assert len(tried["attempts"]) >= 2 and tried["gave_up"], tried
        assert len(server.requests) <= 12, "bounded"
