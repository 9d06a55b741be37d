"""``GET /metrics`` counts requests, repairs, attempts, ladder steps, latency and tokens."""

from __future__ import annotations

import openai
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.referee import Referee
from gateway.telemetry.metrics import Metrics
from tests.conftest import GatewayFactory, gateway_state, model_entry
from tests.factories import assistant, calls, tool, user
from tests.telemetry.promtext import scrape


async def test_metrics_count_what_the_gateway_did(gateway_factory: GatewayFactory) -> None:
    async with Referee(rules="strict") as ref:
        gw = await gateway_factory({"model_list": [model_entry("demo", ref.base_url)]})
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
            await c.chat.completions.create(model="demo", messages=[user("a"), tool("ghost")])
            # A leading assistant message: refused by the strict referee, fixed by strict.
            await c.chat.completions.create(model="demo",
                                            messages=[assistant("hello"), user("b")])
        m = await scrape(gw.root)
    assert m.total("gateway_requests_total", model="demo", status="200", wire="chat") == 2
    assert {s["deployment"] for s in m.series("gateway_requests_total")} == {
        "openai/demo-upstream"}
    assert m.total("gateway_repairs_total", kind="orphan_tool_result_dropped") == 1
    assert m.total("gateway_repairs_total", kind="leading_non_user_dropped") == 1
    assert m.total("gateway_recovery_steps_total", step="strict") == 1
    assert m.total("gateway_upstream_attempts_total", model="demo", step="initial",
                   outcome="structural") == 1
    assert m.total("gateway_upstream_attempts_total", model="demo", step="strict",
                   outcome="ok") == 1
    assert m.total("gateway_upstream_attempts_total", model="demo", outcome="ok") == 2
    # Latency histograms: one observation per request, the gateway's share below the whole.
    assert m.total("gateway_request_duration_seconds_count", model="demo") == 2
    assert m.total("gateway_added_latency_seconds_count", model="demo") == 2
    assert m.total("gateway_upstream_ttfb_seconds_count", model="demo") == 2
    assert 0 < m.total("gateway_added_latency_seconds_sum") < m.total(
        "gateway_request_duration_seconds_sum")
    # The referee reports usage: tokens are counted in and out.
    assert m.total("gateway_tokens_total", model="demo", direction="input") > 0
    assert m.total("gateway_tokens_total", model="demo", direction="output") > 0
    assert m.total("gateway_in_flight_requests") == 1  # the scrape itself


async def test_trailing_synthesized_results_are_counted_apart(
    gateway_factory: GatewayFactory,
) -> None:
    async with Referee(rules="openai") as ref:
        gw = await gateway_factory({"model_list": [model_entry("demo", ref.base_url)]})
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
            # A call at the very end of the history: its result is synthesized (trailing).
            await c.chat.completions.create(model="demo", messages=[user("a"), calls("c1")])
            # A call in the middle whose result was lost: synthesized, not trailing.
            await c.chat.completions.create(
                model="demo", messages=[user("a"), calls("c2"), user("b")])
        m = await scrape(gw.root)
    assert m.total("gateway_repairs_total", kind="tool_result_synthesized_trailing") == 1
    assert m.total("gateway_repairs_total", kind="tool_result_synthesized") == 1


async def test_streamed_usage_is_counted(gateway_factory: GatewayFactory) -> None:
    async with Referee(rules="openai") as ref:
        gw = await gateway_factory({"model_list": [model_entry("demo", ref.base_url)]})
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
            stream = await c.chat.completions.create(
                model="demo", messages=[user("count my tokens please")], stream=True,
                stream_options={"include_usage": True})
            usage = None
            async for chunk in stream:
                usage = chunk.usage or usage
        assert usage is not None
        m = await scrape(gw.root)
    assert m.total("gateway_tokens_total", direction="input") == usage.prompt_tokens
    assert m.total("gateway_tokens_total", direction="output") == usage.completion_tokens
    assert m.total("gateway_open_streams") == 0


async def test_router_and_breaker_state_gauges(gateway_factory: GatewayFactory) -> None:
    async with Referee(rules="openai") as ref:
        gw = await gateway_factory({"model_list": [model_entry("demo", ref.base_url)]})
        metrics = gateway_state(gw).telemetry.metrics
        metrics.set_deployment_cooldown("demo", "openai/demo-upstream", True)
        metrics.set_circuit_state("demo", "openai/demo-upstream", "open")
        m = await scrape(gw.root)
        assert m.total("gateway_deployment_cooldown", deployment="openai/demo-upstream") == 1
        assert m.total("gateway_deployment_circuit_state", model="demo") == 2
        metrics.set_deployment_cooldown("demo", "openai/demo-upstream", False)
        metrics.set_circuit_state("demo", "openai/demo-upstream", "half_open")
        m = await scrape(gw.root)
    assert m.total("gateway_deployment_cooldown", deployment="openai/demo-upstream") == 0
    assert m.total("gateway_deployment_circuit_state", model="demo") == 1


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(
    st.floats(min_value=0, max_value=1e7, allow_nan=False),
    st.sampled_from([0.0, 0.005, 0.01, 2.5, 120.0, 300.0, 1_000_000.0])), max_size=40))
def test_a_scrape_shows_what_each_update_would_have(values: list[float]) -> None:
    # The request path adds its updates up and writes them at a scrape: the histogram's
    # buckets, sum and count, and a counter, must be what observing one by one gives.
    added_up, one_by_one = Metrics(), Metrics()
    for metrics in (added_up, one_by_one):
        duration = metrics._child("gateway_request_duration_seconds", "m", "d", "200", "chat")
        tokens = metrics._child("gateway_context_tokens", "m", "tools")
        requests = metrics._child("gateway_requests_total", "m", "d", "200", "chat")
        for value in values:
            if metrics is added_up:
                metrics._tally.observe(duration, value)
                metrics._tally.observe(tokens, value)
                metrics._tally.inc(requests, value)
            else:
                duration.observe(value)
                tokens.observe(value)
                requests.inc(value)
    assert added_up.render() == one_by_one.render()
    assert added_up._tally.counts == {} and added_up._tally.observed == {}
