"""A fifth outsider's round of LiteLLM proxy configs: the narrowing ``general_settings``
(``allowed_ips``, ``allowed_routes``, ``enforce_user_param``, ``enforced_params``,
``global_max_parallel_requests``, ``reject_clientside_metadata_tags``), tag-based routing
(``enable_tag_filtering``, ``tag_filtering_match_any``, ``default``-tagged deployments, tags
from ``metadata.tags``, a top-level ``tags`` and the ``x-litellm-tags`` header) and the
per-deployment cap on requests at once, written as teams write whole configs (several
providers, keys from ``os.environ/``, aliases, fallbacks, rpm, callbacks).

Each config is a file loaded as ``gateway serve --config`` loads it (one in its own process)
in front of upstreams on 127.0.0.1 speaking Chat Completions, Responses and Anthropic
Messages; requests come from the real ``openai`` and ``anthropic`` SDKs. Asserted: where each
request lands, each refusal's status, wire format and code, that tags and other LiteLLM-only
fields never reach an upstream, and that no key shows in a log line or an error.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from gateway.config import ConfigError, load_config, load_document
from tests.conftest import GatewayFactory, RunningGateway, free_port, gateway_state
from tests.fakes.openai_fleet import FleetUpstream
from tests.fakes.three_wires import ThreeWires
from tests.http import wait_until_serving
from tests.providers.e2e_litellm import IGNORE_SCHEMA_WARNINGS

pytestmark = IGNORE_SCHEMA_WARNINGS

MASTER = "sk-h5-master-3a9d1e"
EU_KEY = "sk-h5-eu-77c0f2"
US_KEY = "sk-h5-us-1b2e90"
ANTHROPIC_KEY = "sk-ant-h5-5d5d11"
BATCH_KEY = "sk-h5-batch-c4c4c4"
LANGFUSE_SECRET = "sk-lf-h5-secret-9191"
SECRETS = (MASTER, EU_KEY, US_KEY, ANTHROPIC_KEY, BATCH_KEY, LANGFUSE_SECRET)
HI = [{"role": "user", "content": "hi"}]


class Wires(ThreeWires):
    """The three-wire upstream of one region, keeping each body and its path."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.got: list[tuple[str, dict[str, Any]]] = []

    async def _answer(self, request: web.Request, whole: dict[str, Any],
                      events: list[bytes]) -> web.StreamResponse:
        self.got.append((request.path, orjson.loads(await request.read())))
        return await super()._answer(request, whole, events)


@dataclass
class Site:
    """Two regions' three-wire upstreams, a chat-only batch server and the variables the
    configs read set to them."""

    eu: Wires
    us: Wires
    batch: FleetUpstream
    tmp_path: Path
    factory: GatewayFactory
    caplog: pytest.LogCaptureFixture
    clients: list[Any] = field(default_factory=list)

    async def serve(self, text: str) -> RunningGateway:
        """Start a gateway from the config file as ``gateway serve --config`` reads it."""
        path = self.tmp_path / "config.yaml"
        path.write_text(text)
        with self.caplog.at_level(logging.DEBUG, logger="gateway"):
            raw = load_document(path)
            assert isinstance(raw, dict)
            return await self.factory(raw)

    def openai(self, gw: RunningGateway, **headers: str) -> openai.AsyncOpenAI:
        """An openai SDK client on ``gw`` (no SDK retries)."""
        made = openai.AsyncOpenAI(base_url=gw.base_url, api_key=MASTER, max_retries=0,
                                  default_headers=headers or None)
        self.clients.append(made)
        return made

    def claude(self, gw: RunningGateway, **headers: str) -> anthropic.AsyncAnthropic:
        """An anthropic SDK client on ``gw`` (no SDK retries)."""
        made = anthropic.AsyncAnthropic(base_url=gw.root, api_key=MASTER, max_retries=0,
                                        default_headers=headers or None)
        self.clients.append(made)
        return made

    def warnings(self) -> list[str]:
        """Every warning the gateway logged."""
        return [r.getMessage() for r in self.caplog.records if r.levelno >= logging.WARNING]

    def assert_no_secret(self, *texts: str) -> None:
        """No secret in any record the gateway logged, nor in ``texts``."""
        logged = "\n".join(r.getMessage() for r in self.caplog.records)
        for text in (logged, *texts):
            for secret in SECRETS:
                assert secret not in text


@pytest.fixture
async def site(gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
               tmp_path: Path, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Site]:
    async with Wires("eu") as eu, Wires("us") as us, FleetUpstream("batch") as batch:
        for name, value in {"H5_MASTER": MASTER, "EU_BASE": eu.base_url, "EU_KEY": EU_KEY,
                            "US_BASE": us.base_url, "US_KEY": US_KEY,
                            "ANTHROPIC_KEY": ANTHROPIC_KEY, "BATCH_BASE": batch.v1,
                            "BATCH_KEY": BATCH_KEY, "LANGFUSE_SECRET_KEY": LANGFUSE_SECRET,
                            "LITELLM_LOCAL_MODEL_COST_MAP": "True"}.items():
            monkeypatch.setenv(name, value)
        made = Site(eu, us, batch, tmp_path, gateway_factory, caplog)
        yield made
        for client in made.clients:
            await client.close()


def sent(upstream: Wires | FleetUpstream) -> list[dict[str, Any]]:
    """The bodies ``upstream`` received."""
    if isinstance(upstream, Wires):
        return [body for _, body in upstream.got]
    return [r.body for r in upstream.requests]


def assert_no_litellm_fields(*upstreams: Wires | FleetUpstream) -> None:
    """Tags and LiteLLM's own controls reached no upstream."""
    for upstream in upstreams:
        for body in sent(upstream):
            assert not {"tags", "fallbacks", "num_retries", "mock_response"} & body.keys()
            metadata = body.get("metadata")
            assert not isinstance(metadata, dict) or "tags" not in metadata


async def chat(client: openai.AsyncOpenAI, model: str = "gpt-4o", **extra: Any) -> str:
    done = await client.chat.completions.create(model=model, messages=HI,  # type: ignore[arg-type]
                                                **extra)
    return done.choices[0].message.content or ""


# --- 1. Regional tags on three wires --------------------------------------------------------

REGIONS = """
# EU data must stay in the EU: teams tag their requests; untagged traffic goes to the US.
model_list:
  - model_name: claude-sonnet
    litellm_params:
      model: anthropic/claude-sonnet-4-5
      api_base: os.environ/EU_BASE
      api_key: os.environ/ANTHROPIC_KEY
      tags: ["eu"]
      rpm: 400
  - model_name: claude-sonnet
    litellm_params:
      model: anthropic/claude-sonnet-4-5
      api_base: os.environ/US_BASE
      api_key: os.environ/ANTHROPIC_KEY
      tags: ["us", "default"]
      rpm: 400
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EU_BASE
      api_key: os.environ/EU_KEY
      tags: ["eu"]
    model_info: {responses_api: true}
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/US_BASE
      api_key: os.environ/US_KEY
      tags: ["us", "default"]
    model_info: {responses_api: true}
router_settings:
  routing_strategy: simple-shuffle
  enable_tag_filtering: true
  model_group_alias: {"claude-3-7-sonnet": "claude-sonnet"}
  num_retries: 1
litellm_settings:
  success_callback: ["langfuse"]
  fallbacks: [{"claude-sonnet": ["gpt-4o"]}]
general_settings:
  master_key: os.environ/H5_MASTER
"""


async def test_regional_tags_route_each_wire_and_never_reach_the_provider(site: Site) -> None:
    gw = await site.serve(REGIONS)
    # One warning, naming the callback the gateway does not run.
    assert [w for w in site.warnings() if "litellm_settings.success_callback" in w]
    assert len(site.warnings()) == 1
    oai = site.openai(gw)
    for _ in range(3):  # not a lucky shuffle
        await chat(oai, extra_body={"metadata": {"tags": ["eu"], "run": "42"}})
    assert len(site.eu.got) == 3 and not site.us.got
    await chat(oai)  # untagged: the default-tagged deployment
    assert len(site.us.got) == 1
    # The provider got the client's other metadata, not the tags.
    assert site.eu.got[0][1]["metadata"] == {"run": "42"}

    # Anthropic Messages: the header, a top-level tags and metadata.tags beside user_id.
    claude = site.claude(gw, **{"x-litellm-tags": "eu"})
    done = await claude.messages.create(model="claude-sonnet", max_tokens=64, messages=HI)
    assert done.content and site.eu.got[-1][0] == "/v1/messages"
    plain = site.claude(gw)
    await plain.messages.create(model="claude-3-7-sonnet", max_tokens=64, messages=HI,
                                extra_body={"tags": ["eu"]})  # an alias, tag-filtered
    assert site.eu.got[-1][0] == "/v1/messages" and site.eu.got[-1][1]["model"] \
        == "claude-sonnet-4-5"
    await plain.messages.create(model="claude-sonnet", max_tokens=64, messages=HI,
                                metadata={"user_id": "u-7"},
                                extra_body={"metadata": {"user_id": "u-7", "tags": ["eu"]}})
    assert site.eu.got[-1][1]["metadata"] == {"user_id": "u-7"}
    async with plain.messages.stream(model="claude-sonnet", max_tokens=64, messages=HI,
                                     extra_headers={"x-litellm-tags": "us"}) as stream:
        assert await stream.get_final_text()
    assert site.us.got[-1][0] == "/v1/messages" and site.us.got[-1][1]["stream"] is True

    # Responses: a top-level tags and the header.
    eu_before = len(site.eu.got)
    await oai.responses.create(model="gpt-4o", input="hi", extra_body={"tags": ["eu"]})
    await site.openai(gw, **{"x-litellm-tags": "eu"}).responses.create(model="gpt-4o",
                                                                       input="hi")
    assert [p for p, _ in site.eu.got[eu_before:]] == ["/v1/responses"] * 2
    assert_no_litellm_fields(site.eu, site.us)
    site.assert_no_secret()


# --- 2. Tags with a fallback group, a wildcard, and no default -------------------------------

NO_DEFAULT = """
model_list:
  - model_name: eu-gpt
    litellm_params: {model: openai/gpt-4o, api_base: os.environ/EU_BASE,
                     api_key: os.environ/EU_KEY, tags: ["eu"]}
  - model_name: backup
    litellm_params: {model: openai/gpt-4o-mini, api_base: os.environ/US_BASE,
                     api_key: os.environ/US_KEY, tags: ["us", "batch"]}
  - model_name: "openai/*"
    litellm_params: {model: "openai/*", api_base: os.environ/BATCH_BASE,
                     api_key: os.environ/BATCH_KEY, tags: ["batch"]}
router_settings:
  enable_tag_filtering: true
  tag_filtering_match_any: true
  fallbacks: [{"eu-gpt": ["backup"]}]
litellm_settings:
  drop_params: true
general_settings:
  master_key: os.environ/H5_MASTER
"""


async def test_tags_a_group_cannot_serve_move_on_to_its_fallback(site: Site) -> None:
    """LiteLLM's Router runs a group's fallbacks for the error its tag filter raises (the
    fallback group is tag-filtered too), as docs/fleet.md says the gateway does."""
    gw = await site.serve(NO_DEFAULT)
    raw = await site.openai(gw).chat.completions.with_raw_response.create(
        model="eu-gpt", messages=HI, extra_body={"tags": ["us"]})  # type: ignore[arg-type]
    assert raw.headers["x-gateway-model-used"] == "backup"
    assert not site.eu.got and len(site.us.got) == 1


async def test_tags_no_group_of_the_chain_serves_are_refused_in_each_wire(site: Site) -> None:
    gw = await site.serve(NO_DEFAULT)
    oai = site.openai(gw)
    # Tags neither group has: LiteLLM's 400, without an upstream call.
    with pytest.raises(openai.BadRequestError) as refused:
        await chat(oai, "eu-gpt", extra_body={"metadata": {"tags": ["apac"]}})
    assert refused.value.code == "no_deployments_with_tag_routing"
    assert "Not allowed to access model due to tags configuration" in refused.value.message
    assert not site.eu.got and not site.us.got
    # And on the Messages wire, in Anthropic's format.
    with pytest.raises(anthropic.BadRequestError) as messages_refused:
        await site.claude(gw, **{"x-litellm-tags": "apac"}).messages.create(
            model="eu-gpt", max_tokens=32, messages=HI)
    body = messages_refused.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert not site.us.got and not site.batch.requests
    site.assert_no_secret(str(refused.value), str(messages_refused.value))


async def test_a_tagged_wildcard_serves_its_tag_and_untagged_requests(site: Site) -> None:
    gw = await site.serve(NO_DEFAULT)
    oai = site.openai(gw)
    assert await chat(oai, "openai/gpt-4.1-mini", extra_body={"tags": ["batch"]}) \
        == "from batch: gpt-4.1-mini"
    # No deployment is tagged default: an untagged request may use any.
    assert await chat(oai, "openai/gpt-4.1-mini") == "from batch: gpt-4.1-mini"
    with pytest.raises(openai.BadRequestError) as refused:
        await chat(oai, "openai/gpt-4.1-mini", extra_body={"tags": ["eu"]})
    assert refused.value.code == "no_deployments_with_tag_routing"
    assert site.batch.hits == 2
    assert_no_litellm_fields(site.batch)


async def test_match_all_needs_every_tag_of_the_request(site: Site) -> None:
    gw = await site.serve(NO_DEFAULT.replace("tag_filtering_match_any: true",
                                             "tag_filtering_match_any: false"))
    oai = site.openai(gw)
    raw = await oai.chat.completions.with_raw_response.create(
        model="backup", messages=HI, extra_body={"tags": ["us", "batch"]})  # type: ignore
    assert raw.headers["x-gateway-model-used"] == "backup"
    with pytest.raises(openai.BadRequestError):
        await chat(oai, "backup", extra_body={"tags": ["us", "eu"]})  # "eu" it lacks
    assert len(site.us.got) == 1


# --- 3. Access rules: routes, required fields, client-side tags ------------------------------

LOCKED_DOWN = """
model_list:
  - model_name: claude-sonnet
    litellm_params: {model: anthropic/claude-sonnet-4-5, api_base: os.environ/EU_BASE,
                     api_key: os.environ/ANTHROPIC_KEY}
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: os.environ/US_BASE,
                     api_key: os.environ/US_KEY, rpm: 100}
litellm_settings:
  fallbacks: [{"gpt-4o": ["claude-sonnet"]}]
general_settings:
  master_key: os.environ/H5_MASTER
  allowed_ips: ["127.0.0.1", "10.0.0.0/8"]
  # (forgets /v1/models: the model list is not exposed)
  allowed_routes: ["/v1/chat/completions", "LiteLLMRoutes.anthropic_routes"]
  enforce_user_param: true
  enforced_params: ["metadata.generation_name"]
  reject_clientside_metadata_tags: true
"""


async def test_locked_down_routes_and_fields_refuse_in_each_wire(site: Site) -> None:
    gw = await site.serve(LOCKED_DOWN)
    assert not site.warnings()  # every key is honoured
    oai = site.openai(gw)
    with pytest.raises(openai.PermissionDeniedError) as listing:
        await oai.models.list()
    assert listing.value.code == "route_not_allowed"
    with pytest.raises(openai.PermissionDeniedError):
        await oai.responses.create(model="gpt-4o", input="hi")
    with pytest.raises(openai.BadRequestError) as no_user:
        await chat(oai)
    assert "'user' param not passed in" in no_user.value.message
    with pytest.raises(openai.BadRequestError) as no_name:
        await chat(oai, user="alice")
    assert "metadata][generation_name" in no_name.value.message
    assert not site.us.got  # no refusal cost an upstream call
    # Tags chosen by the client are refused as LiteLLM refuses them.
    with pytest.raises(openai.BadRequestError) as tagged:
        await chat(oai, user="alice", metadata={"generation_name": "nightly"},
                   extra_body={"metadata": {"generation_name": "nightly", "tags": ["eu"]}})
    assert "Client-side 'metadata.tags' not allowed" in tagged.value.message
    assert await chat(oai, user="alice", metadata={"generation_name": "nightly"})
    assert site.us.got[-1][1]["user"] == "alice"
    assert site.us.got[-1][1]["metadata"] == {"generation_name": "nightly"}

    # The Messages wire: enforced too, refused in Anthropic's format.
    claude = site.claude(gw)
    with pytest.raises(anthropic.BadRequestError) as messages_no_user:
        await claude.messages.create(model="claude-sonnet", max_tokens=32, messages=HI)
    body = messages_no_user.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert "'user' param not passed in" in body["error"]["message"]
    assert not site.eu.got
    site.assert_no_secret(str(listing.value), str(no_user.value), str(messages_no_user.value))


def test_reject_clientside_metadata_tags_must_be_a_boolean(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("model_list: []\ngeneral_settings:\n  reject_clientside_metadata_tags: "
                    "sometimes\n")
    with pytest.raises(ConfigError, match=r"general_settings\.reject_clientside_metadata_tags"):
        load_config(path)


async def test_allowed_ips_of_ipv6_loopback_alone_refuse_an_ipv4_peer(site: Site) -> None:
    gw = await site.serve(LOCKED_DOWN.replace('["127.0.0.1", "10.0.0.0/8"]', '["::1"]'))
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await chat(site.openai(gw), user="a", metadata={"generation_name": "n"})
    assert refused.value.code == "ip_not_allowed"
    with pytest.raises(anthropic.PermissionDeniedError) as messages_refused:
        await site.claude(gw).messages.create(model="claude-sonnet", max_tokens=8,
                                              messages=HI)
    assert isinstance(messages_refused.value.body, dict)
    assert messages_refused.value.body["type"] == "error"
    async with aiohttp.ClientSession() as http, http.get(gw.root + "/healthz") as health:
        assert health.status == 200  # the probe stays open
    assert not site.us.got and not site.eu.got


async def test_gateway_serve_on_ipv6_loopback_serves_the_allowed_address(
        site: Site, tmp_path: Path) -> None:
    """``gateway serve --config`` in its own process, listening on ``::1`` with
    ``allowed_ips: ["::1"]``: the SDK connecting over IPv6 is served."""
    path = tmp_path / "ipv6.yaml"
    path.write_text(LOCKED_DOWN.replace('["127.0.0.1", "10.0.0.0/8"]', '["::1"]')
                    .replace('["/v1/chat/completions", ', '["/v1/chat/completions", '
                             '"/v1/models", '))
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path),
             "--host", "::1", "--port", str(port)],
            env=dict(os.environ), stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp_path)
    try:
        root = f"http://[::1]:{port}"
        await wait_until_serving(root, lambda: None if proc.poll() is None
                                 else log.read_text()[-3000:])
        async with openai.AsyncOpenAI(base_url=f"{root}/v1", api_key=MASTER,
                                      max_retries=0) as oai:
            assert await chat(oai, user="a", metadata={"generation_name": "n"})
            assert {m.id async for m in oai.models.list()} == {"claude-sonnet", "gpt-4o"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    output = log.read_text()
    assert "Traceback" not in output
    site.assert_no_secret(output)
    assert len(site.us.got) == 1


# --- 4. Requests at once: the global cap and per-deployment caps -----------------------------

GLOBAL_CAP = """
model_list:
  - model_name: claude-sonnet
    litellm_params: {model: anthropic/claude-sonnet-4-5, api_base: os.environ/EU_BASE,
                     api_key: os.environ/ANTHROPIC_KEY}
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: os.environ/US_BASE,
                     api_key: os.environ/US_KEY}
general_settings:
  master_key: os.environ/H5_MASTER
  global_max_parallel_requests: 1
"""


async def test_a_stream_holds_the_global_slot_until_it_ends(site: Site) -> None:
    gw = await site.serve(GLOBAL_CAP)
    site.eu.hold = asyncio.Event()
    claude = site.claude(gw)
    async with claude.messages.stream(model="claude-sonnet", max_tokens=32,
                                      messages=HI) as stream:
        await site.eu.holding.wait()  # the stream's first words are out, the rest pending
        with pytest.raises(openai.RateLimitError) as busy:
            await chat(site.openai(gw))
        assert busy.value.code == "max_parallel_requests_reached"
        assert busy.value.response.headers["retry-after"] == "1"
        with pytest.raises(anthropic.RateLimitError) as messages_busy:
            await claude.messages.create(model="claude-sonnet", max_tokens=8, messages=HI)
        assert isinstance(messages_busy.value.body, dict)
        assert messages_busy.value.body["error"]["type"] == "rate_limit_error"
        site.eu.hold.set()
        assert await stream.get_final_text()
    assert await chat(site.openai(gw))  # the slot came back with the stream's end
    assert len(site.us.got) == 1 and len(site.eu.got) == 1


PAIR_CAPPED = """
model_list:
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: os.environ/EU_BASE,
                     api_key: os.environ/EU_KEY, max_parallel_requests: 1, order: 1}
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: os.environ/US_BASE,
                     api_key: os.environ/US_KEY, order: 2}
router_settings:
  default_max_parallel_requests: 1
general_settings:
  master_key: os.environ/H5_MASTER
"""


async def test_a_full_deployment_passes_its_request_to_a_free_sibling(site: Site) -> None:
    """Two deployments of one group, one request at once each: while the first holds an
    answer, the next request goes to the second (waiting for the first while the second
    sits idle is what a team adding a second deployment wants to avoid); with both full,
    a third waits for a slot and is then served."""
    gw = await site.serve(PAIR_CAPPED)
    site.eu.hold = asyncio.Event()
    oai = site.openai(gw)
    first = asyncio.create_task(chat(oai))
    await site.eu.holding.wait()
    assert await chat(oai)  # eu is full: us answers at once
    assert len(site.us.got) == 1
    site.us.hold = asyncio.Event()
    second = asyncio.create_task(chat(oai))
    await site.us.holding.wait()
    third = asyncio.create_task(chat(oai))  # both full: it waits at the gateway
    slots = gateway_state(gw).fleet.slots
    for _ in range(1000):  # (a state polled, not a time: bounded so a bug fails, not hangs)
        if any(getattr(s, "_waiters", None) for s in slots.values()):
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the third request never waited for a slot")
    assert len(site.eu.got) + len(site.us.got) == 3
    site.eu.hold.set()
    site.us.hold.set()
    assert await first and await second and await third
    assert len(site.eu.got) + len(site.us.got) == 4


# --- 5. The heldout files of this round, served as written ----------------------------------

HELDOUT = Path(__file__).resolve().parents[1] / "data" / "litellm_configs" / "heldout"


async def serve_heldout(site: Site, name: str, monkeypatch: pytest.MonkeyPatch
                        ) -> RunningGateway:
    """A heldout file of this round, its endpoints pointed at the site's upstreams."""
    for variable, value in {"H5_EU_API_BASE": site.eu.base_url,
                            "H5_US_API_BASE": site.us.base_url,
                            "H5_BATCH_API_BASE": site.batch.v1, "LITELLM_MASTER_KEY": MASTER,
                            "OPENAI_API_KEY": US_KEY, "OPENAI_API_KEY_SECONDARY": BATCH_KEY,
                            "ANTHROPIC_API_KEY": ANTHROPIC_KEY, "VLLM_API_KEY": EU_KEY}.items():
        monkeypatch.setenv(variable, value)
    return await site.serve((HELDOUT / name).read_text())


async def test_a_wildcard_default_pool_and_a_tagged_batch_account(
        site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    gw = await serve_heldout(site, "h5_wildcard_tags.yaml", monkeypatch)
    oai = site.openai(gw)
    await chat(oai, "openai/gpt-4.1")  # untagged: the default-tagged wildcard
    assert len(site.us.got) == 1 and site.us.got[0][1]["model"] == "gpt-4.1"
    for _ in range(3):
        assert await chat(oai, "openai/gpt-4.1", extra_body={"tags": ["batch"]}) \
            == "from batch: gpt-4.1"
    await chat(oai, "openai/gpt-4.1", extra_body={"tags": ["apac"]})  # no match: default
    assert len(site.us.got) == 2
    await chat(site.openai(gw, **{"x-litellm-tags": "batch"}), "fast")
    assert site.us.got[-1][1]["model"] == "gpt-4o-mini"
    assert {m.id async for m in oai.models.list()} >= {"fast"}
    assert_no_litellm_fields(site.us, site.batch)
    site.assert_no_secret()


async def test_capped_gpu_boxes_queue_past_their_slots_and_serve_everyone(
        site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two vLLM boxes of four slots each (one its own ``max_parallel_requests``, the other
    ``default_max_parallel_requests``): eight requests at once fill both, a ninth waits at
    the gateway instead of reaching a box or the fallback, then every one is answered."""
    gw = await serve_heldout(site, "h5_gpu_caps.yaml", monkeypatch)
    assert [w for w in site.warnings() if "litellm_settings.callbacks" in w]
    slots = gateway_state(gw).fleet.slots
    assert sorted(s._value for s in slots.values()) == [4, 4, 4]  # the fallback too
    site.eu.hold, site.us.hold = asyncio.Event(), asyncio.Event()
    oai = site.openai(gw)
    asks = [asyncio.create_task(chat(oai, "qwen-coder")) for _ in range(9)]
    for _ in range(1000):  # (a state polled, bounded so a bug fails instead of hanging)
        if site.eu.held.qsize() + site.us.held.qsize() == 8 and any(
                getattr(s, "_waiters", None) for s in slots.values()):
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("eight requests did not fill the two boxes, or none waited")
    assert site.eu.held.qsize() == 4 and site.us.held.qsize() == 4  # four each, never five
    assert not site.batch.requests
    site.eu.hold.set()
    site.us.hold.set()
    assert all(await asyncio.gather(*asks))
    assert len(site.eu.got) + len(site.us.got) == 9 and not site.batch.requests
    site.assert_no_secret()


async def test_the_locked_down_file_serves_claude_code_and_refuses_the_rest(
        site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    gw = await serve_heldout(site, "h5_locked_down.yaml", monkeypatch)
    assert not site.warnings()
    claude = site.claude(gw)
    done = await claude.messages.create(model="claude-sonnet-4", max_tokens=32, messages=HI,
                                        extra_body={"user": "dev-1", "metadata": {
                                            "user_id": "dev-1", "generation_name": "cc"}})
    assert done.content
    assert site.eu.got[-1][0] == "/v1/messages"
    with pytest.raises(anthropic.BadRequestError) as no_name:
        await claude.messages.create(model="claude-sonnet-4", max_tokens=32, messages=HI,
                                     extra_body={"user": "dev-1"})
    assert "generation_name" in str(no_name.value)
    oai = site.openai(gw)
    with pytest.raises(openai.PermissionDeniedError):
        await oai.models.list()
    with pytest.raises(openai.PermissionDeniedError):
        await oai.responses.create(model="gpt-4o", input="hi", user="dev-1")
    assert await chat(oai, user="dev-1", metadata={"generation_name": "ci"})
    assert len(site.us.got) == 1
    site.assert_no_secret(str(no_name.value))


def test_a_tags_string_under_tag_filtering_stops_start_up_naming_it(tmp_path: Path) -> None:
    """``tags: eu`` (not a list) would be no tags: the deployment would take untagged
    traffic and none of the EU traffic it was written for."""
    path = tmp_path / "c.yaml"
    entry = ("model_list:\n  - model_name: m\n    litellm_params: {model: openai/x, "
             "api_base: 'http://127.0.0.1:9/v1', tags: eu}\n")
    path.write_text(entry + "router_settings: {enable_tag_filtering: true}\n")
    with pytest.raises(ConfigError, match=r"model_list\[0\]\.litellm_params\.tags: must be "
                                          r"a list"):
        load_config(path)
    path.write_text(entry)  # without tag filtering the tags choose nothing: it starts
    assert load_config(path).model_list


RESIDENCY = """
model_list:
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: os.environ/EU_CHAT, api_key: os.environ/EU_KEY,
                     tags: ["eu"]}
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: os.environ/US_CHAT, api_key: os.environ/US_KEY,
                     tags: ["us", "default"]}
  - model_name: gpt-4o-mini
    litellm_params: {model: openai/gpt-4o-mini, api_base: os.environ/EU_MINI,
                     api_key: os.environ/EU_KEY, tags: ["eu"]}
  - model_name: gpt-4o-mini
    litellm_params: {model: openai/gpt-4o-mini, api_base: os.environ/US_CHAT,
                     api_key: os.environ/US_KEY, tags: ["default"]}
router_settings:
  enable_tag_filtering: true
  num_retries: 1
  retry_after: 0
  fallbacks: [{"gpt-4o": ["gpt-4o-mini"]}]
general_settings:
  master_key: os.environ/H5_MASTER
"""


async def test_an_eu_request_whose_eu_deployment_fails_stays_in_the_eu(
        site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """The EU deployment answers 500: the retries and the fallback group are tag-filtered
    too (as LiteLLM passes the request's tags to its fallbacks), so the EU-tagged request
    ends on the EU deployment of the fallback, never on a US one."""
    async with FleetUpstream("eu-chat", mode="dead") as eu_chat, \
            FleetUpstream("us-chat") as us_chat, FleetUpstream("eu-mini") as eu_mini:
        for name, upstream in (("EU_CHAT", eu_chat), ("US_CHAT", us_chat),
                               ("EU_MINI", eu_mini)):
            monkeypatch.setenv(name, upstream.v1)
        gw = await site.serve(RESIDENCY)
        raw = await site.openai(gw, **{"x-litellm-tags": "eu"}).chat.completions \
            .with_raw_response.create(model="gpt-4o", messages=HI)  # type: ignore[arg-type]
        assert raw.parse().choices[0].message.content == "from eu-mini: gpt-4o-mini"
        assert eu_chat.hits == 2  # the first try and its retry
        assert us_chat.hits == 0
        assert await chat(site.openai(gw)) == "from us-chat: gpt-4o"  # untagged: default
        assert_no_litellm_fields(eu_chat, eu_mini, us_chat)


async def test_a_client_leaving_a_held_stream_gives_the_global_slot_back(site: Site) -> None:
    """A stream the client walks away from (Claude Code's Esc) must not keep the only
    slot: the gateway hangs up on the upstream and the next request is served."""
    from gateway.server.auth import AUTH

    gw = await site.serve(GLOBAL_CAP)
    site.eu.hold = asyncio.Event()
    async with site.claude(gw).messages.stream(model="claude-sonnet", max_tokens=32,
                                               messages=HI) as stream:
        await site.eu.holding.wait()
        async for _ in stream.text_stream:
            break  # the first words, then the client leaves
    await site.eu.hung_up.wait()  # the gateway closed the upstream stream
    for _ in range(1000):  # (a state polled, bounded so a leak fails instead of hanging)
        if gw.app[AUTH].parallel == 0:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the left stream still holds the global slot")
    assert await chat(site.openai(gw))


async def test_gateway_serve_runs_the_eu_tenants_file_on_three_wires(
        site: Site, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``gateway serve --config h5_eu_tenants_tags.yaml`` in its own process: one start-up
    warning (the logging callback), EU-tagged Messages (an alias, streamed), Responses and
    chat requests on the EU upstream, untagged ones on the default pool."""
    for variable, value in {"H5_EU_API_BASE": site.eu.base_url,
                            "H5_US_API_BASE": site.us.base_url, "LITELLM_MASTER_KEY": MASTER,
                            "OPENAI_API_KEY": EU_KEY, "OPENAI_API_KEY_SECONDARY": US_KEY,
                            "ANTHROPIC_API_KEY": ANTHROPIC_KEY}.items():
        monkeypatch.setenv(variable, value)
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--config",
             str(HELDOUT / "h5_eu_tenants_tags.yaml"), "--port", str(port)],
            env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=tmp_path)
    try:
        root = f"http://127.0.0.1:{port}"
        await wait_until_serving(root, lambda: None if proc.poll() is None
                                 else log.read_text()[-3000:])
        eu = {"x-litellm-tags": "eu"}
        async with anthropic.AsyncAnthropic(base_url=root, api_key=MASTER, max_retries=0,
                                            default_headers=eu) as claude, \
                openai.AsyncOpenAI(base_url=f"{root}/v1", api_key=MASTER,
                                   max_retries=0) as oai:
            async with claude.messages.stream(model="claude-3-7-sonnet-latest",
                                              max_tokens=64, messages=HI) as stream:
                assert await stream.get_final_text()
            await oai.responses.create(model="gpt-4o", input="hi",
                                       extra_body={"metadata": {"tags": ["eu"]}})
            await chat(oai, extra_headers=eu)
            assert [p for p, _ in site.eu.got] == ["/v1/messages", "/v1/responses",
                                                   "/v1/chat/completions"]
            await claude.messages.create(model="claude-sonnet-4", max_tokens=8, messages=HI,
                                         extra_headers={"x-litellm-tags": ""})
            await chat(oai)
            assert [p for p, _ in site.us.got] == ["/v1/messages", "/v1/chat/completions"]
            with pytest.raises(openai.AuthenticationError) as wrong_key:
                await chat(oai.with_options(api_key=EU_KEY))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    output = log.read_text()
    assert output.count("WARNING gateway.config ignoring LiteLLM settings the gateway does "
                        "not use: litellm_settings.success_callback\n") == 1
    assert "Traceback" not in output
    site.assert_no_secret(output, str(wrong_key.value))
    assert_no_litellm_fields(site.eu, site.us)


async def test_an_eu_responses_chain_continues_in_the_eu(site: Site) -> None:
    """The EU tenant's second turn (``previous_response_id``) goes where the first did,
    not to the group's first deployment in the US."""
    gw = await site.serve(REGIONS.replace("EU_BASE", "FIRST_BASE").replace(
        "US_BASE", "EU_BASE").replace("FIRST_BASE", "US_BASE").replace(
        '["eu"]', '["first"]').replace('["us", "default"]', '["eu"]').replace(
        '["first"]', '["us", "default"]'))  # the US deployment first in each group
    oai = site.openai(gw, **{"x-litellm-tags": "eu"})
    first = await oai.responses.create(model="gpt-4o", input="hi")
    await oai.responses.create(model="gpt-4o", input="and then?",
                               previous_response_id=first.id)
    assert [p for p, _ in site.eu.got] == ["/v1/responses"] * 2 and not site.us.got


SHARED_LIMITS = """
# Two replicas share rpm counts through Redis; the EU deployment has a small quota.
model_list:
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: os.environ/EU_BASE,
                     api_key: os.environ/EU_KEY, tags: ["eu"], rpm: 2}
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: os.environ/US_BASE,
                     api_key: os.environ/US_KEY, tags: ["default"], rpm: 1000}
router_settings:
  routing_strategy: usage-based-routing-v2
  enable_tag_filtering: true
  redis_host: os.environ/H5_REDIS_HOST
  redis_port: os.environ/H5_REDIS_PORT
litellm_settings:
  success_callback: ["datadog"]
general_settings:
  master_key: os.environ/H5_MASTER
  allowed_routes: ["openai_routes"]
"""


async def test_an_eu_quota_spent_on_one_replica_refuses_on_the_other_without_spilling(
        site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two gateways on one real redis-server: the EU deployment's rpm is counted across
    both, and an EU-tagged request past it gets ``429 no_deployments_available`` instead
    of going to the US default deployment."""
    from tests.sessions.conftest import run_redis_server

    with run_redis_server(tmp_path) as url:
        host_port = url.split("//", 1)[1].split("/", 1)[0]
        monkeypatch.setenv("H5_REDIS_HOST", host_port.rsplit(":", 1)[0])
        monkeypatch.setenv("H5_REDIS_PORT", host_port.rsplit(":", 1)[1])
        first, second = await site.serve(SHARED_LIMITS), await site.serve(SHARED_LIMITS)
        eu = {"x-litellm-tags": "eu"}
        await chat(site.openai(first, **eu))
        await chat(site.openai(second, **eu))
        with pytest.raises(openai.RateLimitError) as spent:
            await chat(site.openai(first, **eu))
        assert spent.value.code == "no_deployments_available"
        assert spent.value.response.headers.get("retry-after")
        assert len(site.eu.got) == 2 and not site.us.got
        await chat(site.openai(second))  # untagged traffic still flows to the default
        assert len(site.us.got) == 1
        async with aiohttp.ClientSession() as http, http.get(
                first.root + "/v1/models",
                headers={"Authorization": f"Bearer {MASTER}"}) as listed:
            assert listed.status == 200  # openai_routes include the model list
    site.assert_no_secret(str(spent.value))


async def test_without_tag_filtering_tags_choose_nothing_and_reach_no_provider(
        site: Site) -> None:
    gw = await site.serve(GLOBAL_CAP.replace("  global_max_parallel_requests: 1\n", ""))
    claude = site.claude(gw, **{"x-litellm-tags": "eu"})
    await claude.messages.create(model="claude-sonnet", max_tokens=8, messages=HI,
                                 extra_body={"metadata": {"user_id": "u-1", "tags": ["x"]},
                                             "tags": ["y"]})
    assert site.eu.got[-1][1]["metadata"] == {"user_id": "u-1"}
    assert_no_litellm_fields(site.eu)
    with pytest.raises(anthropic.BadRequestError) as wrong:
        await claude.messages.create(model="claude-sonnet", max_tokens=8, messages=HI,
                                     extra_body={"tags": "eu"})
    assert isinstance(wrong.value.body, dict) and wrong.value.body["type"] == "error"
    assert "'tags' must be a list of strings" in wrong.value.body["error"]["message"]
    with pytest.raises(openai.BadRequestError) as wrong_chat:
        await chat(site.openai(gw), extra_body={"tags": "eu"})
    assert wrong_chat.value.param == "tags"
    # A string under metadata.tags is OpenAI metadata (its values are strings): it passes.
    await chat(site.openai(gw), metadata={"tags": "eu"})
    assert site.us.got[-1][1]["metadata"] == {"tags": "eu"}
    assert len(site.eu.got) == 1 and len(site.us.got) == 1


async def test_a_wildcard_allowed_route_exposes_the_paths_under_it_as_written(
        site: Site) -> None:
    """``allowed_routes: ["/v1/*"]`` (LiteLLM's route wildcard): every ``/v1/`` path is
    served, a path outside it (``/chat/completions``, ``/metrics``) is not."""
    gw = await site.serve(GLOBAL_CAP.replace("  global_max_parallel_requests: 1\n",
                                             '  allowed_routes: ["/v1/*"]\n'))
    oai = site.openai(gw)
    assert await chat(oai)
    assert {m.id async for m in oai.models.list()} == {"claude-sonnet", "gpt-4o"}
    assert (await site.claude(gw).messages.create(model="claude-sonnet", max_tokens=8,
                                                  messages=HI)).content
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with aiohttp.ClientSession() as http:
        async with http.post(gw.root + "/chat/completions", headers=headers,
                             json={"model": "gpt-4o", "messages": HI}) as bare:
            assert bare.status == 403
            assert (await bare.json())["error"]["code"] == "route_not_allowed"
        async with http.get(gw.root + "/metrics", headers=headers) as metrics:
            assert metrics.status == 403
    assert len(site.us.got) == 1


@pytest.mark.parametrize("forwarded_for", [True, False])
async def test_allowed_ips_behind_a_load_balancer_read_the_address_it_appended(
        site: Site, forwarded_for: bool) -> None:
    """``use_x_forwarded_for: true`` (LiteLLM's setting for a proxy behind a load balancer):
    the address compared is the last of ``X-Forwarded-For``, the one the balancer appended;
    an address a client wrote before it is not believed. Without the setting the header
    is never read."""
    setting = "  use_x_forwarded_for: true\n" if forwarded_for else ""
    gw = await site.serve(GLOBAL_CAP.replace(
        "  global_max_parallel_requests: 1\n",
        f'  allowed_ips: ["10.20.0.0/16"]\n{setting}'))
    body = {"model": "gpt-4o", "messages": HI}
    statuses = []
    async with aiohttp.ClientSession() as http:
        for forwarded in ("203.0.113.9, 10.20.3.4", "10.20.3.4, 203.0.113.9", "sk-junk",
                          None):
            headers = {"Authorization": f"Bearer {MASTER}"}
            if forwarded is not None:
                headers["X-Forwarded-For"] = forwarded
            async with http.post(gw.base_url + "/chat/completions", json=body,
                                 headers=headers) as answer:
                statuses.append(answer.status)
                text = await answer.text()
                assert "sk-junk" not in text
    assert statuses == ([200, 403, 403, 403] if forwarded_for else [403, 403, 403, 403])
    assert len(site.us.got) == statuses.count(200)
