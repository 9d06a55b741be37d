"""LiteLLM's narrowing ``general_settings`` (``allowed_ips``, ``allowed_routes``,
``enforce_user_param``, ``enforced_params``, ``global_max_parallel_requests``) run unchanged
and are enforced: on a real gateway on 127.0.0.1, through the real ``openai`` and
``anthropic`` SDKs, each refusal in the client's own wire format and before any upstream
call; health probes stay open."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from gateway.access import AccessRules
from gateway.config import ConfigError, load_config, parse_config
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.three_wires import ThreeWires, wire_models

KEY = "sk-access-master-0001"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def upstream() -> AsyncIterator[ThreeWires]:
    async with ThreeWires() as up:
        yield up


async def serve(factory: GatewayFactory, upstream: ThreeWires,
                **general: Any) -> RunningGateway:
    return await factory({"model_list": wire_models(upstream.base_url),
                          "general_settings": {"master_key": KEY, **general}})


def oa(gw: RunningGateway, base: str | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base or gw.base_url, api_key=KEY, max_retries=0)


def an(gw: RunningGateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY, max_retries=0)


async def get(gw: RunningGateway, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(
            gw.root + path, headers={"Authorization": f"Bearer {KEY}"}) as r:
        return r.status, await r.json(content_type=None)


# --- the rules themselves ----------------------------------------------------------------

def test_routes_match_exactly_with_or_without_v1_and_one_segment_per_placeholder() -> None:
    rules = AccessRules(allowed_routes=(
        "chat/completions", "LiteLLMRoutes.info_routes",
        "/openai/deployments/{model}/chat/completions"))
    allowed = ["/chat/completions", "/v1/chat/completions", "/v1/models", "/models/gpt-4o",
               "/openai/deployments/prod/chat/completions", "/healthz"]
    refused = ["/v1/messages", "/v1/responses", "/metrics", "/ui/", "/v1/chat/completionsx",
               "/openai/deployments/a/b/chat/completions", "/v1/gateway/project"]
    assert [p for p in allowed if not rules.route_allowed(p)] == []
    assert [p for p in refused if rules.route_allowed(p)] == []


def test_addresses_match_exactly_or_by_network() -> None:
    rules = AccessRules(allowed_ips=("10.20.0.0/16", "192.168.1.10", "::1"))
    assert all(rules.address_allowed(a) for a in
               ("10.20.3.4", "192.168.1.10", "::1", "::ffff:10.20.0.9"))
    assert not any(rules.address_allowed(a) for a in
                   ("10.21.0.1", "192.168.1.11", "127.0.0.1", None, "", "not-an-ip"))


def test_required_fields_are_named_as_litellm_names_them() -> None:
    rules = AccessRules(enforce_user_param=True,
                        enforced_params=("metadata.generation_name", "metadata"))
    assert rules.missing_text({}) == (
        "user", "'user' param not passed in. 'enforce_user_param'=True")
    missing = rules.missing_text({"user": "u", "metadata": {"other": 1}})
    assert missing is not None and missing[0] == "metadata.generation_name"
    assert "param=[metadata][generation_name] in request body" in missing[1]
    assert rules.missing_text({"user": "u", "metadata": "text"}) is not None
    assert rules.missing_text({"user": "u", "metadata": {"generation_name": "g"}}) is None


def test_openai_routes_expose_a_clients_stored_responses() -> None:
    rules = AccessRules(allowed_routes=("openai_routes",))
    allowed = ["/v1/responses/resp_1", "/responses/resp_1", "/v1/responses/resp_1/cancel",
               "/v1/responses/resp_1/input_items", "/v1/responses"]
    assert [p for p in allowed if not rules.route_allowed(p)] == []
    assert not AccessRules(allowed_routes=("info_routes",)).route_allowed(
        "/v1/responses/resp_1")


@pytest.mark.parametrize(("general", "path"), [
    ({"allowed_ips": ["10.0.0.300"]}, "general_settings.allowed_ips[0]"),
    ({"allowed_ips": "10.0.0.1"}, "general_settings.allowed_ips: must be a list"),
    ({"allowed_routes": ["spend_routes_that_do_not_exist"]},
     "general_settings.allowed_routes[0]"),
    ({"enforced_params": ["metadata..name"]}, "general_settings.enforced_params"),
    ({"enforce_user_param": "sometimes"}, "general_settings.enforce_user_param"),
    ({"global_max_parallel_requests": "lots"},
     "general_settings.global_max_parallel_requests"),
])
def test_a_wrong_value_stops_start_up_naming_the_key(general: dict[str, Any],
                                                     path: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"model_list": wire_models("http://127.0.0.1:9/v1"),
                      "general_settings": {"master_key": KEY, **general}})
    assert path in str(info.value)


def test_check_config_shows_the_rules_and_no_ignored_warning(
        tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "model_list:\n  - model_name: m\n    litellm_params: {model: openai/m, "
        "api_base: 'http://127.0.0.1:9/v1', api_key: k}\n"
        "general_settings:\n  master_key: sk-x-000000001\n  allowed_ips: [10.0.0.0/8]\n"
        "  allowed_routes: [/chat/completions]\n  enforce_user_param: true\n"
        "  global_max_parallel_requests: 4\n")
    with caplog.at_level("WARNING", logger="gateway.config"):
        config = load_config(path)
    assert "allowed_ips" not in caplog.text and "enforce_user_param" not in caplog.text
    described = config.router.describe()["general_settings"]
    assert described["allowed_ips"] == ["10.0.0.0/8"]
    assert described["global_max_parallel_requests"] == 4


# --- enforced end to end -----------------------------------------------------------------

async def test_an_address_outside_allowed_ips_gets_403_in_each_wire_and_no_upstream_call(
        gateway_factory: GatewayFactory, upstream: ThreeWires) -> None:
    gw = await serve(gateway_factory, upstream, allowed_ips=["10.20.0.0/16", "192.168.1.10"])
    async with oa(gw) as c:
        with pytest.raises(openai.PermissionDeniedError) as info:
            await c.chat.completions.create(model="chat", messages=HI)  # type: ignore[arg-type]
    assert info.value.code == "ip_not_allowed"
    assert "IP address 127.0.0.1 not allowed" in info.value.message
    async with an(gw) as a:
        with pytest.raises(anthropic.PermissionDeniedError) as refused:
            await a.messages.create(model="claude", max_tokens=8,
                                    messages=HI)  # type: ignore[arg-type]
    assert refused.value.body["type"] == "error"  # type: ignore[index]
    assert "not allowed" in refused.value.message
    assert (await get(gw, "/healthz"))[0] == 200  # probes stay open
    assert (await get(gw, "/v1/models"))[0] == 403
    assert upstream.hits == 0


async def test_loopback_inside_allowed_ips_is_served(gateway_factory: GatewayFactory,
                                                     upstream: ThreeWires) -> None:
    gw = await serve(gateway_factory, upstream, allowed_ips=["10.0.0.1", "127.0.0.0/8"])
    async with oa(gw) as c:
        answer = await c.chat.completions.create(model="chat",
                                                 messages=HI)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == "hello there"


async def test_allowed_routes_expose_only_what_they_name(gateway_factory: GatewayFactory,
                                                         upstream: ThreeWires) -> None:
    gw = await serve(gateway_factory, upstream,
                     allowed_routes=["/chat/completions", "LiteLLMRoutes.info_routes"])
    # The SDK with /v1 in its base URL and without: the same endpoint, both served.
    for base in (gw.base_url, gw.root):
        async with oa(gw, base) as c:
            answer = await c.chat.completions.create(model="chat",
                                                     messages=HI)  # type: ignore[arg-type]
            assert answer.choices[0].message.content == "hello there"
            assert {m.id async for m in c.models.list()} >= {"chat", "claude", "resp"}
    async with oa(gw) as c:
        with pytest.raises(openai.PermissionDeniedError) as info:
            await c.responses.create(model="resp", input="hi")
    assert info.value.code == "route_not_allowed"
    async with an(gw) as a:
        with pytest.raises(anthropic.PermissionDeniedError) as refused:
            await a.messages.create(model="claude", max_tokens=8,
                                    messages=HI)  # type: ignore[arg-type]
    assert "Route /v1/messages is not allowed" in refused.value.message
    status, body = await get(gw, "/metrics")
    assert status == 403 and body["error"]["code"] == "route_not_allowed"
    assert upstream.hits == 2


async def test_enforce_user_param_refuses_a_model_request_without_user_on_every_wire(
        gateway_factory: GatewayFactory, upstream: ThreeWires) -> None:
    gw = await serve(gateway_factory, upstream, enforce_user_param=True)
    async with oa(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="chat", messages=HI)  # type: ignore[arg-type]
        assert "'user' param not passed in. 'enforce_user_param'=True" in info.value.message
        assert info.value.param == "user"
        with pytest.raises(openai.BadRequestError):
            await c.responses.create(model="resp", input="hi")
        answer = await c.chat.completions.create(model="chat", messages=HI,  # type: ignore[arg-type]
                                                 user="end-user-7")
        assert answer.choices[0].message.content == "hello there"
        stream = await c.responses.create(model="resp", input="hi", user="end-user-7",
                                          stream=True)
        kinds = [event.type async for event in stream]
        assert kinds[-1] == "response.completed"
    async with an(gw) as a:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await a.messages.create(model="claude", max_tokens=8,
                                    messages=HI)  # type: ignore[arg-type]
    assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert upstream.hits == 2


async def test_enforced_params_name_the_nested_field_missing(
        gateway_factory: GatewayFactory, upstream: ThreeWires) -> None:
    gw = await serve(gateway_factory, upstream,
                     enforced_params=["user", "metadata.generation_name"])
    async with oa(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(
                model="chat", messages=HI, user="u",  # type: ignore[arg-type]
                extra_body={"metadata": {"trace": "x"}})
        assert "param=[metadata][generation_name]" in info.value.message
        answer = await c.chat.completions.create(
            model="chat", messages=HI, user="u",  # type: ignore[arg-type]
            extra_body={"metadata": {"generation_name": "nightly"}})
        assert answer.choices[0].message.content == "hello there"
    assert upstream.hits == 1


async def test_one_model_request_past_global_max_parallel_requests_gets_429(
        gateway_factory: GatewayFactory, upstream: ThreeWires) -> None:
    gw = await serve(gateway_factory, upstream, global_max_parallel_requests=1)
    upstream.hold = asyncio.Event()
    async with oa(gw) as c:
        first = asyncio.create_task(c.chat.completions.create(
            model="chat", messages=HI))  # type: ignore[arg-type]
        await upstream.holding.wait()
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="chat", messages=HI)  # type: ignore[arg-type]
        assert info.value.code == "max_parallel_requests_reached"
        assert info.value.response.headers["retry-after"] == "1"
        assert (await get(gw, "/v1/models"))[0] == 200  # not a model request: not counted
        upstream.hold.set()
        assert (await first).choices[0].message.content == "hello there"
        again = await c.chat.completions.create(model="chat", messages=HI)  # type: ignore[arg-type]
        assert again.choices[0].message.content == "hello there"
    assert upstream.hits == 2


async def test_a_cancelled_request_frees_its_parallel_slot(
        gateway_factory: GatewayFactory, upstream: ThreeWires) -> None:
    gw = await serve(gateway_factory, upstream, global_max_parallel_requests=1)
    upstream.hold = asyncio.Event()
    async with oa(gw) as c:
        first = asyncio.create_task(c.chat.completions.create(
            model="chat", messages=HI))  # type: ignore[arg-type]
        await upstream.holding.wait()
        first.cancel()  # the client hangs up
        await upstream.hung_up.wait()
        upstream.hold = None
        answer = await c.chat.completions.create(model="chat",
                                                 messages=HI)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == "hello there"
