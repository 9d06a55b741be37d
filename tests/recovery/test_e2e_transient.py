"""Ladder step 5 end to end: transient refusals are retried within bounds, and what must not
be retried is not (SPEC §3)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

from gateway.referee import Referee, bodies
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import user
from tests.recovery.e2e_support import attempt_spans, client, span_summary, start_gateway


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict", style="openai") as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await start_gateway(gateway_factory, referee.base_url)


REFUSALS = {
    "429 rate limit, Retry-After 0": bodies.rate_limited("openai", retry_after=0),
    "429 rate limit, Retry-After 1": bodies.rate_limited("openai", retry_after=1),
    "503 overloaded, Retry-After 0": bodies.overloaded("openai", retry_after=0),
    "529 anthropic overloaded": bodies.overloaded("anthropic", retry_after=0),
    "500 without Retry-After (backoff)": bodies.server_error("openai"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
async def test_transient_refusal_is_retried_and_succeeds(
    gw: RunningGateway, referee: Referee, case: str
) -> None:
    referee.script(REFUSALS[case])
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=[user("hi")])
    assert raw.parse().choices[0].message.content == "referee: accepted 1 messages"
    assert raw.headers["x-gateway-attempts"] == "2"
    assert raw.headers["x-gateway-recovery"] == "retry"
    assert [r.status for r in referee.requests] == [REFUSALS[case].status, 200]
    assert referee.requests[0].body == referee.requests[1].body  # a retry resends as is
    spans = [span_summary(s) for s in attempt_spans(gw)]
    assert [(s["step"], s["status"], s["verdict"], s["error"]) for s in spans] == [
        ("initial", REFUSALS[case].status, "transient", True), ("retry", 200, None, False)]


async def test_dropped_connection_is_retried(gw: RunningGateway, referee: Referee) -> None:
    referee.script_disconnect()
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=[user("hi")])
    assert raw.headers["x-gateway-recovery"] == "retry"
    assert len(referee.requests) == 2


async def test_several_transient_refusals_in_a_row(gw: RunningGateway,
                                                   referee: Referee) -> None:
    referee.script(bodies.overloaded("openai", retry_after=0))
    referee.script(bodies.rate_limited("openai", retry_after=0))
    referee.script(bodies.server_error("openai"))
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=[user("hi")])
    assert raw.headers["x-gateway-attempts"] == "4"
    assert raw.headers["x-gateway-recovery"] == "retry,retry,retry"


async def test_insufficient_quota_is_not_retried(gw: RunningGateway, referee: Referee) -> None:
    referee.script(bodies.insufficient_quota())
    async with client(gw) as c:
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    assert len(referee.requests) == 1
    response = info.value.response
    assert response.status_code == 429
    assert response.headers["x-gateway-attempts"] == "1"
    got = response.json()
    assert got["error"]["code"] == "insufficient_quota"
    assert got["error"]["message"].startswith("You exceeded your current quota")
    assert [a["verdict"] for a in got["gateway"]["attempts"]] == ["fatal"]


async def test_x_should_retry_false_is_honoured(gw: RunningGateway, referee: Referee) -> None:
    referee.script(503, bodies.overloaded("openai").body,
                   {"x-should-retry": "false", "Retry-After": "0"})
    async with client(gw) as c:
        with pytest.raises(openai.InternalServerError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    assert info.value.status_code == 503
    assert len(referee.requests) == 1


async def test_retries_are_bounded_by_count(gateway_factory: GatewayFactory,
                                            referee: Referee) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url,
                             recovery={"max_transient_retries": 2})
    referee.script(bodies.overloaded("openai", retry_after=0), times=5)
    async with client(gw) as c:
        with pytest.raises(openai.InternalServerError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    assert len(referee.requests) == 3
    response = info.value.response
    assert response.status_code == 503
    assert response.headers["x-gateway-attempts"] == "3"
    assert response.headers["x-gateway-recovery"] == "retry,retry"
    got = response.json()
    assert got["error"]["message"].startswith("That model is currently overloaded")
    assert [a["verdict"] for a in got["gateway"]["attempts"]] == ["transient"] * 3
    assert got["gateway"]["gave_up"] == "transient: 2 retries used"


async def test_retry_after_past_the_deadline_is_not_waited_for(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    """A Retry-After that would end past the deadline: give up now, with the hint relayed."""
    gw = await start_gateway(gateway_factory, referee.base_url, recovery={"deadline": 0.5})
    referee.script(bodies.rate_limited("openai", retry_after=1))
    async with client(gw) as c:
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    assert len(referee.requests) == 1
    response = info.value.response
    assert response.headers["retry-after"] == "1"
    assert response.json()["gateway"]["gave_up"].startswith("deadline:")


async def test_retry_after_over_the_cap_is_not_waited_for(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url,
                             recovery={"max_retry_after": 0.5})
    referee.script(bodies.rate_limited("openai", retry_after=1))
    async with client(gw) as c:
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    assert len(referee.requests) == 1
    assert "exceeds" in info.value.response.json()["gateway"]["gave_up"]


async def test_retries_disabled_per_model(gateway_factory: GatewayFactory,
                                          referee: Referee) -> None:
    """``model_info.recovery`` replaces the global ``recovery:`` section for that model."""
    gw = await start_gateway(
        gateway_factory, referee.base_url,
        extra_models=[model_entry("no-retry", referee.base_url, model="openai/referee",
                                  recovery={"max_transient_retries": 0})],
    )
    referee.script(bodies.overloaded("openai", retry_after=0))
    async with client(gw) as c:
        with pytest.raises(openai.InternalServerError):
            await c.chat.completions.create(model="no-retry", messages=[user("hi")])
        assert len(referee.requests) == 1
        referee.script(bodies.overloaded("openai", retry_after=0))
        await c.chat.completions.create(model="demo", messages=[user("hi")])
    assert len(referee.requests) == 3


async def test_model_info_recovery_overrides_only_the_keys_it_names(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    """A model that only turns ``strict`` off still has the global ``max_retry_after``."""
    gw = await start_gateway(
        gateway_factory, referee.base_url, recovery={"max_retry_after": 0.5},
        extra_models=[model_entry("other", referee.base_url, model="openai/referee",
                                  recovery={"strict": False})],
    )
    referee.script(bodies.rate_limited("openai", retry_after=1))
    async with client(gw) as c:
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="other", messages=[user("hi")])
    assert len(referee.requests) == 1
    assert "exceeds 0.5s" in info.value.response.json()["gateway"]["gave_up"]
