"""Hardening, third round, from the outside: raw JSON bodies hypothesis writes for the
Responses and Messages wires (a wrong type, a huge number, a ``NaN``/``Infinity`` literal, a
lone surrogate escape, a duplicate key, a null or non-object item at any field the gateway
reads), bodies of 10,000 items, deeply nested tool schemas, odd and repeated headers, two
credentials that disagree, odd paths and queries on ``/v1/models``, the inspector and
``/v1/gateway/*``, and bodies that stop half way on every POST route.

Bad input is a clear 4xx in the wire's error shape (OpenAI's ``{"error": {...}}``,
Anthropic's ``{"type": "error", "error": {...}}``); a valid body is served; never a 500, a
traceback, or a hang; the gateway answers ``/healthz`` after each; no key comes out.
Bounded for ``make test`` like the other fuzzers (``FUZZ_EXAMPLES`` for ``make fuzz``).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from yarl import URL

from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.raw_http import RawAnswer, exchange
from tests.fakes.three_wires import ThreeWires
from tests.fuzz.test_wire_fuzz import FUZZ, TERMINAL
from tests.server.test_hardening_heldout_2 import (
    CLIENT_KEY,
    MASTER_KEY,
    UPSTREAM_KEY,
    everything_visible,
    keyed,
    leaked,
)

RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
CHAT = "/v1/chat/completions"
COUNT = "/v1/messages/count_tokens"
COMPACT = "/v1/responses/compact"
PROJECT = "/v1/gateway/project"

RESPONSES_SEED: dict[str, Any] = {
    "model": "gpt", "instructions": "Be brief.", "max_output_tokens": 64, "temperature": 0.5,
    "top_p": 0.9, "store": False, "stream": False, "parallel_tool_calls": True,
    "reasoning": {"effort": "low", "summary": "auto"}, "text": {"format": {"type": "text"}},
    "tool_choice": "auto", "metadata": {"team": "a"}, "prompt_cache_key": "k1",
    "include": ["reasoning.encrypted_content"],
    "tools": [{"type": "function", "name": "read_file", "description": "read",
               "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                              "required": ["path"]}}],
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "function_call", "call_id": "call_1", "name": "read_file",
         "arguments": '{"path": "a.py"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "x = 1"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "done", "annotations": []}]},
        {"role": "user", "content": "and now?"},
    ],
}
MESSAGES_SEED: dict[str, Any] = {
    "model": "claude", "max_tokens": 64, "temperature": 0.5, "stream": False,
    "system": [{"type": "text", "text": "Be brief."}], "metadata": {"user_id": "u1"},
    "stop_sequences": ["END"], "tool_choice": {"type": "auto"},
    "tools": [{"name": "read_file", "description": "read",
               "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                                "required": ["path"]}}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "reading"},
            {"type": "tool_use", "id": "toolu_01", "name": "read_file",
             "input": {"path": "a.py"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01",
             "content": [{"type": "text", "text": "x = 1"}]}]},
    ],
}

# JSON text hypothesis puts where a value was: wrong types, numbers past every range,
# literals Python's json module writes but JSON does not have, lone surrogates in escapes.
ODD_TOKENS = [
    "null", "true", "false", "0", "-1", "1.5", "-0", "1e400", "-1e400", "1e-400",
    "123456789012345678901234567890", "-99999999999999999999999999999999999999",
    "NaN", "Infinity", "-Infinity", '""', '"\\ud800"', '"a\\udc00b"', '"\\udbff\\udbff"',
    '"\\u0000"', '"\\uffff"', "[]", "{}", "[null]", "[1, 2]", '[""]', '[{}]', '[[[]]]',
    '{"type": null}', '{"type": 5}', '{"type": "\\ud800"}', '{"": ""}',
    "[" * 100 + "]" * 100, '{"a":' * 60 + "1" + "}" * 60,
]
PLACE = "\u0001ODD\u0001"


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``value`` (keys and list indices), the root excluded."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            out.append((*here, key))
            out += _paths(inner, (*here, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            out.append((*here, index))
            out += _paths(inner, (*here, index))
    return out


@st.composite
def odd_bodies(draw: st.DrawFn, seed: dict[str, Any], models: tuple[str, ...]) -> bytes:
    """``seed`` as JSON text with one to three values replaced by odd JSON text, maybe a
    duplicate key, maybe a list whose items are all null or not objects."""
    body = copy.deepcopy(seed)
    body["model"] = draw(st.sampled_from(models))
    body["stream"] = draw(st.booleans())
    tokens: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(body) if PLACE not in json.dumps(p)]
        path = draw(st.sampled_from(paths))
        target = body
        try:
            for key in path[:-1]:
                target = target[key]
        except (KeyError, IndexError, TypeError):
            continue  # (a value replaced before held this path)
        if isinstance(target, (dict, list)) and (
                isinstance(target, dict) or path[-1] < len(target)):
            target[path[-1]] = f"{PLACE}{len(tokens)}"
            tokens.append(draw(st.sampled_from(ODD_TOKENS)))
    lists = [p for p in _paths(body) if isinstance(_at(body, p), list)]
    if lists and draw(st.booleans()):
        path = draw(st.sampled_from(lists))
        item = draw(st.sampled_from(["null", "7", '"text"', "[]", "true"]))
        _put(body, path, f"{PLACE}{len(tokens)}")
        tokens.append("[" + ", ".join([item] * draw(st.integers(1, 50))) + "]")
    text = json.dumps(body)
    for n, token in enumerate(tokens):
        text = text.replace(json.dumps(f"{PLACE}{n}"), token)
    if draw(st.booleans()):  # a duplicate key at the top, first or last wins: either way
        key = draw(st.sampled_from(sorted(seed)))
        text = "{" + json.dumps(key) + ": " + draw(st.sampled_from(ODD_TOKENS)) + ", " + text[1:]
    return text.encode()


def _at(body: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        body = body[key]
    return body


def _put(body: Any, path: tuple[Any, ...], value: Any) -> None:
    _at(body, path[:-1])[path[-1]] = value


def assert_wire_error(path: str, status: int, data: bytes) -> None:
    """A 4xx/5xx body in the wire's own error shape, no traceback."""
    assert b"Traceback" not in data
    error = orjson.loads(data)
    if path in (MESSAGES, COUNT):
        assert error.get("type") == "error", data[:400]
        assert isinstance(error.get("error"), dict) and isinstance(
            error["error"].get("message"), str), data[:400]
    else:
        assert isinstance(error.get("error"), dict), data[:400]
        assert set(error["error"]) >= {"message", "type"}, data[:400]


async def check_raw(gw: RunningGateway, path: str, data: bytes,
                    headers: dict[str, str] | None = None) -> int:
    """Send ``data`` as a JSON body: never a 500; an error in the wire's shape; a stream
    that ends with its wire's terminal event."""
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.post(
        gw.root + path, data=data, headers={"content-type": "application/json",
                                            **(headers or {})},
    ) as answer:
        got = await answer.read()
    assert answer.status != 500, (path, data[:300], got[:400])
    assert answer.status < 500 or answer.status in (502, 503, 504), got[:400]
    if answer.status >= 400:
        assert answer.content_type == "application/json", got[:300]
        assert_wire_error(path, answer.status, got)
    elif answer.content_type == "text/event-stream":
        wire = {MESSAGES: "anthropic", RESPONSES: "responses"}.get(path, "chat")
        last = got.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        assert last.startswith(TERMINAL[wire]), got[-400:]
    return answer.status


async def healthy(gw: RunningGateway) -> None:
    async with aiohttp.ClientSession() as s, s.get(gw.root + "/healthz") as r:
        assert r.status == 200


async def search_raw(gw: RunningGateway, path: str, bodies: st.SearchStrategy[bytes]) -> None:
    """Run hypothesis in a thread; each body is sent from this loop, the gateway's."""
    loop = asyncio.get_running_loop()

    @FUZZ
    @given(data=bodies)
    def one(data: bytes) -> None:
        asyncio.run_coroutine_threadsafe(check_raw(gw, path, data), loop).result()

    await asyncio.to_thread(one)
    await healthy(gw)


# --- 1. hypothesis: odd JSON text at every field the gateway reads -----------------------

@pytest.mark.parametrize("path", [RESPONSES, COMPACT])
async def test_odd_json_text_anywhere_in_a_responses_body_is_never_a_500(
    gw: RunningGateway, path: str,
) -> None:
    models = ("gpt", "local", "claude") if path == RESPONSES else ("gpt",)
    await search_raw(gw, path, odd_bodies(RESPONSES_SEED, models))


@pytest.mark.parametrize("path", [MESSAGES, COUNT])
async def test_odd_json_text_anywhere_in_a_messages_body_is_never_a_500(
    gw: RunningGateway, path: str,
) -> None:
    models = ("claude", "local", "gpt") if path == MESSAGES else ("claude", "local")
    seed = dict(MESSAGES_SEED)
    if path == COUNT:
        seed.pop("max_tokens")
        seed.pop("stream")
    await search_raw(gw, path, odd_bodies(seed, models))


@st.composite
def odd_header_requests(draw: st.DrawFn, path: str, body: bytes) -> bytes:
    """A raw request to ``path`` with one to three headers whose values are any bytes a
    header line can hold (non-ASCII, control characters, 4 KB long), some repeated."""
    names = ["anthropic-version", "anthropic-beta", "x-session-id", "session_id",
             "traceparent", "tracestate", "openai-beta", "x-request-id", "accept",
             "accept-encoding", "user-agent", "x-api-key", "authorization",
             "x-litellm-api-key", "idempotency-key", "x-stainless-retry-count"]
    value = st.one_of(
        st.binary(max_size=64).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
        st.sampled_from([b"\xff\xfe", "é".encode(), "密钥".encode(), b"\x00", b"\x7f",
                         b"a" * 4000, b" ", b"Bearer ", b"Bearer \xff", b"00-" + b"0" * 60]))
    lines = b""
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(names)).encode()
        for _ in range(draw(st.integers(1, 2))):  # sometimes the same header twice
            lines += name + b": " + draw(value) + b"\r\n"
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n").encode() + lines + (
        b"\r\n" + body)


def check_raw_answer(path: str, got: RawAnswer) -> None:
    assert got.status != 500, got.body[:300]
    assert got.status < 500 or got.status in (502, 503, 504), got.body[:300]
    if got.status >= 400:
        assert got.headers.get("content-type", "").startswith("application/json"), got.body
        assert_wire_error(path, got.status, got.body)


@pytest.mark.parametrize("path", [RESPONSES, MESSAGES, CHAT])
async def test_odd_header_bytes_are_never_a_500(gw: RunningGateway, path: str) -> None:
    body = {RESPONSES: {"model": "gpt", "input": "hi"},
            MESSAGES: {"model": "claude", "max_tokens": 8,
                       "messages": [{"role": "user", "content": "hi"}]},
            CHAT: {"model": "local", "messages": [{"role": "user", "content": "hi"}]}}[path]
    loop = asyncio.get_running_loop()

    @FUZZ
    @given(data=odd_header_requests(path, orjson.dumps(body)))
    def one(data: bytes) -> None:
        got = asyncio.run_coroutine_threadsafe(exchange(gw.root, data), loop).result()
        check_raw_answer(path, got)

    await asyncio.to_thread(one)
    await healthy(gw)


# --- 2. big and deep bodies --------------------------------------------------------------

def _ten_thousand(path: str, model: str, item: Any) -> bytes:
    if path == RESPONSES:
        return orjson.dumps({"model": model, "input": [item] * 10_000})
    return orjson.dumps({"model": model, "max_tokens": 8, "messages": [item] * 10_000})


ITEMS = {
    "user_turns": ({"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                   {"role": "user", "content": "hi"}),
    "null_items": (None, None),
    "number_items": (7, 7),
    "empty_objects": ({}, {}),
    "text_parts_of_nulls": ({"role": "user", "content": [None]},
                            {"role": "user", "content": [None]}),
}


@pytest.mark.parametrize("model", ["native", "local"])
@pytest.mark.parametrize("path", [RESPONSES, MESSAGES])
@pytest.mark.parametrize("case", sorted(ITEMS))
async def test_ten_thousand_items_are_served_or_refused_in_the_wire_shape(
    gw: RunningGateway, path: str, model: str, case: str,
) -> None:
    name = model if model == "local" else ("gpt" if path == RESPONSES else "claude")
    item = ITEMS[case][0 if path == RESPONSES else 1]
    status = await check_raw(gw, path, _ten_thousand(path, name, item))
    if case != "user_turns":
        assert 400 <= status < 500, status
    await healthy(gw)


def _schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for n in range(depth):
        schema = {"type": "object", "properties": {f"p{n}": schema}}
    return schema


@pytest.mark.parametrize("model", ["native", "local"])
@pytest.mark.parametrize("path", [RESPONSES, MESSAGES, COUNT])
@pytest.mark.parametrize("depth", [60, 125, 400])
async def test_a_deeply_nested_tool_schema_is_served_or_refused_in_the_wire_shape(
    gw: RunningGateway, path: str, model: str, depth: int,
) -> None:
    # Each level is two JSON levels (object, properties): 125 is just inside the limit of
    # 254, 400 far past it.
    name = model if model == "local" else ("gpt" if path == RESPONSES else "claude")
    if path == RESPONSES:
        body: dict[str, Any] = {"model": name, "input": "hi", "tools": [
            {"type": "function", "name": "f", "parameters": _schema(depth)}]}
    else:
        body = {"model": name, "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"name": "f", "input_schema": _schema(depth)}]}
        if path == MESSAGES:
            body["max_tokens"] = 8
    data = json.dumps(body).encode()  # (orjson refuses to write past its own depth)
    status = await check_raw(gw, path, data)
    if depth == 400:
        assert status == 400
    else:
        assert status in (200, 400), status
    await healthy(gw)


# --- 3. keys: two that disagree, repeated, odd bytes -------------------------------------

@pytest.fixture
async def wires() -> AsyncIterator[ThreeWires]:
    async with ThreeWires() as up:
        yield up


@pytest.fixture
async def kgw(gateway_factory: GatewayFactory, wires: ThreeWires,
              caplog: pytest.LogCaptureFixture) -> RunningGateway:
    caplog.set_level(logging.DEBUG)
    return await gateway_factory({
        "model_list": keyed(wires.base_url),
        "general_settings": {"master_key": MASTER_KEY},
        "gateway": {"api_keys": [CLIENT_KEY], "ui": True, "capture_bodies": True,
                    "body_timeout": 0.5, "header_timeout": 0.5},
        "recovery": {"max_transient_retries": 0, "backoff_base": 0.001, "deadline": 5},
    })


WRONG = "sk-wrong-ROUND3-00000000000000"
BODIES = {
    CHAT: {"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
    MESSAGES: {"model": "claude", "max_tokens": 8, "messages": [{"role": "user",
                                                                  "content": "hi"}]},
    RESPONSES: {"model": "resp", "input": "hi"},
}
# (headers, who the gateway must let in) -- Authorization is read before x-api-key (LiteLLM's
# order); a wrong key in it is never rescued by a right one elsewhere.
DISAGREEING: dict[str, tuple[dict[str, str], bool]] = {
    "bearer_right_x_api_key_wrong": ({"Authorization": f"Bearer {CLIENT_KEY}",
                                      "x-api-key": WRONG}, True),
    "bearer_wrong_x_api_key_right": ({"Authorization": f"Bearer {WRONG}",
                                      "x-api-key": CLIENT_KEY}, False),
    "bearer_master_x_api_key_client": ({"Authorization": f"Bearer {MASTER_KEY}",
                                        "x-api-key": CLIENT_KEY}, True),
    "x_api_key_right_api_key_wrong": ({"x-api-key": CLIENT_KEY, "api-key": WRONG}, True),
    "litellm_right_bearer_wrong": ({"x-litellm-api-key": CLIENT_KEY,
                                    "Authorization": f"Bearer {WRONG}"}, True),
    "bearer_upstream_key": ({"Authorization": f"Bearer {UPSTREAM_KEY}"}, False),
}


@pytest.mark.parametrize("path", [CHAT, MESSAGES, RESPONSES])
@pytest.mark.parametrize("case", sorted(DISAGREEING))
async def test_two_credentials_that_disagree_are_decided_one_way_and_never_echoed(
    kgw: RunningGateway, caplog: pytest.LogCaptureFixture, path: str, case: str,
) -> None:
    headers, admitted = DISAGREEING[case]
    async with aiohttp.ClientSession() as s, s.post(kgw.root + path, json=BODIES[path],
                                                    headers=headers) as r:
        raw = await r.read()
        status = r.status
    assert status == (200 if admitted else 401), raw[:300]
    if status == 401:
        assert_wire_error(path, status, raw)
    assert WRONG.encode() not in raw
    shown = await everything_visible(kgw, caplog, [])
    assert leaked(raw) == [] and leaked(shown) == [] and WRONG not in shown
    await healthy(kgw)


def _raw_request(path: str, header_lines: bytes, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n").encode() + header_lines + (
        b"\r\n" + body)


REPEATED = {
    "two_bearers_right_first": (f"Authorization: Bearer {CLIENT_KEY}\r\n"
                                f"Authorization: Bearer {WRONG}\r\n").encode(),
    "two_bearers_wrong_first": (f"Authorization: Bearer {WRONG}\r\n"
                                f"Authorization: Bearer {CLIENT_KEY}\r\n").encode(),
    "two_x_api_keys": f"x-api-key: {WRONG}\r\nx-api-key: {CLIENT_KEY}\r\n".encode(),
    "latin1_bearer": b"Authorization: Bearer sk-\xe9\xe8-key\r\n",
    "utf8_x_api_key": "x-api-key: sk-ключ-密钥\r\n".encode(),
    "key_with_nul": f"Authorization: Bearer {CLIENT_KEY}\x00\r\n".encode(),
}


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
@pytest.mark.parametrize("case", sorted(REPEATED))
async def test_repeated_or_undecodable_credentials_are_a_clear_answer(
    kgw: RunningGateway, caplog: pytest.LogCaptureFixture, path: str, case: str,
) -> None:
    got = await exchange(kgw.root, _raw_request(path, REPEATED[case], orjson.dumps(
        BODIES[path])))
    # The first of two headers counts (as aiohttp's request.headers.get reads it).
    admitted = case == "two_bearers_right_first"
    assert got.status == (200 if admitted else 401) or (
        got.status == 400 and case == "key_with_nul"), (got.status, got.body[:300])
    if got.status != 200:
        assert_wire_error(path, got.status, got.body)
    assert WRONG.encode() not in got.body and b"\xe9\xe8" not in got.body
    shown = await everything_visible(kgw, caplog, [])
    assert leaked(got.body) == [] and leaked(shown) == [] and WRONG not in shown
    await healthy(kgw)


# --- 4. the other routes: models, inspector, gateway API ----------------------------------

ODD_GETS = [
    "/v1/models/%00", "/v1/models/%ff%fe", "/v1/models/" + "m" * 10_000,
    "/v1/models/..%2F..%2Fetc%2Fpasswd", "/v1/models?limit=NaN&after=%ff",
    "/v1/model/info?litellm_model_id=%00",
    "/ui/api/requests?model=%ff&status=NaN&kind=%00&owner=" + "o" * 5000,
    "/ui/api/requests/%00", "/ui/api/requests/" + "r" * 10_000, "/ui/api/requests/%ff",
    "/ui/api/sessions/%ff%fe", "/ui/api/sessions/" + "s" * 10_000,
    "/ui/api/sessions/a%2F..%2Fb/archive", "/ui/static/..%2F..%2Fpyproject.toml",
    "/ui/static/%00", "/v1/gateway/sessions/%ff/archive",
    "/v1/gateway/sessions/s/archive?from=1e999&to=-1",
    "/v1/gateway/sessions/s/archive?from=NaN", "/v1/gateway/sessions/" + "s" * 10_000
    + "/archive", "/v1/gateway/sessions/s/archive?from=99999999999999999999999",
]


@pytest.mark.parametrize("auth", ["bearer", "x_api_key"])
async def test_odd_paths_and_queries_on_the_read_routes_are_a_4xx_or_served(
    kgw: RunningGateway, caplog: pytest.LogCaptureFixture, auth: str,
) -> None:
    headers = ({"Authorization": f"Bearer {MASTER_KEY}"} if auth == "bearer"
               else {"x-api-key": CLIENT_KEY})
    seen = []
    async with aiohttp.ClientSession() as s:
        for where in ODD_GETS:
            async with s.get(URL(kgw.root + where, encoded=True), headers=headers) as r:
                raw = await r.read()
            assert r.status != 500 and r.status < 500, (where[:80], r.status, raw[:300])
            if r.status >= 400:
                assert r.content_type == "application/json", (where[:80], raw[:200])
                assert isinstance(orjson.loads(raw).get("error"), dict), raw[:300]
            seen.append(raw)
    assert [leaked(raw) for raw in seen if leaked(raw)] == []
    shown = await everything_visible(kgw, caplog, [])
    assert leaked(shown) == []
    await healthy(kgw)


PROJECT_BODIES = [
    b"[]", b"NaN", b'{"messages": NaN}', b'{"messages": [{"role": "user", "content": '
    b'"\\ud800"}]}', b'{"input": [null, 7, "x"]}', b'{"messages": [], "messages": 5}',
    b'{"messages": [{"role": "tool", "tool_call_id": 1e400, "content": "x"}]}',
    b'{"input": [{"type": "function_call_output", "call_id": {"a": 1}, "output": 5}]}',
    b'{"messages": "' + b"x" * 100_000 + b'"}',
]


@pytest.mark.parametrize("query", ["", "?wire=%ff", "?wire=anthropic&strict=%00",
                                   "?wire=responses&strict=true"])
async def test_odd_dry_runs_are_a_4xx_in_the_openai_shape_or_served(
    kgw: RunningGateway, query: str,
) -> None:
    async with aiohttp.ClientSession() as s:
        for data in PROJECT_BODIES:
            async with s.post(URL(kgw.root + PROJECT + query, encoded=True), data=data,
                              headers={"Authorization": f"Bearer {CLIENT_KEY}",
                                       "Content-Type": "application/json"}) as r:
                raw = await r.read()
            assert r.status == 200 or 400 <= r.status < 500, (data[:80], r.status, raw[:300])
            if r.status != 200:
                assert isinstance(orjson.loads(raw).get("error"), dict), raw[:300]
    await healthy(kgw)


# --- 5. bodies that stop half way, on every POST route ------------------------------------

@pytest.mark.parametrize("how", ["chunked", "content_length"])
@pytest.mark.parametrize("path", [COMPACT, COUNT, PROJECT, "/v1/models"])
async def test_a_body_that_stops_is_a_408_in_the_wire_shape(
    kgw: RunningGateway, path: str, how: str,
) -> None:
    auth = f"Authorization: Bearer {CLIENT_KEY}\r\n"
    start = b'{"model": "resp", "input": [{"role": "user", "cont'
    if how == "chunked":
        head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"{auth}Transfer-Encoding: chunked\r\n\r\n").encode()
        data = head + b"%x\r\n" % len(start) + start + b"\r\n"
    else:
        head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"{auth}Content-Length: 5000\r\n\r\n").encode()
        data = head + start
    got = await exchange(kgw.root, data)  # the gateway answers and closes: no hang
    if path == "/v1/models":  # a GET route: another method is refused at once
        assert got.status == 405, got.body[:300]
    else:
        assert got.status == 408, (got.status, got.body[:300])
    assert_wire_error(MESSAGES if path == COUNT else RESPONSES, got.status, got.body)
    await healthy(kgw)


# --- 6. odd bodies as the inspector shows them --------------------------------------------

@pytest.mark.parametrize("path", [RESPONSES, MESSAGES])
async def test_odd_bodies_the_inspector_captured_are_shown_never_a_500(
    kgw: RunningGateway, caplog: pytest.LogCaptureFixture, path: str,
) -> None:
    # The same odd JSON text, to a gateway that captures bodies for its inspector and
    # keeps sessions: every request and session page it then shows is a 200 without keys.
    seed = dict(RESPONSES_SEED if path == RESPONSES else MESSAGES_SEED)
    models = ("resp", "chat", "claude")
    headers = {"Authorization": f"Bearer {CLIENT_KEY}", "x-session-id": "odd-3"}
    loop = asyncio.get_running_loop()

    @FUZZ
    @given(data=odd_bodies(seed, models))
    def one(data: bytes) -> None:
        asyncio.run_coroutine_threadsafe(check_raw(kgw, path, data, headers), loop).result()

    await asyncio.to_thread(one)
    auth = {"Authorization": f"Bearer {CLIENT_KEY}"}  # (the inspector shows its own owner's)
    shown = []
    async with aiohttp.ClientSession() as s:
        async with s.get(kgw.root + "/ui/api/requests", headers=auth) as r:
            assert r.status == 200
            entries = (await r.json())["requests"]
        assert entries  # (the served ones at least)
        pages = [f"/ui/api/requests/{e['request_id']}" for e in entries]
        pages += ["/ui/api/sessions/odd-3", "/ui/api/sessions/odd-3/archive"]
        for page in pages:
            async with s.get(kgw.root + page, headers=auth) as r:
                raw = await r.read()
            assert r.status in (200, 403, 404), (page, r.status, raw[:300])
            shown.append(raw)
    assert [leaked(raw) for raw in shown if leaked(raw)] == []
    assert leaked(await everything_visible(kgw, caplog, [])) == []
    await healthy(kgw)


@pytest.mark.parametrize("path", [RESPONSES, MESSAGES, CHAT])
async def test_odd_header_bytes_with_client_keys_are_a_401_or_served_never_a_500(
    kgw: RunningGateway, caplog: pytest.LogCaptureFixture, path: str,
) -> None:
    # The same headers with keys configured: every credential header is read and compared.
    loop = asyncio.get_running_loop()
    answers: list[bytes] = []

    @FUZZ
    @given(data=odd_header_requests(path, orjson.dumps(BODIES[path])))
    def one(data: bytes) -> None:
        got = asyncio.run_coroutine_threadsafe(exchange(kgw.root, data), loop).result()
        check_raw_answer(path, got)
        answers.append(got.body)

    await asyncio.to_thread(one)
    assert [leaked(raw) for raw in answers if leaked(raw)] == []
    assert leaked(await everything_visible(kgw, caplog, [])) == []
    await healthy(kgw)
