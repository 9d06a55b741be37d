"""The held-out refusals of test_classifier_heldout_2 end to end: a real gateway on loopback,
the real ``openai`` SDK, and an upstream (the referee) that answers the provider's body first
and judges normally after. What the client gets and what the upstream received show the rung.
"""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator

import openai
import pytest
from PIL import Image

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, tool, tool_call, user
from tests.recovery.e2e_support import client, start_gateway
from tests.recovery.test_classifier_heldout_2 import CASES

BODY = {name: (status, headers, body) for name, status, headers, body, _i, _v in CASES}
TWO_ASSISTANTS = [user("q"), assistant("first"), assistant("second"), user("next")]


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await start_gateway(gateway_factory, referee.base_url,
                               media={"max_side": 256, "allowed_formats": ["png", "jpeg"]})


def script(referee: Referee, name: str) -> None:
    status, headers, body = BODY[name]
    referee.script(status, body, headers)


@pytest.mark.parametrize("name", ["cohere-empty-message", "openrouter-xiaomi-empty-assistant",
                                  "bedrock-tool-use-id-constraint"])
async def test_structural_refusal_takes_the_strict_rung(
    gw: RunningGateway, referee: Referee, name: str
) -> None:
    script(referee, name)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=TWO_ASSISTANTS)
    assert raw.parse().choices[0].message.content == "referee: accepted 3 messages"
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert raw.headers["x-gateway-attempts"] == "2"
    first, second = (r.json()["messages"] for r in referee.requests)
    assert [m["role"] for m in first] == ["user", "assistant", "assistant", "user"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]  # merged


def wide_png() -> str:
    buf = io.BytesIO()
    Image.linear_gradient("L").resize((1200, 300)).convert("RGB").save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def image_side(body: dict[str, object]) -> int:
    messages = body["messages"]
    assert isinstance(messages, list)
    url = messages[0]["content"][1]["image_url"]["url"]
    img = Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2])))
    return max(img.size)


# (llamacpp-no-mmproj, a model without images, is stripped at once: test_e2e_heldout_3.)
@pytest.mark.parametrize("name", ["openrouter-one-image-per-prompt",
                                  "nginx-413-html-with-images"])
async def test_media_refusal_degrades_the_image(
    gw: RunningGateway, referee: Referee, name: str
) -> None:
    script(referee, name)
    messages = [user([{"type": "text", "text": "what is this?"},
                      {"type": "image_url", "image_url": {"url": wide_png()}}])]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=messages)
    assert raw.parse().choices[0].message.content == "referee: accepted 1 messages"
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    first, second = (r.json() for r in referee.requests)
    assert image_side(first) == 1200
    assert image_side(second) <= 256


def agent_history(turns: int) -> list[dict[str, object]]:
    history: list[dict[str, object]] = []
    for i in range(turns):
        body = "\n".join(f"def handler_{i}_{n}(x):  # line {n}\n    return x * {n}"
                         for n in range(40))
        history += [user(f"Step {i}: read module_{i}.py"),
                    assistant(None, [tool_call(f"call_{i}", "read_file",
                                               {"path": f"module_{i}.py"})]),
                    tool(f"call_{i}", body)]
    return [*history, user("What does handler_5_3 do?")]


async def test_a_500_context_overflow_is_compacted_not_retried(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url, max_input_tokens=100_000)
    script(referee, "llamacpp-500-context-size")
    history = agent_history(6)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=history)
    assert raw.parse().choices[0].message.content.startswith("referee: accepted")
    assert raw.headers["x-gateway-recovery"] == "compact"
    final = referee.requests[-1].json()["messages"]
    assert referee.requests[-1].status == 200
    assert len(final) < len(history)  # the compacted history, not the same one again


async def test_bedrock_stream_error_is_retried_unchanged(
    gw: RunningGateway, referee: Referee
) -> None:
    script(referee, "bedrock-model-stream-error")
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=[user("hi")])
    assert raw.parse().choices[0].message.content == "referee: accepted 1 messages"
    assert raw.headers["x-gateway-recovery"] == "retry"
    assert [r.status for r in referee.requests] == [424, 200]
    assert referee.requests[0].body == referee.requests[1].body


async def test_a_reset_longer_than_the_wait_bound_is_not_waited_for(
    gw: RunningGateway, referee: Referee
) -> None:
    # No Retry-After; the used-up token limit resets in six minutes (over max_retry_after):
    # the client gets the 429 at once instead of three blind retries.
    body = ('{"error":{"message":"Rate limit reached for gpt-4.1 in organization org-x on '
            'tokens per min (TPM): Limit 30000, Used 30000, Requested 12.","type":"tokens",'
            '"param":null,"code":"rate_limit_exceeded"}}')
    referee.script(429, body, {
        "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6m0s"})
    async with client(gw) as c:
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    response = info.value.response
    assert response.headers["x-gateway-attempts"] == "1"
    assert "exceeds" in response.json()["gateway"]["gave_up"]
    assert len(referee.requests) == 1


@pytest.mark.parametrize(("name", "error"), [
    ("groq-max-tokens-over-limit", openai.BadRequestError),
    ("cohere-trial-per-month", openai.RateLimitError),
    ("vllm-max-tokens-over-window", openai.BadRequestError),
    ("nginx-400-html-header-too-large", openai.BadRequestError),
])
async def test_a_refusal_no_rung_fixes_is_relayed_at_once(
    gw: RunningGateway, referee: Referee, name: str, error: type[openai.APIStatusError]
) -> None:
    script(referee, name)
    async with client(gw) as c:
        with pytest.raises(error) as info:
            await c.chat.completions.create(model="demo", messages=agent_history(2),
                                            max_tokens=64000)
    response = info.value.response
    assert response.status_code == BODY[name][0]
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-gateway-attempts"] == "1"
    got = response.json()
    assert got["gateway"]["gave_up"].startswith("fatal:")
    assert isinstance(got["error"]["message"], str) and got["error"]["message"]
    assert len(referee.requests) == 1  # never retried, never repaired
