"""Ladder step 2 end to end: a strict upstream refuses what ``project()`` leaves in place,
and the gateway recovers with one ``project_strict()`` resend (SPEC §3)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from gateway.referee import Referee, bodies
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import assistant, calls, system, tool, user
from tests.recovery.e2e_support import attempt_spans, client, span_summary, start_gateway

# History shapes project() leaves alone but Anthropic/Bedrock/Gemini refuse, with the strict
# repair that fixes each and the message the strict resend must carry.
STRICT_ONLY: dict[str, tuple[list[dict[str, Any]], str, list[dict[str, Any]]]] = {
    "two assistant messages in a row": (
        [user("q"), assistant("first half"), assistant("second half"), user("go on")],
        "assistant_messages_merged",
        [user("q"), assistant("first half\n\nsecond half"), user("go on")],
    ),
    "leading assistant message": (
        [system("be brief"), assistant("Hi! How can I help?"), user("what is 2+2?")],
        "leading_non_user_dropped",
        [system("be brief"), user("what is 2+2?")],
    ),
    "duplicate tool ids": (
        [user("look it up"), calls("call_1"), tool("call_1", "first"), user("again"),
         calls("call_1"), tool("call_1", "second"), user("done?")],
        "duplicate_tool_call_deduped",
        [],  # the exact shape is projection's business; checked by the referee's acceptance
    ),
}


@pytest.fixture(params=["openai", "anthropic"])
async def referee(request: pytest.FixtureRequest) -> AsyncIterator[Referee]:
    async with Referee(rules="strict", style=request.param) as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await start_gateway(gateway_factory, referee.base_url)


@pytest.mark.parametrize("case", list(STRICT_ONLY))
async def test_strict_resend_recovers(gw: RunningGateway, referee: Referee, case: str) -> None:
    messages, repair, expected = STRICT_ONLY[case]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=messages)
    completion = raw.parse()
    assert completion.choices[0].message.content.startswith("referee: accepted")
    assert raw.headers["x-gateway-attempts"] == "2"
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert repair in raw.headers["x-gateway-repairs"]

    first, second = referee.requests
    assert first.status == 400  # the strict upstream really refused the project()ed shape
    assert first.json()["messages"] == messages  # project() had nothing to repair
    assert second.status == 200
    if expected:
        assert second.json()["messages"] == expected

    spans = [span_summary(s) for s in attempt_spans(gw)]
    assert spans == [
        {"attempt": 1, "step": "initial", "structure": "default", "media": "original",
         "status": 400, "verdict": "structural", "error": True},
        {"attempt": 2, "step": "strict", "structure": "strict", "media": "original",
         "status": 200, "verdict": None, "error": False},
    ]


async def test_valid_history_is_one_attempt_without_recovery_header(
    gw: RunningGateway, referee: Referee
) -> None:
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=[user("hi"), assistant("hello"), user("bye")])
    assert raw.headers["x-gateway-attempts"] == "1"
    assert "x-gateway-recovery" not in raw.headers
    assert len(referee.requests) == 1


async def test_strict_step_that_changes_nothing_is_skipped(
    gw: RunningGateway, referee: Referee
) -> None:
    """A structural refusal of a history strict projection cannot change: no identical
    resend; the client gets the provider's refusal after one attempt."""
    body = {"error": {"message": "messages: roles must alternate between \"user\" and "
                      "\"assistant\", but found multiple \"user\" roles in a row",
                      "type": "invalid_request_error", "param": None, "code": None}}
    referee.script(400, body)
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="demo",
                                            messages=[user("hi"), assistant("yo"), user("ok")])
    assert len(referee.requests) == 1
    got = info.value.response.json()
    assert got["error"]["message"] == body["error"]["message"]
    assert info.value.response.headers["x-gateway-attempts"] == "1"
    assert "x-gateway-recovery" not in info.value.response.headers
    assert [a["verdict"] for a in got["gateway"]["attempts"]] == ["structural"]
    assert got["gateway"]["gave_up"].startswith("structural:")


async def test_strict_disabled_per_model_returns_the_refusal(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    """``model_info.recovery.strict: false`` turns the step off for that model only."""
    gw = await start_gateway(
        gateway_factory, referee.base_url,
        extra_models=[model_entry("lenient", referee.base_url, model="openai/referee",
                                  recovery={"strict": False})],
    )
    messages, _, _ = STRICT_ONLY["two assistant messages in a row"]
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="lenient", messages=messages)
        assert len(referee.requests) == 1
        assert info.value.response.headers["x-gateway-attempts"] == "1"
        recovered = await c.chat.completions.with_raw_response.create(model="demo",
                                                                      messages=messages)
    assert recovered.headers["x-gateway-recovery"] == "strict"
    assert len(referee.requests) == 3


async def test_strict_resend_keeps_every_user_text(gw: RunningGateway,
                                                   referee: Referee) -> None:
    messages = [system("s"), assistant("stale greeting"), user("alpha"), assistant("one"),
                assistant("two"), user("omega")]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=messages)
    assert raw.headers["x-gateway-recovery"] == "strict"
    sent = json.dumps(referee.requests[-1].json()["messages"])
    for text in ("alpha", "omega", "one", "two"):
        assert text in sent


PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"


@pytest.mark.parametrize(("role", "words", "refused"), [
    # OpenAI takes only text and refusals in an assistant turn (the media rung replaced the
    # image, and the user's own, by a note that the model takes no images: false).
    ("assistant", "here is the chart", "Supported values are: 'text' and 'refusal'."),
    # Only text in a system message (a refusal nothing recovered).
    ("system", "You are the brand assistant.", "Supported values are: 'text'."),
])
async def test_media_where_only_text_goes_is_moved_to_the_user_turn(
        gw: RunningGateway, referee: Referee, role: str, words: str, refused: str) -> None:
    messages = [*([user("plot it")] if role == "assistant" else []),
                {"role": role, "content": [{"type": "text", "text": words},
                                           {"type": "image_url", "image_url": {"url": PIXEL}}]},
                user("explain it")]
    referee.script(400, bodies.openai_error(
        f"Invalid value: 'image_url'. {refused}",
        param=f"messages[{len(messages) - 2}].content[1].type", code="invalid_value"))
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=messages)
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert raw.headers["x-gateway-repairs"] == "message_media_moved=1"
    sent = referee.requests[-1].json()["messages"]
    at = len(messages) - 2
    assert sent[at] == {"role": role, "content": [{"type": "text", "text": words}]}
    assert sent[at + 1]["role"] == "user" and PIXEL in json.dumps(sent[at + 1])
