"""Compaction against a local model server with a 2,048-token window and no window in the
config: the window is learned from the server's own overflow refusal, every budget scales
to it, and a summarizer that always fails is caught by the trimming safety net and the
circuit breaker."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.compaction import SUMMARY_PREFIX
from tests.compaction.conftest import Session
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import assistant, system, user
from tests.fakes.llamacpp_server import LlamaCppServer, prompt_tokens
from tests.sessions.conftest import run_redis_server


def chat(turns: int) -> list[dict[str, Any]]:
    """A long plain chat: ``turns`` questions with their answers, then one more question."""
    history: list[dict[str, Any]] = [system("You are a friendly gardening assistant.")]
    for i in range(turns):
        history.append(user(f"Question {i}: in my garden plan, which vegetable should go in "
                            f"bed {i}, next to the tomatoes and the basil?"))
        history.append(assistant(f"Bed {i}: plant carrots; they like the loose soil there "
                                 "and do not shade the tomatoes."))
    history.append(user(f"Question {turns}: and what about the herbs?"))
    return history


@pytest.fixture
async def llama() -> AsyncIterator[LlamaCppServer]:
    async with LlamaCppServer(n_ctx=2048) as server:
        yield server


async def gateway(factory: GatewayFactory, server: LlamaCppServer) -> RunningGateway:
    # No max_input_tokens: the gateway does not know the window until the server says it.
    return await factory({"model_list": [model_entry("local", server.base_url,
                                                     model="openai/local-model")]})


async def models(gw: RunningGateway) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(gw.base_url + "/models") as resp:
        data = await resp.json()
    return {m["id"]: m for m in data["data"]}


async def test_a_long_chat_is_answered_in_a_learned_2048_token_window(
    gateway_factory: GatewayFactory, llama: LlamaCppServer,
) -> None:
    gw = await gateway(gateway_factory, llama)
    assert (await models(gw))["local"]["context_window"] == 128_000  # a guess, for now
    s = Session(gw, session_id="garden-1", model="local", history=chat(90))
    assert prompt_tokens(s.history) > 4_500  # more than twice the window

    first = await s.send()
    assert first.headers["x-gateway-compaction"].startswith("summarized; ")
    assert "compact" in first.headers["x-gateway-recovery"]
    # The server refused the whole chat once, then got a summary request and the compacted
    # chat, each within its window.
    refused = llama.requests[0]
    assert prompt_tokens(refused["messages"]) > 2048
    summaries = llama.summary_requests()
    assert len(summaries) == 1
    assert summaries[0]["max_tokens"] <= 256
    assert prompt_tokens(summaries[0]["messages"]) + summaries[0]["max_tokens"] <= 2048
    answered = llama.chat_requests()[-1]["messages"]
    assert prompt_tokens(answered) < 2048
    summary = next(m["content"] for m in answered if str(m["content"]).startswith(SUMMARY_PREFIX))
    assert ("Everything before this note is still on disk in this agent's event log "
            "(read-only, append-only):") in summary

    listed = (await models(gw))["local"]
    assert listed["context_window"] == 2048
    assert listed["context_window_source"] == "learned"

    # Later turns of the session reuse the compaction: no new summary, same bytes first.
    for turn in range(3):
        raw = await s.send([user(f"Follow-up {turn}: and the mint?")])
        assert raw.headers["x-gateway-compaction"].startswith("reused; ")
        sent = llama.chat_requests()[-1]["messages"]
        assert sent[: len(answered)] == answered
        assert prompt_tokens(sent) < 2048
    assert len(llama.summary_requests()) == 1


async def test_a_summarizer_that_always_fails_costs_a_handful_of_calls(
    gateway_factory: GatewayFactory,
) -> None:
    async with LlamaCppServer(n_ctx=2048, fail_summaries=True) as llama:
        gw = await gateway(gateway_factory, llama)
        s = Session(gw, session_id="garden-2", model="local", history=chat(60)[:-1])
        for request in range(10):
            # Each turn pastes a long note: every request overflows the window again.
            note = " ".join(f"row {request}-{n}: two tomatoes and one basil." for n in range(40))
            raw = await s.send([user(f"Notes of day {request}:\n{note}")])
            how = raw.headers["x-gateway-compaction"]
            assert how.startswith("trimmed; "), how
            sent = llama.chat_requests()[-1]["messages"]
            assert prompt_tokens(sent) <= 2048
            # The task and the current turn stay; one note says what was left out and where.
            assert sent[0] == s.history[0] and sent[1] == s.history[1]
            notes = [m for m in sent if "earlier messages of this conversation were omitted"
                     in str(m.get("content"))]
            assert len(notes) == 1 and "/v1/gateway/sessions/garden-2/archive?from=" in (
                notes[0]["content"])
            assert sent[-1] == s.history[-2]
        # The breaker stopped calling the summarizer after a few failures.
        assert 1 <= len(llama.summary_requests()) <= 3


async def test_the_learned_window_is_shared_through_redis(
    gateway_factory: GatewayFactory, llama: LlamaCppServer, tmp_path: Path,
) -> None:
    with run_redis_server(tmp_path) as url:
        config = {"model_list": [model_entry("local", llama.base_url, model="openai/local-model")],
                  "sessions": {"data_dir": str(tmp_path / "data"), "redis_url": url}}
        first = await gateway_factory(config)
        second = await gateway_factory(config)
        await Session(first, session_id="garden-3", model="local", history=chat(90)).send()
        assert (await models(first))["local"]["context_window"] == 2048
        # The other replica never saw a refusal: it plans with the shared window at once and
        # compacts before sending instead of paying a refusal of its own.
        before = len(llama.requests)
        raw = await Session(second, session_id="garden-4", model="local",
                            history=chat(80)).send()
        assert raw.headers["x-gateway-compaction"].startswith("summarized; ")
        assert "x-gateway-recovery" not in raw.headers
        assert all(prompt_tokens(b["messages"]) <= 2048 for b in llama.requests[before:])
        assert (await models(second))["local"]["context_window"] == 2048


async def test_a_chat_growing_to_90_turns_stays_answerable(
    gateway_factory: GatewayFactory, llama: LlamaCppServer,
) -> None:
    gw = await gateway(gateway_factory, llama)
    full = chat(90)
    history = [full[0]]
    hows: list[str] = []
    async with aiohttp.ClientSession(headers={"x-session-id": "garden-5"}) as http:
        for turn in range(90):
            history.append(full[1 + 2 * turn])
            async with http.post(gw.base_url + "/chat/completions",
                                 json={"model": "local", "messages": history}) as resp:
                assert resp.status == 200, await resp.text()
                answer = (await resp.json())["choices"][0]["message"]["content"]
                hows.append(resp.headers.get("x-gateway-compaction", "").split(";")[0])
            history.append(assistant(answer))  # the client keeps the answer it got
    # One refusal taught the window; from then on the gateway compacts before sending.
    refusals = [b for b in llama.chat_requests() if prompt_tokens(b["messages"]) > 2048]
    assert len(refusals) == 1
    assert hows.count("summarized") >= 2 and hows.count("reused") > hows.count("summarized")
    assert len(llama.summary_requests()) == hows.count("summarized")
    assert all(prompt_tokens(b["messages"]) + (b.get("max_tokens") or 0) <= 2048
               for b in llama.summary_requests())
    # The latest summary lists one archive range per compaction window, contiguous from 1.
    last = llama.chat_requests()[-1]["messages"]
    summary = next(m["content"] for m in last if str(m["content"]).startswith(SUMMARY_PREFIX))
    ranges = [(int(a), int(b)) for a, b in re.findall(r"from=(\d+)&to=(\d+)", summary)]
    assert len(ranges) >= 2 and ranges[0][0] == 1
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges))
