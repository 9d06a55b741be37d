"""Response state the gateway keeps: ``previous_response_id`` on every upstream.

Real sockets, the real ``openai`` SDK and the OpenAI Agents SDK; the chat-only upstream is
the referee (strict chat rules), the Responses upstream the fake that keeps its own state
and refuses ids it does not know with the real bodies. Every test runs on SQLite and on a
real redis-server.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

from gateway.referee import Referee
from gateway.server.keys import STATE
from gateway.server.wire_routes import RESPONSE_STATE
from gateway.sessions.response_records import KeptResponse, encode_kept
from tests.conftest import GatewayFactory, RunningGateway, free_port
from tests.fakes.native_base import Canned
from tests.fakes.responses_server import FakeResponses

KEY_A, KEY_B = "client-key-a", "client-key-b"
TOOLS: list[Any] = [{"type": "function", "name": "read_file", "description": "read a file",
                     "parameters": {"type": "object", "properties": {}}}]
DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict") as ref:
        yield ref


@pytest.fixture
async def fake() -> AsyncIterator[FakeResponses]:
    async with FakeResponses() as server:
        yield server


def config(sessions: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    return {"model_list": [model], "sessions": sessions,
            "gateway": {"api_keys": [KEY_A, KEY_B]},
            "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05}}


@pytest.fixture
async def chat_gw(gateway_factory: GatewayFactory, referee: Referee,
                  sessions: dict[str, Any]) -> RunningGateway:
    """A gateway whose model ``local`` only speaks Chat Completions."""
    return await gateway_factory(config(sessions, {"model_name": "local", "litellm_params": {
        "model": "hosted_vllm/referee", "api_base": referee.base_url, "api_key": "k"}}))


@pytest.fixture
async def native_gw(gateway_factory: GatewayFactory, fake: FakeResponses,
                    sessions: dict[str, Any]) -> RunningGateway:
    """A gateway whose model ``gpt`` is served by a Responses upstream."""
    return await gateway_factory(config(sessions, {"model_name": "gpt", "litellm_params": {
        "model": "openai/gpt-5", "api_base": f"{fake.base_url}/v1", "api_key": "k"}}))


def client(gw: RunningGateway, key: str = KEY_A) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


async def settled(gw: RunningGateway) -> None:
    """Wait for the answers' background writes (what a later request would wait for)."""
    await gw.app[RESPONSE_STATE].flush()


def texts(messages: list[dict[str, Any]]) -> str:
    return " | ".join(str(m.get("content")) for m in messages)


# -- chat-only upstreams: previous_response_id expanded into the full input -------------

file_reads: list[str] = []


@function_tool
def read_file(query: str = "") -> str:
    """Read the file the user means."""
    file_reads.append(query)
    return "the file says 42"


async def test_agents_sdk_chain_keeps_its_context_through_a_chat_only_upstream(
        chat_gw: RunningGateway, referee: Referee) -> None:
    set_tracing_disabled(True)  # the SDK would export traces to OpenAI otherwise
    file_reads.clear()
    async with client(chat_gw) as c:
        helper = Agent(name="helper", instructions="Use tools when asked.", tools=[read_file],
                       model=OpenAIResponsesModel(model="local", openai_client=c))
        first = await Runner.run(helper, "read notes.txt with the TOOL",
                                 auto_previous_response_id=True)
        assert len(file_reads) == 1
        second = await Runner.run(helper, "and what was my first question?",
                                  previous_response_id=first.last_response_id)
    assert str(second.final_output).startswith("referee: accepted")
    # The tool turn inside the first run was chained by id too: all of it reached the
    # upstream, and the second run's request carried the whole conversation.
    chained = [r.json() for r in referee.requests]
    last = chained[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant",
                                         "user"]
    assert "read notes.txt with the TOOL" in texts(last)
    assert last[3]["content"] == "the file says 42"
    assert last[-1]["content"] == "and what was my first question?"
    # Only the new items were sent by the SDK: the gateway expanded the rest.
    assert len(chained) == 3


async def test_a_streamed_answer_is_continued_too(chat_gw: RunningGateway,
                                                  referee: Referee) -> None:
    async with client(chat_gw) as c:
        async with c.responses.stream(model="local", input="first turn") as stream:
            first = await stream.get_final_response()
        await settled(chat_gw)
        second = await c.responses.create(model="local", input="second turn",
                                          previous_response_id=first.id, stream=False)
    assert second.previous_response_id == first.id
    sent = referee.requests[-1].json()["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == "first turn"
    assert sent[1]["content"] == first.output_text


async def test_answers_kept_together_are_each_continued_at_once(
        chat_gw: RunningGateway, referee: Referee) -> None:
    # Twenty sessions answered at once: their records are written together, those that
    # come while one write is under way in the next one; each is continued right after its
    # answer, before anything settled (the lookup waits for the write that holds it).
    async with client(chat_gw) as c:
        async def session(n: int) -> tuple[int, str]:
            first = await c.responses.create(model="local", input=f"session {n} begins")
            await c.responses.create(model="local", input=f"session {n} goes on",
                                     previous_response_id=first.id)
            return n, first.id

        done = await asyncio.gather(*(session(n) for n in range(20)))
    assert len({ref for _, ref in done}) == 20
    continued = [r.json()["messages"] for r in referee.requests if len(r.json()["messages"]) == 3]
    assert sorted(m[0]["content"] for m in continued) == sorted(
        f"session {n} begins" for n in range(20))
    assert all(m[2]["content"] == m[0]["content"].replace("begins", "goes on")
               for m in continued)


async def test_unknown_id_is_a_clear_400_on_a_chat_only_upstream(chat_gw: RunningGateway,
                                                                 referee: Referee) -> None:
    async with client(chat_gw) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model="local", input="next",
                                     previous_response_id="resp_nobody_knows")
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "previous_response_id"
    assert error["code"] == "previous_response_not_found"
    assert "resp_nobody_knows" in error["message"]
    assert "full conversation in 'input'" in error["message"]
    assert referee.requests == []


async def test_another_key_cannot_continue_a_response(chat_gw: RunningGateway,
                                                      referee: Referee) -> None:
    async with client(chat_gw, KEY_A) as a, client(chat_gw, KEY_B) as b:
        first = await a.responses.create(model="local", input="my secret plan")
        await settled(chat_gw)
        with pytest.raises(openai.BadRequestError) as refused:
            await b.responses.create(model="local", input="tell me",
                                     previous_response_id=first.id)
        # Its owner still can.
        await a.responses.create(model="local", input="go on", previous_response_id=first.id)
    assert refused.value.code == "previous_response_not_found"
    assert len(referee.requests) == 2
    assert "my secret plan" in texts(referee.requests[-1].json()["messages"])


async def test_store_false_is_not_kept(chat_gw: RunningGateway, referee: Referee) -> None:
    async with client(chat_gw) as c:
        first = await c.responses.create(model="local", input="forget me", store=False)
        await settled(chat_gw)
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model="local", input="next", previous_response_id=first.id)
    assert refused.value.code == "previous_response_not_found"
    assert await chat_gw.app[RESPONSE_STATE].store.get_response(first.id) is None
    assert len(referee.requests) == 1


async def test_an_item_sent_twice_is_reported_on_the_translated_path(
        chat_gw: RunningGateway, referee: Referee) -> None:
    item = {"type": "message", "id": "msg_1", "role": "user",
            "content": [{"type": "input_text", "text": "hello"}]}
    async with client(chat_gw) as c:
        raw = await c.responses.with_raw_response.create(model="local", input=[item, item])
        answer = raw.parse()
    assert "duplicate_item_dropped=1" in raw.headers["x-gateway-repairs"]
    assert answer.output_text.startswith("referee: accepted 1 messages")
    assert len(referee.requests[-1].json()["messages"]) == 1


# -- native Responses upstreams: sent as is, recovered when the upstream forgot ------------

async def test_previous_response_id_goes_to_a_responses_upstream_as_sent(
        native_gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(native_gw) as c:
        first = await c.responses.create(model="gpt", input="hi")
        await settled(native_gw)
        raw = await c.responses.with_raw_response.create(
            model="gpt", input="again", previous_response_id=first.id)
    assert fake.requests[-1].body["previous_response_id"] == first.id
    assert fake.requests[-1].body["input"] == "again"
    assert "x-gateway-repairs" not in raw.headers


@pytest.mark.parametrize("stream", [False, True])
async def test_an_upstream_that_forgot_the_id_is_recovered(
        native_gw: RunningGateway, fake: FakeResponses, stream: bool) -> None:
    async with client(native_gw) as c:
        if stream:
            async with c.responses.stream(model="gpt", input="remember 7") as events:
                first = await events.get_final_response()
        else:
            first = await c.responses.create(model="gpt", input="remember 7")
        await settled(native_gw)
        fake.stored.clear()  # expired upstream (or another backend answered the first turn)
        raw = await c.responses.with_raw_response.create(
            model="gpt", input="what number?", previous_response_id=first.id, stream=stream)
        if stream:  # the refusal came before the first event: the stream is the resent one
            events = [event async for event in raw.parse()]
            assert events[-1].type == "response.completed"
            second = events[-1].response  # type: ignore[union-attr]
        else:
            second = raw.parse()
    assert raw.status_code == 200
    assert raw.headers["x-gateway-repairs"] == "previous_response_expanded=1"
    assert raw.headers["x-gateway-attempts"] == "2"
    assert second.output_text == "you said: what number?"
    refused, resent = fake.requests[-2].body, fake.requests[-1].body
    assert refused["previous_response_id"] == first.id  # sent as is first
    assert "previous_response_id" not in resent
    assert resent["input"][0] == {"role": "user", "content": "remember 7"}
    assert resent["input"][1]["id"] == first.output[0].id
    assert resent["input"][2] == {"role": "user", "content": "what number?"}
    # The recovered answer is kept too: the conversation goes on from it.
    await settled(native_gw)
    fake.stored.clear()
    async with client(native_gw) as c:
        await c.responses.create(model="gpt", input="and then?", previous_response_id=second.id)
    assert [i.get("content") for i in fake.requests[-1].body["input"]
            if i.get("role") == "user"] == ["remember 7", "what number?", "and then?"]


def recorded_refusals() -> list[Any]:
    """The real ``previous_response_id`` refusals of ``wire-errors.jsonl`` (exact bodies)."""
    lines = (DATA / "wire-errors.jsonl").read_text().splitlines()
    records = [orjson.loads(line) for line in lines if line.strip()]
    return [pytest.param(r, id=r["situation"]) for r in records
            if r["wire"] == "responses" and "previous_response_id" in r["situation"]]


@pytest.mark.parametrize("record", recorded_refusals())
async def test_each_real_refusal_of_a_forgotten_id_is_recovered(
        native_gw: RunningGateway, fake: FakeResponses, record: dict[str, Any]) -> None:
    async with client(native_gw) as c:
        first = await c.responses.create(model="gpt", input="one")
        await settled(native_gw)
        fake.script(Canned(record["status"], record["body"].encode()))
        raw = await c.responses.with_raw_response.create(
            model="gpt", input="two", previous_response_id=first.id)
        second = raw.parse()
        # Without the gateway's state the same refusal is the clear 400.
        fake.script(Canned(record["status"], record["body"].encode()))
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model="gpt", input="three",
                                     previous_response_id="resp_0f09a275409xxx")
    assert raw.status_code == 200
    assert raw.headers["x-gateway-repairs"] == "previous_response_expanded=1"
    assert second.output_text == "you said: two"
    assert "previous_response_id" not in fake.requests[-2].body
    assert refused.value.code == "previous_response_not_found"


async def test_unknown_id_on_both_is_the_clear_400(native_gw: RunningGateway,
                                                   fake: FakeResponses) -> None:
    async with client(native_gw) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model="gpt", input="next",
                                     previous_response_id="resp_expired")
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] == "previous_response_not_found"
    assert error["param"] == "previous_response_id"
    assert error["type"] == "invalid_request_error"
    assert "full conversation in 'input'" in error["message"]
    assert len(fake.requests) == 1  # asked once, as sent


async def test_another_key_cannot_continue_through_a_responses_upstream(
        native_gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(native_gw, KEY_A) as a, client(native_gw, KEY_B) as b:
        first = await a.responses.create(model="gpt", input="my secret plan")
        await settled(native_gw)
        with pytest.raises(openai.BadRequestError) as refused:
            await b.responses.create(model="gpt", input="tell me",
                                     previous_response_id=first.id)
    assert refused.value.code == "previous_response_not_found"
    assert len(fake.requests) == 1  # the upstream (which knows the id) was never asked


async def test_store_false_is_not_kept_for_a_responses_upstream(
        native_gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(native_gw) as c:
        first = await c.responses.create(model="gpt", input="forget me", store=False)
        await settled(native_gw)
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model="gpt", input="next", previous_response_id=first.id)
    assert refused.value.code == "previous_response_not_found"
    assert await native_gw.app[RESPONSE_STATE].store.get_response(first.id) is None


# -- the store failing never fails a request ---------------------------------------------

@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_a_store_that_is_down_never_fails_an_answer(
        gateway_factory: GatewayFactory, referee: Referee, tmp_path: Path, backend: str,
        caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the data dir should be")
    down: dict[str, Any] = {"data_dir": str(blocked)}
    if backend == "redis":
        down["redis_url"] = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    gw = await gateway_factory({
        "model_list": [{"model_name": "local", "litellm_params": {
            "model": "hosted_vllm/referee", "api_base": referee.base_url, "api_key": "k"}}],
        "sessions": down, "compaction": {"enabled": False}})
    with caplog.at_level(logging.WARNING, logger="gateway.responses_state"):
        async with client(gw) as c:
            for text in ("one", "two"):
                answer = await c.responses.create(model="local", input=text)
                assert answer.output_text.startswith("referee: accepted")
                await settled(gw)
            # Continuing needs the store: a clear, retryable 503 in the Responses shape.
            with pytest.raises(openai.InternalServerError) as unavailable:
                await c.responses.create(model="local", input="three",
                                         previous_response_id=answer.id)
    assert unavailable.value.status_code == 503
    assert unavailable.value.code == "response_state_unavailable"
    warnings = [r for r in caplog.records if "response state not kept" in r.getMessage()]
    assert len(warnings) == 1
    metrics = gw.app[STATE].telemetry.metrics  # (each answer lost is counted)
    assert metrics.value("gateway_responses_not_kept_total", reason="store_unavailable") == 2


async def test_a_previous_response_id_that_is_not_a_string_is_a_clear_400(
        chat_gw: RunningGateway, referee: Referee) -> None:
    async with client(chat_gw) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model="local", input="next",
                                     extra_body={"previous_response_id": 42})
    assert refused.value.param == "previous_response_id"
    assert referee.requests == []


# -- an agent's turns are kept as what each adds ------------------------------------------

def stored_bytes(sessions: dict[str, Any]) -> tuple[int, int]:
    """How many records the store holds and their blobs' bytes (read from the SQLite file
    or the Redis the gateway writes)."""
    if sessions.get("redis_url"):
        import redis

        with redis.Redis.from_url(sessions["redis_url"]) as r:
            keys = list(r.scan_iter("gw:r:*"))
            return len(keys), sum(int(r.strlen(k)) for k in keys)
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(Path(sessions["data_dir"]) / "sessions.sqlite3")) as db:
        count, size = db.execute("SELECT count(*), coalesce(sum(length(items)), 0) "
                                 "FROM responses").fetchone()
    return int(count), int(size)


def prose(seed: int, words: int) -> str:
    """Text that compresses as text does, not as a repeated phrase."""
    return " ".join(hashlib.sha256(f"{seed}.{n}".encode()).hexdigest()[:2 + n % 7]
                    for n in range(words))


async def agent_turns(c: openai.AsyncOpenAI, gw: RunningGateway,
                      turns: int) -> tuple[list[Any], list[Any]]:
    """An agent resending its whole input each turn (the answer's items and a new ask
    added), its answers kept (``store`` left to its default): the answers and the input."""
    items: list[Any] = [{"role": "developer", "content": prose(0, 1500)}]
    answers: list[Any] = []
    for turn in range(turns):
        items.append({"role": "user", "content": f"step {turn}: {prose(turn + 1, 25)}"})
        answer = await c.responses.create(model="gpt", input=items)
        answers.append(answer)
        items.extend(o.model_dump(exclude_none=True) for o in answer.output)
        await settled(gw)
    return answers, items


async def test_an_agents_turns_are_kept_as_what_each_adds(
        native_gw: RunningGateway, fake: FakeResponses, sessions: dict[str, Any]) -> None:
    # Every turn's record repeats the conversation before it; the store holds what each
    # adds, the whole conversation comes back when one is continued.
    async with client(native_gw) as c:
        answers, items = await agent_turns(c, native_gw, 12)
        count, size = stored_bytes(sessions)
        store = native_gw.app[RESPONSE_STATE].store
        kept = [await store.get_response(a.id) for a in answers]
        assert all(k is not None for k in kept)
        last = kept[-1]
        assert last is not None and last.conversation() == items
        # What the same records take stored whole.
        whole = sum(len(encode_kept(KeptResponse.create(
            "resp_x", k.owner, k.input, k.output, k.response))) for k in kept if k)
        assert count == 12
        assert size < 0.3 * whole
        # Retrieved, its input is listed whole.
        listed = [i async for i in c.responses.input_items.list(answers[-1].id, order="asc")]
        assert len(listed) == len(last.input)
        last_ask = items[-len(answers[-1].output) - 1]["content"]
        assert listed[-1].content[0].text == last_ask
        fake.stored.clear()  # the upstream forgot: the gateway's conversation is sent
        again = await c.responses.create(model="gpt", input="and now?",
                                         previous_response_id=answers[-1].id)
    resent = fake.requests[-1].body["input"]
    assert resent[:len(items)] == items
    assert resent[len(items):] == [{"role": "user", "content": "and now?"}]
    assert again.output_text == "you said: and now?"


async def test_a_deleted_turn_is_gone_while_the_later_ones_still_continue(
        native_gw: RunningGateway, fake: FakeResponses, sessions: dict[str, Any]) -> None:
    async with client(native_gw) as c:
        answers, items = await agent_turns(c, native_gw, 4)
        deleted = await c.responses.delete(answers[1].id)
        assert deleted is None or getattr(deleted, "deleted", True)
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(answers[1].id)
        with pytest.raises(openai.BadRequestError) as refused:
            fake.stored.clear()
            await c.responses.create(model="gpt", input="x", previous_response_id=answers[1].id)
        assert refused.value.code == "previous_response_not_found"
        fake.stored.clear()
        went_on = await c.responses.create(model="gpt", input="go on",
                                           previous_response_id=answers[-1].id)
        assert fake.requests[-1].body["input"][:len(items)] == items
        await settled(native_gw)
        # The turns the continued answer repeats are deleted: it still continues.
        for answer in answers:
            if answer is not answers[1]:
                await c.responses.delete(answer.id)
        fake.stored.clear()
        await c.responses.create(model="gpt", input="still here?",
                                 previous_response_id=went_on.id, store=False)
        assert fake.requests[-1].body["input"][:len(items)] == items
        for answer in answers:
            with pytest.raises(openai.NotFoundError):
                await c.responses.retrieve(answer.id)
        # Once the last is deleted too, nothing of the conversation is left in the store.
        await c.responses.delete(went_on.id)
    assert stored_bytes(sessions) == (0, 0)


# -- a store slower than the traffic slows the traffic, it does not fill the memory ------

async def test_requests_wait_for_a_store_slower_than_the_traffic(
        gateway_factory: GatewayFactory, fake: FakeResponses, tmp_path: Path) -> None:
    sessions = {"data_dir": str(tmp_path / "data")}
    gw = await gateway_factory(config(sessions, {"model_name": "gpt", "litellm_params": {
        "model": "openai/gpt-5", "api_base": f"{fake.base_url}/v1", "api_key": "k"}}))
    state = gw.app[RESPONSE_STATE]
    asks = [f"ask {n}: {prose(n, 200)}" for n in range(3)]
    async with client(gw) as c:
        await c.responses.create(model="gpt", input="hello")  # (the store's file exists)
        await settled(gw)
        state.backlog_bytes = 2 * len(asks[0])  # (about two of these bodies)
        other = sqlite3.connect(tmp_path / "data" / "sessions.sqlite3", isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # another process writing: the writes wait
        try:
            first = await c.responses.create(model="gpt", input=asks[0])
            second = await c.responses.create(model="gpt", input=asks[1])
            assert state.backlog > state.backlog_bytes
            third = asyncio.create_task(c.responses.create(model="gpt", input=asks[2]))
            done, _ = await asyncio.wait({third}, timeout=0.5)
            assert not done and len(fake.requests) == 3  # it waits before it is served
        finally:
            other.rollback()
            other.close()
        answers = [first, second, await asyncio.wait_for(third, 30)]
        await settled(gw)
        assert state.backlog == 0
        for answer in answers:  # every answer was kept: each one continues
            again = await c.responses.create(model="gpt", input="and?",
                                             previous_response_id=answer.id)
            assert again.output_text == "you said: and?"
