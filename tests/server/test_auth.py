"""Who may read stored conversations, key owners and rotation, the failed-auth limiter and
the optional key on /metrics: through real sockets, with a compacting referee upstream."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.config import parse_config
from gateway.referee import Referee
from gateway.server.app import create_app
from gateway.server.auth import PRINCIPAL, FailedAuthLimiter, owner_only
from tests.compaction.conftest import Gateways, Session, compaction_header, demo_config
from tests.compaction.test_e2e_sessions import REFEREE_WINDOW, grow_until_compacted
from tests.conftest import GatewayFactory, RunningGateway, model_entry, serve_app
from tests.factories import user
from tests.telemetry.promtext import Scrape


@pytest.fixture
async def ref() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai", context_window=REFEREE_WINDOW) as r:
        yield r


@pytest.fixture
async def gateways(tmp_path: Path) -> AsyncIterator[Gateways]:
    started = Gateways(tmp_path / "data")
    yield started
    for runner in reversed(list(started.runners.values())):
        await runner.cleanup()


async def get(root: str, path: str, key: str | None = None) -> tuple[int, Any, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with aiohttp.ClientSession() as http, http.get(root + path, headers=headers) as r:
        body = await r.json() if r.content_type == "application/json" else await r.text()
        return r.status, body, r.headers


def archive_path(session_id: str) -> str:
    return f"/v1/gateway/sessions/{session_id}/archive?to=999"


async def test_without_client_keys_a_compacted_sessions_archive_is_refused(
    gateways: Gateways, ref: Referee
) -> None:
    gw = await gateways.start(demo_config(ref))  # loopback, no gateway.api_keys
    s = Session(gw, session_id="open-1")
    await grow_until_compacted(s, ref)  # chat itself needs no key on loopback
    data = gateways.data_dir
    assert (data.stat().st_mode & 0o077, (data / "archive").stat().st_mode & 0o077) == (0, 0)
    # The store's database (with its WAL files) and every archive file: owner only too.
    files = [*data.glob("sessions.sqlite3*"), *(data / "archive").iterdir()]
    assert any(f.name == "sessions.sqlite3" for f in files) and len(files) > 1
    assert {f.name: oct(f.stat().st_mode & 0o777) for f in files} == {
        f.name: oct(0o600) for f in files}
    status, body, _ = await get(gw.root, archive_path("open-1"))
    assert status == 403
    assert body["error"]["code"] == "session_data_needs_auth"
    assert body["error"]["type"] == "permission_error"
    assert "gateway.api_keys" in body["error"]["message"]
    # A made-up key changes nothing: there is no owner to match it against.
    status, body, _ = await get(gw.root, archive_path("open-1"), "any-key")
    assert status == 403 and body["error"]["code"] == "session_data_needs_auth"


async def test_only_the_owner_reads_and_rotating_its_key_keeps_the_session(
    gateways: Gateways, ref: Referee
) -> None:
    before = {"api_keys": [{"key": "alice-key-1", "owner": "alice"}, "bob-key"]}
    gw = await gateways.start(demo_config(ref, gateway=before))
    s = Session(gw, session_id="rot-1", key="alice-key-1")
    compacted = await grow_until_compacted(s, ref)
    original = s.history[:-1]

    status, body, _ = await get(gw.root, archive_path("rot-1"), "alice-key-1")
    assert status == 200 and body["messages"] == original
    status, body, _ = await get(gw.root, archive_path("rot-1"), "bob-key")
    assert status == 403 and body["error"]["code"] == "session_not_owned"
    assert set(body) == {"error"}  # nothing of Alice's conversation
    # A session that does not exist answers the same: ids cannot be probed.
    status, missing, _ = await get(gw.root, archive_path("never-made"), "bob-key")
    assert status == 403 and missing["error"]["code"] == "session_not_owned"

    # Rotation: a second key for Alice, then the first one removed.
    during = {"api_keys": [{"key": "alice-key-1", "owner": "alice"},
                           {"key": "alice-key-2", "owner": "alice"}, "bob-key"]}
    await gateways.stop(gw)
    gw = await gateways.start(demo_config(ref, gateway=during))
    for key in ("alice-key-1", "alice-key-2"):
        status, body, _ = await get(gw.root, archive_path("rot-1"), key)
        assert status == 200 and body["messages"] == original, key
    after = {"api_keys": [{"key": "alice-key-2", "owner": "alice"}, "bob-key"]}
    await gateways.stop(gw)
    gw = await gateways.start(demo_config(ref, gateway=after))
    status, body, _ = await get(gw.root, archive_path("rot-1"), "alice-key-2")
    assert status == 200 and body["messages"] == original
    status, _, _ = await get(gw.root, archive_path("rot-1"), "alice-key-1")
    assert status == 401  # the old key is gone
    status, _, _ = await get(gw.root, archive_path("rot-1"), "bob-key")
    assert status == 403
    # The session itself goes on under the new key: its stored compaction is reused.
    s.gw, s.key = gw, "alice-key-2"
    stored = len(compacted.json()["messages"])
    mark = len(ref.requests)
    raw = await s.send([user("What is left to do?")])
    header = compaction_header(raw)
    assert header is not None and header[0] == "reused"
    assert len(ref.requests[mark:][-1].json()["messages"]) == stored + 2


async def test_a_plain_key_given_an_owner_name_keeps_its_archives(
    gateways: Gateways, ref: Referee
) -> None:
    gw = await gateways.start(demo_config(ref, gateway={"api_keys": ["carol-key-1"]}))
    s = Session(gw, session_id="legacy-1", key="carol-key-1")
    await grow_until_compacted(s, ref)
    original = s.history[:-1]
    await gateways.stop(gw)
    named = {"api_keys": [{"key": "carol-key-1", "owner": "carol"},
                          {"key": "carol-key-2", "owner": "carol"}, "dave-key"]}
    gw = await gateways.start(demo_config(ref, gateway=named))
    for key in ("carol-key-1", "carol-key-2"):
        status, body, _ = await get(gw.root, archive_path("legacy-1"), key)
        assert status == 200 and body["messages"] == original, key
    status, _, _ = await get(gw.root, archive_path("legacy-1"), "dave-key")
    assert status == 403


def limited_config(ref: Referee, **gateway: Any) -> dict[str, Any]:
    # A bucket of 10 that refills about once an hour: what a test run sees is the burst.
    return {"model_list": [model_entry("demo", ref.base_url)],
            "gateway": {"api_keys": ["right-key"], "log_level": "debug",
                        "failed_auth_limit": {"burst": 10, "per_minute": 0.02}, **gateway}}


async def test_fifty_bad_keys_in_a_burst_are_answered_429_after_the_limit(
    gateway_factory: GatewayFactory, ref: Referee, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    gw = await gateway_factory(limited_config(ref))
    body = {"model": "demo", "messages": [user("hi")]}
    async with aiohttp.ClientSession() as http:

        async def attempt(n: int) -> tuple[int, str | None, dict[str, Any]]:
            headers = {"Authorization": f"Bearer guess-{n:04d}-secret"}
            async with http.post(gw.base_url + "/chat/completions", json=body,
                                 headers=headers) as r:
                return r.status, r.headers.get("Retry-After"), await r.json()

        results = await asyncio.gather(*(attempt(n) for n in range(50)))
        statuses = [status for status, _, _ in results]
        assert statuses.count(401) == 10 and statuses.count(429) == 40
        for status, retry_after, payload in results:
            if status == 429:
                assert retry_after is not None and int(retry_after) >= 1
                assert payload["error"]["type"] == "rate_limit_error"
                assert payload["error"]["code"] == "too_many_failed_authentications"
        # While limited, even the right key is not looked at (no oracle for guesses) ...
        async with http.post(gw.base_url + "/chat/completions", json=body,
                             headers={"Authorization": "Bearer right-key"}) as r:
            assert r.status == 429
        # ... health stays public, and the failures are counted.
        async with http.get(gw.root + "/healthz") as r:
            assert r.status == 200
        async with http.get(gw.root + "/metrics") as r:
            scraped = Scrape(await r.text())
    assert scraped.total("gateway_auth_failures_total", reason="invalid_key") == 10
    assert scraped.total("gateway_auth_failures_total", reason="rate_limited") == 41
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "authentication failed from 127.0.0.1" in logged
    assert "guess-" not in logged and "right-key" not in logged


async def test_the_limit_is_per_source_address(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    gw = await gateway_factory(limited_config(ref))
    bad = {"Authorization": "Bearer wrong"}
    async with aiohttp.ClientSession() as http:
        statuses = []
        for _ in range(11):
            async with http.get(gw.base_url + "/models", headers=bad) as r:
                statuses.append(r.status)
        assert statuses == [401] * 10 + [429]
    # A client connecting from another loopback address is not limited.
    other = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    good = {"Authorization": "Bearer right-key"}
    async with (aiohttp.ClientSession(connector=other) as http,
                http.get(gw.base_url + "/models", headers=good) as r):
        assert r.status == 200


async def test_behind_a_balancer_the_limit_is_per_forwarded_client(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    # With use_x_forwarded_for every request comes from the balancer's address: the
    # failures are counted per client address it forwards, so one client's stale key does
    # not lock the others out.
    gw = await gateway_factory({**limited_config(ref),
                                "general_settings": {"use_x_forwarded_for": True}})
    async with aiohttp.ClientSession() as http:
        statuses = []
        for _ in range(11):
            async with http.get(gw.base_url + "/models", headers={
                    "Authorization": "Bearer wrong",
                    "X-Forwarded-For": "203.0.113.9, 10.0.0.66"}) as r:
                statuses.append(r.status)
        assert statuses == [401] * 10 + [429]
        async with http.get(gw.base_url + "/models", headers={
                "Authorization": "Bearer right-key", "X-Forwarded-For": "10.0.0.7"}) as r:
            assert r.status == 200


async def test_a_balancers_own_forwarded_line_is_the_one_believed(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    # A balancer that appends its own X-Forwarded-For line (not extending the client's)
    # names the client last: a client writing an allowed address in its own line first
    # is not let in by it.
    gw = await gateway_factory({**limited_config(ref), "general_settings": {
        "use_x_forwarded_for": True, "allowed_ips": ["10.0.0.1"]}})
    good = {"Authorization": "Bearer right-key"}
    async with aiohttp.ClientSession() as http:
        for lines, status in (([("X-Forwarded-For", "10.0.0.1"),
                                ("X-Forwarded-For", "203.0.113.9")], 403),
                              ([("X-Forwarded-For", "203.0.113.9"),
                                ("X-Forwarded-For", "10.0.0.1")], 200)):
            async with http.get(gw.base_url + "/models",
                                headers=[*good.items(), *lines]) as r:
                assert r.status == status


async def test_metrics_auth_puts_metrics_behind_a_key_and_health_stays_public(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    gw: RunningGateway = await gateway_factory(limited_config(ref, metrics_auth=True))
    status, _, _ = await get(gw.root, "/metrics")
    assert status == 401
    status, text, _ = await get(gw.root, "/metrics", "right-key")
    assert status == 200 and "gateway_auth_failures_total" in text
    status, body, _ = await get(gw.root, "/healthz")
    assert status == 200 and body["status"] == "ok"


async def test_metrics_auth_without_any_key_is_a_clear_403(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    gw = await gateway_factory({"model_list": [model_entry("demo", ref.base_url)],
                                "gateway": {"metrics_auth": True}})
    status, body, _ = await get(gw.root, "/metrics")
    assert status == 403 and "gateway.metrics_auth" in body["error"]["message"]


def test_a_limited_address_gets_its_tokens_back_over_time() -> None:
    now = [1000.0]
    limiter = FailedAuthLimiter(burst=3, per_minute=6, clock=lambda: now[0])
    assert [limiter.fail("10.0.0.1") for _ in range(3)] == [False, False, True]
    assert limiter.retry_after("10.0.0.1") == 10  # one token every 10 s
    assert limiter.retry_after("10.0.0.2") == 0  # other addresses are not affected
    now[0] += 10
    assert limiter.retry_after("10.0.0.1") == 0
    assert limiter.fail("10.0.0.1") is True  # one token back, used again at once


def test_the_limiter_forgets_the_oldest_addresses_first() -> None:
    limiter = FailedAuthLimiter(burst=1, per_minute=1, max_addresses=100, clock=lambda: 0.0)
    for n in range(1000):
        limiter.fail(f"10.0.{n // 256}.{n % 256}")
    assert limiter.retry_after("10.0.3.231") > 0  # the most recent is still limited
    assert limiter.retry_after("10.0.0.0") == 0  # memory is bounded: the first is forgotten


async def test_owner_only_guards_any_handler_of_stored_session_data(tmp_path: Path) -> None:
    """The check other session-data endpoints (the inspector) are built on."""

    @owner_only
    async def probe(request: web.Request) -> web.Response:
        principal = request[PRINCIPAL]
        assert principal is not None
        return web.json_response({"owners": list(principal.owner_ids)})

    async def serve(gateway: dict[str, Any]) -> tuple[web.AppRunner, str]:
        app = create_app(parse_config({"gateway": gateway,
                                       "sessions": {"data_dir": str(tmp_path)}}))
        app.router.add_get("/v1/gateway/probe", probe)
        return await serve_app(app)

    runner, root = await serve({})
    try:
        status, body, _ = await get(root, "/v1/gateway/probe")
        assert status == 403 and body["error"]["code"] == "session_data_needs_auth"
    finally:
        await runner.cleanup()
    runner, root = await serve({"api_keys": [{"key": "k1", "owner": "ops"}, "k2"]})
    try:
        status, one, _ = await get(root, "/v1/gateway/probe", "k1")
        status2, two, _ = await get(root, "/v1/gateway/probe", "k2")
        assert (status, status2) == (200, 200)
        assert one["owners"][0] != two["owners"][0]  # two owners, two namespaces
        status, _, _ = await get(root, "/v1/gateway/probe", "k3")
        assert status == 401
    finally:
        await runner.cleanup()


async def test_a_limited_anthropic_client_gets_anthropics_error_shape(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    gw = await gateway_factory(limited_config(ref))
    body = {"model": "demo", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as http:
        answers = []
        for n in range(12):
            async with http.post(gw.root + "/v1/messages", json=body,
                                 headers={"x-api-key": f"guess-{n}"}) as r:
                answers.append((r.status, r.headers.get("Retry-After"), await r.json()))
    status, retry_after, last = answers[-1]
    assert status == 429 and retry_after is not None
    assert last["type"] == "error" and last["error"]["type"] == "rate_limit_error"
    assert "too many failed authentications" in last["error"]["message"]
