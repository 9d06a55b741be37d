"""LiteLLM's tag-based routing (``router_settings.enable_tag_filtering``): a request's tags
(``metadata.tags``, a top-level ``tags``, the ``x-litellm-tags`` header) choose among a
group's deployments by their ``litellm_params.tags``; untagged requests go to the
``default``-tagged ones. Real gateways on 127.0.0.1, real upstreams, the real SDKs; the
tags never reach a provider."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from gateway.config import ConfigError, parse_config
from gateway.router.selection import Deployment, tagged
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.openai_fleet import FleetUpstream
from tests.fakes.three_wires import ThreeWires

KEY = "sk-tags-master-0001"
HI = [{"role": "user", "content": "hi"}]


def dep(name: str, *tags: str) -> Deployment:
    return Deployment(id=name, group="g", tags=tags or None)


EU, US, BOTH, DEFAULT, PLAIN = (dep("eu", "eu"), dep("us", "us"), dep("both", "eu", "us"),
                                dep("default", "default"), dep("plain"))


@pytest.mark.parametrize(("request_tags", "match_any", "chosen"), [
    (("eu",), True, ["eu", "both"]),
    (("eu", "us"), True, ["eu", "us", "both"]),
    (("eu", "us"), False, ["both"]),  # every tag of the request
    (("apac",), True, ["default"]),  # no match: the default deployments
    ((), True, ["default"]),  # untagged: the default deployments
])
def test_tags_choose_as_litellm_does(request_tags: tuple[str, ...], match_any: bool,
                                     chosen: list[str]) -> None:
    group = [EU, US, BOTH, DEFAULT, PLAIN]
    assert [d.id for d in tagged(group, request_tags, match_any)] == chosen


def test_without_defaults_untagged_requests_use_every_deployment_and_others_none() -> None:
    group = [EU, US, PLAIN]
    assert [d.id for d in tagged(group, ())] == ["eu", "us", "plain"]
    assert tagged(group, ("apac",)) == []  # a deployment without tags never matches a tag


def test_the_setting_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match=r"router_settings\.enable_tag_filtering"):
        parse_config({"model_list": [], "router_settings": {"enable_tag_filtering": "maybe"}})


class RecordingWires(ThreeWires):
    """The three-wire upstream, keeping every body it received."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    async def _answer(self, request: web.Request, whole: dict[str, Any],
                      events: list[bytes]) -> web.StreamResponse:
        self.bodies.append(orjson.loads(await request.read()))
        return await super()._answer(request, whole, events)


@pytest.fixture
async def regions() -> AsyncIterator[tuple[FleetUpstream, FleetUpstream]]:
    async with FleetUpstream("eu") as eu, FleetUpstream("us") as us:
        yield eu, us


def chat_entry(name: str, upstream: FleetUpstream, *tags: str) -> dict[str, Any]:
    return {"model_name": name, "litellm_params": {
        "model": "openai/gpt-4o", "api_base": upstream.v1, "api_key": "k-upstream-1",
        "tags": list(tags)}}


async def tagged_gateway(factory: GatewayFactory, eu: FleetUpstream, us: FleetUpstream,
                         **router: Any) -> RunningGateway:
    return await factory({
        "model_list": [chat_entry("gpt-4o", eu, "eu"), chat_entry("gpt-4o", us, "us", "default"),
                       chat_entry("eu-only", eu, "eu")],
        "router_settings": {"enable_tag_filtering": True, **router},
        "general_settings": {"master_key": KEY}})


def client(gw: RunningGateway, **headers: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0,
                              default_headers=headers or None)


async def answer(c: openai.AsyncOpenAI, model: str = "gpt-4o", **extra: Any) -> str:
    done = await c.chat.completions.create(model=model, messages=HI,  # type: ignore[arg-type]
                                           **extra)
    return done.choices[0].message.content or ""


async def test_each_way_of_tagging_a_chat_request_routes_it(
        gateway_factory: GatewayFactory, regions: tuple[FleetUpstream, FleetUpstream]) -> None:
    eu, us = regions
    gw = await tagged_gateway(gateway_factory, eu, us)
    async with client(gw) as c:
        for _ in range(3):  # not a lucky shuffle
            assert await answer(c, extra_body={"metadata": {"tags": ["eu"], "run": "7"}}) \
                == "from eu: gpt-4o"
        assert await answer(c, extra_body={"tags": ["eu"]}) == "from eu: gpt-4o"
        assert await answer(c) == "from us: gpt-4o"  # untagged: the default deployment
        assert await answer(c, extra_body={"tags": ["apac"]}) == "from us: gpt-4o"
    async with client(gw, **{"x-litellm-tags": "eu, batch"}) as c:
        assert await answer(c) == "from eu: gpt-4o"
    # The tags were the router's: the provider got the client's other metadata only.
    sent = [r.body for r in eu.requests]
    assert all("tags" not in body for body in sent)
    assert sent[0]["metadata"] == {"run": "7"}


async def test_a_group_the_tags_leave_empty_is_a_400_before_any_upstream_call(
        gateway_factory: GatewayFactory, regions: tuple[FleetUpstream, FleetUpstream]) -> None:
    eu, us = regions
    gw = await tagged_gateway(gateway_factory, eu, us)
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await answer(c, "eu-only", extra_body={"metadata": {"tags": ["us"]}})
    assert info.value.code == "no_deployments_with_tag_routing"
    assert "tags=['us']" in info.value.message
    assert eu.hits == us.hits == 0


async def test_match_all_needs_every_tag(gateway_factory: GatewayFactory,
                                         regions: tuple[FleetUpstream, FleetUpstream]) -> None:
    eu, us = regions
    gw = await tagged_gateway(gateway_factory, eu, us, tag_filtering_match_any=False)
    async with client(gw) as c:
        # "eu" alone matches the eu deployment; "eu"+"gpu" matches none: the default serves.
        assert await answer(c, extra_body={"tags": ["eu"]}) == "from eu: gpt-4o"
        assert await answer(c, extra_body={"tags": ["eu", "gpu"]}) == "from us: gpt-4o"


async def test_without_enable_tag_filtering_tags_choose_nothing_and_still_never_go_upstream(
        gateway_factory: GatewayFactory, regions: tuple[FleetUpstream, FleetUpstream]) -> None:
    eu, _us = regions
    gw = await gateway_factory({
        "model_list": [chat_entry("eu-only", eu, "eu")],
        "general_settings": {"master_key": KEY}})
    async with client(gw) as c:
        assert await answer(c, "eu-only", extra_body={"metadata": {"tags": ["us"]}}) \
            == "from eu: gpt-4o"
    assert "metadata" not in eu.requests[0].body


@pytest.fixture
async def native() -> AsyncIterator[tuple[RecordingWires, RecordingWires]]:
    first, second = RecordingWires(), RecordingWires()
    async with first, second:
        yield first, second


async def test_tags_route_native_responses_and_messages_requests_too(
        gateway_factory: GatewayFactory,
        native: tuple[RecordingWires, RecordingWires]) -> None:
    eu, us = native

    def entries(name: str, model: str, info: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"model_name": name, "model_info": info, "litellm_params": {
            "model": model, "api_base": up.base_url, "api_key": "k-upstream-1", "tags": tags}}
            for up, tags in ((eu, ["eu"]), (us, ["us", "default"]))]

    gw = await gateway_factory({
        "model_list": [*entries("claude", "anthropic/claude", {}),
                       *entries("resp", "openai/resp", {"responses_api": True})],
        "router_settings": {"enable_tag_filtering": True},
        "general_settings": {"master_key": KEY}})
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY, max_retries=0) as a:
        await a.messages.create(model="claude", max_tokens=8, messages=HI,  # type: ignore[call-overload]
                                metadata={"user_id": "u-1"},
                                extra_body={"tags": ["eu"]})
    async with client(gw, **{"x-litellm-tags": "eu"}) as c:
        await c.responses.create(model="resp", input="hi", metadata={"run": "7"})
    assert [b["model"] for b in eu.bodies] == ["claude", "resp"]
    assert us.bodies == []
    assert eu.bodies[0]["metadata"] == {"user_id": "u-1"} and "tags" not in eu.bodies[0]
    assert eu.bodies[1]["metadata"] == {"run": "7"}


async def test_count_tokens_is_counted_where_the_tags_send_the_call(
        gateway_factory: GatewayFactory) -> None:
    """``/v1/messages/count_tokens`` asks the deployment the request's tags choose, and the
    LiteLLM-only fields (tags, ``metadata.tags``) never reach it."""
    from tests.fakes.anthropic_server import FakeAnthropic

    eu, us = FakeAnthropic(), FakeAnthropic()
    async with eu, us:
        gw = await gateway_factory({
            "model_list": [{"model_name": "claude", "litellm_params": {
                "model": "anthropic/claude-x", "api_base": up.base_url, "api_key": "k-1",
                "tags": tags}} for up, tags in ((us, ["us", "default"]), (eu, ["eu"]))],
            "router_settings": {"enable_tag_filtering": True},
            "general_settings": {"master_key": KEY}})
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY,
                                            max_retries=0) as a:
            counted = await a.messages.count_tokens(
                model="claude", messages=HI,  # type: ignore[arg-type]
                extra_body={"tags": ["eu"]})
            await a.messages.count_tokens(model="claude", messages=HI,  # type: ignore[arg-type]
                                          extra_headers={"x-litellm-tags": "eu"})
        assert counted.input_tokens > 0
        assert [r.path for r in eu.requests] == ["/v1/messages/count_tokens"] * 2
        assert us.requests == []
        assert all("tags" not in r.body for r in eu.requests)
