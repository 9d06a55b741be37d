"""Hostile client input through real sockets: always a 4xx in the OpenAI envelope, never a
500, a plain-text page or a held connection."""

from __future__ import annotations

import asyncio
import gzip
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
import brotli
import pytest
from backports import zstd
from yarl import URL

from tests.conftest import GatewayFactory, RunningGateway, free_port, model_entry
from tests.fakes.raw_http import RawAnswer, exchange, parse_answer
from tests.http import post_json
from tests.server.test_bad_input import assert_envelope


async def post_raw(gw: RunningGateway, data: bytes, path: str = "/v1/chat/completions",
                   headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    """POST raw bytes (a JSON content type unless ``headers`` say otherwise)."""
    return await post_json(gw.root + path, data=data,
                           headers=headers or {"Content-Type": "application/json"})

CHAT = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture
async def gw(gateway_factory: GatewayFactory) -> RunningGateway:
    dead = f"http://127.0.0.1:{free_port()}/v1"  # never reached by these requests
    return await gateway_factory({
        "model_list": [model_entry("m", dead)],
        "gateway": {"max_body_bytes": 256 * 1024, "header_timeout": 0.5},
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002, "max_transient_retries": 0},
    })


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/gateway/project"])
@pytest.mark.parametrize("where", ["message", "top", "content_part", "tools"])
async def test_deep_nesting_is_400_at_parse_time(gw: RunningGateway, path: str,
                                                 where: str) -> None:
    deep = nested(300)
    bodies = {
        "message": b'{"model": "m", "messages": [{"role": "user", "content": "hi", "x": '
                   + deep + b"}]}",
        "top": b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": '
               + deep + b"}",
        "content_part": b'{"model": "m", "messages": [{"role": "user", "content": '
                        b'[{"type": "text", "text": "hi", "meta": ' + deep + b"}]}]}",
        "tools": b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], '
                 b'"tools": [{"type": "function", "function": {"name": "f", "parameters": '
                 + deep + b"}}]}",
    }
    status, headers, body = await post_raw(gw, bodies[where], path=path)
    assert status == 400
    assert_envelope(body, contains="nested deeper than")
    assert headers["x-request-id"].startswith("req_")


async def test_nesting_at_the_limit_is_accepted(gw: RunningGateway) -> None:
    # 254 levels in all (the body object, "x" and 252 more arrays): still served.
    body = b'{"messages": [{"role": "user", "content": "hi"}], "x": ' + nested(253) + b"}"
    status, _, got = await post_raw(gw, body, path="/v1/gateway/project")
    assert status == 200, got


async def test_non_utf8_session_id_is_400(gw: RunningGateway) -> None:
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               b"Content-Type: application/json\r\nx-session-id: s\xff\xfe\xc3\r\n"
               b"Content-Length: " + str(len(CHAT)).encode() + b"\r\n\r\n" + CHAT)
    answer = await exchange(gw.root, request)
    assert answer.status == 400
    assert_envelope(answer.json(), contains="session id")


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd", "compress"])
async def test_undecodable_body_is_4xx_envelope(gw: RunningGateway, encoding: str) -> None:
    status, _, body = await post_raw(gw, b"this is not compressed at all",
                                     headers={"Content-Type": "application/json",
                                              "Content-Encoding": encoding})
    assert 400 <= status < 500
    assert_envelope(body, contains="content-encoding")


async def test_a_body_that_does_not_decode_closes_its_connection_saying_so(
        gw: RunningGateway) -> None:
    # The rest of the body cannot be read: the connection ends after the answer, and the
    # answer says so (a keep-alive client must not send its next request on it).
    answer = await exchange(gw.root, _request(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        b"\r\nContent-Encoding: gzip\r\nContent-Length: 20", b"not gzip at all, no.."))
    assert answer.status == 400
    assert answer.headers.get("connection") == "close"
    assert_envelope(answer.json(), contains="content-encoding")


COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {"gzip": gzip.compress,
                                                     "zstd": zstd.compress,
                                                     "br": brotli.compress}


@pytest.mark.parametrize("encoding", sorted(COMPRESSORS))
async def test_compressed_body_is_accepted(gw: RunningGateway, encoding: str) -> None:
    status, _, body = await post_raw(
        gw, COMPRESSORS[encoding](b'{"messages": [{"role": "user", "content": "hi"}]}'),
        path="/v1/gateway/project",
        headers={"Content-Type": "application/json", "Content-Encoding": encoding})
    assert status == 200
    assert body["messages"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("encoding", sorted(COMPRESSORS))
async def test_compression_bomb_is_413(gw: RunningGateway, encoding: str) -> None:
    bomb = COMPRESSORS[encoding](b'{"messages": [{"role": "user", "content": "'
                                 + b"a" * 4_000_000)
    status, _, body = await post_raw(gw, bomb, headers={"Content-Type": "application/json",
                                                        "Content-Encoding": encoding})
    assert status == 413
    assert_envelope(body, contains="limit")


@pytest.mark.parametrize("query", ["from=99999999999999999999", "from=1&to=99999999999999999999",
                                   "from=-99999999999999999999", "to=1e400", "from=१२"])
async def test_archive_integers_are_bounded(gateway_factory: GatewayFactory, query: str) -> None:
    # Archives need client auth (without keys they answer 403 before reading the query).
    gw = await gateway_factory({
        "model_list": [model_entry("m", f"http://127.0.0.1:{free_port()}/v1")],
        "gateway": {"api_keys": ["archive-reader-key"]},
    })
    async with aiohttp.ClientSession() as s, s.get(
            URL(gw.root + "/v1/gateway/sessions/s1/archive?" + query, encoded=False),
            headers={"Authorization": "Bearer archive-reader-key"}) as r:
        assert r.status == 400
        assert_envelope(await r.json(), contains="from")


def _request(head: bytes, body: bytes = b"") -> bytes:
    return head + b"\r\n\r\n" + body


BROKEN_HTTP = {
    "header_too_long": (_request(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                 b"x-big: " + b"a" * 9000), (431,)),
    "too_many_headers": (_request(b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                  + b"\r\n".join(b"x-h%d: v" % i for i in range(200))),
                         (431,)),
    "bad_request_line": (_request(b"GARBAGE\x01 / what\r\nHost: x"), (400,)),
    "cl_and_te": (_request(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Length: 5\r\nTransfer-Encoding: chunked",
                           b"0\r\n\r\n"), (400,)),
    "bad_chunk": (_request(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\nTransfer-Encoding: chunked",
                           b"zz\r\n{}\r\n0\r\n\r\n"), (400,)),
    "nul_in_path": (_request(b"GET /v1/mod\x00els HTTP/1.1\r\nHost: x"), (400,)),
    "bad_header_name": (_request(b"GET /healthz HTTP/1.1\r\nHost: x\r\nbad header: v"),
                        (400,)),
}


@pytest.mark.parametrize("case", sorted(BROKEN_HTTP))
async def test_http_parse_errors_answer_in_the_envelope(
    gw: RunningGateway, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    data, statuses = BROKEN_HTTP[case]
    answer = await exchange(gw.root, data)
    assert answer.status in statuses
    assert answer.headers["content-type"].startswith("application/json")
    body = answer.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    assert "Traceback" not in caplog.text
    # And the gateway is still serving.
    async with aiohttp.ClientSession() as s, s.get(gw.root + "/healthz") as r:
        assert r.status == 200


UNKNOWN_KEY = b"sk-unknown-never-configured-31337"
# Malformed requests that quote a key the gateway does not know (so no registered secret
# masks it) where a parser's error preview would show it.
LEAKY_HTTP = {
    "a bearer key past the header limit": b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
    b"Authorization: Bearer " + UNKNOWN_KEY + b"a" * 9000,
    "x-api-key written without its colon": b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
    b"x-api-key " + UNKNOWN_KEY,
    "a key in the query of a bad request line": b"POST /v1/messages?key=" + UNKNOWN_KEY
    + b" HTTP/1.1 junk\r\nHost: x",
    "a key in a cookie with a control character": b"POST /v1/messages HTTP/1.1\r\n"
    b"Host: x\r\nCookie: session=" + UNKNOWN_KEY + b"\x01",
    "an api-key folded onto a second line": b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
    b"api-key:\r\n " + UNKNOWN_KEY,
}


@pytest.mark.parametrize("case", sorted(LEAKY_HTTP))
async def test_a_parse_error_never_quotes_the_requests_bytes(
    gw: RunningGateway, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    answer = await exchange(gw.root, _request(LEAKY_HTTP[case]))
    assert "refused a malformed HTTP request" in caplog.text  # (the line was logged)
    assert answer.status in (400, 431)
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert UNKNOWN_KEY not in answer.body and UNKNOWN_KEY.decode() not in caplog.text


async def _partial(gw: RunningGateway, data: bytes) -> RawAnswer:
    url = URL(gw.root)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(data)
        await writer.drain()
        # The client never finishes: the gateway must answer and close on its own.
        got = await asyncio.wait_for(reader.read(-1), 15)
    finally:
        writer.close()
    return parse_answer(got)


@pytest.mark.parametrize("data", [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty",
    b"GET /heal",
    b"",
])
async def test_partial_headers_are_timed_out_with_408(gw: RunningGateway, data: bytes) -> None:
    if not data:
        # A connection that sends nothing at all is closed too (nothing to answer).
        url = URL(gw.root)
        reader, writer = await asyncio.open_connection(url.host, url.port)
        try:
            assert await asyncio.wait_for(reader.read(-1), 15) == b""
        finally:
            writer.close()
        return
    answer = await _partial(gw, data)
    assert answer.status == 408
    assert_envelope(answer.json(), contains="headers")


async def test_partial_body_is_timed_out(gateway_factory: GatewayFactory) -> None:
    gw = await gateway_factory({
        "model_list": [model_entry("m", f"http://127.0.0.1:{free_port()}/v1")],
        "gateway": {"body_timeout": 0.5},
    })
    answer = await _partial(gw, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                b"Content-Length: 100\r\n\r\n{\"model\"")
    assert answer.status == 408
    assert_envelope(answer.json(), contains="body")
