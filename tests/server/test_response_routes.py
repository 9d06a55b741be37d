"""Stored responses: ``GET`` / ``DELETE /v1/responses/{id}``, ``.../input_items`` and
``.../cancel``, through the real ``openai`` SDK.

A chat-only model's answers (the referee upstream) are served from what the gateway kept; a
Responses upstream's background response (the fake, which answers ``queued`` and completes
once polled) is polled, resumed and cancelled at the deployment that runs it, with that
deployment's key. Every test runs on SQLite and on a real redis-server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from gateway.referee import Referee
from gateway.server.keys import RESPONSE_STATE
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.native_base import Canned
from tests.fakes.responses_server import FakeResponses

KEY_A, KEY_B = "client-key-aaaa", "client-key-bbbb"
UPSTREAM_KEY = "upstream-key-responses"


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict") as ref:
        yield ref


@pytest.fixture
async def fake() -> AsyncIterator[FakeResponses]:
    async with FakeResponses(api_key=UPSTREAM_KEY) as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee, fake: FakeResponses,
             sessions: dict[str, Any]) -> RunningGateway:
    """``local``: a chat-only model; ``gpt``: a Responses upstream."""
    return await gateway_factory({
        "model_list": [
            {"model_name": "local", "litellm_params": {
                "model": "hosted_vllm/referee", "api_base": referee.base_url, "api_key": "k"}},
            {"model_name": "gpt", "litellm_params": {
                "model": "openai/gpt-5", "api_base": f"{fake.base_url}/v1",
                "api_key": UPSTREAM_KEY}}],
        "sessions": sessions,
        "gateway": {"api_keys": [KEY_A, KEY_B]},
    })


def client(gw: RunningGateway, key: str = KEY_A) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


def upstream_calls(fake: FakeResponses, method: str) -> list[Any]:
    return [r for r in fake.requests if r.method == method and r.path != "/v1/responses"]


# -- answers the gateway made (a chat-only model) ---------------------------------------

async def test_a_chat_only_answer_is_retrieved_listed_and_deleted(gw: RunningGateway) -> None:
    async with client(gw) as c:
        made = await c.responses.create(model="local", input=[
            {"role": "user", "content": "first"},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "ok"}]},
            {"role": "user", "content": "second"}])
        await gw.app[RESPONSE_STATE].flush()
        got = await c.responses.retrieve(made.id)
        assert got.id == made.id and got.status == "completed"
        assert got.output_text == made.output_text and got.model == made.model
        items = [i async for i in c.responses.input_items.list(made.id, order="asc")]
        assert [i.type for i in items] == ["message"] * 3
        assert [i.content[0].text for i in items] == ["first", "ok", "second"]  # type: ignore[union-attr]
        assert len({i.id for i in items}) == 3
        # Paged one by one, newest first: every item once.
        page = await c.responses.input_items.list(made.id, limit=1)
        assert page.data[0].content[0].text == "second"  # type: ignore[union-attr]
        assert page.has_more is True
        await c.responses.delete(made.id)
        with pytest.raises(openai.NotFoundError) as gone:
            await c.responses.retrieve(made.id)
        assert gone.value.status_code == 404
        assert f"Response with id '{made.id}' not found." in gone.value.message
        with pytest.raises(openai.BadRequestError):  # nothing left to continue
            await c.responses.create(model="local", input="again",
                                     previous_response_id=made.id)


async def test_another_key_sees_no_response_and_cannot_delete_it(gw: RunningGateway) -> None:
    async with client(gw) as a, client(gw, KEY_B) as b:
        made = await a.responses.create(model="local", input="mine")
        await gw.app[RESPONSE_STATE].flush()
        with pytest.raises(openai.NotFoundError):
            await b.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError):
            await b.responses.delete(made.id)
        with pytest.raises(openai.NotFoundError):
            await b.responses.input_items.list(made.id)
        assert (await a.responses.retrieve(made.id)).id == made.id  # still there


async def test_unknown_ids_and_bad_queries_get_openai_errors(gw: RunningGateway) -> None:
    async with client(gw) as c:
        with pytest.raises(openai.NotFoundError) as unknown:
            await c.responses.retrieve("resp_nothing_here")
        assert unknown.value.body == {"message": "Response with id 'resp_nothing_here' not "
                                      "found.", "type": "invalid_request_error", "param": None,
                                      "code": None}
        with pytest.raises(openai.BadRequestError):  # only background responses are
            made = await c.responses.create(model="local", input="hi")
            await gw.app[RESPONSE_STATE].flush()
            await c.responses.cancel(made.id)
        with pytest.raises(openai.BadRequestError) as limit:
            await c.responses.input_items.list(made.id, limit=1000)
        assert limit.value.body["param"] == "limit"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as stream:  # answered whole: no events
            await c.responses.retrieve(made.id, stream=True)
        assert stream.value.body["param"] == "stream"  # type: ignore[index]
    # No key: refused before anything is read.
    async with aiohttp.ClientSession() as s, s.get(f"{gw.base_url}/responses/{made.id}") as r:
        assert r.status == 401


# -- a Responses upstream's background response ------------------------------------------

async def test_a_background_response_is_polled_at_its_deployment_then_kept(
        gw: RunningGateway, fake: FakeResponses) -> None:
    fake.background_polls = 2
    async with client(gw) as c:
        made = await c.responses.create(model="gpt", input="think long", background=True)
        assert made.status == "queued"
        await gw.app[RESPONSE_STATE].flush()
        seen = [(await c.responses.retrieve(made.id)).status for _ in range(3)]
        assert seen == ["in_progress", "in_progress", "completed"]
        polls = upstream_calls(fake, "GET")
        assert len(polls) == 3
        # The deployment's own key went upstream, never the client's.
        assert {p.headers["authorization"] for p in polls} == {f"Bearer {UPSTREAM_KEY}"}
        await gw.app[RESPONSE_STATE].flush()
        done = await c.responses.retrieve(made.id)
        assert done.status == "completed" and done.output_text == "you said: think long"
        assert len(upstream_calls(fake, "GET")) == 3  # finished: served from what was kept
        nxt = await c.responses.create(model="gpt", input="and then?",
                                       previous_response_id=made.id)
        assert nxt.status == "completed"


async def test_another_key_cannot_poll_a_background_response(
        gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(gw) as a, client(gw, KEY_B) as b:
        made = await a.responses.create(model="gpt", input="secret plan", background=True)
        await gw.app[RESPONSE_STATE].flush()
        with pytest.raises(openai.NotFoundError):
            await b.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError):
            await b.responses.cancel(made.id)
    assert upstream_calls(fake, "GET") == [] and upstream_calls(fake, "POST") == []


async def test_a_background_response_is_cancelled_at_its_deployment(
        gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(gw) as c:
        made = await c.responses.create(model="gpt", input="long job", background=True)
        await gw.app[RESPONSE_STATE].flush()
        cancelled = await c.responses.cancel(made.id)
        assert cancelled.status == "cancelled"
        assert made.id not in fake.under_way
        await gw.app[RESPONSE_STATE].flush()
        with pytest.raises(openai.BadRequestError):  # nothing under way any more
            await c.responses.cancel(made.id)


async def test_a_background_stream_is_resumed_after_a_sequence_number(
        gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(gw) as c:
        made = await c.responses.create(model="gpt", input="stream me", background=True)
        await gw.app[RESPONSE_STATE].flush()
        events = [e async for e in await c.responses.retrieve(made.id, stream=True,
                                                              starting_after=2)]
    assert [e.sequence_number for e in events] == list(range(3, 3 + len(events)))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "you said: stream me"
    gets = upstream_calls(fake, "GET")
    assert gets[-1].query["starting_after"] == "2" and gets[-1].query["stream"] == "true"
    await gw.app[RESPONSE_STATE].flush()
    async with client(gw) as c:
        assert (await c.responses.retrieve(made.id)).status == "completed"
    assert len(upstream_calls(fake, "GET")) == len(gets)  # kept from the replayed stream


async def test_deleting_a_native_response_deletes_the_upstream_copy_too(
        gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(gw) as c:
        made = await c.responses.create(model="gpt", input="to forget")
        await gw.app[RESPONSE_STATE].flush()
        assert made.id in fake.responses
        assert (await c.responses.retrieve(made.id)).output_text == "you said: to forget"
        assert upstream_calls(fake, "GET") == []  # finished: the kept copy answered
        await c.responses.delete(made.id)
        assert made.id not in fake.responses
        assert upstream_calls(fake, "DELETE")[0].headers["authorization"] == \
            f"Bearer {UPSTREAM_KEY}"
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(made.id)


async def test_a_failing_deployment_gives_a_clean_error_on_poll(
        gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(gw) as c:
        made = await c.responses.create(model="gpt", input="x", background=True)
        await gw.app[RESPONSE_STATE].flush()
        fake.script(Canned(500, b"<html>upstream exploded</html>"))
        with pytest.raises(openai.InternalServerError) as broken:
            await c.responses.retrieve(made.id)
        assert broken.value.status_code == 502
        assert "exploded" not in str(broken.value.body)
        fake.script(Canned(401, {"error": {"message": f"Incorrect API key provided: "
                                           f"{UPSTREAM_KEY}.", "type": "invalid_request_error",
                                           "param": None, "code": "invalid_api_key"}}))
        with pytest.raises(openai.AuthenticationError) as refused:
            await c.responses.retrieve(made.id)
        assert UPSTREAM_KEY not in str(refused.value.body)
        assert (await c.responses.retrieve(made.id)).status in ("in_progress", "completed")


async def test_a_deployment_that_is_gone_gives_a_502_and_the_gateway_stays_up(
        gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(gw) as c:
        made = await c.responses.create(model="gpt", input="x", background=True)
        await gw.app[RESPONSE_STATE].flush()
        await fake.__aexit__(None, None, None)  # the deployment stops listening
        with pytest.raises(openai.InternalServerError) as gone:
            await c.responses.retrieve(made.id)
        assert gone.value.status_code == 502
        assert gone.value.body["code"] == "upstream_unreachable"  # type: ignore[index]
        with pytest.raises(openai.InternalServerError):
            await c.responses.retrieve(made.id, stream=True)
        local = await c.responses.create(model="local", input="still here")
        assert local.status == "completed"


# -- a group of several Responses deployments ---------------------------------------------

async def test_a_continuation_goes_to_the_deployment_that_made_the_answer(
        gateway_factory: GatewayFactory, sessions: dict[str, Any]) -> None:
    """A stateless turn may land on any deployment of the group; the turn continuing it by
    ``previous_response_id`` goes where that history is, not to the group's first (which
    would refuse the id and cost a resend of the whole conversation)."""
    async with FakeResponses() as first, FakeResponses() as second:
        def deployment(fake: FakeResponses, weight: int) -> dict[str, Any]:
            return {"model_name": "gpt", "litellm_params": {
                "model": "openai/gpt-5", "api_base": f"{fake.base_url}/v1", "api_key": "k",
                "weight": weight}}
        gw = await gateway_factory({"model_list": [deployment(first, 0), deployment(second, 1)],
                                    "sessions": sessions})
        async with client(gw) as c:
            made = await c.responses.create(model="gpt", input="remember: heron")
            await gw.app[RESPONSE_STATE].flush()
            raw = await c.responses.with_raw_response.create(
                model="gpt", input="what did I say?", previous_response_id=made.id)
            polled = await c.responses.retrieve(made.id)
        assert polled.id == made.id
        assert "x-gateway-repairs" not in raw.headers  # (nothing was expanded)
        assert first.requests == []
        sent = second.requests[-1].body
        assert sent["previous_response_id"] == made.id
        assert sent["input"] == "what did I say?"  # as sent: the history is upstream


async def test_a_background_stream_cut_off_is_resumed_through_the_gateway(
        gw: RunningGateway, fake: FakeResponses) -> None:
    """The connection of a streamed background response drops after its opening events:
    the response goes on upstream, the gateway kept it from its first event, and the client
    resumes its stream where it stopped."""
    fake.cut_background_streams = 3
    seen: list[Any] = []
    async with client(gw) as c:
        async for event in await c.responses.create(model="gpt", input="long story",
                                                    background=True, stream=True):
            seen.append(event)
        assert seen[0].type == "response.created"
        assert seen[-1].type in ("error", "response.failed")  # told the stream broke off
        last = max(e.sequence_number for e in seen if e.type.startswith("response."))
        await gw.app[RESPONSE_STATE].flush()
        resumed = [e async for e in await c.responses.retrieve(
            seen[0].response.id, stream=True, starting_after=last)]
    assert resumed[0].sequence_number == last + 1
    assert resumed[-1].type == "response.completed"
    assert resumed[-1].response.output_text == "you said: long story"
