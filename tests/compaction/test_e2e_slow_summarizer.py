"""A local model that summarizes slower than the request deadline allows (issue 22): the
summary gets its share of the deadline, then the trimming safety net answers, within the
deadline; the session's next turn is answered too. llama.cpp's own overflow body teaches
the gateway the 2,048-token window (nothing is configured)."""

from __future__ import annotations

from typing import Any

import aiohttp

from tests.compaction.test_e2e_small_window import chat
from tests.conftest import GatewayFactory, model_entry
from tests.factories import user
from tests.fakes.llamacpp_server import LlamaCppServer, prompt_tokens

DEADLINE = 4.0  # seconds (recovery.deadline): the summary never comes within it


async def post(http: aiohttp.ClientSession, url: str, history: list[dict[str, Any]]
               ) -> tuple[int, Any, dict[str, Any]]:
    async with http.post(url + "/chat/completions", json={"model": "local",
                                                          "messages": history}) as r:
        return r.status, r.headers, await r.json()


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
            status, headers, body = await post(http, gw.base_url, history)
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
            status, headers, body = await post(http, gw.base_url, history)
            assert status == 200, body
            assert headers["x-gateway-compaction"].startswith(("reused; ", "trimmed; "))
            assert prompt_tokens(llama.chat_requests()[-1]["messages"]) <= 2048
            assert len(llama.summary_requests()) <= 2
