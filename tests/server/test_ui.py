"""The repair inspector's API and pages: off by default, behind client auth (Basic for
browsers), recent requests with filters, request detail with the captured messages redacted
and truncated, session pages."""

from __future__ import annotations

import base64
from typing import Any

import aiohttp
import openai
import pytest

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import calls, tool, user

KEY = "inspector-client-key-0123"
OTHER = "another-client-key-4567"


def basic(user: str, password: str) -> dict[str, str]:
    """An Authorization header for HTTP Basic auth."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


BASIC = basic("me", KEY)


@pytest.fixture
async def referee() -> Any:
    async with Referee(rules="openai") as ref:
        yield ref


async def start(factory: GatewayFactory, ref: Referee, **gateway: Any) -> RunningGateway:
    return await factory({"model_list": [model_entry("demo", ref.base_url)],
                          "gateway": {"api_keys": [KEY, OTHER], "ui": True, **gateway}})


async def get(gw: RunningGateway, path: str, *, auth: dict[str, str] | None = BASIC,
              ) -> tuple[int, Any, Any]:
    async with aiohttp.ClientSession() as s, s.get(gw.root + path, headers=auth) as r:
        body = await r.json() if r.content_type == "application/json" else await r.text()
        return r.status, body, r.headers


async def test_inspector_is_off_unless_enabled(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await gateway_factory({"model_list": [model_entry("demo", referee.base_url)]})
    for path in ("/ui/", "/ui/api/requests"):
        status, _, _ = await get(gw, path, auth=None)
        assert status == 404


async def test_inspector_needs_a_client_key_and_browsers_are_asked_for_it(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await start(gateway_factory, referee)
    status, body, headers = await get(gw, "/ui/", auth=None)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic ")
    assert body["error"]["type"] == "authentication_error"
    status, _, _ = await get(gw, "/ui/api/requests", auth=basic("me", "wrong"))
    assert status == 401
    status, page, headers = await get(gw, "/ui/")
    assert status == 200 and "Repair inspector" in page
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "http" not in page.replace("http-equiv", "")  # no CDN: every asset is ours
    for asset in ("ui.js", "ui.css"):
        status, _, _ = await get(gw, f"/ui/static/{asset}")
        assert status == 200
    status, _, _ = await get(gw, "/ui/static/..%2Fui.py")
    assert status == 404
    # Basic auth is for the inspector only: the API still wants its usual headers.
    async with aiohttp.ClientSession() as s, s.get(gw.base_url + "/models", headers=BASIC) as r:
        assert r.status == 401


async def test_recent_requests_detail_and_filters(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await start(gateway_factory, referee, capture_bodies=True, capture_max_chars=100)
    secret_text = f"my key is {KEY} and sk-proj-{'a' * 30}"
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0) as c:
        await c.chat.completions.create(model="demo", messages=[user("fine")])
        await c.chat.completions.create(
            model="demo", messages=[user(secret_text), calls("call_1"), user("x" * 500)],
            extra_headers={"x-session-id": "sess-ui"})
        with pytest.raises(openai.NotFoundError):
            await c.chat.completions.create(model="nope", messages=[user("a")])
    status, listing, _ = await get(gw, "/ui/api/requests")
    assert status == 200
    rows = listing["requests"]
    assert [r["status"] for r in rows] == [404, 200, 200]  # most recent first
    repaired = rows[1]
    assert repaired["repairs"] == {"tool_result_synthesized": 1}
    assert "client_messages" not in repaired  # bodies only on the detail page
    _, only_repaired, _ = await get(gw, "/ui/api/requests?kind=tool_result_synthesized")
    assert [r["request_id"] for r in only_repaired["requests"]] == [repaired["request_id"]]
    _, only_4xx, _ = await get(gw, "/ui/api/requests?status=4xx")
    assert [r["status"] for r in only_4xx["requests"]] == [404]
    _, by_model, _ = await get(gw, "/ui/api/requests?model=demo")
    assert len(by_model["requests"]) == 2
    status, detail, _ = await get(gw, f"/ui/api/requests/{repaired['request_id']}")
    assert status == 200
    assert detail["anomalies"][0]["kind"] == "tool_result_synthesized"
    assert [a["verdict"] for a in detail["attempts_detail"]] == ["ok"]
    sent, received = detail["client_messages"], detail["upstream_messages"]
    assert len(sent) == 3 and len(received) == 4
    assert received[2]["role"] == "tool" and received[2]["tool_call_id"] == "call_1"
    assert KEY not in str(detail) and "sk-proj-" not in str(detail)
    assert "***" in sent[0]["content"]
    assert sent[2]["content"].startswith("x" * 100) and "more characters" in sent[2]["content"]
    status, session, _ = await get(gw, "/ui/api/sessions/sess-ui")
    assert [r["request_id"] for r in session["requests"]] == [repaired["request_id"]]
    assert session["archive"].endswith("/sess-ui/archive")
    status, _, _ = await get(gw, "/ui/api/requests/req_unknown")
    assert status == 404
    # Another client key sees none of these requests.
    other = basic("me", OTHER)
    _, theirs, _ = await get(gw, "/ui/api/requests", auth=other)
    assert theirs["requests"] == []
    status, _, _ = await get(gw, f"/ui/api/requests/{repaired['request_id']}", auth=other)
    assert status == 404
    _, their_session, _ = await get(gw, "/ui/api/sessions/sess-ui", auth=other)
    assert their_session["requests"] == []


async def test_without_capture_no_bodies_are_kept(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await start(gateway_factory, referee)
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0) as c:
        await c.chat.completions.create(model="demo", messages=[user("a"), tool("ghost")])
    _, listing, _ = await get(gw, "/ui/api/requests")
    assert listing["capture_bodies"] is False
    _, detail, _ = await get(gw, f"/ui/api/requests/{listing['requests'][0]['request_id']}")
    assert detail["client_messages"] is None and detail["upstream_messages"] is None
    assert detail["repairs"] == {"orphan_tool_result_dropped": 1}
