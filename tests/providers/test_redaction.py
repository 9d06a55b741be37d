"""An upstream that echoes the key it was given: the key never reaches the client's body,
an SSE error event, a span or a log line."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import user
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.faulty_upstream import (
    Fault,
    FaultyUpstream,
    Received,
    Writer,
    chunk_event,
    head,
)
from tests.providers.e2e_litellm import (
    ANTHROPIC_MODEL,
    IGNORE_SCHEMA_WARNINGS,
    UPSTREAM_KEY,
    start_native_gateway,
)

KEY = "upstream-key-ECHO-7f3a9c2e"


def echo(status: int, ctype: str, template: str, *, first: bytes = b"") -> Fault:
    """Answer ``status`` with ``template`` holding the Authorization header it received."""
    async def run(got: Received, w: Writer) -> None:
        body = first + template.replace("{auth}", got.headers["authorization"]).encode()
        w.write(head(status, {"Content-Type": ctype}, length=len(body)) + body)
        await w.drain()
    return run


ECHOES = {
    "json_401": (echo(401, "application/json", json.dumps({"error": {
        "message": "Incorrect API key provided: {auth}. You can find your API key at "
                   "https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}})), False),
    "text_500": (echo(500, "text/plain", "proxy failure while sending {auth} upstream"), False),
    "html_502": (echo(502, "text/html", "<html><pre>{auth}</pre></html>"), False),
    "error_in_200": (echo(200, "application/json",
                          '{"error": {"message": "bad credential {auth}", "type": "x"}}'), False),
    "first_sse_event": (echo(200, "text/event-stream",
                             'data: {"error": {"message": "denied for {auth}", '
                             '"type": "server_error"}}\n\n'), True),
    "sse_after_start": (echo(200, "text/event-stream",
                             'data: {"error": {"message": "denied for {auth}", '
                             '"type": "server_error"}}\n\n', first=chunk_event("a")), True),
}


@pytest.fixture
async def up() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


def leaked(gw: RunningGateway, text: str) -> list[str]:
    places = []
    if KEY in text:
        places.append("client body")
    for span in gw.spans.get_finished_spans():
        dump = json.dumps({"status": span.status.description, "attrs": dict(span.attributes or {}),
                           "events": [dict(e.attributes or {}) for e in span.events]},
                          default=str)
        if KEY in dump:
            places.append(f"span {span.name}")
    return places


@pytest.mark.parametrize("case", sorted(ECHOES))
async def test_echoed_upstream_key_is_redacted_everywhere(
    gateway_factory: GatewayFactory, up: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    case: str,
) -> None:
    fault, stream = ECHOES[case]
    up.then(fault, fault)
    gw = await gateway_factory({
        "model_list": [model_entry("m", up.base_url, api_key=KEY)],
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002, "max_transient_retries": 1},
    })
    caplog.set_level(logging.DEBUG)
    async with aiohttp.ClientSession() as s, s.post(
            gw.base_url + "/chat/completions",
            json={"model": "m", "messages": [user("hi")], "stream": stream}) as r:
        text = (await r.read()).decode()
    assert up.received and up.received[0].headers["authorization"] == f"Bearer {KEY}"
    assert "***" in text or "error" in text
    assert leaked(gw, text) == []
    assert KEY not in caplog.text
    logging.getLogger("gateway.test").warning("a log line that names %s", KEY)
    assert KEY not in caplog.records[-1].getMessage()


@IGNORE_SCHEMA_WARNINGS
async def test_echoed_key_is_redacted_on_the_litellm_path(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeAnthropic(api_key=UPSTREAM_KEY) as fake:
        fake.script(anthropic_error(401, f"the key {UPSTREAM_KEY} was revoked",
                                    "authentication_error"))
        gw = await start_native_gateway(gateway_factory, fake.base_url, ANTHROPIC_MODEL,
                                        name="claude")
        async with aiohttp.ClientSession() as s, s.post(
                gw.base_url + "/chat/completions",
                json={"model": "claude", "messages": [user("hi")], "max_tokens": 10}) as r:
            text = (await r.read()).decode()
        assert r.status == 401
    assert "was revoked" in text
    assert UPSTREAM_KEY not in text
    spans = gw.spans.get_finished_spans()
    assert spans and all(UPSTREAM_KEY not in (s.status.description or "") for s in spans)
    assert UPSTREAM_KEY not in caplog.text


SLASHED_KEY = "AKIA/upstream+secret=ECHO42"


async def _echoed(gateway_factory: GatewayFactory, up: FaultyUpstream,
                  caplog: pytest.LogCaptureFixture, key: str,
                  ) -> tuple[RunningGateway, int, str]:
    """One chat request through a gateway whose deployment holds ``key``, answered by the
    refusal ``up`` was given (logs captured at debug): the gateway, status and body."""
    gw = await gateway_factory({
        "model_list": [model_entry("m", up.base_url, api_key=key)],
        "recovery": {"max_transient_retries": 0}})
    caplog.set_level(logging.DEBUG)
    async with aiohttp.ClientSession() as s, s.post(
            gw.base_url + "/chat/completions",
            json={"model": "m", "messages": [user("hi")]}) as r:
        return gw, r.status, (await r.read()).decode()


async def test_a_key_echoed_percent_encoded_is_redacted(
    gateway_factory: GatewayFactory, up: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    # An upstream quoting the URL it was called with: a key holding "/" or "+" (an AWS
    # secret) comes back percent-encoded, in either hex case.
    fault = echo(400, "application/json", json.dumps({"error": {
        "message": "bad signature for https://h/v1?sig=AKIA%2Fupstream%2Bsecret%3DECHO42 and "
                   "AKIA%2fupstream%2bsecret%3dECHO42", "type": "invalid_request_error"}}))
    up.then(fault)
    gw, status, text = await _echoed(gateway_factory, up, caplog, SLASHED_KEY)
    assert status == 400 and "bad signature" in text
    for form in ("AKIA%2Fupstream", "AKIA%2fupstream"):
        assert form not in text and form not in caplog.text
    assert not any("AKIA%2" in (span.status.description or "")
                   for span in gw.spans.get_finished_spans())


async def test_a_key_echoed_in_base64_is_redacted(
    gateway_factory: GatewayFactory, up: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    # An upstream quoting the credential it was given as a Basic pair or an encoded blob:
    # the key's base64 at any alignment, standard or URL-safe, is masked.
    key = "sk-provider-SECRET-0123456789abcdef"
    echoes = [base64.b64encode(f"{lead}{key}".encode()).decode()
              for lead in ("", "u:", "Bearer ")]
    echoes.append(base64.urlsafe_b64encode(f"x{key}?".encode()).decode())
    up.then(echo(403, "application/json", json.dumps({"error": {
        "message": "credentials " + " ".join(echoes) + " are not allowed",
        "type": "permission_error"}})))
    _, status, text = await _echoed(gateway_factory, up, caplog, key)
    assert status == 403 and "are not allowed" in text
    for leaked in echoes:
        middle = leaked[len(leaked) // 2 - 6:len(leaked) // 2 + 6]  # of the key's part
        assert middle not in text and middle not in caplog.text
