"""A local model that summarizes slower than the request deadline allows (issue 22): the
summary gets its share of the deadline, then the trimming safety net answers, within the
deadline; the session's next turn is answered too. llama.cpp's own overflow body teaches
the gateway the 2,048-token window (nothing is configured)."""

from __future__ import annotations

import asyncio

import aiohttp

from gateway.compaction import SUMMARY_PREFIX
from tests.compaction.conftest import wait_background_idle
from tests.compaction.test_e2e_small_window import chat
from tests.conftest import GatewayFactory, gateway_state, model_entry
from tests.factories import user
from tests.fakes.llamacpp_server import LlamaCppServer, prompt_tokens
from tests.http import post_json

DEADLINE = 4.0  # seconds (recovery.deadline): the summary never comes within it


async def test_an_overflowing_chat_is_answered_trimmed_within_the_deadline(
    gateway_factory: GatewayFactory,
) -> None:
    async with LlamaCppServer(n_ctx=2048, slow_summaries=True) as llama:
        gw = await gateway_factory({
            "model_list": [model_entry("local", llama.base_url, model="openai/local-model")],
            "recovery": {"deadline": DEADLINE}})
        history = chat(90)
        assert prompt_tokens(history) > 2 * 2048
        async with aiohttp.ClientSession(headers={"x-session-id": "slow-1"}) as http:
            status, headers, body = await post_json(
                gw.base_url + "/chat/completions", {"model": "local", "messages": history},
                session=http)
            # Not the 504 of a deadline spent on the summary, nor llama.cpp's 400: an answer.
            assert status == 200, body
            assert headers["x-gateway-compaction"].startswith("trimmed; ")
            assert "no summary within its share (50%)" in headers[
                "x-gateway-compaction-summary-failed"]
            assert headers["x-gateway-recovery"] == "compact"  # after llama.cpp's refusal
            sent = llama.chat_requests()[-1]["messages"]
            assert prompt_tokens(sent) <= 2048
            assert sent[0] == history[0] and sent[1] == history[1]  # the system and the task
            assert sent[-1] == history[-1]  # the current question
            notes = [m["content"] for m in sent
                     if "earlier messages of this conversation were omitted" in str(m["content"])]
            assert len(notes) == 1 and "/v1/gateway/sessions/slow-1/archive?from=1&to=" in (
                notes[0])
            assert len(llama.summary_requests()) == 1  # the one that never came back

            # The next turn: the stored trimmed history is reused, no summary is waited for.
            history += [{"role": "assistant", "content": body["choices"][0]["message"]
                         ["content"]}, user("Question 91: and the strawberries?")]
            status, headers, body = await post_json(
                gw.base_url + "/chat/completions", {"model": "local", "messages": history},
                session=http)
            assert status == 200, body
            assert headers["x-gateway-compaction"].startswith(("reused; ", "trimmed; "))
            assert prompt_tokens(llama.chat_requests()[-1]["messages"]) <= 2048
            assert len(llama.summary_requests()) <= 2


async def test_a_summary_that_comes_late_serves_the_next_turn(
    gateway_factory: GatewayFactory,
) -> None:
    async with LlamaCppServer(n_ctx=2048) as llama:
        gate = llama.summary_gate = asyncio.Event()
        gw = await gateway_factory({
            "model_list": [model_entry("local", llama.base_url, model="openai/local-model")],
            "recovery": {"deadline": DEADLINE}})
        history = chat(90)
        async with aiohttp.ClientSession(headers={"x-session-id": "slow-2"}) as http:
            status, headers, body = await post_json(
                gw.base_url + "/chat/completions", {"model": "local", "messages": history},
                session=http)
            assert status == 200, body
            assert headers["x-gateway-compaction"].startswith("trimmed; ")
            # The summary goes on after the answer: once it comes, it is parked for the
            # session's next turn, which is sent with it instead of the trimmed history.
            gate.set()
            await wait_background_idle(gw)
            history += [{"role": "assistant", "content": body["choices"][0]["message"]
                         ["content"]}, user("Question 91: and the strawberries?")]
            status, headers, body = await post_json(
                gw.base_url + "/chat/completions", {"model": "local", "messages": history},
                session=http)
            assert status == 200, body
            assert headers["x-gateway-compaction"].startswith("background-applied; ")
            sent = llama.chat_requests()[-1]["messages"]
            assert any(str(m["content"]).startswith(SUMMARY_PREFIX) for m in sent)
            assert sent[-1] == history[-1]
            assert prompt_tokens(sent) <= 2048
            assert len(llama.summary_requests()) == 1  # the late one, not another
            # The trimmed messages were archived once, not again with the late summary.
            archive = gateway_state(gw).driver.compactor.archive
            assert await archive.line_count("slow-2") == len(chat(90))
            # The turn after reuses it (the same bytes first).
            history += [{"role": "assistant", "content": "ok"}, user("Question 92: mint?")]
            status, headers, body = await post_json(
                gw.base_url + "/chat/completions", {"model": "local", "messages": history},
                session=http)
            assert status == 200 and headers["x-gateway-compaction"].startswith("reused; ")
            assert llama.chat_requests()[-1]["messages"][:len(sent)] == sent
