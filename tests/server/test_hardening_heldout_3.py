"""Held-out hardening, third round, from the outside: upstreams whose answers carry a key
in odd places (relayed headers, JSON-escaped in an error body), odd HTTP from upstreams
(huge headers, informational answers, redirects off loopback, odd Retry-After values), the
gateway's less used routes (the Azure deployment path, ``/v1/responses/compact``, the dry
run) with hostile bodies, and which credential wins when a client sends two. Bad input gets
a clear 4xx in the client's wire format, a broken upstream a clean 5xx in it, every wait
ends by the deadline and no key of any kind comes out.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.wires.json_prefix import ObjectPrefix
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.faulty_upstream import (
    FaultyUpstream,
    Received,
    Writer,
    answer,
    head,
    trickle,
)
from tests.fakes.three_wires import (
    ThreeWires,
    anthropic_events,
    anthropic_whole,
    chat_events,
    chat_whole,
    responses_events,
    responses_whole,
    wire_models,
)
from tests.http import post
from tests.server.test_hardening_heldout import assert_wire_error

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
CHAT = "/v1/chat/completions"

CLIENT_KEY = "sk-client-ROUND3-0a1b2c3d4e"
MASTER_KEY = "sk-master-ROUND3-5f6a7b8c9d"
# An upstream secret the way AWS and many proxies write them: with '/' and '+' (a JSON
# encoder that escapes '/' writes it as '\/').
UPSTREAM_KEY = "up/ROUND3+secret/0e1f2a3b4c=="
KEYS = (CLIENT_KEY, MASTER_KEY, UPSTREAM_KEY)

# (path, model): a native upstream of each wire, and the agent wires translated to chat.
WIRE_MODELS = [(CHAT, "chat"), (MESSAGES, "claude"), (MESSAGES, "chat"), (RESPONSES, "resp"),
               (RESPONSES, "chat")]


def body_for(path: str, model: str, **extra: Any) -> dict[str, Any]:
    """A small valid body of the wire of ``path`` for ``model``."""
    if path == MESSAGES:
        return {"model": model, "max_tokens": 16,
                "messages": [{"role": "user", "content": "hi"}], **extra}
    if path == RESPONSES:
        return {"model": model, "input": "hi", **extra}
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def upstream_whole(path: str, model: str) -> dict[str, Any]:
    if model == "chat":
        return chat_whole("up")
    return anthropic_whole("up") if path == MESSAGES else responses_whole("up")


def upstream_events(path: str, model: str) -> list[bytes]:
    if model == "chat":
        return chat_events("up")
    return anthropic_events("up") if path == MESSAGES else responses_events("up")


def escaped_forms(key: str) -> list[str]:
    """The key as written, as PHP's json_encode writes it ('/' escaped) and as .NET's
    System.Text.Json does ('+' as a unicode escape)."""
    return [key, key.replace("/", "\\/"), key.replace("+", "\\u002B")]


def leaked(data: str | bytes) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [form for key in KEYS for form in escaped_forms(key) if form in text]


def error_shape(path: str, status: int, body: Any) -> str:
    return assert_wire_error(RESPONSES if path == CHAT else path, status, body)


@pytest.fixture
async def faulty() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


@pytest.fixture
async def wires() -> AsyncIterator[ThreeWires]:
    async with ThreeWires() as up:
        yield up


def keyed(base_url: str) -> list[dict[str, Any]]:
    models = wire_models(base_url)
    for m in models:
        m["litellm_params"]["api_key"] = UPSTREAM_KEY
    return models


async def keyed_gateway(gateway_factory: GatewayFactory, base_url: str,
                        **gateway: Any) -> RunningGateway:
    return await gateway_factory({
        "model_list": keyed(base_url),
        "general_settings": {"master_key": MASTER_KEY},
        "gateway": {"api_keys": [CLIENT_KEY], "ui": True, "capture_bodies": True, **gateway},
        "recovery": {"max_transient_retries": 0, "backoff_base": 0.001, "backoff_cap": 0.002,
                     "deadline": 5.0},
    })


AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}


async def everything_visible(gw: RunningGateway, caplog: pytest.LogCaptureFixture,
                             replies: list[Any]) -> str:
    """Every channel a key could leak through as one text: replies (bodies and headers,
    JSON-decoded too), logs, spans, /metrics and the inspector's API."""
    seen = []
    for r in replies:
        seen.append(r.raw.decode("utf-8", "replace"))
        seen.append(json.dumps(list(r.headers.items())))
        with contextlib.suppress(ValueError):
            seen.append(json.dumps(json.loads(r.raw), ensure_ascii=False))
    master = {"Authorization": f"Bearer {MASTER_KEY}"}
    async with aiohttp.ClientSession() as s:
        for where in ("/metrics", "/ui/api/requests"):
            async with s.get(gw.root + where, headers=master) as got:
                seen.append(await got.text())
        async with s.get(gw.root + "/ui/api/requests", headers=master) as got:
            listed = await got.json() if got.status == 200 else {}
        for entry in (listed.get("requests") or [])[:20]:
            async with s.get(gw.root + f"/ui/api/requests/{entry['request_id']}",
                             headers=master) as got:
                seen.append(await got.text())
    spans = gw.spans.get_finished_spans()
    seen.append(json.dumps([{"name": s.name, "attrs": dict(s.attributes or {}),
                             "events": [dict(e.attributes or {}) for e in s.events]}
                            for s in spans], default=str))
    seen.append(caplog.text)
    return "\n".join(seen)


# --- keys in what an upstream sends back ------------------------------------------------

KEYED_HEADERS = {
    "x-ratelimit-limit-requests": f"100; key={UPSTREAM_KEY}",
    "x-ratelimit-remaining-tokens": UPSTREAM_KEY,
    "x-request-id": f"req-{UPSTREAM_KEY}",
    "openai-version": MASTER_KEY,
    "openai-processing-ms": CLIENT_KEY,
    "anthropic-ratelimit-requests-limit": UPSTREAM_KEY,
    "retry-after": UPSTREAM_KEY,
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_relayed_upstream_headers_quoting_a_key_never_reach_the_client(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, model: str,
    stream: bool, caplog: pytest.LogCaptureFixture,
) -> None:
    # Rate-limit and request-id headers are relayed to the client: a proxy that names the
    # key's bucket in them (or echoes what it was sent) must not hand the key on.
    caplog.set_level(logging.DEBUG)
    if stream:
        data = b"".join(upstream_events(path, model))
        faulty.then(answer(200, data, {"Content-Type": "text/event-stream", **KEYED_HEADERS}))
    else:
        data = json.dumps(upstream_whole(path, model)).encode()
        faulty.then(answer(200, data, {"Content-Type": "application/json", **KEYED_HEADERS}))
    gw = await keyed_gateway(gateway_factory, faulty.base_url)
    reply = await post(gw.root + path, body_for(path, model, stream=stream), headers=AUTH)
    assert reply.status == 200, reply.raw[:300]
    assert b"hello" in reply.raw
    shown = await everything_visible(gw, caplog, [reply])
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_refusal_whose_headers_quote_a_key_never_reaches_the_client(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, model: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    body = json.dumps({"error": {"message": "slow down", "type": "rate_limit_error"}}).encode()
    faulty.then(answer(429, body, {"Content-Type": "application/json", **KEYED_HEADERS}))
    gw = await keyed_gateway(gateway_factory, faulty.base_url)
    reply = await post(gw.root + path, body_for(path, model), headers=AUTH)
    assert reply.status == 429, reply.raw[:300]
    error_shape(path, 429, reply.json)
    shown = await everything_visible(gw, caplog, [reply])
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


def _refusal_echoing(path: str, model: str, escaped: str) -> bytes:
    """The raw bytes of a 401 quoting the key as an encoder escaped it."""
    text = f"Incorrect API key provided: {escaped}. You can find your API key at ..."
    if model == "claude":
        return ('{"type":"error","error":{"type":"authentication_error","message":"'
                + text + '"}}').encode()
    return ('{"error":{"message":"' + text + '","type":"invalid_request_error",'
            '"param":null,"code":"invalid_api_key"}}').encode()


@pytest.mark.parametrize("form", [1, 2], ids=["php_escaped", "dotnet_escaped"])
@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_an_upstream_echoing_the_key_json_escaped_is_masked(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, model: str,
    form: int, caplog: pytest.LogCaptureFixture,
) -> None:
    # PHP's json_encode (and Java's, and some proxies) writes '/' as '\/': the bytes hold
    # no key, the JSON the client decodes does.
    caplog.set_level(logging.DEBUG)
    escaped = escaped_forms(UPSTREAM_KEY)[form]
    faulty.then(answer(401, _refusal_echoing(path, model, escaped),
                       {"Content-Type": "application/json"}))
    gw = await keyed_gateway(gateway_factory, faulty.base_url)
    reply = await post(gw.root + path, body_for(path, model), headers=AUTH)
    assert 400 <= reply.status < 600 and reply.status != 500, reply.raw[:300]
    error_shape(path, reply.status, reply.json)
    shown = await everything_visible(gw, caplog, [reply])
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


@pytest.mark.parametrize("form", [1, 2], ids=["php_escaped", "dotnet_escaped"])
@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_stream_error_echoing_the_key_json_escaped_is_masked(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, model: str,
    form: int, caplog: pytest.LogCaptureFixture,
) -> None:
    # (after the first text: relayed as it came, so masked in the bytes themselves)
    caplog.set_level(logging.DEBUG)
    escaped = escaped_forms(UPSTREAM_KEY)[form]
    events = upstream_events(path, model)
    error = (b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":'
             b'"key ' + escaped.encode() + b' was revoked"}}\n\n')
    faulty.then(answer(200, b"".join(events[:3]) + error,
                       {"Content-Type": "text/event-stream"}))
    gw = await keyed_gateway(gateway_factory, faulty.base_url)
    reply = await post(gw.root + path, body_for(path, model, stream=True), headers=AUTH)
    assert reply.status != 500, reply.raw[:300]
    shown = await everything_visible(gw, caplog, [reply])
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


# --- odd HTTP from upstreams --------------------------------------------------------------

@pytest.fixture
async def fgw(gateway_factory: GatewayFactory, faulty: FaultyUpstream) -> RunningGateway:
    return await gateway_factory({
        "model_list": wire_models(faulty.base_url),
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002, "max_transient_retries": 0,
                     "deadline": 3.0},
        "gateway": {"timeouts": {"read": 0.5}},
    })


def _huge_header(_: Received, w: Writer) -> Any:
    async def run() -> None:
        w.write(head(200, {"Content-Type": "application/json",
                           "x-debug-trace": "a" * 70_000}, length=2) + b"{}")
        await w.drain()
    return run()


ODD_HTTP = {
    "header_of_70k": lambda: _huge_header,
    "ten_thousand_headers": lambda: answer(
        200, b"{}", {"Content-Type": "application/json",
                     **{f"x-h{i}": "v" for i in range(10_000)}}),
    "status_103_then_nothing": lambda: answer(103, b"", {"Link": "</a.css>; rel=preload"}),
    "status_204": lambda: answer(204, b""),
    "status_999": lambda: answer(999, b"{}", {"Content-Type": "application/json"}),
    "status_text": lambda: answer("abc", b"{}", {"Content-Type": "application/json"}),
    "http_0_9": lambda: _raw_bytes(b'{"id":"x"}'),
    "content_length_negative": lambda: answer(200, b"{}", {"Content-Type": "application/json"},
                                              length=-5),
    "two_content_lengths": lambda: _raw_bytes(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
        b"Content-Length: 9\r\nConnection: close\r\n\r\n{}"),
    "chunked_with_bad_size": lambda: _raw_bytes(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
        b"\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
}


def _raw_bytes(data: bytes) -> Any:
    async def run(_: Received, w: Writer) -> None:
        w.write(data)
        await w.drain()
    return run


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
@pytest.mark.parametrize("case", sorted(ODD_HTTP))
async def test_odd_http_from_an_upstream_is_a_clean_5xx_in_the_wire_format(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str, case: str,
    stream: bool,
) -> None:
    faulty.then(ODD_HTTP[case]())
    reply = await post(fgw.root + path, body_for(path, model, stream=stream), timeout=30)
    assert 500 < reply.status < 600, (reply.status, reply.raw[:300])
    assert reply.headers["content-type"].startswith("application/json")
    error_shape(path, reply.status, reply.json)
    assert "x-debug-trace" not in reply.headers
    faulty.then(answer(200, json.dumps(upstream_whole(path, model)).encode(),
                       {"Content-Type": "application/json"}))
    again = await post(fgw.root + path, body_for(path, model))
    assert again.status == 200, again.raw[:300]


async def test_an_early_hints_answer_before_the_real_one_is_served(
    fgw: RunningGateway, faulty: FaultyUpstream,
) -> None:
    # 103 Early Hints (a CDN in front of the provider) comes before the final answer.
    whole = json.dumps(chat_whole("up")).encode()

    async def hinted(_: Received, w: Writer) -> None:
        w.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
        w.write(head(200, {"Content-Type": "application/json"}, length=len(whole)) + whole)
        await w.drain()

    faulty.then(hinted)
    reply = await post(fgw.root + CHAT, body_for(CHAT, "chat"))
    assert reply.status in (200, 502), reply.raw[:300]
    if reply.status == 502:
        error_shape(CHAT, 502, reply.json)


# --- redirects off loopback ---------------------------------------------------------------

@pytest.mark.parametrize("status", [301, 302, 307, 308])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_an_upstream_redirect_is_never_followed_with_the_key(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, model: str,
    stream: bool, status: int, caplog: pytest.LogCaptureFixture,
) -> None:
    # A compromised or misconfigured upstream sends the gateway elsewhere: following it
    # would hand the key (Authorization, x-api-key) and the conversation to that host.
    caplog.set_level(logging.DEBUG)
    async with FaultyUpstream() as elsewhere:
        location = f"{elsewhere.base_url}/steal?key={UPSTREAM_KEY}"
        faulty.then(answer(status, b"moved", {"Location": location,
                                              "Content-Type": "text/plain"}))
        gw = await keyed_gateway(gateway_factory, faulty.base_url)
        reply = await post(gw.root + path, body_for(path, model, stream=stream),
                           headers=AUTH)
        assert elsewhere.received == []
    assert 500 < reply.status < 600, (reply.status, reply.raw[:300])
    error_shape(path, reply.status, reply.json)
    assert "location" not in {k.lower() for k in reply.headers}
    assert str(elsewhere.port) not in reply.raw.decode()
    shown = await everything_visible(gw, caplog, [reply])
    assert leaked(shown) == []


# --- odd Retry-After values ---------------------------------------------------------------

RETRY_AFTERS = ["inf", "nan", "-1", "1e309", "99999999999999999999", "0x10", "1_000",
                "Fri, 31 Dec 9999 23:59:59 GMT", "Thu, 01 Jan 1970 00:00:00 GMT", "", "５"]


@pytest.mark.parametrize("value", RETRY_AFTERS)
@pytest.mark.parametrize(("path", "model"), [(CHAT, "chat"), (MESSAGES, "claude"),
                                             (RESPONSES, "resp")])
async def test_an_odd_retry_after_is_answered_within_the_deadline(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, model: str,
    value: str,
) -> None:
    # With retries on, a Retry-After the gateway would wait for must be finite and inside
    # the request's deadline; the refusal the client gets says when to come back sanely.
    body = json.dumps({"error": {"message": "slow down", "type": "rate_limit_error",
                                 "code": "rate_limit_exceeded"}}).encode()
    for _ in range(3):
        faulty.then(answer(429, body, {"Content-Type": "application/json",
                                       "Retry-After": value, "retry-after-ms": value}))
    gw = await gateway_factory({
        "model_list": wire_models(faulty.base_url),
        "recovery": {"max_transient_retries": 2, "backoff_base": 0.001,
                     "backoff_cap": 0.002, "deadline": 2.0, "max_retry_after": 1.0},
    })
    reply = await post(gw.root + path, body_for(path, model), timeout=30)
    assert reply.status == 429, (reply.status, reply.raw[:300])
    error_shape(path, 429, reply.json)
    shown = reply.headers.get("Retry-After")  # (relayed as the upstream stated it)
    assert shown is None or shown.isdigit(), shown


# --- credentials sent twice or oddly --------------------------------------------------------

ODD_AUTH: dict[str, dict[str, str]] = {
    "bearer_without_token": {"Authorization": "Bearer"},
    "bearer_and_spaces": {"Authorization": "Bearer    "},
    "tab_after_scheme": {"Authorization": f"Bearer\t{CLIENT_KEY}"},
    "token_scheme": {"Authorization": f"Token {CLIENT_KEY}"},
    "two_tokens": {"Authorization": f"Bearer {CLIENT_KEY} {CLIENT_KEY}"},
    "comma_list": {"Authorization": f"Bearer {CLIENT_KEY}, Bearer {MASTER_KEY}"},
    "digest": {"Authorization": f'Digest username="a", response="{CLIENT_KEY}"'},
    "basic_off_ui": {"Authorization": "Basic dXNlcjpzay1jbGllbnQtUk9VTkQzLTBhMWIyYzNkNGU="},
    "bad_bearer_good_x_api_key": {"Authorization": "Bearer sk-wrong-ROUND3-000000",
                                  "x-api-key": CLIENT_KEY},
    "good_bearer_bad_x_api_key": {"Authorization": f"Bearer {CLIENT_KEY}",
                                  "x-api-key": "sk-wrong-ROUND3-000000"},
    "x_api_key_with_bearer": {"x-api-key": f"Bearer {CLIENT_KEY}"},
    "empty_x_api_key_then_api_key": {"x-api-key": "", "api-key": CLIENT_KEY},
    "key_with_newline_escape": {"Authorization": f"Bearer {CLIENT_KEY}%0d%0a"},
    "key_prefix_only": {"Authorization": f"Bearer {CLIENT_KEY[:-1]}"},
    "key_plus_one": {"Authorization": f"Bearer {CLIENT_KEY}0"},
    "key_uppercased": {"Authorization": f"Bearer {CLIENT_KEY.upper()}"},
}


@pytest.mark.parametrize("path", [CHAT, MESSAGES, RESPONSES])
async def test_odd_or_doubled_credentials_are_refused_or_served_in_the_wire_shape(
    gateway_factory: GatewayFactory, wires: ThreeWires, path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    gw = await gateway_factory({
        "model_list": keyed(wires.base_url),
        "general_settings": {"master_key": MASTER_KEY},
        "gateway": {"api_keys": [CLIENT_KEY], "ui": True,
                    "failed_auth_limit": {"burst": 1000, "per_minute": 1000}},
    })
    model = "claude" if path == MESSAGES else "resp" if path == RESPONSES else "chat"
    statuses: dict[str, int] = {}
    replies = []
    for case, headers in ODD_AUTH.items():
        reply = await post(gw.root + path, body_for(path, model), headers=headers)
        statuses[case] = reply.status
        replies.append(reply)
        assert reply.status in (200, 401), (case, reply.status, reply.raw[:300])
        if reply.status == 401:
            error_shape(path, 401, reply.json)
    # A near miss of a key never passes; a doubled header is never read as the good one
    # when the other is bad.
    for case in ("key_prefix_only", "key_plus_one", "key_uppercased", "token_scheme",
                 "digest", "basic_off_ui", "bearer_without_token", "two_tokens",
                 "comma_list", "key_with_newline_escape"):
        assert statuses[case] == 401, case
    shown = await everything_visible(gw, caplog, replies)
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


async def test_the_anthropic_sdk_authenticates_with_either_of_its_credentials(
    gateway_factory: GatewayFactory, wires: ThreeWires,
) -> None:
    import anthropic

    gw = await gateway_factory({"model_list": keyed(wires.base_url),
                                "gateway": {"api_keys": [CLIENT_KEY]}})
    for options in ({"api_key": CLIENT_KEY}, {"auth_token": CLIENT_KEY, "api_key": None}):
        async with anthropic.AsyncAnthropic(base_url=gw.root, max_retries=0,
                                            **options) as claude:  # type: ignore[arg-type]
            got = await claude.messages.create(
                model="claude", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        assert got.content[0].text == "hello there"  # type: ignore[union-attr]
    async with anthropic.AsyncAnthropic(base_url=gw.root, max_retries=0,
                                        api_key="sk-wrong-ROUND3-000000") as claude:
        with pytest.raises(anthropic.AuthenticationError) as refused:
            await claude.messages.create(
                model="claude", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["type"] == "error"  # type: ignore[index]
    assert "sk-wrong" not in json.dumps(refused.value.body)


# --- the less used routes with hostile bodies ----------------------------------------------

AZURE = "/openai/deployments/chat/chat/completions?api-version=2024-10-21"
ENGINES = "/engines/chat/chat/completions"  # (LiteLLM's legacy path, the model in it)
COMPACT = "/v1/responses/compact"
PROJECT = "/v1/gateway/project"
HOSTILE: dict[str, bytes] = {
    "not_json": b"{model: chat}",
    "array": b'[{"model":"chat"}]',
    "null": b"null",
    "string": b'"hi"',
    "number": b"12",
    "nan": b'{"model":"chat","messages":[{"role":"user","content":"hi"}],"temperature":NaN}',
    "deep": b'{"model":"chat","x":' + b"[" * 5000 + b"]" * 5000 + b"}",
    "bom": b'\xef\xbb\xbf{"model":"chat","input":"hi"}',
    "bad_utf8": b'{"model":"chat","input":"\xff\xfe"}',
    "lone_surrogate_role": b'{"model":"chat","input":[{"role":"\\ud800","content":"hi"}],'
                           b'"messages":[{"role":"\\ud800","content":"hi"}]}',
    "huge_int": b'{"model":"chat","input":"hi","max_output_tokens":' + b"9" * 5000 + b"}",
    "messages_object": b'{"model":"chat","messages":{"role":"user","content":"hi"}}',
    "input_object": b'{"model":"chat","input":{"role":"user","content":"hi"}}',
    "truncated": b'{"model":"chat","input":"h',
    "empty": b"",
}


@pytest.mark.parametrize("route", [AZURE, ENGINES, COMPACT, PROJECT])
@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_hostile_bodies_on_the_less_used_routes_are_a_4xx(
    gateway_factory: GatewayFactory, wires: ThreeWires, route: str, case: str,
) -> None:
    gw = await gateway_factory({"model_list": wire_models(wires.base_url),
                                "gateway": {"max_body_bytes": 256 * 1024}})
    reply = await post(gw.root + route, data=HOSTILE[case],
                       headers={"Content-Type": "application/json", "api-key": "x"})
    assert 400 <= reply.status < 500, (reply.status, reply.raw[:300])
    assert reply.headers["content-type"].startswith("application/json")
    error_shape(RESPONSES, reply.status, reply.json)


# --- tool arguments that are not JSON, through the translations ----------------------------

BAD_ARGUMENTS = ["{not json", "", "null", "[1, 2]", '"a string"', '{"a": 1} trailing',
                 '{"a": NaN}', '{"a": "\\ud800"}']


def _chat_answer_with_arguments(arguments: str) -> dict[str, Any]:
    whole = chat_whole("up")
    message = whole["choices"][0]["message"]
    message["content"] = None
    message["tool_calls"] = [{"id": "call_1", "type": "function",
                              "function": {"name": "read_file", "arguments": arguments}}]
    whole["choices"][0]["finish_reason"] = "tool_calls"
    return whole


def _chat_stream_with_arguments(arguments: str) -> bytes:
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "up"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    half = len(arguments) // 2
    return b"".join([
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "read_file", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[:half]}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}),
        chunk({}, "tool_calls"), b"data: [DONE]\n\n"])


TOOLS_MESSAGES = [{"name": "read_file", "description": "read",
                   "input_schema": {"type": "object", "properties": {}}}]
TOOLS_RESPONSES = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("arguments", BAD_ARGUMENTS)
async def test_a_chat_tool_call_with_arguments_that_are_no_object_reaches_the_sdks(
    fgw: RunningGateway, faulty: FaultyUpstream, arguments: str, stream: bool,
) -> None:
    # A chat-only model answers a tool call whose arguments are not a JSON object; the
    # Messages wire needs an object as tool_use.input: the Anthropic SDK gets a message it
    # can read (or a clean error in its shape), the Responses SDK the call as sent.
    import anthropic
    import openai

    def queue() -> None:
        if stream:
            faulty.then(answer(200, _chat_stream_with_arguments(arguments),
                               {"Content-Type": "text/event-stream"}))
        else:
            faulty.then(answer(200, json.dumps(_chat_answer_with_arguments(arguments)).encode(),
                               {"Content-Type": "application/json"}))

    queue()
    async with anthropic.AsyncAnthropic(base_url=fgw.root, api_key="k",
                                        max_retries=0) as claude:
        try:
            if stream:
                async with claude.messages.stream(
                        model="chat", max_tokens=16, tools=TOOLS_MESSAGES,  # type: ignore[arg-type]
                        messages=[{"role": "user", "content": "hi"}]) as s:
                    message = await s.get_final_message()
            else:
                message = await claude.messages.create(
                    model="chat", max_tokens=16, tools=TOOLS_MESSAGES,  # type: ignore[arg-type]
                    messages=[{"role": "user", "content": "hi"}])
        except anthropic.APIStatusError as exc:
            assert exc.status_code >= 500 and exc.status_code != 500, exc
            assert isinstance(exc.body, dict) and exc.body.get("type") == "error", exc.body
        else:
            calls = [b for b in message.content if b.type == "tool_use"]
            assert calls and isinstance(calls[0].input, dict), message
    queue()
    async with openai.AsyncOpenAI(base_url=fgw.base_url, api_key="k", max_retries=0) as gpt:
        if stream:
            async with gpt.responses.stream(model="chat", input="hi",
                                            tools=TOOLS_RESPONSES) as rs:  # type: ignore[arg-type]
                final = await rs.get_final_response()
        else:
            final = await gpt.responses.create(model="chat", input="hi",
                                               tools=TOOLS_RESPONSES)  # type: ignore[arg-type]
        calls = [o for o in final.output if o.type == "function_call"]
        assert calls and calls[0].name == "read_file", final


HISTORY_ARGUMENTS: dict[str, tuple[Any, Any]] = {
    # (a Messages tool_use input, a Responses function_call arguments)
    "string": ("{not json", "{not json"),
    "list": ([1, 2], "[1, 2]"),
    "null": (None, "null"),
    "number": (7, "7"),
    "empty": ("", ""),
    "lone_surrogate": ({"p": "\ud800"}, '{"p": "\\ud800"}'),
}


@pytest.mark.parametrize("model", ["native", "chat"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
@pytest.mark.parametrize("case", sorted(HISTORY_ARGUMENTS))
async def test_a_past_tool_call_whose_arguments_are_no_object_is_served_or_refused(
    gateway_factory: GatewayFactory, wires: ThreeWires, path: str, model: str, case: str,
) -> None:
    gw = await gateway_factory({"model_list": wire_models(wires.base_url)})
    name = "chat" if model == "chat" else ("claude" if path == MESSAGES else "resp")
    value = HISTORY_ARGUMENTS[case][0 if path == MESSAGES else 1]
    if path == MESSAGES:
        body = body_for(path, name, tools=TOOLS_MESSAGES, messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                               "name": "read_file", "input": value}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": "ok"}]}])
    else:
        body = body_for(path, name, tools=TOOLS_RESPONSES, input=[
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "call_1", "name": "read_file",
             "arguments": value},
            {"type": "function_call_output", "call_id": "call_1", "output": "ok"}])
    raw = json.dumps(body).encode()
    reply = await post(gw.root + path, data=raw)
    assert reply.status == 200 or 400 <= reply.status < 500, (reply.status, reply.raw[:300])
    if reply.status != 200:
        error_shape(path, reply.status, reply.json)
    else:
        assert b"hello there" in reply.raw


_JSON_LEAVES = (st.none() | st.booleans() | st.integers()
                | st.floats(allow_nan=False, allow_infinity=False) | st.text())
_JSON_NESTED = _JSON_LEAVES | st.lists(_JSON_LEAVES, max_size=4)
_JSON_VALUES = _JSON_NESTED | st.dictionaries(st.text(), _JSON_NESTED, max_size=4) | st.lists(
    st.dictionaries(st.text(), _JSON_NESTED, max_size=3), max_size=3)


@settings(max_examples=300, deadline=None)
@given(value=st.dictionaries(st.text(), _JSON_VALUES, max_size=5), ascii=st.booleans(),
       indent=st.sampled_from([None, 1]), cuts=st.lists(st.integers(1, 9), max_size=200))
def test_a_json_object_relayed_in_any_pieces_is_never_held_back(
    value: dict[str, Any], ascii: bool, indent: int | None, cuts: list[int],
) -> None:
    # Valid arguments pass as they are, however the stream cuts them.
    text = json.dumps(value, ensure_ascii=ascii, indent=indent)
    checker, at = ObjectPrefix(), 0
    for size in [*cuts, len(text)]:
        assert checker.feed(text[at:at + size]), (text, at)
        at += size


@pytest.mark.parametrize("text", BAD_ARGUMENTS[:1] + BAD_ARGUMENTS[2:] + [
    "{'path': 'a.py'}", '{"a": [1,]}', '{"a" 1}', '{"a": 01}', '{"a": "\\x"}',
    '{"a": "\\udc00"}', '{"a": "\\ud800\\u0041"}', '{"a": "raw\nnewline"}', "{} {}"])
def test_arguments_no_object_starts_with_are_caught(text: str) -> None:
    assert not ObjectPrefix().feed(text)
    checker = ObjectPrefix()
    assert not all(checker.feed(c) for c in text)


# --- a Redis password, with Redis down or refusing it ---------------------------------------

REDIS_PASSWORD = "redis-PASSWORD-round3-77aa"


@pytest.mark.parametrize("where", ["sessions", "router"])
async def test_a_redis_password_never_comes_out_while_redis_is_down(
    gateway_factory: GatewayFactory, wires: ThreeWires, where: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.conftest import free_port

    caplog.set_level(logging.DEBUG)
    url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{free_port()}/0"
    raw: dict[str, Any] = {"model_list": keyed(wires.base_url),
                           "general_settings": {"master_key": MASTER_KEY},
                           "gateway": {"api_keys": [CLIENT_KEY], "ui": True}}
    if where == "sessions":
        raw["sessions"] = {"redis_url": url}
    else:
        raw["router_settings"] = {"redis_url": url}
    gw = await gateway_factory(raw)
    replies = [await post(gw.root + path, body_for(path, model), headers={
        **AUTH, "x-session-id": "s1"}) for path, model in WIRE_MODELS]
    replies.append(await post(gw.root + CHAT, body_for(CHAT, "chat"),
                              headers={"Authorization": "Bearer sk-wrong-ROUND3-000000"}))
    assert [r.status for r in replies[:-1]] == [200] * len(WIRE_MODELS), [
        r.raw[:200] for r in replies]
    assert replies[-1].status in (401, 429, 503)
    async with aiohttp.ClientSession() as s:
        for where_ in ("/health/readiness", "/health", "/v1/model/info", "/readyz"):
            async with s.get(gw.root + where_, headers=AUTH) as got:
                body = await got.read()
                assert REDIS_PASSWORD.encode() not in body, (where_, body[:300])
    shown = await everything_visible(gw, caplog, replies)
    assert REDIS_PASSWORD not in shown, [s[:300] for s in shown.splitlines()
                                         if REDIS_PASSWORD in s][:5]


# --- a history of many turns ----------------------------------------------------------------

@pytest.mark.parametrize("path", [CHAT, MESSAGES, RESPONSES])
async def test_a_history_of_forty_thousand_turns_is_answered(
    gateway_factory: GatewayFactory, wires: ThreeWires, path: str,
) -> None:
    # An agent's long session (or a hostile client) within the body limit: every repair
    # rule runs over it once, not once per turn.
    gw = await gateway_factory({"model_list": wire_models(wires.base_url)})
    turns = 40_000
    if path == RESPONSES:
        items: list[dict[str, Any]] = []
        for i in range(turns // 2):
            items += [{"type": "function_call", "call_id": f"c{i}", "name": "f",
                       "arguments": "{}"},
                      {"type": "function_call_output", "call_id": f"c{i}", "output": "x"}]
        body = body_for(path, "chat", input=[{"role": "user", "content": "go"}, *items])
    elif path == MESSAGES:
        turns_: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for i in range(turns // 2):
            turns_ += [{"role": "assistant", "content": [
                {"type": "tool_use", "id": f"t{i}", "name": "f", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                              "content": "x"}]}]
        body = body_for(path, "chat", messages=turns_)
    else:
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for i in range(turns // 2):
            msgs += [{"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "f",
                                                                 "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": "x"}]
        body = body_for(path, "chat", messages=msgs)
    data = io.BytesIO(json.dumps(body).encode())  # (aiohttp wants a big body as a file)
    async with aiohttp.ClientSession() as s, s.post(
            gw.root + path, data=data, headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=120)) as got:
        status, raw = got.status, await got.read()
    assert status in (200, 400, 413), raw[:300]
    if status != 200:
        error_shape(path, status, json.loads(raw))
    else:
        assert b"hello there" in raw


# --- an upstream that trickles a whole answer forever ---------------------------------------

@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_whole_answer_trickled_forever_ends_by_the_deadline(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, model: str,
    framing: str,
) -> None:
    # A byte every 50 ms never lets the read timeout (0.5 s between bytes) fire: only the
    # request's deadline ends it, with a 504 in the wire's shape.
    stop = asyncio.Event()
    if framing == "length":
        prefix = head(200, {"Content-Type": "application/json"}, length=10_000_000)
    elif framing == "chunked":
        prefix = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
    else:
        prefix = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
    drip = b"1\r\n \r\n" if framing == "chunked" else b" "
    faulty.then(trickle(prefix + (b'5\r\n{"id"\r\n' if framing == "chunked" else b'{"id"'),
                        drip, stop))
    gw = await gateway_factory({
        "model_list": wire_models(faulty.base_url),
        "recovery": {"max_transient_retries": 0, "deadline": 1.5},
        "gateway": {"timeouts": {"read": 0.5}},
    })
    try:
        reply = await post(gw.root + path, body_for(path, model), timeout=30)
    finally:
        stop.set()
    assert reply.status == 504, (reply.status, reply.raw[:300])
    error_shape(path, 504, reply.json)


# --- a key pasted into the path -----------------------------------------------------------

@pytest.mark.parametrize("method", ["POST", "GET", "DELETE"])
@pytest.mark.parametrize("where", [
    "/v1/{key}/chat/completions", "/v1/chat/completions/{key}", "/v1/messages/{key}",
    "/v1/models/{key}", "/ui/api/requests/{key}", "/ui/api/sessions/{key}/archive",
    "/v1/gateway/sessions/{key}/archive", "/openai/deployments/{key}/chat/completions",
    "/v1/responses/{key}", "/{key}"])
async def test_a_key_pasted_into_the_path_is_never_echoed(
    gateway_factory: GatewayFactory, wires: ThreeWires, where: str, method: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A client that puts its key (or the upstream's) where an id goes: the 404 or 405
    # naming the path, the access log and the span must not repeat it.
    caplog.set_level(logging.DEBUG)
    gw = await keyed_gateway(gateway_factory, wires.base_url)
    replies = []
    async with aiohttp.ClientSession() as s:
        for key in KEYS:
            url = gw.root + where.format(key=key.replace("/", "%2F").replace("+", "%2B"))
            async with s.request(method, url, json=body_for(CHAT, "chat"),
                                 headers=AUTH) as got:
                replies.append(_Reply(got.status, got.headers, await got.read()))
    for reply in replies:
        assert reply.status != 500 and reply.status < 500, reply.raw[:300]
    shown = await everything_visible(gw, caplog, replies)
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


class _Reply:
    def __init__(self, status: int, headers: Any, raw: bytes) -> None:
        self.status, self.headers, self.raw = status, headers, raw


# --- the Responses compaction endpoint with a broken upstream ---------------------------------

COMPACT_FAULTS = {
    "truncated_json": lambda: answer(200, b'{"id":"resp_1","object":"response.comp',
                                     {"Content-Type": "application/json"}, length=400),
    "html_with_200": lambda: answer(200, b"<html><body>nginx</body></html>",
                                    {"Content-Type": "text/html"}),
    "empty_200": lambda: answer(200, b"", {"Content-Type": "application/json"}),
    "sse_to_a_whole_request": lambda: answer(200, b"".join(responses_events("up")),
                                             {"Content-Type": "text/event-stream"}),
    "json_list": lambda: answer(200, b"[1, 2]", {"Content-Type": "application/json"}),
    "html_502": lambda: answer(502, b"<html>Bad Gateway</html>", {"Content-Type": "text/html"}),
    "error_quoting_the_key": lambda: answer(
        401, json.dumps({"error": {"message": f"bad key {UPSTREAM_KEY}", "type": "auth",
                                   "param": None, "code": "invalid_api_key"}}).encode(),
        {"Content-Type": "application/json", "x-request-id": UPSTREAM_KEY}),
    "redirect": lambda: answer(307, b"", {"Location": "http://192.0.2.1/steal"}),
}


@pytest.mark.parametrize("fault", sorted(COMPACT_FAULTS))
async def test_a_broken_compaction_answer_is_a_clean_error_in_openai_shape(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, fault: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    faulty.then(COMPACT_FAULTS[fault]())
    gw = await keyed_gateway(gateway_factory, faulty.base_url)
    reply = await post(gw.root + COMPACT, {"model": "resp", "input": [
        {"role": "user", "content": "hi"}]}, headers=AUTH)
    assert reply.status >= 400 and reply.status != 500, (reply.status, reply.raw[:300])
    assert reply.headers["content-type"].startswith("application/json")
    assert b"<html" not in reply.raw
    error_shape(RESPONSES, reply.status, reply.json)
    shown = await everything_visible(gw, caplog, [reply])
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


# --- an answer that quotes the upstream key ---------------------------------------------------

def _quoting(path: str, model: str, text: str) -> dict[str, Any]:
    whole = upstream_whole(path, model)
    if model == "chat":
        whole["choices"][0]["message"]["content"] = text
    elif path == MESSAGES:
        whole["content"][0]["text"] = text
    else:
        whole["output"][0]["content"][0]["text"] = text
    return whole


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_an_answer_quoting_the_upstream_key_is_masked_whole_or_streamed(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, model: str,
    stream: bool, caplog: pytest.LogCaptureFixture,
) -> None:
    # A proxy that answers "your key <key> has no credit left" as a 200 message (some
    # free-tier routers do), or a model that was given the key: masked on every exit.
    caplog.set_level(logging.DEBUG)
    text = f"credit exhausted for key {UPSTREAM_KEY}"
    whole = _quoting(path, model, text)
    if stream:
        events = upstream_events(path, model)
        data = b"".join(events).replace(b"hello", json.dumps(text)[1:-1].encode(), 1)
        faulty.then(answer(200, data, {"Content-Type": "text/event-stream"}))
    else:
        faulty.then(answer(200, json.dumps(whole).encode(),
                           {"Content-Type": "application/json"}))
    gw = await keyed_gateway(gateway_factory, faulty.base_url)
    reply = await post(gw.root + path, body_for(path, model, stream=stream), headers=AUTH)
    assert reply.status == 200, reply.raw[:300]
    assert b"credit exhausted" in reply.raw
    shown = await everything_visible(gw, caplog, [reply])
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


async def test_a_compaction_quoting_the_upstream_key_is_masked(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    compacted = {"id": "resp_c", "object": "response.compaction", "created_at": 0,
                 "output": [{"type": "message", "role": "user", "content": [
                     {"type": "input_text", "text": f"the key was {UPSTREAM_KEY}"}]},
                            {"type": "compaction", "encrypted_content": "abc"}],
                 "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}}
    faulty.then(answer(200, json.dumps(compacted).encode(),
                       {"Content-Type": "application/json"}))
    gw = await keyed_gateway(gateway_factory, faulty.base_url)
    reply = await post(gw.root + COMPACT, {"model": "resp", "input": [
        {"role": "user", "content": "hi"}]}, headers=AUTH)
    assert reply.status == 200, reply.raw[:300]
    assert b"the key was" in reply.raw
    shown = await everything_visible(gw, caplog, [reply])
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


# --- clients that leave, many times over ----------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
async def test_clients_that_leave_mid_answer_leave_no_upstream_connection_or_stream_open(
    gateway_factory: GatewayFactory, wires: ThreeWires, stream: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Ten clients on each wire hang up while the answer is on its way: each upstream
    # request is hung up on, the pool holds no connection for them and /metrics counts no
    # stream as open; the gateway answers the next client as before.
    from tests.conftest import gateway_state

    caplog.set_level(logging.INFO)
    gw = await gateway_factory({"model_list": wire_models(wires.base_url)})
    for path, model in WIRE_MODELS * 2:
        wires.hold, wires.hung_up, wires.holding = (asyncio.Event(), asyncio.Event(),
                                                    asyncio.Event())
        async with aiohttp.ClientSession() as s:
            sent = asyncio.create_task(s.post(gw.root + path,
                                              json=body_for(path, model, stream=stream)))
            await asyncio.wait_for(wires.holding.wait(), 10)
            if stream:
                response = await sent
                assert response.status == 200
                await response.content.readany()
                response.close()
            else:  # (no answer yet: the client gives up waiting)
                sent.cancel()
        await asyncio.wait_for(wires.hung_up.wait(), 10)
        wires.hold.set()
    wires.hold = None
    connector = gateway_state(gw).pool.session.connector
    assert connector is not None
    assert not connector._acquired  # type: ignore[attr-defined]
    async with aiohttp.ClientSession() as s, s.get(gw.root + "/metrics") as got:
        text = await got.text()
    open_streams = [line for line in text.splitlines()
                    if line.startswith("gateway_open_streams{")]
    assert all(line.endswith(" 0.0") for line in open_streams), open_streams
    for path, model in WIRE_MODELS:
        again = await post(gw.root + path, body_for(path, model, stream=stream))
        assert again.status == 200 and b"hello" in again.raw
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert bad == [], [r.getMessage()[:300] for r in bad]


# --- histories that are well typed and make no sense ----------------------------------------

def _odd_histories(path: str) -> dict[str, Any]:
    """Per case, the wire's history field (Messages ``messages``, Responses ``input``, chat
    ``messages``): shapes a broken agent or a hostile client sends."""
    many = 300
    if path == MESSAGES:
        def use(i: Any, name: str = "f") -> dict[str, Any]:
            return {"type": "tool_use", "id": i, "name": name, "input": {}}

        def result(i: Any) -> dict[str, Any]:
            return {"type": "tool_result", "tool_use_id": i, "content": "ok"}

        user = {"role": "user", "content": "go"}
        return {
            "duplicate_ids": [user, {"role": "assistant", "content": [use("t1"), use("t1")]},
                              {"role": "user", "content": [result("t1"), result("t1")]}],
            "result_for_unknown_id": [user, {"role": "user", "content": [result("nope")]}],
            "result_first": [{"role": "user", "content": [result("t1")]}],
            "empty_id": [user, {"role": "assistant", "content": [use("")]},
                         {"role": "user", "content": [result("")]}],
            "id_of_ten_kilobytes": [user, {"role": "assistant", "content": [use("t" * 10_000)]},
                                    {"role": "user", "content": [result("t" * 10_000)]}],
            "many_parallel_calls": [user, {"role": "assistant", "content": [
                use(f"t{i}") for i in range(many)]}, {"role": "user", "content": [
                    result(f"t{i}") for i in range(many)]}],
            "assistant_first": [{"role": "assistant", "content": "hi"}, user],
            "only_assistant": [{"role": "assistant", "content": "hi"}],
            "hundred_users_in_a_row": [user] * 100,
            "system_role_inside": [{"role": "system", "content": "be nice"}, user],
            "empty_content_everywhere": [{"role": "user", "content": []},
                                         {"role": "assistant", "content": []},
                                         {"role": "user", "content": ""}],
            "tool_name_odd": [user, {"role": "assistant", "content": [
                use("t1", "../../etc/passwd\u0000\u202e")]},
                {"role": "user", "content": [result("t1")]}],
            "unknown_block_types": [{"role": "user", "content": [
                {"type": "hologram", "data": 1}, {"type": "text", "text": "hi"}]}],
            "image_with_bad_base64": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "!!!not base64!!!"}},
                {"type": "text", "text": "what is it"}]}],
            "image_from_a_file_url": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "url", "url": "file:///etc/passwd"}},
                {"type": "text", "text": "what is it"}]}],
        }

    def call(i: Any, name: str = "f") -> dict[str, Any]:
        return {"id": i, "type": "function", "function": {"name": name, "arguments": "{}"}}

    if path == RESPONSES:
        def fc(i: Any, name: str = "f") -> dict[str, Any]:
            return {"type": "function_call", "call_id": i, "name": name, "arguments": "{}"}

        def out(i: Any) -> dict[str, Any]:
            return {"type": "function_call_output", "call_id": i, "output": "ok"}

        user = {"role": "user", "content": "go"}
        return {
            "duplicate_ids": [user, fc("c1"), fc("c1"), out("c1"), out("c1")],
            "result_for_unknown_id": [user, out("nope")],
            "result_first": [out("c1"), user],
            "empty_id": [user, fc(""), out("")],
            "id_of_ten_kilobytes": [user, fc("c" * 10_000), out("c" * 10_000)],
            "many_parallel_calls": [user, *[fc(f"c{i}") for i in range(many)],
                                    *[out(f"c{i}") for i in range(many)]],
            "assistant_first": [{"role": "assistant", "content": "hi"}, user],
            "only_reasoning": [{"type": "reasoning", "id": "rs_1", "summary": []}],
            "hundred_users_in_a_row": [user] * 100,
            "tool_name_odd": [user, fc("c1", "../../etc/passwd\u0000\u202e"), out("c1")],
            "unknown_item_types": [{"type": "hologram", "data": 1}, user],
            "item_reference_unknown": [{"type": "item_reference", "id": "msg_nope"}, user],
            "image_with_bad_data_url": [{"role": "user", "content": [
                {"type": "input_image", "image_url": "data:image/png;base64,!!!"},
                {"type": "input_text", "text": "what is it"}]}],
            "image_from_a_file_url": [{"role": "user", "content": [
                {"type": "input_image", "image_url": "file:///etc/passwd"},
                {"type": "input_text", "text": "what is it"}]}],
        }
    user = {"role": "user", "content": "go"}

    def tool(i: Any) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": i, "content": "ok"}

    return {
        "duplicate_ids": [user, {"role": "assistant", "tool_calls": [call("c1"), call("c1")]},
                          tool("c1"), tool("c1")],
        "result_for_unknown_id": [user, tool("nope")],
        "result_first": [tool("c1"), user],
        "empty_id": [user, {"role": "assistant", "tool_calls": [call("")]}, tool("")],
        "id_of_ten_kilobytes": [user, {"role": "assistant", "tool_calls": [call("c" * 10_000)]},
                                tool("c" * 10_000)],
        "many_parallel_calls": [user, {"role": "assistant", "tool_calls": [
            call(f"c{i}") for i in range(many)]}, *[tool(f"c{i}") for i in range(many)]],
        "assistant_first": [{"role": "assistant", "content": "hi"}, user],
        "hundred_users_in_a_row": [user] * 100,
        "tool_name_odd": [user, {"role": "assistant", "tool_calls": [
            call("c1", "../../etc/passwd\u0000\u202e")]}, tool("c1")],
        "unknown_part_types": [{"role": "user", "content": [
            {"type": "hologram", "data": 1}, {"type": "text", "text": "hi"}]}],
        "image_with_bad_data_url": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!"}},
            {"type": "text", "text": "what is it"}]}],
        "image_from_a_file_url": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}},
            {"type": "text", "text": "what is it"}]}],
    }


ODD_HISTORY_CASES = [(path, model, case) for path, model in WIRE_MODELS
                     for case in sorted(_odd_histories(path))]


@pytest.mark.parametrize(("path", "model", "case"), ODD_HISTORY_CASES)
async def test_a_well_typed_history_that_makes_no_sense_is_served_or_refused(
    gateway_factory: GatewayFactory, wires: ThreeWires, path: str, model: str, case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    gw = await gateway_factory({"model_list": wire_models(wires.base_url)})
    history = _odd_histories(path)[case]
    field = "input" if path == RESPONSES else "messages"
    body = body_for(path, model, **{field: history})
    for stream in (False, True):
        reply = await post(gw.root + path, {**body, "stream": stream})
        assert reply.status == 200 or 400 <= reply.status < 500, (
            stream, reply.status, reply.raw[:300])
        if reply.status != 200:
            error_shape(path, reply.status, reply.json)
        else:
            assert b"hello" in reply.raw
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert bad == [], [r.getMessage()[:300] for r in bad]


def _split_text_events(path: str, model: str, first: str, second: str) -> bytes:
    events = upstream_events(path, model)
    data = b"".join(events)
    return (data.replace(b'"hello"', json.dumps(first).encode(), 1)
            .replace(b'" there"', json.dumps(second).encode(), 1))


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_key_split_across_two_stream_deltas_stays_out_of_the_inspector_and_logs(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, model: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # No single event holds the key, the answer the gateway records does.
    caplog.set_level(logging.DEBUG)
    half = len(UPSTREAM_KEY) // 2
    data = _split_text_events(path, model, f"key {UPSTREAM_KEY[:half]}", UPSTREAM_KEY[half:])
    faulty.then(answer(200, data, {"Content-Type": "text/event-stream"}))
    gw = await keyed_gateway(gateway_factory, faulty.base_url)
    reply = await post(gw.root + path, body_for(path, model, stream=True), headers=AUTH)
    assert reply.status == 200, reply.raw[:300]
    # (the client reads the two halves; every record the gateway keeps is masked)
    shown = await everything_visible(gw, caplog, [])
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


# --- usage numbers no meter can take ----------------------------------------------------------

ODD_USAGE = {"negative": -5, "past_64_bits": 10**30, "float": 2.5, "huge_float": 1e300,
             "zero": 0, "bool": True}


def _with_usage(path: str, model: str, value: Any, stream: bool) -> bytes:
    if model == "chat":
        usage = {"prompt_tokens": value, "completion_tokens": value, "total_tokens": value,
                 "prompt_tokens_details": {"cached_tokens": value},
                 "completion_tokens_details": {"reasoning_tokens": value}}
    elif path == MESSAGES:
        usage = {"input_tokens": value, "output_tokens": value,
                 "cache_read_input_tokens": value, "cache_creation_input_tokens": value}
    else:
        usage = {"input_tokens": value, "output_tokens": value, "total_tokens": value,
                 "input_tokens_details": {"cached_tokens": value},
                 "output_tokens_details": {"reasoning_tokens": value}}
    token = b'"@@USAGE@@"'
    if not stream:
        whole = upstream_whole(path, model)
        whole["usage"] = "@@USAGE@@"
        return json.dumps(whole).encode().replace(token, json.dumps(usage).encode())
    events = upstream_events(path, model)
    out = []
    for event in events:
        if model == "chat" and b'"usage"' in event:
            data = json.loads(event[len(b"data: "):])
            data["usage"] = "@@USAGE@@"
            event = b"data: " + json.dumps(data).encode() + b"\n\n"
        elif model != "chat" and (b"message_delta" in event or b"response.completed" in event
                                  or b"message_start" in event):
            name, _, rest = event.partition(b"\ndata: ")
            data = json.loads(rest)
            if "message" in data:
                data["message"]["usage"] = "@@USAGE@@"
            elif "response" in data:
                data["response"]["usage"] = "@@USAGE@@"
            else:
                data["usage"] = "@@USAGE@@"
            event = name + b"\ndata: " + json.dumps(data).encode() + b"\n\n"
        out.append(event.replace(token, json.dumps(usage).encode()))
    return b"".join(out)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
@pytest.mark.parametrize("case", sorted(ODD_USAGE))
async def test_usage_numbers_no_meter_can_take_never_break_the_answer(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str, case: str,
    stream: bool, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    data = _with_usage(path, model, ODD_USAGE[case], stream)
    faulty.then(answer(200, data, {"Content-Type": "text/event-stream" if stream
                                   else "application/json"}))
    reply = await post(fgw.root + path, body_for(path, model, stream=stream))
    assert reply.status in (200, 502), (reply.status, reply.raw[:300])
    if reply.status == 502:
        error_shape(path, 502, reply.json)
    else:
        assert b"hello" in reply.raw
        failed = b"event: error" in reply.raw or b"response.failed" in reply.raw
        # (a count that is no number at all, true, may end a translated stream with the
        # wire's error event, as any chunk that is no chat chunk does)
        assert not failed or (case == "bool" and model == "chat" and path != CHAT), reply.raw
    async with aiohttp.ClientSession() as s, s.get(fgw.root + "/metrics") as got:
        assert got.status == 200
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert bad == [], [r.getMessage()[:300] for r in bad]


BIG_FIELDS = ["created", "index", "tool_index", "logprobs", "system_fingerprint", "seed"]


def _chat_with_big(field: str, stream: bool) -> bytes:
    big = "1" + "0" * 30
    calls = [{"index": "@@TI@@", "id": "call_1", "type": "function",
              "function": {"name": "f", "arguments": "{}"}}]
    if stream:
        chunks = [json.loads(e[len(b"data: "):]) for e in chat_events("up")[:-1]]
        chunks[1]["choices"][0]["delta"]["tool_calls"] = calls
        data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
        data += b"data: [DONE]\n\n"
    else:
        whole = chat_whole("up")
        whole["choices"][0]["message"]["tool_calls"] = [
            {k: v for k, v in calls[0].items() if k != "index"}]
        data = json.dumps(whole).encode()
    value = {"created": b'"created": ' + big.encode(), "index": b'"index": ' + big.encode()}
    if field in value:
        data = data.replace(b'"' + field.encode() + b'": 0', value[field])
    elif field == "tool_index":
        data = data.replace(b'"@@TI@@"', big.encode())
    else:
        data = data.replace(b'"finish_reason"', b'"' + field.encode() + b'": ' + big.encode()
                            + b', "finish_reason"')
    return data.replace(b'"@@TI@@"', b"0")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", [CHAT, MESSAGES, RESPONSES])
@pytest.mark.parametrize("field", BIG_FIELDS)
async def test_a_number_past_64_bits_in_a_chat_answer_never_breaks_the_wires(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, field: str, stream: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    faulty.then(answer(200, _chat_with_big(field, stream),
                       {"Content-Type": "text/event-stream" if stream else "application/json"}))
    reply = await post(fgw.root + path, body_for(path, "chat", stream=stream))
    assert reply.status in (200, 502), (reply.status, reply.raw[:300])
    if reply.status == 502:
        error_shape(path, 502, reply.json)
    bad = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert bad == [], [r.getMessage()[:300] for r in bad]
