"""Mutated requests on every route and wire, against a real gateway and real fake upstreams
(a chat referee, a Responses API, an Anthropic Messages API): never a 500, every stream
ends with its wire's terminal event.

Bounded for ``make test`` (30 examples per route, derandomized, no example database);
``make fuzz`` runs the long search (``FUZZ_EXAMPLES``, 2000 per route by default).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import RunningGateway
from tests.fuzz.mutations import ALL_SEEDS, SEEDS, mutate

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "30"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck), print_blob=True)

# Route -> (seed wire, models: translated to chat and native).
ROUTES: dict[str, tuple[str, tuple[str, ...]]] = {
    "/v1/chat/completions": ("chat", ("local", "gpt", "claude")),
    "/v1/responses": ("responses", ("local", "gpt", "claude")),
    "/v1/messages": ("anthropic", ("local", "claude", "gpt")),
    "/v1/messages/count_tokens": ("anthropic", ("local", "claude")),
}
# The last event of a finished stream, per route kind.
TERMINAL = {
    "chat": (b"data: [DONE]", b'data: {"error"'),
    "responses": (b"event: response.completed", b"event: response.incomplete",
                  b"event: response.failed", b"event: error"),
    "anthropic": (b"event: message_stop", b"event: error"),
}


async def check(gw: RunningGateway, path: str, body: Any, wire: str,
                session_id: str | None = None) -> None:
    """Send one request; fail on a 500, a non-JSON error, or a stream without its end."""
    timeout = aiohttp.ClientTimeout(total=60)
    headers = {"content-type": "application/json"}
    if session_id is not None:  # the session paths: stores, compaction state, turn reads
        headers["x-session-id"] = session_id
    async with aiohttp.ClientSession(timeout=timeout) as session, session.post(
        gw.root + path, data=orjson.dumps(body), headers=headers,
    ) as answer:
        data = await answer.read()  # a chunked body not closed raises ClientPayloadError
    shown = data[:600]
    assert answer.status != 500, (path, shown)
    if answer.status >= 400:
        error = orjson.loads(data)
        if wire == "anthropic" and path != "/v1/gateway/project":
            assert error.get("type") == "error" and isinstance(error.get("error"), dict), shown
        else:
            assert isinstance(error.get("error"), dict), shown
    elif answer.content_type == "text/event-stream":
        last = data.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        assert last.startswith(TERMINAL[wire]), (path, data[-600:])


Request = tuple[str, Any, str, str | None]  # path, body, wire, session id


async def search(gw: RunningGateway, requests: st.SearchStrategy[Request]) -> None:
    """Run hypothesis in a thread; each request is sent from this loop, the gateway's."""
    loop = asyncio.get_running_loop()

    @FUZZ
    @given(request=requests)
    def one(request: Request) -> None:
        asyncio.run_coroutine_threadsafe(check(gw, *request), loop).result()

    await asyncio.to_thread(one)


@st.composite
def route_requests(draw: st.DrawFn, path: str) -> Request:
    """A mutated request of the route's wire, to a translated or a native model, in one of
    a few sessions or in none."""
    wire, models = ROUTES[path]
    seed = dict(draw(st.sampled_from(ALL_SEEDS[wire])), model=draw(st.sampled_from(models)),
                stream=draw(st.booleans()))
    return path, draw(mutate(seed)), wire, draw(st.sampled_from((None, "fuzz-a", "fuzz-b")))


@st.composite
def dry_runs(draw: st.DrawFn, wire: str) -> Request:
    """A mutated body of ``wire`` to the dry run, its wire named (rightly or not) or not."""
    asked = draw(st.sampled_from(("", "chat", "responses", "anthropic")))
    strict = str(draw(st.booleans())).lower()
    seed = draw(st.sampled_from(ALL_SEEDS[wire]))
    return f"/v1/gateway/project?wire={asked}&strict={strict}", draw(mutate(seed)), "chat", None


@pytest.mark.parametrize("path", list(ROUTES))
async def test_mutated_requests_never_fail_with_500(gw: RunningGateway, path: str) -> None:
    await search(gw, route_requests(path))


@pytest.mark.parametrize("wire", list(SEEDS))
async def test_mutated_dry_runs_never_fail_with_500(gw: RunningGateway, wire: str) -> None:
    await search(gw, dry_runs(wire))


_SEGMENT = st.one_of(st.text(min_size=1, max_size=80),
                     st.from_regex(r"resp_[A-Za-z0-9_-]{1,300}", fullmatch=True))
_QUERY = st.dictionaries(st.sampled_from(["stream", "starting_after", "limit", "order", "after",
                                          "include[]", "include_obfuscation", "x"]),
                         st.text(max_size=20), max_size=4)


async def _stored_response_call(gw: RunningGateway, method: str, suffix: str, response_id: str,
                                query: dict[str, str]) -> None:
    """One call to a stored-response route: a 4xx or a 200, never a 500; JSON errors."""
    timeout = aiohttp.ClientTimeout(total=60)
    url = gw.root + "/v1/responses/" + quote(response_id, safe="") + suffix
    async with aiohttp.ClientSession(timeout=timeout) as session, session.request(
            method, url, params=query) as answer:
        data = await answer.read()
    assert answer.status < 500, (method, url, data[:300])
    if answer.status >= 400 and answer.content_type == "application/json":
        assert isinstance(orjson.loads(data).get("error"), dict), data[:300]


async def test_stored_response_routes_never_fail_with_500(gw: RunningGateway) -> None:
    """Odd ids, queries and methods on retrieve / input items / delete / cancel, with a
    background response under way among the ids tried."""
    async with aiohttp.ClientSession() as session, session.post(
            gw.base_url + "/responses", json={"model": "gpt", "input": "hi",
                                              "background": True}) as made:
        kept = (await made.json())["id"]
    loop = asyncio.get_running_loop()

    @FUZZ
    @given(st.sampled_from([("GET", ""), ("GET", "/input_items"), ("DELETE", ""),
                            ("POST", "/cancel")]),
           st.one_of(_SEGMENT, st.just(kept)), _QUERY)
    def one(route: tuple[str, str], response_id: str, query: dict[str, str]) -> None:
        asyncio.run_coroutine_threadsafe(
            _stored_response_call(gw, *route, response_id, query), loop).result()

    await asyncio.to_thread(one)
