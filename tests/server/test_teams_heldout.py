"""What a platform team checks before rolling the gateway out to several teams.

Client keys and their owners (rotation, prefixes, whitespace from env files, LiteLLM's master
key), per-owner repair policies against per-model-group ones, who sees whose inspector
entries and response ids, ``/metrics`` owner labels, and rpm limits shared by two replicas
through a real Redis that goes away mid-traffic. Everything through real gateways and the
official SDKs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from gateway.config import ConfigError, parse_config
from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, free_port, gateway_state
from tests.factories import assistant, tool, user
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_fleet import FleetUpstream
from tests.fakes.responses_server import FakeResponses
from tests.server.three_upstreams import models
from tests.sessions.conftest import run_redis_server
from tests.telemetry.promtext import scrape

KEYS = {"team-a": "key-team-a-0001", "team-b": "key-team-b-0002", "team-c": "key-team-c-0003",
        "platform": "key-platform-0004"}
CHAT_BROKEN = [user("hi"), assistant("hello"), tool("call_gone", "stale"), user("go on")]
RESPONSES_BROKEN = [user("hi"), {"type": "function_call_output", "call_id": "call_gone",
                                 "output": "stale"}, user("go on")]
ANTHROPIC_BROKEN = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_gone",
                                  "content": "stale"}, {"type": "text", "text": "go"}]}]


def teams(referee: Referee, claude: FakeAnthropic, gpt: FakeResponses,
          **extra: Any) -> dict[str, Any]:
    return {
        "model_list": models(referee, claude, gpt),
        "gateway": {"api_keys": [{"key": k, "owner": o} for o, k in KEYS.items()],
                    "ui": True, "ui_admin_owners": ["platform"]},
        "repair": {"owners": {"team-b": {"policy": "report"},
                              "team-c": {"policy": "reject"}}},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
        **extra,
    }


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
             gpt: FakeResponses) -> RunningGateway:
    return await gateway_factory(teams(referee, claude, gpt))


def oa(gw: RunningGateway, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


def an(gw: RunningGateway, key: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key=key, max_retries=0)


async def get(gw: RunningGateway, path: str, key: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(
            gw.root + path, headers={"Authorization": f"Bearer {key}"}) as r:
        return r.status, await r.json(content_type=None)


async def hello(gw: RunningGateway, key: str) -> Any:
    async with oa(gw, key) as c:
        return await c.chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": "hi"}])


# -- keys and owners -----------------------------------------------------------------------


async def test_a_key_from_an_env_file_with_a_trailing_newline_is_the_key_clients_send(
    gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
    gpt: FakeResponses, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``echo key > file; export KEY=$(cat file)`` keeps no newline, but a Kubernetes secret
    mounted with ``env`` from a file often does: the team's key must still work."""
    monkeypatch.setenv("TEAM_A_KEY", "key-team-a-0001\n")
    config = teams(referee, claude, gpt)
    config["gateway"]["api_keys"][0] = {"key": "os.environ/TEAM_A_KEY", "owner": "team-a"}
    config["gateway"]["api_keys"][1] = {"key": "  key-team-b-0002 ", "owner": "team-b"}
    gw = await gateway_factory(config)
    raw = await hello(gw, "key-team-a-0001")
    assert raw.http_response.status_code == 200
    raw = await hello(gw, "key-team-b-0002")
    assert raw.http_response.status_code == 200
    status, listed = await get(gw, "/ui/api/requests", "key-team-b-0002")
    assert status == 200
    assert {e["owner_name"] for e in listed["requests"]} == {"team-b"}


def test_a_key_with_a_newline_inside_stops_start_up_without_echoing_it() -> None:
    """A key no HTTP header can carry is a config mistake, not a key nobody can use."""
    raw = {"model_list": [{"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_base": "http://127.0.0.1:9/v1", "api_key": "up-12345678"}}],
        "gateway": {"api_keys": ["first-half-of-key\nsecond-half"]}}
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    text = str(info.value)
    assert "gateway.api_keys" in text and "[0]" in text
    assert "first-half" not in text and "second-half" not in text


async def test_a_key_that_is_a_prefix_of_another_is_its_own_owner(
    gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
    gpt: FakeResponses,
) -> None:
    config = teams(referee, claude, gpt)
    config["gateway"]["api_keys"] = [{"key": "shared-prefix-key", "owner": "team-a"},
                                     {"key": "shared-prefix-key-admin", "owner": "platform"}]
    config["repair"] = {}
    gw = await gateway_factory(config)
    assert (await hello(gw, "shared-prefix-key")).http_response.status_code == 200
    for near in ("shared-prefix-ke", "shared-prefix-key-", "shared-prefix-key-admi",
                 "shared-prefix-key-adminx"):
        async with oa(gw, near) as c:
            with pytest.raises(openai.AuthenticationError):
                await c.chat.completions.create(model="chat",
                                                messages=[{"role": "user", "content": "hi"}])
    status, listed = await get(gw, "/ui/api/requests", "shared-prefix-key")
    assert status == 200 and [e["owner_name"] for e in listed["requests"]] == ["team-a"]


async def test_a_rotated_key_works_beside_the_new_one_then_is_refused_on_every_wire(
    gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
    gpt: FakeResponses, tmp_path: Path,
) -> None:
    config = teams(referee, claude, gpt, sessions={"data_dir": str(tmp_path / "d")})
    config["gateway"]["api_keys"].append({"key": "key-team-a-next", "owner": "team-a"})
    during = await gateway_factory(config)
    old, new = KEYS["team-a"], "key-team-a-next"
    assert (await hello(during, old)).http_response.status_code == 200
    assert (await hello(during, new)).http_response.status_code == 200
    # Both keys are one owner: the new key sees what the old key did.
    status, listed = await get(during, "/ui/api/requests", new)
    assert status == 200 and len(listed["requests"]) == 2
    config["gateway"]["api_keys"] = [k for k in config["gateway"]["api_keys"]
                                     if k["key"] != old]
    after = await gateway_factory(config)
    assert (await hello(after, new)).http_response.status_code == 200
    async with oa(after, old) as c:
        with pytest.raises(openai.AuthenticationError):
            await c.chat.completions.create(model="chat",
                                            messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.AuthenticationError):
            await c.responses.create(model="gpt", input="hi")
    async with an(after, old) as a:
        with pytest.raises(anthropic.AuthenticationError) as info:
            await a.messages.create(model="claude", max_tokens=8,
                                    messages=[{"role": "user", "content": "hi"}])
    assert old not in info.value.response.text


async def test_litellm_master_key_is_a_client_key_that_sees_only_its_own_entries(
    gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
    gpt: FakeResponses,
) -> None:
    config = teams(referee, claude, gpt,
                   general_settings={"master_key": "sk-litellm-master-0005"})
    gw = await gateway_factory(config)
    assert (await hello(gw, KEYS["team-a"])).http_response.status_code == 200
    assert (await hello(gw, "sk-litellm-master-0005")).http_response.status_code == 200
    status, listed = await get(gw, "/ui/api/requests", "sk-litellm-master-0005")
    assert status == 200 and len(listed["requests"]) == 1
    assert "team-a" not in {e["owner_name"] for e in listed["requests"]}


# -- per-owner and per-model-group policies ---------------------------------------------------


async def test_a_report_team_streams_its_broken_responses_history_upstream_as_sent(
    gw: RunningGateway, gpt: FakeResponses,
) -> None:
    async with oa(gw, KEYS["team-b"]) as c:
        raw = await c.responses.with_raw_response.create(
            model="gpt", input=RESPONSES_BROKEN, stream=True)  # type: ignore[arg-type]
        events = [e.type async for e in raw.parse()]
    assert raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"
    assert "response.completed" in events
    assert gpt.requests[0].body["input"] == RESPONSES_BROKEN


async def test_a_reject_team_streaming_on_responses_gets_a_400_naming_the_repair(
    gw: RunningGateway, gpt: FakeResponses,
) -> None:
    async with oa(gw, KEYS["team-c"]) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.responses.create(model="gpt", input=RESPONSES_BROKEN,  # type: ignore[arg-type]
                                     stream=True)
    assert "orphan" in info.value.message
    assert info.value.response.json()["error"]["code"] == "invalid_history"
    assert gpt.requests == []


async def test_three_teams_one_broken_anthropic_history_three_outcomes(
    gw: RunningGateway, claude: FakeAnthropic,
) -> None:
    async with an(gw, KEYS["team-a"]) as a:
        raw = await a.messages.with_raw_response.create(
            model="claude", max_tokens=16, messages=ANTHROPIC_BROKEN)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200 and "x-gateway-repairs" in raw.headers
    sent_by_a = claude.requests[-1].body["messages"]
    assert sent_by_a != ANTHROPIC_BROKEN
    async with an(gw, KEYS["team-b"]) as a:
        raw = await a.messages.with_raw_response.create(
            model="claude", max_tokens=16, messages=ANTHROPIC_BROKEN)  # type: ignore[arg-type]
    assert "x-gateway-would-repair" in raw.headers
    assert any(r.body["messages"] == ANTHROPIC_BROKEN for r in claude.requests)
    before = len(claude.requests)
    async with an(gw, KEYS["team-c"]) as a:
        with pytest.raises(anthropic.BadRequestError) as info:
            await a.messages.create(model="claude", max_tokens=16,
                                    messages=ANTHROPIC_BROKEN)  # type: ignore[arg-type]
    assert info.value.response.json()["type"] == "error"
    assert "orphan" in info.value.message
    assert len(claude.requests) == before


async def test_an_owner_setting_only_invisible_chars_keeps_the_model_groups_policy(
    gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
    gpt: FakeResponses,
) -> None:
    """``repair.owners.team-a: {invisible_chars: strip}`` says nothing about ``policy``:
    the model group's ``report`` still applies to team A (a key left out keeps the wider
    value), while team C's own ``reject`` beats it."""
    config = teams(referee, claude, gpt)
    config["model_list"][0]["model_info"] = {"repair": {"policy": "report"}}
    config["repair"]["owners"]["team-a"] = {"invisible_chars": "strip"}
    gw = await gateway_factory(config)
    async with oa(gw, KEYS["team-a"]) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="chat", messages=[*CHAT_BROKEN[:-1], user("go\u200b on")])
    assert raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"
    assert referee.requests[0].json()["messages"][-1]["content"] == "go on"  # stripped
    assert referee.requests[0].json()["messages"][2] == CHAT_BROKEN[2]  # as sent
    async with oa(gw, KEYS["team-c"]) as c:
        with pytest.raises(openai.BadRequestError, match="orphan_tool_result_dropped"):
            await c.chat.completions.create(model="chat", messages=CHAT_BROKEN)


def test_a_per_owner_rate_limit_in_the_repair_section_stops_start_up() -> None:
    """Owners have repair settings, not quotas: an ``rpm`` written there must not be
    silently ignored (a team would run unlimited while the config says otherwise)."""
    raw = {"model_list": [{"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_base": "http://127.0.0.1:9/v1", "api_key": "up-12345678"}}],
        "gateway": {"api_keys": [{"key": "k-team-a-123", "owner": "team-a"}]},
        "repair": {"owners": {"team-a": {"policy": "repair", "rpm": 10}}}}
    with pytest.raises(ConfigError, match=r"repair\.owners\.team-a\.rpm"):
        parse_config(raw)


# -- who sees what ------------------------------------------------------------------------------


async def test_one_team_cannot_see_or_open_another_teams_inspector_entries(
    gw: RunningGateway,
) -> None:
    await hello(gw, KEYS["team-a"])
    await hello(gw, KEYS["team-b"])
    status, mine = await get(gw, "/ui/api/requests", KEYS["team-b"])
    assert status == 200 and {e["owner_name"] for e in mine["requests"]} == {"team-b"}
    # The owner filter of another team returns nothing, and its names are not offered.
    status, theirs = await get(gw, "/ui/api/requests?owner=team-a", KEYS["team-b"])
    assert status == 200 and theirs["requests"] == []
    assert mine["owners"] == ["team-b"]
    status, everything = await get(gw, "/ui/api/requests", KEYS["platform"])
    assert status == 200
    assert {e["owner_name"] for e in everything["requests"]} == {"team-a", "team-b"}
    assert set(everything["owners"]) >= {"team-a", "team-b", "team-c"}
    a_entry = next(e for e in everything["requests"] if e["owner_name"] == "team-a")
    denied, body = await get(gw, f"/ui/api/requests/{a_entry['request_id']}", KEYS["team-b"])
    missing, other = await get(gw, "/ui/api/requests/req-that-never-was", KEYS["team-b"])
    assert (denied, body) == (missing, other)  # existence is not revealed
    assert denied == 404
    assert KEYS["team-a"] not in str(body)
    ok, detail = await get(gw, f"/ui/api/requests/{a_entry['request_id']}", KEYS["team-a"])
    assert ok == 200 and detail["owner_name"] == "team-a"


@pytest.mark.parametrize("model", ["gpt", "claude"])
async def test_another_teams_response_id_does_not_resolve(
    gw: RunningGateway, gpt: FakeResponses, model: str,
) -> None:
    async with oa(gw, KEYS["team-a"]) as c:
        first = await c.responses.create(model=model, input="my secret plan is X")
    sent = len(gpt.requests)
    async with oa(gw, KEYS["team-b"]) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.responses.create(model=model, input="what was my plan?",
                                     previous_response_id=first.id)
    assert info.value.code == "previous_response_not_found"
    assert "secret plan" not in info.value.response.text
    assert len(gpt.requests) == sent  # never sent to the upstream that holds it
    async with oa(gw, KEYS["team-a"]) as c:
        again = await c.responses.create(model=model, input="and then?",
                                         previous_response_id=first.id)
    assert again.id != first.id


async def test_session_archives_are_read_by_their_owner_only_on_both_paths(
    gw: RunningGateway,
) -> None:
    for path in ("/v1/gateway/sessions/sess-1/archive", "/ui/api/sessions/sess-1/archive"):
        answers = {owner: (await get(gw, path, key))[0] for owner, key in KEYS.items()}
        assert set(answers.values()) == {403}, path  # none exists: no one can probe it


async def test_metrics_owner_labels_are_config_names_never_keys(
    gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
    gpt: FakeResponses,
) -> None:
    config = teams(referee, claude, gpt,
                   general_settings={"master_key": "sk-litellm-master-0005"})
    config["gateway"]["api_keys"].append("plain-key-without-owner")
    gw = await gateway_factory(config)
    for key in [*KEYS.values(), "plain-key-without-owner", "sk-litellm-master-0005"]:
        async with oa(gw, key) as c:
            try:
                await c.chat.completions.create(model="chat", messages=CHAT_BROKEN)
            except openai.BadRequestError:
                assert key == KEYS["team-c"]
    async with aiohttp.ClientSession() as s, s.get(gw.root + "/metrics") as r:
        text = await r.text()
    for key in [*KEYS.values(), "plain-key-without-owner", "sk-litellm-master-0005"]:
        assert key not in text
    metrics = await scrape(gw.root)
    owners = {labels["owner"] for labels in metrics.series("gateway_owner_requests_total")}
    # A plain key by its place in gateway.api_keys, LiteLLM's master key by its name.
    assert owners == {*KEYS, "api_keys[4]", "master_key"}


# -- shared limits across two replicas ------------------------------------------------------


async def test_redis_going_away_mid_traffic_keeps_both_replicas_serving(
    gateway_factory: GatewayFactory, tmp_path: Path,
) -> None:
    async with FleetUpstream("limited") as upstream:
        with run_redis_server(tmp_path) as url:
            config: dict[str, Any] = {
                "model_list": [{"model_name": "small", "litellm_params": {
                    "model": "openai/small", "api_base": upstream.v1, "api_key": "k-123456",
                    "rpm": 4}}],
                "gateway": {"api_keys": [{"key": KEYS["team-a"], "owner": "team-a"}]},
                "router_settings": {"redis_url": url},
                "recovery": {"max_retry_after": 0.0, "deadline": 20},
            }
            replicas = [await gateway_factory(config), await gateway_factory(config)]
            for gw in replicas:
                shared = gateway_state(gw).fleet.shared
                assert shared is not None
                shared.wall = lambda: 1_800_000_000.0
            clients = [oa(gw, KEYS["team-a"]) for gw in replicas]
            for client in (*clients, *clients):
                await client.chat.completions.create(
                    model="small", messages=[{"role": "user", "content": "hi"}])
            with pytest.raises(openai.RateLimitError):  # 4 of 4 used across both
                await clients[0].chat.completions.create(
                    model="small", messages=[{"role": "user", "content": "hi"}])
        # Redis is gone: each replica counts on its own (documented), and answers.
        served = 0
        for client in clients:
            try:
                await client.chat.completions.create(
                    model="small", messages=[{"role": "user", "content": "hi"}])
                served += 1
            except openai.RateLimitError as err:
                assert err.code == "no_deployments_available"
        assert served >= 1
        for client in clients:
            await client.close()
        status, _ = await get(replicas[0], "/healthz", KEYS["team-a"])
        assert status == 200


@pytest.mark.parametrize("name", ["api_keys[0]", "master_key", "anonymous"])
def test_an_owner_named_like_a_key_without_one_stops_start_up(name: str) -> None:
    """A plain key is shown as ``api_keys[0]`` (LiteLLM's master key as ``master_key``): a
    team of that name would share its metrics, report rows and inspector admin rights."""
    raw = {"model_list": [{"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_base": "http://127.0.0.1:9/v1", "api_key": "up-12345678"}}],
        "gateway": {"api_keys": ["plain-key-0000-x",
                                 {"key": KEYS["platform"], "owner": name}],
                    "ui": True, "ui_admin_owners": [name]}}
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert "gateway.api_keys[1].owner" in str(info.value)
    assert KEYS["platform"] not in str(info.value)


async def test_a_response_id_follows_its_owner_across_replicas_and_no_one_else(
    gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
    gpt: FakeResponses, tmp_path: Path,
) -> None:
    """Two replicas sharing Redis: team A continues on replica 2 what replica 1 answered
    (the gateway expands it for a Messages upstream); team B cannot, on either."""
    with run_redis_server(tmp_path) as url:
        config = teams(referee, claude, gpt,
                       sessions={"data_dir": str(tmp_path / "d"), "redis_url": url})
        one, two = await gateway_factory(config), await gateway_factory(config)
        async with oa(one, KEYS["team-a"]) as c:
            first = await c.responses.create(model="claude", input="remember: violet")
        for replica in (one, two):
            async with oa(replica, KEYS["team-b"]) as c:
                with pytest.raises(openai.BadRequestError) as info:
                    await c.responses.create(model="claude", input="what colour?",
                                             previous_response_id=first.id)
            assert info.value.code == "previous_response_not_found"
        assert not any("what colour?" in str(r.body) for r in claude.requests)
        async with oa(two, KEYS["team-a"]) as c:
            await c.responses.create(model="claude", input="what colour?",
                                     previous_response_id=first.id)
        sent = str(claude.requests[-1].body["messages"])
        assert "remember: violet" in sent and "what colour?" in sent


async def test_repair_switched_off_forwards_even_a_reject_teams_history(
    gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
    gpt: FakeResponses,
) -> None:
    """``repair.enabled: false`` switches repairs and their policies off (documented): team
    C's ``reject`` does not refuse; the history goes as written (the upstream decides)."""
    config = teams(referee, claude, gpt)
    config["repair"]["enabled"] = False
    gw = await gateway_factory(config)
    async with oa(gw, KEYS["team-c"]) as c:
        try:
            await c.chat.completions.create(model="chat", messages=CHAT_BROKEN)
        except openai.BadRequestError as err:
            assert err.code != "invalid_history"  # the referee's refusal, not the gateway's
    assert referee.requests[0].json()["messages"] == CHAT_BROKEN


async def test_a_wrong_key_is_counted_as_an_auth_failure_under_no_owner(
    gw: RunningGateway,
) -> None:
    for wrong in (KEYS["team-a"] + "x", KEYS["team-a"][:-1], " " + KEYS["team-b"][1:]):
        async with an(gw, wrong) as a:
            with pytest.raises(anthropic.AuthenticationError) as info:
                await a.messages.create(model="claude", max_tokens=8,
                                        messages=[{"role": "user", "content": "hi"}])
        assert info.value.response.json()["type"] == "error"
        assert wrong.strip() not in info.value.response.text
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_auth_failures_total", reason="invalid_key") == 3
    assert metrics.series("gateway_owner_requests_total") == []


async def test_two_keys_in_one_request_resolve_to_the_litellm_headers_owner(
    gw: RunningGateway, referee: Referee,
) -> None:
    """Claude Code through LiteLLM's guide sends the team key in ``x-litellm-api-key`` and
    its own login in ``Authorization``: the team key decides the owner and its policy."""
    async with openai.AsyncOpenAI(
            base_url=gw.base_url, api_key=KEYS["team-c"], max_retries=0,
            default_headers={"x-litellm-api-key": f"Bearer {KEYS['team-a']}"}) as c:
        raw = await c.chat.completions.with_raw_response.create(model="chat",
                                                               messages=CHAT_BROKEN)
    assert raw.http_response.status_code == 200  # team A repairs; team C would refuse
    assert raw.headers["x-gateway-repairs"] == "orphan_tool_result_dropped=1"
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_owner_requests_total", owner="team-a",
                         outcome="repaired") == 1
    assert metrics.total("gateway_owner_requests_total", owner="team-c") == 0


async def test_what_a_client_says_about_itself_never_changes_its_owner(
    gw: RunningGateway,
) -> None:
    """``user``, ``metadata`` and LiteLLM-ish team headers are the client's words: the
    owner (policy, metrics, inspector) is the key's."""
    async with openai.AsyncOpenAI(
            base_url=gw.base_url, api_key=KEYS["team-c"], max_retries=0,
            default_headers={"x-litellm-team": "team-a", "x-gateway-owner": "team-a"}) as c:
        with pytest.raises(openai.BadRequestError, match="orphan_tool_result_dropped"):
            await c.chat.completions.create(model="chat", messages=CHAT_BROKEN,
                                            user="team-a", metadata={"owner": "team-a"})
    status, seen = await get(gw, "/ui/api/requests", KEYS["team-a"])
    assert status == 200 and seen["requests"] == []
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_owner_requests_total", owner="team-c",
                         outcome="rejected") == 1


async def test_an_owners_invisible_chars_beats_the_model_groups_on_the_messages_wire(
    gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
    gpt: FakeResponses,
) -> None:
    config = teams(referee, claude, gpt)
    config["model_list"][1]["model_info"] = {"repair": {"invisible_chars": "reject"}}
    config["repair"]["owners"]["team-a"] = {"invisible_chars": "strip"}
    gw = await gateway_factory(config)
    hidden = [{"role": "user", "content": "summarise\U000e0041\U000e0042 this"}]
    async with an(gw, KEYS["team-a"]) as a:
        await a.messages.create(model="claude", max_tokens=8, messages=hidden)  # type: ignore[arg-type]
    assert claude.requests[-1].body["messages"][0]["content"] == "summarise this"
    async with an(gw, KEYS["team-b"]) as a:
        with pytest.raises(anthropic.BadRequestError) as info:
            await a.messages.create(model="claude", max_tokens=8, messages=hidden)  # type: ignore[arg-type]
    assert info.value.response.json()["type"] == "error"
    assert len(claude.requests) == 1


async def test_the_platform_team_opens_a_teams_session_in_the_inspector_but_not_its_archive(
    gw: RunningGateway,
) -> None:
    """Inspector admins see every owner's requests, and so the session page they link to;
    the archive (stored conversation) stays its owner's."""
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEYS["team-a"], max_retries=0,
                                  default_headers={"x-session-id": "sess-team-a"}) as c:
        await c.chat.completions.create(model="chat",
                                        messages=[{"role": "user", "content": "hi"}])
    status, page = await get(gw, "/ui/api/sessions/sess-team-a", KEYS["platform"])
    assert status == 200 and len(page["requests"]) == 1
    status, page = await get(gw, "/ui/api/sessions/sess-team-a", KEYS["team-b"])
    assert status == 200 and page["requests"] == []
    status, _ = await get(gw, "/ui/api/sessions/sess-team-a/archive", KEYS["platform"])
    assert status == 403


async def test_a_replica_started_while_redis_is_down_serves_and_counts_alone(
    gateway_factory: GatewayFactory, tmp_path: Path,
) -> None:
    async with FleetUpstream("limited") as upstream:
        config: dict[str, Any] = {
            "model_list": [{"model_name": "small", "litellm_params": {
                "model": "openai/small", "api_base": upstream.v1, "api_key": "k-123456",
                "rpm": 2}}],
            "gateway": {"api_keys": [{"key": KEYS["team-a"], "owner": "team-a"}]},
            "router_settings": {"redis_url": f"redis://127.0.0.1:{free_port()}/0"},
            "recovery": {"max_retry_after": 0.0, "deadline": 20},
        }
        gw = await gateway_factory(config)
        async with oa(gw, KEYS["team-a"]) as c:
            for _ in range(2):
                await c.chat.completions.create(
                    model="small", messages=[{"role": "user", "content": "hi"}])
            with pytest.raises(openai.RateLimitError) as info:  # its own count still holds
                await c.chat.completions.create(
                    model="small", messages=[{"role": "user", "content": "hi"}])
        assert info.value.code == "no_deployments_available"
        assert upstream.hits == 2
