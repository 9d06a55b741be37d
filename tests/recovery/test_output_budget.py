"""The overflow rung when the client's output budget alone overflows the window: the budget
is lowered to what the window leaves beside the prompt (``recovery.output_budget``), end to
end through a vLLM-style upstream that counts the window as prompt plus ``max_tokens``."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from gateway.recovery.output_budget import MARGIN, fit_output_budget
from tests.conftest import GatewayFactory
from tests.factories import assistant, user
from tests.fakes.faulty_upstream import Fault, FaultyUpstream, Received, Writer, answer, ok_json
from tests.recovery.e2e_support import client, start_gateway

WINDOW = 4096


def vllm_words(window: int, prompt: int, budget: int) -> str:
    return (f"This model's maximum context length is {window} tokens. However, you requested "
            f"{prompt + budget} tokens ({prompt} in the messages, {budget} in the completion). "
            "Please reduce the length of the messages or completion.")


@pytest.mark.parametrize("window, prompt, budget, lowered", [
    (6048, 568, 6048, 6048 - 568 - MARGIN),  # provider-errors.jsonl: the whole window asked
    (8192, 64, 8192, 8192 - 64 - MARGIN),
    (32768, 1200, 32000, 32768 - 1200 - MARGIN),  # less than 1K tokens left for messages
    (131072, 122942, 8192, None),  # the history is the problem: compact it
    (2048, 1699, 1024, None),
    (4096, 3900, 4096, None),  # too little would be left to answer in: the refusal stands
])
def test_the_budget_is_lowered_only_when_no_history_fits_beside_it(
        window: int, prompt: int, budget: int, lowered: int | None) -> None:
    fit = fit_output_budget(["BadRequestError", vllm_words(window, prompt, budget)])
    assert (fit.lowered if fit is not None else None) == lowered
    assert fit_output_budget(["maximum context length exceeded"]) is None


def prompt_tokens(body: dict[str, Any]) -> int:
    """The upstream's count of the prompt: four characters a token, as a tokenizer would."""
    return sum(len(m.get("content") or "") for m in body["messages"]) // 4 + 10


def vllm_judge() -> Fault:
    """A vLLM server with a 4096-token window: prompt plus output budget must fit."""
    async def run(got: Received, w: Writer) -> None:
        body = got.json()
        budget = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        prompt = prompt_tokens(body)
        if prompt + budget > WINDOW:
            error = {"object": "error", "message": vllm_words(WINDOW, prompt, budget),
                     "type": "BadRequestError", "param": None, "code": 400}
            await answer(400, json.dumps(error).encode(),
                         {"Content-Type": "application/json"})(got, w)
        else:
            await ok_json()(got, w)
    return run


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
async def test_a_budget_of_the_whole_window_is_lowered_and_the_history_kept(
        gateway_factory: GatewayFactory, field: str) -> None:
    history = [user("summarize the plan " * 40), assistant("Here it is."), user("go on")]
    async with FaultyUpstream() as up:
        up.then(vllm_judge(), vllm_judge(), vllm_judge())
        gw = await start_gateway(gateway_factory, up.base_url)
        async with client(gw) as c:
            raw = await c.chat.completions.with_raw_response.create(
                model="demo", messages=history, **{field: WINDOW})  # type: ignore[arg-type]
            assert raw.parse().choices[0].message.content
        first, second = up.received[0].json(), up.received[1].json()
        prompt = prompt_tokens(first)
        assert second[field] == WINDOW - prompt - MARGIN
        assert second["messages"] == first["messages"] == history  # nothing summarized
        assert raw.headers["x-gateway-recovery"] == "compact"
        assert raw.headers["x-gateway-compaction"] == (
            f"output_lowered; tokens_before={prompt + WINDOW}; "
            f"tokens_after={WINDOW - MARGIN}")
        assert len(up.received) == 2


async def test_without_a_budget_of_its_own_the_overflow_is_compacted(
        gateway_factory: GatewayFactory) -> None:
    # The refusal names a budget the client never set (the server's default): there is no
    # field of the client's to lower, so the usual overflow rung runs (here: it gives up).
    async with FaultyUpstream() as up:
        words = {"object": "error", "message": vllm_words(WINDOW, 100, WINDOW),
                 "type": "BadRequestError", "param": None, "code": 400}
        refusal = answer(400, json.dumps(words).encode(), {"Content-Type": "application/json"})
        up.then(refusal, refusal, refusal, refusal)
        gw = await start_gateway(gateway_factory, up.base_url)
        async with client(gw) as c:
            with pytest.raises(openai.BadRequestError) as refused:
                await c.chat.completions.create(
                    model="demo", messages=[user("hi"), assistant("hello"), user("go on")])
        assert refused.value.response.headers["x-gateway-recovery"] == "compact"
        assert "output_lowered" not in refused.value.response.text
        sent = [r.json() for r in up.received if r.json()["messages"][-1] == user("go on")]
        assert sent and all("max_tokens" not in body for body in sent)  # (summaries aside)
