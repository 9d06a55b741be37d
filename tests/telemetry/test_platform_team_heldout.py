"""What a platform team running the gateway for several teams relies on, checked from the
outside: per-owner repair policies (report, repair, reject) on the three wires, the context
report (``x-gateway-context``), the prefix-stability report, ``/metrics`` label hygiene, the
access log and the inspector's JSON API. Real gateways on 127.0.0.1, the official SDKs, real
SQLite; the upstream is a lenient one that records what it received (so "sent as written"
can be checked byte for byte) or the strict referee.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import anthropic
import openai
import pytest
import yaml
from aiohttp import web

from gateway.cli import main
from gateway.config import ConfigError, load_config, parse_config
from gateway.referee import Referee
from gateway.server.keys import STATE
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import assistant, system, tool, tool_call, user
from tests.fakes.three_wires import ThreeWires, wire_models
from tests.telemetry.promtext import scrape, settled_scrape

KEYS = {"team-a": "key-team-a-report-0001", "team-b": "key-team-b-reject-0002",
        "team-c": "key-team-c-default-0003", "platform": "key-platform-admin-0004"}
PLAIN_KEY = "plain-key-without-owner-0005"
MASTER_KEY = "sk-litellm-master-key-0006"
UPSTREAM_KEY = "k"  # wire_models' upstream key: too short to be masked, never asserted
POLICIES = {"team-a": {"policy": "report"}, "team-b": {"policy": "reject"}}

# One broken history per wire: a tool result that answers no call (an orphan).
CHAT_BROKEN = [user("hi"), assistant("hello"), tool("call_gone", "stale output"),
               user("go on")]
RESPONSES_BROKEN = [{"role": "user", "content": "hi"},
                    {"type": "function_call_output", "call_id": "call_gone",
                     "output": "stale output"},
                    {"role": "user", "content": "go on"}]
ANTHROPIC_BROKEN = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_gone",
                                  "content": "stale output"},
                                 {"type": "text", "text": "go on"}]}]
WIRES = ["chat", "responses", "anthropic"]
MODEL_OF = {"chat": "chat", "responses": "resp", "anthropic": "claude"}
PATH_OF = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
           "anthropic": "/v1/messages"}


class RecordingWires(ThreeWires):
    """The three-wire upstream, lenient about histories, keeping every body it received."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[tuple[str, bytes]] = []

    async def _answer(self, request: web.Request, whole: dict[str, Any],
                      events: list[bytes]) -> web.StreamResponse:
        self.bodies.append((request.path, await request.read()))
        return await super()._answer(request, whole, events)

    def sent(self, path: str) -> list[dict[str, Any]]:
        """The JSON bodies received on ``path``, oldest first."""
        return [json.loads(raw) for p, raw in self.bodies if p == path]


@pytest.fixture
async def upstream() -> AsyncIterator[RecordingWires]:
    async with RecordingWires() as up:
        yield up


def team_config(upstream: RecordingWires, **extra: Any) -> dict[str, Any]:
    gateway = {"api_keys": [*({"key": k, "owner": o} for o, k in KEYS.items()), PLAIN_KEY],
               "ui": True, "capture_bodies": True, "ui_admin_owners": ["platform"]}
    gateway.update(extra.pop("gateway", {}))
    return {"model_list": wire_models(upstream.base_url), "gateway": gateway,
            "repair": {"owners": dict(POLICIES)},
            "general_settings": {"master_key": MASTER_KEY}, **extra}


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, upstream: RecordingWires) -> RunningGateway:
    return await gateway_factory(team_config(upstream))


class Served(NamedTuple):
    """A gateway served by another process: what the SDK helpers need of it."""

    base_url: str
    root: str


def oa(gw: RunningGateway | Served, key: str, **headers: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0,
                              default_headers=headers or None)


def an(gw: RunningGateway | Served, key: str, **headers: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key=key, max_retries=0,
                                    default_headers=headers or None)


async def drain(answer: Any) -> list[Any]:
    """Read a (possibly streamed) parsed answer to its end: its events."""
    if inspect.isawaitable(answer):
        answer = await answer
    if hasattr(answer, "__aiter__"):
        return [event async for event in answer]
    return [answer]


async def send_broken(gw: RunningGateway | Served, wire: str, key: str, *, stream: bool = False,
                      session: str | None = None) -> Any:
    """The wire's broken history through its official SDK; the raw response."""
    headers = {"x-session-id": session} if session else {}
    if wire == "anthropic":
        async with an(gw, key, **headers) as a:
            raw = await a.messages.with_raw_response.create(
                model="claude", max_tokens=16, messages=ANTHROPIC_BROKEN,  # type: ignore[arg-type]
                stream=stream)
            await drain(raw.parse())
            return raw
    async with oa(gw, key, **headers) as c:
        if wire == "chat":
            raw = await c.chat.completions.with_raw_response.create(
                model="chat", messages=CHAT_BROKEN, stream=stream)  # type: ignore[arg-type]
        else:
            raw = await c.responses.with_raw_response.create(
                model="resp", input=RESPONSES_BROKEN, stream=stream)  # type: ignore[arg-type]
        await drain(raw.parse())
        return raw


def client_items(wire: str) -> list[Any]:
    return {"chat": CHAT_BROKEN, "responses": RESPONSES_BROKEN,
            "anthropic": ANTHROPIC_BROKEN}[wire]


def items_field(wire: str) -> str:
    return "input" if wire == "responses" else "messages"


async def get_json(gw: RunningGateway, path: str, key: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(
            gw.root + path, headers={"Authorization": f"Bearer {key}"}) as r:
        return r.status, await r.json(content_type=None)


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [dict(r.access) for r in caplog.records  # type: ignore[attr-defined]
            if r.name == "gateway.access" and hasattr(r, "access")]


def parse_context(value: str) -> tuple[str, dict[str, float]]:
    level, *pairs = [p.strip() for p in value.split(";")]
    return level, {k: float(v) for k, v in (p.split("=") for p in pairs)}


# -- per-team policies on the three wires ---------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
async def test_report_team_sends_as_written_and_reject_team_gets_its_wires_400(
    gw: RunningGateway, upstream: RecordingWires, wire: str,
) -> None:
    raw = await send_broken(gw, wire, KEYS["team-a"])
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"
    assert "x-gateway-repairs" not in raw.headers  # nothing was changed
    (sent,) = upstream.sent(PATH_OF[wire] if wire != "anthropic" else "/v1/messages")
    assert sent[items_field(wire)] == client_items(wire)  # as the team wrote it
    before = len(upstream.bodies)
    if wire == "anthropic":
        with pytest.raises(anthropic.BadRequestError) as a_info:
            await send_broken(gw, wire, KEYS["team-b"])
        body = a_info.value.response.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        message = body["error"]["message"]
    else:
        with pytest.raises(openai.BadRequestError) as o_info:
            await send_broken(gw, wire, KEYS["team-b"])
        assert o_info.value.code == "invalid_history"
        message = o_info.value.message
    assert "orphan_tool_result_dropped" in message and "reject" in message
    assert len(upstream.bodies) == before  # never forwarded
    for key in KEYS.values():
        assert key not in message


@pytest.mark.parametrize("wire", WIRES)
async def test_a_streamed_request_under_reject_is_a_plain_400_before_any_event(
    gw: RunningGateway, upstream: RecordingWires, wire: str,
) -> None:
    """A streaming client of a reject team gets the refusal as an HTTP 400 its SDK raises,
    not a 200 stream that ends in an error event."""
    error = anthropic.BadRequestError if wire == "anthropic" else openai.BadRequestError
    with pytest.raises(error) as info:
        await send_broken(gw, wire, KEYS["team-b"], stream=True)
    response = info.value.response
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/json")
    assert "orphan_tool_result_dropped" in response.text
    assert upstream.bodies == []


@pytest.mark.parametrize("wire", WIRES)
async def test_a_streamed_report_team_request_goes_as_sent_with_the_header(
    gw: RunningGateway, upstream: RecordingWires, wire: str,
) -> None:
    raw = await send_broken(gw, wire, KEYS["team-a"], stream=True)
    assert raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"
    assert raw.headers["content-type"].startswith("text/event-stream")
    (sent,) = [json.loads(b) for _, b in upstream.bodies]
    assert sent[items_field(wire)] == client_items(wire)


@pytest.mark.parametrize("wire", WIRES)
async def test_a_team_without_a_policy_and_a_plain_key_get_the_global_repair(
    gw: RunningGateway, upstream: RecordingWires, wire: str,
) -> None:
    for key in (KEYS["team-c"], PLAIN_KEY, MASTER_KEY):
        raw = await send_broken(gw, wire, key)
        assert raw.headers["x-gateway-repairs"] == "orphan_tool_result_dropped=1", key
        assert "x-gateway-would-repair" not in raw.headers
        sent = json.loads(upstream.bodies[-1][1])
        assert "stale output" not in json.dumps(sent[items_field(wire)])  # dropped


async def test_a_global_report_policy_is_overridden_by_a_teams_repair(
    gateway_factory: GatewayFactory, upstream: RecordingWires,
) -> None:
    config = team_config(upstream)
    config["repair"] = {"policy": "report", "owners": {"team-c": {"policy": "repair"},
                                                       "team-b": {"policy": "reject"}}}
    gw = await gateway_factory(config)
    raw = await send_broken(gw, "chat", KEYS["team-a"])  # no owner entry: the global report
    assert raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"
    raw = await send_broken(gw, "chat", KEYS["team-c"])
    assert raw.headers["x-gateway-repairs"] == "orphan_tool_result_dropped=1"
    with pytest.raises(openai.BadRequestError):
        await send_broken(gw, "chat", KEYS["team-b"])
    sent = upstream.sent("/v1/chat/completions")
    assert sent[0]["messages"] == CHAT_BROKEN
    assert len(sent[1]["messages"]) == 3


async def test_a_valid_history_of_a_reject_team_passes_untouched(
    gw: RunningGateway, upstream: RecordingWires,
) -> None:
    body = (b'{"model":"chat","messages":[{"role":"user","content":"hi"},'
            b'{"role":"assistant","content":"hello"},{"role":"user","content":"go"}]}')
    async with aiohttp.ClientSession() as s, s.post(
            gw.base_url + "/chat/completions", data=body,
            headers={"Authorization": f"Bearer {KEYS['team-b']}",
                     "Content-Type": "application/json"}) as r:
        assert r.status == 200
        assert "x-gateway-would-repair" not in r.headers
    assert json.loads(upstream.bodies[0][1])["messages"] == json.loads(body)["messages"]


async def test_a_rotated_key_keeps_its_teams_reject_and_one_metrics_owner(
    gateway_factory: GatewayFactory, upstream: RecordingWires,
) -> None:
    config = team_config(upstream)
    config["gateway"]["api_keys"].append({"key": "key-team-b-next-0007", "owner": "team-b"})
    gw = await gateway_factory(config)
    for key in (KEYS["team-b"], "key-team-b-next-0007"):
        with pytest.raises(openai.BadRequestError) as info:
            await send_broken(gw, "chat", key)
        assert info.value.code == "invalid_history"
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_owner_requests_total", owner="team-b",
                         outcome="rejected") == 2
    assert {s["owner"] for s in metrics.series("gateway_owner_requests_total")} == {"team-b"}
    # The old key removed: refused; the new one still rejected (the team's policy stays).
    config["gateway"]["api_keys"] = [k for k in config["gateway"]["api_keys"]
                                     if not isinstance(k, dict) or k["key"] != KEYS["team-b"]]
    after = await gateway_factory(config)
    with pytest.raises(openai.AuthenticationError):
        await send_broken(after, "chat", KEYS["team-b"])
    with pytest.raises(openai.BadRequestError):
        await send_broken(after, "chat", "key-team-b-next-0007")
    assert upstream.bodies == []


def test_policies_in_a_litellm_config_file_alongside_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The YAML a platform team writes: LiteLLM's model_list and general_settings, keys
    from the environment with owners, per-owner policies. ``check-config`` resolves it
    with every key masked, and each team gets its policy."""
    monkeypatch.setenv("TEAM_A_KEY", KEYS["team-a"])
    monkeypatch.setenv("TEAM_B_KEY", KEYS["team-b"])
    monkeypatch.setenv("UPSTREAM_OPENAI_KEY", "sk-upstream-secret-0008")
    path = tmp_path / "litellm.yaml"
    path.write_text(yaml.safe_dump({
        "model_list": [{"model_name": "gpt-4o", "litellm_params": {
            "model": "openai/gpt-4o", "api_key": "os.environ/UPSTREAM_OPENAI_KEY"}}],
        "general_settings": {"master_key": MASTER_KEY},
        "gateway": {"api_keys": [{"key": "os.environ/TEAM_A_KEY", "owner": "team-a"},
                                 {"key": "os.environ/TEAM_B_KEY", "owner": "team-b"}]},
        "repair": {"policy": "repair", "owners": {
            "team-a": {"policy": "report"},
            "team-b": {"policy": "reject", "invisible_chars": "reject"}}},
        "sessions": {"data_dir": str(tmp_path / "d")},
    }))
    path.chmod(0o600)
    config = load_config(path)
    owners = config.repair.owners
    assert owners["team-a"].policy == "report" and owners["team-b"].policy == "reject"
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    for secret in (KEYS["team-a"], KEYS["team-b"], MASTER_KEY, "sk-upstream-secret-0008"):
        assert secret not in out
    assert "reject" in out and "team-b" in out


@pytest.mark.parametrize(("owners", "path"), [
    ({"team-z": {"policy": "reject"}}, "team-z"),
    ({"team-a": {"policy": "refuse"}}, "repair.owners.team-a.policy"),
    ({"team-a": {"policy": "report", "tool_outputs": "shred"}},
     "repair.owners.team-a.tool_outputs"),
])
def test_a_wrong_team_policy_stops_start_up_naming_it(owners: dict[str, Any],
                                                       path: str) -> None:
    raw = {"model_list": [{"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_base": "http://127.0.0.1:9/v1", "api_key": "up-12345678"}}],
        "gateway": {"api_keys": [{"key": KEYS["team-a"], "owner": "team-a"}]},
        "repair": {"owners": owners}}
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert path in str(info.value)
    assert KEYS["team-a"] not in str(info.value)


# -- the access log and /metrics -----------------------------------------------------------


async def test_one_access_line_per_request_with_the_team_and_never_a_key_or_text(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    secret_text = "my password is hunter2-hunter2"
    await send_broken(gw, "chat", KEYS["team-a"])
    with pytest.raises(anthropic.BadRequestError):
        await send_broken(gw, "anthropic", KEYS["team-b"])
    async with oa(gw, KEYS["team-c"]) as c:
        await c.responses.create(model="resp", input=secret_text)
    async with oa(gw, "key-nobody-has-0009") as c:
        with pytest.raises(openai.AuthenticationError):
            await c.chat.completions.create(model="chat", messages=[user(secret_text)])
    lines = access_lines(caplog)
    assert [(line.get("owner"), line["status"], line.get("wire")) for line in lines] == [
        ("team-a", 200, "chat"), ("team-b", 400, "anthropic"), ("team-c", 200, "responses"),
        (None, 401, None)]
    assert lines[0]["would_repair"] == {"orphan_tool_result_dropped": 1}
    assert lines[1]["rejected"] == 1
    assert len({line["request_id"] for line in lines}) == 4
    text = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (*KEYS.values(), "key-nobody-has-0009", secret_text, "stale output"):
        assert secret not in text


async def test_the_json_access_line_carries_the_team_at_the_top_level(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture,
) -> None:
    from gateway.telemetry.access_log import JsonFormatter, RedactingFormatter

    caplog.set_level(logging.INFO, logger="gateway.access")
    await send_broken(gw, "responses", KEYS["team-a"], session="sess-json")
    (record,) = [r for r in caplog.records if r.name == "gateway.access"]
    line = json.loads(RedactingFormatter(JsonFormatter()).format(record))
    assert line["msg"] == "access" and line["owner"] == "team-a"
    assert line["session"] == "sess-json" and line["wire"] == "responses"
    assert line["context"] in ("comfortable", "warning", "pressure", "critical")
    assert len(line["client"]) == 8 and line["client"] not in KEYS["team-a"]


async def test_a_session_id_cannot_forge_fields_or_lines_in_the_text_access_log(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture,
) -> None:
    """Session ids are the client's words: one with spaces and ``key=value`` pairs (the
    header) or a line break (``prompt_cache_key``) must not add an ``owner=`` field or a
    whole forged line to the team's access log."""
    caplog.set_level(logging.INFO, logger="gateway.access")
    spaced = "s1 owner=platform status=500"
    broken = "p\nrequest_id=req_forged owner=platform status=200"
    async with oa(gw, KEYS["team-c"], **{"x-session-id": spaced}) as c:
        await c.chat.completions.create(model="chat", messages=[user("hi")])
    async with oa(gw, KEYS["team-c"]) as c:
        await c.chat.completions.create(model="chat", messages=[user("hi")],
                                        prompt_cache_key=broken)
    records = [r for r in caplog.records if r.name == "gateway.access"]
    texts = [r.getMessage() for r in records]
    assert len(texts) == 2
    for text, session in zip(texts, (spaced, broken), strict=True):
        assert "\n" not in text and "\r" not in text
        # Read as a log shipper reads key=value lines (a quoted value is one value).
        pairs = re.findall(r'(?:^| )([a-z_]+)=("(?:[^"\\]|\\.)*"|[^ ]*)', text)
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), keys
        fields = dict(pairs)
        assert fields["owner"] == "team-c" and fields["status"] == "200"
        assert json.loads(fields["session"]) == session  # quoted, and read back as sent
    assert [line["session"] for line in access_lines(caplog)] == [spaced, broken]


async def test_metrics_labels_stay_bounded_whatever_clients_send(
    gw: RunningGateway,
) -> None:
    """Keys, texts, session ids and made-up model names never become label values: a
    thousand sessions or a hostile client add no series."""
    await send_broken(gw, "chat", KEYS["team-a"], session="warm-up")
    baseline = {(n, tuple(sorted(lab.items()))) for n, lab, _ in (await scrape(gw.root)).samples}
    hostile = ['<script>alert(1)</script>', KEYS["platform"], "x" * 300, "a\"b{c}=d"]
    for i, word in enumerate(hostile):
        async with oa(gw, KEYS["team-c"], **{"x-session-id": f"sess-{i}-{word[:40]}"}) as c:
            await c.chat.completions.create(model="chat", messages=[user(word)],
                                            user=word, metadata={"team": "x"})
            with pytest.raises(openai.NotFoundError):
                await c.chat.completions.create(model=word, messages=[user(word)])
    metrics = await scrape(gw.root)
    text = metrics.text
    for word in [*hostile, *KEYS.values(), PLAIN_KEY, MASTER_KEY, "sess-0"]:
        assert word not in text
    labels = {v for _, lab, _ in metrics.samples for v in lab.values()}
    assert all(len(v) < 64 for v in labels)
    owners = {lab["owner"] for lab in metrics.series("gateway_owner_requests_total")}
    assert owners <= {*KEYS, "api_keys[4]", "master_key"}
    models = {lab["model"] for _, lab, _ in metrics.samples if "model" in lab}
    assert models <= {"chat", "resp", "claude", ""}
    now = {(n, tuple(sorted(lab.items()))) for n, lab, _ in metrics.samples}
    grown = {n for n, _ in now - baseline}
    # Only the unknown model's counters and per-source context series may be new.
    assert all(n.startswith(("gateway_requests_total", "gateway_request_duration",
                             "gateway_added_latency", "gateway_owner_requests_total",
                             "gateway_context", "gateway_prefix")) for n in grown), grown


async def test_metrics_behind_a_key_refuse_a_scraper_without_one(
    gateway_factory: GatewayFactory, upstream: RecordingWires,
) -> None:
    gw = await gateway_factory(team_config(upstream, gateway={"metrics_auth": True}))
    async with aiohttp.ClientSession() as s:
        async with s.get(gw.root + "/metrics") as r:
            assert r.status == 401
            assert "gateway_requests_total" not in await r.text()
        async with s.get(gw.root + "/metrics",
                         headers={"Authorization": f"Bearer {KEYS['platform']}"}) as r:
            assert r.status == 200
            assert "# TYPE gateway_owner_requests_total counter" in await r.text()


async def test_owner_metrics_tell_report_repair_and_reject_apart(
    gw: RunningGateway,
) -> None:
    await send_broken(gw, "chat", KEYS["team-a"])
    await send_broken(gw, "responses", KEYS["team-c"])
    with pytest.raises(anthropic.BadRequestError):
        await send_broken(gw, "anthropic", KEYS["team-b"])
    async with oa(gw, KEYS["team-b"]) as c:
        await c.chat.completions.create(model="chat", messages=[user("a clean one")])
    m = await scrape(gw.root)
    want = {("team-a", "chat", "would_repair"): 1, ("team-c", "resp", "repaired"): 1,
            ("team-b", "claude", "rejected"): 1, ("team-b", "chat", "clean"): 1}
    got = {(lab["owner"], lab["model"], lab["outcome"]): v for n, lab, v in m.samples
           if n == "gateway_owner_requests_total"}
    assert got == want
    assert m.total("gateway_owner_repairs_total", owner="team-a", policy="report",
                   kind="orphan_tool_result_dropped") == 1
    assert m.total("gateway_owner_repairs_total", owner="team-b", policy="reject") == 1
    assert m.total("gateway_owner_repairs_total", owner="team-c", policy="repair") == 1
    # The report team's history was not repaired: the global repair counter did not move.
    assert m.total("gateway_repairs_total", model="chat") == 0


# -- the context report ----------------------------------------------------------------------


INSTRUCTIONS = "Follow the house rules to the letter. " * 100  # 3,800 characters
BIG_RESULT = "row,value\n" * 2_000  # 20,000 characters


@pytest.mark.parametrize("wire", WIRES)
async def test_context_sources_add_up_to_the_inspectors_total(
    gw: RunningGateway, wire: str,
) -> None:
    if wire == "anthropic":
        async with an(gw, KEYS["team-c"]) as a:
            raw = await a.messages.with_raw_response.create(
                model="claude", max_tokens=16, system=INSTRUCTIONS,
                messages=[{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "hello"},
                          {"role": "user", "content": "go on"}])
    else:
        async with oa(gw, KEYS["team-c"]) as c:
            if wire == "chat":
                raw = await c.chat.completions.with_raw_response.create(
                    model="chat", messages=[system(INSTRUCTIONS), user("hi"),
                                            assistant("hello"), user("go on")])
            else:
                raw = await c.responses.with_raw_response.create(
                    model="resp", instructions=INSTRUCTIONS,
                    input=[{"role": "user", "content": "hi"},
                           {"role": "assistant", "content": "hello"},
                           {"role": "user", "content": "go on"}])
    level, numbers = parse_context(raw.headers["x-gateway-context"])
    assert 900 < numbers["system"] < 1_000
    status, entry = await get_json(gw, f"/ui/api/requests/{raw.headers['x-request-id']}",
                                   KEYS["team-c"])
    assert status == 200
    context = entry["context"]
    assert context["level"] == level
    assert context["total"] == sum(int(numbers[s]) for s in ("system", "tools", "history",
                                                             "turn"))
    assert {k: context[k] for k in numbers if k != "used"} == {
        k: int(v) for k, v in numbers.items() if k != "used"}
    assert numbers["tool_results"] + numbers["summary"] + numbers["images"] <= \
        numbers["history"]


# -- prefix stability ("why did the prompt cache miss") -------------------------------------


RULES = "Rule: answer in English and cite the file you read. " * 40  # ~2,100 characters
READ = {"type": "function", "function": {"name": "read", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}
WRITE = {"type": "function", "function": {"name": "write", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"},
                                     "text": {"type": "string"}}}}}


async def prefixes(gw: RunningGateway, session: str, key: str) -> list[dict[str, Any]]:
    """The session's prefix reports as the inspector lists them, oldest first."""
    status, listed = await get_json(gw, f"/ui/api/requests?session={session}", key)
    assert status == 200
    return [row["prefix"] for row in reversed(listed["requests"])]


async def chat_turns(gw: RunningGateway, key: str, session: str,
                     turns: list[dict[str, Any]]) -> None:
    """Chat requests of one session (each item: the request's keyword arguments)."""
    async with oa(gw, key, **{"x-session-id": session}) as c:
        for kwargs in turns:
            await c.chat.completions.create(model="chat", **kwargs)


async def test_reordered_tools_are_named_as_the_cause(gw: RunningGateway) -> None:
    first = [system(RULES), user("read a")]
    second = [*first, assistant("done"), user("read b")]
    await chat_turns(gw, KEYS["team-c"], "tools-moved", [
        {"messages": first, "tools": [READ, WRITE]},
        {"messages": second, "tools": [WRITE, READ]},
        {"messages": [*second, assistant("ok"), user("c")], "tools": [WRITE, READ]}])
    causes = [p["cause"] for p in await prefixes(gw, "tools-moved", KEYS["team-c"])]
    assert causes == ["first", "tools", "appended"]
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_prefix_turns_total", model="chat", cause="tools") == 1
    assert metrics.total("gateway_prefix_lost_tokens_total", model="chat",
                         cause="tools") >= len(RULES) // 4


async def test_a_changed_system_prompt_on_the_messages_wire_is_named(
    gw: RunningGateway,
) -> None:
    async with an(gw, KEYS["team-c"], **{"x-session-id": "sys-changed"}) as a:
        history: list[dict[str, Any]] = [{"role": "user", "content": "read a"}]
        for turn, prompt in enumerate([RULES, RULES, "Today is Tuesday. " + RULES]):
            await a.messages.create(model="claude", max_tokens=16, system=prompt,
                                    messages=history)  # type: ignore[arg-type]
            history += [{"role": "assistant", "content": f"done {turn}"},
                        {"role": "user", "content": f"next {turn}"}]
    reports = await prefixes(gw, "sys-changed", KEYS["team-c"])
    assert [p["cause"] for p in reports] == ["first", "appended", "system"]
    assert reports[-1]["lost_tokens"] >= len(RULES) // 4


async def test_an_edited_message_mid_history_is_located(gw: RunningGateway) -> None:
    base = [system(RULES), user("read a.py"), assistant("it defines f"), user("and b.py"),
            assistant("it defines g"), user("now c.py")]
    edited = [*base[:3], user("and b.py, carefully"), *base[4:], assistant("h"),
              user("and d.py")]
    await chat_turns(gw, KEYS["team-c"], "edited-mid", [{"messages": base},
                                                       {"messages": edited}])
    broke = (await prefixes(gw, "edited-mid", KEYS["team-c"]))[-1]
    assert (broke["cause"], broke["index"], broke["field"]) == ("message", 3, "content")
    assert (broke["before"], broke["after"]) == ("and b.py", "and b.py, carefully")
    assert 0 < broke["lost_tokens"] < len(RULES) // 4  # the rules stayed cached


async def test_two_teams_on_one_session_id_get_the_admin_their_own_advice(
    gw: RunningGateway,
) -> None:
    """Team A keeps its prompt; team C changes its system prompt, under the same session id.
    The platform team's session page advises each team on its own turns, never one team's
    turns compared with the other's; each team sees only its own."""
    stable = [system(RULES), user("read a")]
    await chat_turns(gw, KEYS["team-a"], "shared-id", [
        {"messages": stable}, {"messages": [*stable, assistant("a"), user("read b")]}])
    await chat_turns(gw, KEYS["team-c"], "shared-id", [
        {"messages": [system("Short rules."), user("read x")]},
        {"messages": [system("Other rules."), user("read x"), assistant("x"), user("y")]}])
    status, view = await get_json(gw, "/ui/api/sessions/shared-id", KEYS["platform"])
    assert status == 200 and len(view["requests"]) == 4
    assert view["owners"] == ["team-c", "team-a"] and view["cache"] is None
    caches = {cache["owner"]: cache for cache in view["caches"]}
    assert caches["team-a"]["turns"] == caches["team-c"]["turns"] == 2
    assert len(caches["team-a"]["advice"]) == 1
    assert caches["team-a"]["advice"][0].startswith("Every turn kept the previous prompt")
    assert any("system" in tip for tip in caches["team-c"]["advice"])
    status, only = await get_json(gw, "/ui/api/sessions/shared-id?owner=team-a",
                                  KEYS["platform"])
    assert status == 200 and only["owners"] == ["team-a"]
    assert only["cache"] == caches["team-a"] and len(only["requests"]) == 2
    status, own = await get_json(gw, "/ui/api/sessions/shared-id", KEYS["team-c"])
    assert status == 200 and own["owners"] == ["team-c"] and own["cache"] == caches["team-c"]


def _blocks(*texts: str, mark: int | None = None) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts]
    if mark is not None:
        blocks[mark]["cache_control"] = {"type": "ephemeral"}
    return blocks


async def test_a_moved_cache_breakpoint_in_messages_is_no_break(gw: RunningGateway) -> None:
    """Claude Code moves its last ``cache_control`` forward every turn: the prompt the
    provider caches is the same, so the turn is ``appended``."""
    history = [{"role": "user", "content": _blocks("read a", mark=0)}]
    async with an(gw, KEYS["team-c"], **{"x-session-id": "bp-moved"}) as a:
        await a.messages.create(model="claude", max_tokens=16, system=RULES,
                                messages=history)  # type: ignore[arg-type]
        history = [{"role": "user", "content": _blocks("read a")},
                   {"role": "assistant", "content": "done"},
                   {"role": "user", "content": _blocks("read b", mark=0)}]
        await a.messages.create(model="claude", max_tokens=16, system=RULES,
                                messages=history)  # type: ignore[arg-type]
    assert [p["cause"] for p in await prefixes(gw, "bp-moved", KEYS["team-c"])] == [
        "first", "appended"]


async def test_a_moved_cache_breakpoint_in_the_system_blocks_is_no_break(
    gw: RunningGateway,
) -> None:
    """The same marker moved between the blocks of ``system`` (the prompt text is the
    same): documented as no part of the prompt, so no ``system`` break either."""
    async with an(gw, KEYS["team-c"], **{"x-session-id": "bp-system"}) as a:
        await a.messages.create(
            model="claude", max_tokens=16, system=_blocks(RULES, "Be brief.", mark=0),  # type: ignore[arg-type]
            messages=[{"role": "user", "content": "read a"}])
        await a.messages.create(
            model="claude", max_tokens=16, system=_blocks(RULES, "Be brief.", mark=1),  # type: ignore[arg-type]
            messages=[{"role": "user", "content": "read a"},
                      {"role": "assistant", "content": "done"},
                      {"role": "user", "content": "read b"}])
    assert [p["cause"] for p in await prefixes(gw, "bp-system", KEYS["team-c"])] == [
        "first", "appended"]


async def test_a_moved_cache_breakpoint_on_the_tools_is_no_break(gw: RunningGateway) -> None:
    tools = [{"name": "read", "input_schema": {"type": "object"}},
             {"name": "write", "input_schema": {"type": "object"}}]
    marked = [dict(tools[0], cache_control={"type": "ephemeral"}), tools[1]]
    moved = [tools[0], dict(tools[1], cache_control={"type": "ephemeral"})]
    history: list[dict[str, Any]] = [{"role": "user", "content": "read a"}]
    async with an(gw, KEYS["team-c"], **{"x-session-id": "bp-tools"}) as a:
        for turn, schemas in enumerate([marked, moved, tools, [tools[1], tools[0]]]):
            await a.messages.create(model="claude", max_tokens=16, system=RULES,
                                    tools=schemas, messages=history)  # type: ignore[arg-type]
            history += [{"role": "assistant", "content": f"done {turn}"},
                        {"role": "user", "content": f"next {turn}"}]
    # Moved, then gone: the same tools; reordered: a real change.
    assert [p["cause"] for p in await prefixes(gw, "bp-tools", KEYS["team-c"])] == [
        "first", "appended", "appended", "tools"]


async def test_one_session_id_on_two_models_is_two_sessions(gw: RunningGateway) -> None:
    turn = [{"messages": [system(RULES), user("hi")]}]
    await chat_turns(gw, KEYS["team-c"], "two-models", turn)
    async with oa(gw, KEYS["team-c"], **{"x-session-id": "two-models"}) as c:
        await c.responses.create(model="resp", instructions="other rules", input="hi")
    causes = [p["cause"] for p in await prefixes(gw, "two-models", KEYS["team-c"])]
    assert causes == ["first", "first"]


async def test_a_rejected_turn_is_no_turn_of_the_session(gw: RunningGateway) -> None:
    """A reject team's refused request reached no provider: the next accepted turn is
    compared with the last one that was sent."""
    good = [system(RULES), user("hi")]
    await chat_turns(gw, KEYS["team-b"], "with-reject", [{"messages": good}])
    with pytest.raises(openai.BadRequestError):
        await chat_turns(gw, KEYS["team-b"], "with-reject",
                         [{"messages": [system(RULES), *CHAT_BROKEN]}])
    await chat_turns(gw, KEYS["team-b"], "with-reject",
                     [{"messages": [*good, assistant("hello"), user("go on")]}])
    reports = await prefixes(gw, "with-reject", KEYS["team-b"])
    assert reports[1] is None  # the refused request: listed, without a prefix report
    assert [p["cause"] for p in reports if p] == ["first", "appended"]
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_prefix_turns_total", model="chat") == 2


async def test_context_right_after_a_compaction_counts_the_summary_as_sent(
    gateway_factory: GatewayFactory,
) -> None:
    """The request that compacts reports its window as the model receives it: the stored
    compaction as ``summary`` (part of ``history``), as the session's next turn does, and
    every source adding up to an estimate of the very messages the upstream got."""
    from tests.compaction.conftest import SYSTEM_PROMPT, agent_turn

    async with Referee(rules="openai", style="openai") as ref:
        gw = await gateway_factory({
            "model_list": [model_entry("demo", ref.base_url, model="openai/referee",
                                       max_input_tokens=4_000)],
            "gateway": {"api_keys": [{"key": KEYS["team-a"], "owner": "team-a"}]},
            "repair": {"owners": {"team-a": {"policy": "report"}}},
            "compaction": {"reserved_context_size": 0, "trigger_ratio": 0.5,
                           "block_ratio": 0.5}})
        history = [system(SYSTEM_PROMPT)]
        for i in range(12):
            history += agent_turn(i)
        history += [assistant("done"), user("what next?")]
        headers = []
        async with oa(gw, KEYS["team-a"], **{"x-session-id": "compacted"}) as c:
            for _ in range(2):
                raw = await c.chat.completions.with_raw_response.create(
                    model="demo", messages=history)  # type: ignore[arg-type]
                headers.append((raw.headers["x-gateway-compaction"].split(";")[0],
                                parse_context(raw.headers["x-gateway-context"])[1]))
                history += [assistant("ok"), user("and then?")]
        sent = [r.json()["messages"] for r in ref.requests
                if r.json()["messages"][0]["content"] == SYSTEM_PROMPT]
    (made, first), (reused, second) = headers
    assert (made, reused) == ("summarized", "reused")
    assert first["summary"] > 300 and first["turn"] == 0
    assert second["summary"] == first["summary"] and second["turn"] > 0
    for numbers, messages in zip((first, second), sent, strict=True):
        estimate = sum(3 + -(-len(m["content"]) // 4) for m in messages)
        assert numbers["system"] + numbers["history"] + numbers["turn"] == estimate
        assert numbers["tool_results"] == 0  # the compaction left none


# -- the inspector's API and gateway report ------------------------------------------------


UPSTREAM_SECRET = "sk-upstream-inspector-secret-0010"


async def test_the_inspector_never_shows_a_key_even_one_pasted_into_a_message(
    gateway_factory: GatewayFactory, upstream: RecordingWires,
) -> None:
    config = team_config(upstream)
    for entry in config["model_list"]:
        entry["litellm_params"]["api_key"] = UPSTREAM_SECRET
    gw = await gateway_factory(config)
    pasted = (f"my keys: {KEYS['team-b']} {MASTER_KEY} {UPSTREAM_SECRET} {PLAIN_KEY} "
              f"{KEYS['platform']}")
    async with oa(gw, KEYS["team-a"], **{"x-session-id": "pasted"}) as c:
        await c.chat.completions.create(model="chat",
                                        messages=[*CHAT_BROKEN[:-1], user(pasted)])
    async with an(gw, KEYS["team-b"]) as a:
        with pytest.raises(anthropic.BadRequestError):
            await a.messages.create(model="claude", max_tokens=8, messages=[
                *ANTHROPIC_BROKEN, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": pasted}])
    secrets = [*KEYS.values(), MASTER_KEY, UPSTREAM_SECRET, PLAIN_KEY]
    seen = []
    for key in (KEYS["team-a"], KEYS["platform"]):
        status, listed = await get_json(gw, "/ui/api/requests", key)
        assert status == 200
        seen.append(json.dumps(listed))
        for entry in listed["requests"]:
            seen.append(json.dumps((await get_json(
                gw, f"/ui/api/requests/{entry['request_id']}", key))[1]))
        seen.append(json.dumps((await get_json(gw, "/ui/api/sessions/pasted", key))[1]))
    captured = [json.loads(text) for text in seen if '"client_messages"' in text]
    assert captured and all("my keys: ***" in json.dumps(d["client_messages"])
                            for d in captured)  # captured, with the keys masked
    inspector = gw.app[STATE].telemetry.inspector
    await inspector.flush()
    stored = (Path(gw.config.sessions.data_dir) / "inspector.sqlite3").read_bytes()
    for secret in secrets:
        assert all(secret not in text for text in seen), secret
        assert secret.encode() not in stored, secret


async def test_a_rejected_request_in_the_inspector_names_team_policy_and_rule(
    gw: RunningGateway,
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await send_broken(gw, "responses", KEYS["team-b"])
    request_id = info.value.response.headers["x-request-id"]
    status, entry = await get_json(gw, f"/ui/api/requests/{request_id}", KEYS["team-b"])
    assert status == 200
    assert (entry["status"], entry["owner_name"], entry["policy"], entry["rejected"]) == (
        400, "team-b", "reject", True)
    assert [v["rule"] for v in entry["violations"]] == ["orphan_tool_result_dropped"]
    status, listed = await get_json(gw, "/ui/api/requests?status=4xx&owner=team-b",
                                    KEYS["platform"])
    assert [e["request_id"] for e in listed["requests"]] == [request_id]
    status, listed = await get_json(gw, "/ui/api/requests", KEYS["team-a"])
    assert listed["requests"] == []  # another team's refusal is not team A's business


async def test_gateway_report_counts_each_team_by_its_policy(
    gw: RunningGateway, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    for wire in WIRES:
        await send_broken(gw, wire, KEYS["team-a"])
        await send_broken(gw, wire, KEYS["team-c"])
        with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)):
            await send_broken(gw, wire, KEYS["team-b"])
    async with oa(gw, KEYS["team-a"]) as c:
        await c.chat.completions.create(model="chat", messages=[user("clean")])
        with pytest.raises(openai.NotFoundError):  # no owner resolved: in no team's row
            await c.chat.completions.create(model="no-such-model", messages=[user("x")])
    inspector = gw.app[STATE].telemetry.inspector
    await inspector.flush()
    config = tmp_path / "report.yaml"
    config.write_text(yaml.safe_dump({"sessions": {"data_dir": gw.config.sessions.data_dir},
                                      "gateway": {"ui": True}}))
    assert main(["report", "--config", str(config), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by = {(r["owner"], r["model"]): r for r in rows}
    assert {owner for owner, _ in by} == {"team-a", "team-b", "team-c"}  # no "anonymous"
    assert by[("team-a", "chat")]["requests"] == 2
    assert by[("team-a", "chat")]["needed_repair"] == 1
    assert by[("team-a", "chat")]["share"] == 0.5
    for model in ("chat", "resp", "claude"):
        assert by[("team-b", model)]["rejected"] == 1
        assert by[("team-c", model)]["top_kinds"][0]["kind"] == "orphan_tool_result_dropped"
    assert main(["report", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "team-a" in out and "team-b" in out
    for key in KEYS.values():
        assert key not in out


async def test_the_session_pages_archive_link_works_for_any_session_id(
    gw: RunningGateway,
) -> None:
    """Session ids are the client's words (``sprint#42?draft``): the archive link the
    session page gives must lead to that session's archive, not elsewhere."""
    session = "sprint#42?draft /x"
    async with oa(gw, KEYS["team-a"], **{"x-session-id": session}) as c:
        await c.chat.completions.create(model="chat", messages=[user("hi")])
    from urllib.parse import quote

    status, page = await get_json(gw, f"/ui/api/sessions/{quote(session, safe='')}",
                                  KEYS["team-a"])
    assert status == 200 and len(page["requests"]) == 1
    status, body = await get_json(gw, page["archive"], KEYS["team-a"])
    # No compaction yet: the archive endpoint's own answer for this session.
    assert status == 403 and session in body["error"]["message"]


async def test_a_compaction_mid_session_is_named_the_gateways_break(
    gateway_factory: GatewayFactory,
) -> None:
    """Turns of an agent session until the gateway compacts: that turn's prefix break is
    ``gateway`` (not blamed on the team), the turns reusing the compaction are
    ``appended`` again, and the summary shows in the context report from then on."""
    from tests.compaction.conftest import SYSTEM_PROMPT, agent_turn

    async with Referee(rules="openai", style="openai") as ref:
        gw = await gateway_factory({
            "model_list": [model_entry("demo", ref.base_url, model="openai/referee",
                                       max_input_tokens=4_000)],
            "gateway": {"api_keys": [{"key": KEYS["team-c"], "owner": "team-c"}],
                        "ui": True},
            "compaction": {"reserved_context_size": 0, "trigger_ratio": 0.5,
                           "block_ratio": 0.5}})
        history = [system(SYSTEM_PROMPT)]
        summaries = []
        async with oa(gw, KEYS["team-c"], **{"x-session-id": "agent"}) as c:
            for i in range(5):
                history += [*agent_turn(i), assistant("done"), user("next")]
                raw = await c.chat.completions.with_raw_response.create(
                    model="demo", messages=history)  # type: ignore[arg-type]
                summaries.append(parse_context(raw.headers["x-gateway-context"])[1]["summary"])
    reports = await prefixes(gw, "agent", KEYS["team-c"])
    causes = [p["cause"] for p in reports]
    assert causes == ["first", "appended", "gateway", "appended", "appended"]
    assert reports[2]["index"] is not None and reports[2]["lost_tokens"] > 500
    assert summaries[:2] == [0, 0] and summaries[2] > 0
    assert summaries[3] == summaries[4] == summaries[2]
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_prefix_turns_total", model="demo", cause="gateway") == 1
    assert metrics.total("gateway_owner_compactions_total", owner="team-c") >= 1


async def test_condensing_per_team_report_measures_and_condense_sends_less(
    gateway_factory: GatewayFactory, upstream: RecordingWires,
) -> None:
    config = team_config(upstream)
    config["repair"] = {"tool_outputs": "condense", "owners": {
        "team-a": {"tool_outputs": "report"}, "team-b": {"policy": "reject"}}}
    gw = await gateway_factory(config)
    listing = "\x1b[32mok\x1b[0m  tests/test_a.py::test_one PASSED   \n" * 40
    history = [user("run the tests"),
               assistant(None, tool_calls=[tool_call("c1", "sh", {"cmd": "pytest"})]),
               tool("c1", listing),
               assistant(None, tool_calls=[tool_call("c2", "sh", {"cmd": "pytest"})]),
               tool("c2", listing), user("and now?")]
    heads = {}
    for owner in ("team-a", "team-c"):
        async with oa(gw, KEYS[owner]) as c:
            raw = await c.chat.completions.with_raw_response.create(
                model="chat", messages=history)  # type: ignore[arg-type]
        heads[owner] = raw.headers
    assert "x-gateway-would-condense" in heads["team-a"]
    assert "x-gateway-condensed" not in heads["team-a"]
    assert "same_as_earlier=1" in heads["team-c"]["x-gateway-condensed"]
    as_written, condensed = upstream.sent("/v1/chat/completions")
    assert as_written["messages"] == history
    assert len(json.dumps(condensed["messages"])) < len(json.dumps(history)) // 2
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_condensed_outputs_total", action="report") >= 1
    assert metrics.total("gateway_condensed_outputs_total", action="condense") >= 1


# -- the whole thing through `gateway serve --workers 2` -----------------------------------


@pytest.mark.slow
async def test_a_litellm_yaml_with_team_policies_served_by_two_workers(
    upstream: RecordingWires, tmp_path: Path,
) -> None:
    """The config file as a platform team writes it (keys from the environment, owners,
    per-owner policies, JSON logs), served by ``gateway serve --workers 2``: each team gets
    its policy whichever worker answers, every request has one JSON access line with its
    team, no key is logged, and one scrape counts every worker's requests by team."""
    import asyncio
    import os
    import signal
    import sys

    from tests.conftest import free_port
    from tests.http import wait_until_serving

    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "model_list": wire_models(upstream.base_url),
        "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"},
        "gateway": {"port": port, "log_format": "json", "api_keys": [
            {"key": f"os.environ/KEY_{o.upper().replace('-', '_')}", "owner": o}
            for o in KEYS]},
        "repair": {"owners": POLICIES},
        "sessions": {"data_dir": str(tmp_path / "data")},
    }))
    config.chmod(0o600)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "LITELLM_MASTER_KEY": MASTER_KEY,
           **{f"KEY_{o.upper().replace('-', '_')}": k for o, k in KEYS.items()}}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log_path = tmp_path / "gateway.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.cli", "serve", "--config", str(config),
            "--workers", "2", env=env, stdout=asyncio.subprocess.DEVNULL, stderr=log)
        root = f"http://127.0.0.1:{port}"
        try:
            await wait_until_serving(root, lambda: None if proc.returncode is None
                                     else f"exit code {proc.returncode}")
            target = Served(root + "/v1", root)
            expected = []
            for _ in range(3):  # several connections: both workers answer some
                raw = await send_broken(target, "chat", KEYS["team-a"])
                assert raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"
                with pytest.raises(anthropic.BadRequestError):
                    await send_broken(target, "anthropic", KEYS["team-b"])
                raw = await send_broken(target, "responses", KEYS["team-c"])
                assert raw.headers["x-gateway-repairs"] == "orphan_tool_result_dropped=1"
                raw = await send_broken(target, "chat", MASTER_KEY)
                assert raw.headers["x-gateway-repairs"] == "orphan_tool_result_dropped=1"
                expected += [("team-a", 200), ("team-b", 400), ("team-c", 200),
                             ("master_key", 200)]
            scraped = await settled_scrape(root, lambda m: m.total(
                "gateway_owner_requests_total") == len(expected))
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
    for owner, outcome in (("team-a", "would_repair"), ("team-b", "rejected"),
                           ("team-c", "repaired"), ("master_key", "repaired")):
        assert scraped.total("gateway_owner_requests_total", owner=owner,
                             outcome=outcome) == 3, owner
    text = log_path.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    access = [line for line in lines if line.get("msg") == "access"
              and line.get("path") in PATH_OF.values()]
    assert sorted((a["owner"], a["status"]) for a in access) == sorted(expected)
    assert len({a["pid"] for a in access}) >= 1
    for secret in (*KEYS.values(), MASTER_KEY, "stale output"):
        assert secret not in text


@pytest.mark.parametrize("session", ["shared-id", None], ids=["same_session_id", "same_start"])
async def test_two_teams_never_share_a_prefix_report(gw: RunningGateway,
                                                     session: str | None) -> None:
    # Two teams run the same agent (same system prompt and first message), under one
    # session id or none: each team's turns are compared with its own, and neither's text
    # shows in the other's inspector.
    start = [system("You are Claude Code."), user("hi")]
    for team, text in (("team-c", "C-SECRET plan: buy Initech"), ("team-a", "A plan")):
        headers = {"x-session-id": session} if session else {}
        async with oa(gw, KEYS[team], **headers) as c:
            await c.chat.completions.create(
                model="chat", messages=[*start, assistant(text), user("ok")])
    status, listed = await get_json(gw, "/ui/api/requests", KEYS["team-a"])
    assert status == 200
    assert [row["prefix"]["cause"] for row in listed["requests"]] == ["first"]
    assert "C-SECRET" not in json.dumps(listed)


async def test_the_access_line_tells_a_teams_rotated_keys_apart(
    gateway_factory: GatewayFactory, upstream: RecordingWires,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The docs promise `client` is the first 8 hex of the key's SHA-256: during a rotation
    # the platform team sees which clients still send the old key.
    old, new = "key-rot-old-0011", "key-rot-new-0012"
    config = team_config(upstream)
    config["gateway"]["api_keys"] += [{"key": old, "owner": "team-r"},
                                      {"key": new, "owner": "team-r"}]
    gw = await gateway_factory(config)
    caplog.set_level(logging.INFO, logger="gateway.access")
    for key in (old, new):
        async with oa(gw, key) as c:
            await c.chat.completions.create(model="chat", messages=[user("hi")])
    lines = access_lines(caplog)
    assert [line["owner"] for line in lines] == ["team-r", "team-r"]
    assert [line["client"] for line in lines] == [
        hashlib.sha256(key.encode()).hexdigest()[:8] for key in (old, new)]


# The broken histories above (an orphan tool result) after a system prompt: on each wire,
# the position the client is told is its own, whether the model speaks the wire or is
# chat-only (then the gateway works on a chat translation with other positions).
@pytest.mark.parametrize(("wire", "where"), [("anthropic", "messages[2]"),
                                             ("responses", "input[1]")])
async def test_a_rejected_translated_history_names_the_clients_own_positions(
    gw: RunningGateway, wire: str, where: str,
) -> None:
    told = {}
    for model in ("chat", MODEL_OF[wire]):  # translated to a chat-only model, then native
        payload: dict[str, Any] = {"model": model, "max_tokens": 16}
        if wire == "anthropic":
            payload |= {"system": "You are terse.", "messages": ANTHROPIC_BROKEN}
        else:
            payload |= {"instructions": "You are terse.", "input": RESPONSES_BROKEN}
        async with aiohttp.ClientSession() as s, s.post(
                gw.root + PATH_OF[wire], json=payload,
                headers={"Authorization": f"Bearer {KEYS['team-b']}"}) as r:
            assert r.status == 400
            error = (await r.json())["error"]
        told[model] = (error.get("param"),
                       re.findall(r"(?:messages|input)\[\d+\]", error["message"]))
    assert told["chat"] == told[MODEL_OF[wire]], told
    assert told["chat"] == ("input" if wire == "responses" else None, [where]), told


async def test_the_context_report_counts_the_history_as_sent_after_a_repair(
    gw: RunningGateway, upstream: RecordingWires,
) -> None:
    # An orphan tool result of 20,000 characters is dropped by the repair: what fills the
    # window is the three short messages sent, turn after turn.
    history = [user("hi"), assistant("hello"), tool("call_gone", "x" * 20_000),
               user("go on")]
    async with oa(gw, KEYS["team-c"], **{"x-session-id": "ctx-sent"}) as c:
        for turn in range(2):
            raw = await c.chat.completions.with_raw_response.create(
                model="chat", messages=history)  # type: ignore[arg-type]
            sent = upstream.sent("/v1/chat/completions")[-1]["messages"]
            assert len(sent) == len(history) - 1  # the orphan left out
            _, sources = parse_context(raw.headers["x-gateway-context"])
            assert sum(sources.get(k, 0) for k in ("turn", "history", "tool_results")) < 200
            history = [*history, assistant(f"done {turn}"), user("and again")]


async def test_a_request_refused_before_its_flow_still_names_its_team_in_the_access_log(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    async with oa(gw, KEYS["team-c"]) as c:
        with pytest.raises(openai.NotFoundError):
            await c.chat.completions.create(model="no-such-model", messages=[user("hi")])
    (line,) = access_lines(caplog)
    assert (line["status"], line["owner"]) == (404, "team-c")
    # (and it is no request of the team's in the metrics: nothing was tried for it)
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_owner_requests_total", owner="team-c") == 0
