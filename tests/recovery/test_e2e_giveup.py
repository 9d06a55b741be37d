"""When the ladder gives up, and when it climbs several rungs: what the client and the traces
see (SPEC §3: the provider's own error, in the client's wire format, with what was tried)."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator

import openai
import pytest
from PIL import Image

from gateway.referee import Referee, bodies
from tests.conftest import GatewayFactory, RunningGateway, free_port
from tests.factories import assistant, user
from tests.recovery.e2e_support import attempt_spans, client, span_summary, start_gateway

TWO_ASSISTANTS = [user("q"), assistant("first"), assistant("second"), user("next")]
CONSECUTIVE = ('messages: roles must alternate between "user" and "assistant", but found '
               'multiple "assistant" roles in a row')


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict", style="anthropic", max_image_side=256,
                       allowed_image_formats=["png", "jpeg"]) as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await start_gateway(gateway_factory, referee.base_url,
                               media={"max_side": 256, "allowed_formats": ["png", "jpeg"]})


async def test_structural_after_strict_gives_up_with_provider_error_and_attempts(
    gw: RunningGateway, referee: Referee
) -> None:
    refusal = bodies.anthropic_error(CONSECUTIVE, request_id="req_011CAAA")
    referee.script(400, refusal, times=2)
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="demo", messages=TWO_ASSISTANTS)
    response = info.value.response
    assert response.status_code == 400
    assert response.headers["x-gateway-attempts"] == "2"
    assert response.headers["x-gateway-recovery"] == "strict"
    # What the refused body had changed, though it was refused: its error quotes that body.
    assert response.headers["x-gateway-repairs"] == "assistant_messages_merged=1"
    got = response.json()
    # Anthropic's body, re-worded in the OpenAI envelope the client speaks.
    assert got["error"]["message"] == CONSECUTIVE
    assert got["error"]["type"] == "invalid_request_error"
    assert set(got["error"]) >= {"message", "type", "param", "code"}
    gateway = got["gateway"]
    assert [(a["number"], a["step"], a["structure"], a["status"], a["verdict"])
            for a in gateway["attempts"]] == [
        (1, None, "default", 400, "structural"), (2, "strict", "strict", 400, "structural")]
    assert gateway["gave_up"].startswith("structural:")
    assert gateway["request_id"] == response.headers["x-request-id"]
    spans = [span_summary(s) for s in attempt_spans(gw)]
    assert [(s["structure"], s["verdict"], s["error"]) for s in spans] == [
        ("default", "structural", True), ("strict", "structural", True)]


def wide_png() -> str:
    buf = io.BytesIO()
    Image.linear_gradient("L").resize((1200, 300)).convert("RGB").save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


async def test_three_rungs_in_one_request(gw: RunningGateway, referee: Referee) -> None:
    """Overloaded, then the wire rules, then the image: retry, strict, degraded media."""
    referee.script(bodies.overloaded("anthropic", retry_after=0))
    messages = [
        user([{"type": "text", "text": "look"},
              {"type": "image_url", "image_url": {"url": wide_png()}}]),
        assistant("I see"), assistant("a gradient"), user("sure?"),
    ]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=messages)
    assert raw.parse().choices[0].message.content == "referee: accepted 3 messages"
    assert raw.headers["x-gateway-attempts"] == "4"
    assert raw.headers["x-gateway-recovery"] == "retry,strict,media=degraded"
    assert [r.status for r in referee.requests] == [529, 400, 400, 200]
    assert [r.situation for r in referee.requests[1:3]] == ["e", "h"]
    spans = [span_summary(s) for s in attempt_spans(gw)]
    assert [(s["step"], s["structure"], s["media"], s["verdict"]) for s in spans] == [
        ("initial", "default", "original", "transient"),
        ("retry", "default", "original", "structural"),
        ("strict", "strict", "original", "media"),
        ("media=degraded", "strict", "degraded", None),
    ]


async def test_plain_text_provider_error_is_wrapped_in_the_envelope(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url,
                             recovery={"max_transient_retries": 1})
    referee.script(502, "Bad gateway: upstream exploded", {"Content-Type": "text/plain"},
                   times=2)
    async with client(gw) as c:
        with pytest.raises(openai.InternalServerError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    response = info.value.response
    assert response.status_code == 502
    assert response.headers["content-type"].startswith("application/json")
    got = response.json()
    assert "upstream exploded" in got["error"]["message"]
    assert isinstance(got["error"]["type"], str)
    assert [a["verdict"] for a in got["gateway"]["attempts"]] == ["transient", "transient"]


async def test_unreachable_upstream_gives_502_after_bounded_retries(
    gateway_factory: GatewayFactory,
) -> None:
    gw = await start_gateway(gateway_factory, f"http://127.0.0.1:{free_port()}/v1",
                             recovery={"max_transient_retries": 2})
    async with client(gw) as c:
        with pytest.raises(openai.InternalServerError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    response = info.value.response
    assert response.status_code == 502
    assert response.headers["x-gateway-attempts"] == "3"
    got = response.json()
    assert got["error"]["message"] == "the upstream of model 'demo' could not be reached"
    assert [a["status"] for a in got["gateway"]["attempts"]] == [502, 502, 502]


async def test_provider_echoing_the_upstream_key_never_reaches_the_client(
    gw: RunningGateway, referee: Referee
) -> None:
    secret = "upstream-secret-key"  # model_entry's default api_key
    referee.script(403, bodies.anthropic_error(f"key {secret} is not allowed for this model",
                                               type="permission_error"))
    async with client(gw) as c:
        with pytest.raises(openai.PermissionDeniedError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    text = info.value.response.text
    assert secret not in text
    assert "is not allowed for this model" in info.value.response.json()["error"]["message"]
    assert len(referee.requests) == 1
