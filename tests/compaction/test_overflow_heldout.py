"""Held-out overflow cases: a provider whose true window is far smaller than the configured
one refuses in its own words (many providers' phrasings), and every turn of a growing
session is still answered; the window is learned wherever the refusal states it."""

from __future__ import annotations

import asyncio
import base64
import io
import sqlite3
from pathlib import Path
from typing import Any, Literal

import aiohttp
import anthropic
import openai
import pytest
from PIL import Image

from tests.compaction.conftest import Session, agent_turn, compaction_header
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import image_part, text_part, user
from tests.fakes.llamacpp_server import prompt_tokens
from tests.fakes.native_overflow import NativeOverflow, estimate
from tests.fakes.phrased_overflow import PHRASINGS, STATES_WINDOW, PhrasedServer
from tests.sessions.conftest import run_redis_server

TRUE_WINDOW = 6_000
CONFIGURED = 100_000


async def model_card(gw: RunningGateway, name: str = "demo") -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(gw.base_url + "/models") as r:
        return {m["id"]: m for m in (await r.json())["data"]}[name]


def phrased_config(server: PhrasedServer, **extra: Any) -> dict[str, Any]:
    return {
        "model_list": [model_entry("demo", server.base_url, model="openai/phrased",
                                   max_input_tokens=CONFIGURED)],
        "compaction": {"reserved_context_size": 0, "recall": False},
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
        **extra,
    }


@pytest.mark.parametrize("phrasing", sorted(PHRASINGS))
async def test_every_providers_overflow_wording_is_compacted_and_answered(
    gateway_factory: GatewayFactory, phrasing: str,
) -> None:
    async with PhrasedServer(phrasing, window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id=f"phrased-{phrasing}")
        s.history.extend(turn for i in range(10) for turn in agent_turn(i, lines=60))
        assert prompt_tokens(s.history) > TRUE_WINDOW  # the first send already overflows
        first = await s.send()  # (asserts the client got an answer, never the 400)
        header = compaction_header(first)
        assert header is not None and header[0] in ("summarized", "trimmed"), header
        for i in range(10, 14):
            await s.send(agent_turn(i, lines=60))
        answered = [b for b, status in server.chats() if status == 200]
        assert len(answered) == 5
        assert all(prompt_tokens(b["messages"]) <= TRUE_WINDOW for b in answered)
        card = await model_card(gw)
        if phrasing in STATES_WINDOW:
            assert card["context_window"] == TRUE_WINDOW, card
            assert card["context_window_source"] == "learned"
            refused = [s for _, s in server.chats() if s != 200]
            assert len(refused) <= 2, "once learned, later turns compact before sending"
        else:  # no window named: the size it refused bounds the plan from then on
            assert TRUE_WINDOW <= card["context_window"] < CONFIGURED, card
            assert card["context_window_source"] == "learned"
            refused = [s for _, s in server.chats() if s != 200]
            assert len(refused) <= 3


# --- overflow on a native stream: the refusal comes as an event after the stream opened ---

def messages_history(turns: int) -> list[dict[str, Any]]:
    """An Anthropic agent history: asks, tool_use, tool_result, conclusions."""
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out.append({"role": "user", "content": f"task {i}: explain module_{i}.py"})
        out.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{i:04d}", "name": "read_file",
             "input": {"path": f"module_{i}.py"}}]})
        out.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i:04d}",
             "content": file_text(i)}]})
        out.append({"role": "assistant", "content": f"module_{i} defines handlers."})
    out.append({"role": "user", "content": "and now the last step"})
    return out


def file_text(i: int) -> str:
    return "\n".join(f"def handler_{i}_{n}(value):  # line {n}" for n in range(30))


def responses_history(turns: int) -> list[dict[str, Any]]:
    """A Responses agent input: asks, function calls, their outputs, conclusions."""
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out.append({"role": "user", "content": f"task {i}: explain module_{i}.py"})
        out.append({"type": "function_call", "call_id": f"call_{i}", "name": "read_file",
                    "arguments": f'{{"path": "module_{i}.py"}}'})
        out.append({"type": "function_call_output", "call_id": f"call_{i}",
                    "output": file_text(i)})
        out.append({"role": "assistant", "content": f"module_{i} defines handlers."})
    out.append({"role": "user", "content": "and now the last step"})
    return out


def native_config(up: NativeOverflow) -> dict[str, Any]:
    return {
        "model_list": [
            {"model_name": "claude", "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5", "api_base": up.base_url, "api_key": "k"},
             "model_info": {"max_input_tokens": 200_000}},
            {"model_name": "resp", "litellm_params": {
                "model": "openai/gpt-5", "api_base": up.base_url, "api_key": "k"},
             "model_info": {"max_input_tokens": 200_000, "responses_api": True}},
        ],
        "compaction": {"reserved_context_size": 0, "recall": False},
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
    }


async def test_a_messages_stream_refused_after_message_start_is_compacted_and_streamed(
    gateway_factory: GatewayFactory,
) -> None:
    async with NativeOverflow(window=1_500) as up:
        gw = await gateway_factory(native_config(up))
        history = messages_history(8)
        assert estimate({"messages": history}) > 1_500
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude, claude.messages.stream(
                model="claude", max_tokens=64, messages=history,  # type: ignore[arg-type]
                tools=[{"name": "read_file", "input_schema": {"type": "object"}}],
                extra_headers={"x-session-id": "native-stream-1"}) as stream:
            text = await stream.get_final_text()
            headers = stream.response.headers
        assert text == "hello there"
        assert headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        assert up.refused() and up.refused()[0]["stream"] is True
        last = up.answered()[-1]
        assert last["stream"] is True and estimate(last) <= 1_500
        assert all(m["role"] in ("user", "assistant") for m in last["messages"])


@pytest.mark.parametrize("failure", ["response.failed", "error"])
async def test_a_responses_stream_refused_after_response_created_is_compacted_and_streamed(
    gateway_factory: GatewayFactory, failure: Literal["response.failed", "error"],
) -> None:
    async with NativeOverflow(window=1_500, responses_failure=failure) as up:
        gw = await gateway_factory(native_config(up))
        items = responses_history(8)
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                      max_retries=0) as gpt:
            raw = await gpt.responses.with_raw_response.create(
                model="resp", input=items, stream=True,  # type: ignore[arg-type]
                extra_headers={"x-session-id": f"native-stream-{failure}"})
            events = [e async for e in raw.parse()]
        kinds = [e.type for e in events]
        assert kinds[-1] == "response.completed", kinds
        assert "response.failed" not in kinds and "error" not in kinds
        assert raw.headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        assert up.refused()
        assert estimate(up.answered()[-1]) <= 1_500


# --- the summarizer is slow or failing, on the agent wires ---------------------------------

def translated_config(server: PhrasedServer, **recovery: Any) -> dict[str, Any]:
    raw = phrased_config(server)
    raw["model_list"][0]["model_info"]["responses_api"] = False  # a chat-only upstream
    raw["recovery"].update(recovery)
    return raw


def last_answered(server: PhrasedServer) -> dict[str, Any]:
    return [b for b, status in server.chats() if status == 200][-1]


async def test_a_summarizer_that_never_answers_falls_back_to_trimming_on_messages(
    gateway_factory: GatewayFactory,
) -> None:
    hold = asyncio.Event()
    async with PhrasedServer("anthropic", window=2_000, summary_hold=hold) as server:
        raw = translated_config(server, deadline=3.0)
        raw["compaction"]["summary_time_share"] = 0.3
        gw = await gateway_factory(raw)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            reply = await asyncio.wait_for(claude.messages.with_raw_response.create(
                model="demo", max_tokens=64, messages=messages_history(10),  # type: ignore[arg-type]
                extra_headers={"x-session-id": "slow-summary-messages"}), 30)
        message = await reply.parse()
        hold.set()
        assert message.content[0].text == "Done."  # type: ignore[union-attr]
        assert reply.headers["x-gateway-compaction"].startswith("trimmed")
        assert server.summaries(), "a summary was asked for"
        assert prompt_tokens(last_answered(server)["messages"]) <= 2_000


async def test_a_summarizer_failing_every_time_falls_back_to_trimming_on_responses(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("openai", window=2_000, fail_summaries=True) as server:
        gw = await gateway_factory(translated_config(server, max_transient_retries=1))
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                      max_retries=0) as gpt:
            for turn in range(3):  # a later turn too: the failing summarizer is not retried
                reply = await gpt.responses.with_raw_response.create(
                    model="demo", input=responses_history(10 + turn),  # type: ignore[arg-type]
                    extra_headers={"x-session-id": "failing-summary-responses"})
                assert reply.parse().output_text == "Done."
                assert reply.headers["x-gateway-compaction"].startswith("trimmed")
        assert prompt_tokens(last_answered(server)["messages"]) <= 2_000
        assert len(server.summaries()) <= 6, "the circuit breaker stops asking"


# --- the session store fails mid-session ---------------------------------------------------

async def test_a_locked_sqlite_store_mid_session_still_answers_every_turn(
    gateway_factory: GatewayFactory, tmp_path: Path,
) -> None:
    async with PhrasedServer("openai", window=TRUE_WINDOW) as server:
        raw = phrased_config(server, sessions={"data_dir": str(tmp_path / "data")})
        # A request's store call is capped (a quarter of what is left of its deadline, 5 s
        # at most), well below SQLite's own busy timeout (10 s); 20 s leaves a loaded
        # machine room for the summaries made meanwhile (9 s flaked under CI load).
        raw["recovery"]["deadline"] = 20.0
        gw = await gateway_factory(raw)
        s = Session(gw, session_id="locked-store")
        s.history.extend(turn for i in range(10) for turn in agent_turn(i, lines=60))
        first = await s.send()
        assert compaction_header(first) is not None
        # Another process takes the database's write lock and keeps it.
        locker = sqlite3.connect(tmp_path / "data" / "sessions.sqlite3", isolation_level=None)
        try:
            locker.execute("BEGIN EXCLUSIVE")
            for i in range(10, 22):  # grows past the window again: a new compaction is due
                raw = await asyncio.wait_for(s.send(agent_turn(i, lines=60)), 60)
            assert compaction_header(raw) is not None
            # Made in memory while the store could not be written, and said so.
            assert raw.headers["x-gateway-compaction"].endswith("unstored"), raw.headers
        finally:
            locker.rollback()
            locker.close()
        await s.send([user("and after the lock is gone?")])
        assert all(prompt_tokens(b["messages"]) <= TRUE_WINDOW
                   for b, status in server.chats() if status == 200)


class FreezingProxy:
    """A TCP proxy to Redis that, once frozen, keeps every connection open and answers
    nothing (a hung Redis, or a network partition that drops packets)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frozen = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.port = 0
        self.writers: set[asyncio.StreamWriter] = set()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                if self.frozen.is_set():
                    continue  # swallowed: no answer ever comes
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        if self.frozen.is_set():
            await reader.read()  # accepted, never answered
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers.add(up_writer)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def __aenter__(self) -> FreezingProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()


async def test_a_redis_that_stops_answering_mid_session_degrades_on_messages(
    gateway_factory: GatewayFactory, tmp_path: Path,
) -> None:
    with run_redis_server(tmp_path) as url:
        async with FreezingProxy(int(url.rsplit(":", 1)[1].split("/")[0])) as proxy, \
                PhrasedServer("anthropic", window=2_000) as server:
            raw = translated_config(server, deadline=4.0)
            raw["sessions"] = {"data_dir": str(tmp_path / "data"),
                               "redis_url": f"redis://127.0.0.1:{proxy.port}/0"}
            gw = await gateway_factory(raw)
            history = messages_history(10)
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                                max_retries=0) as claude:
                async def turn() -> Any:
                    reply = await asyncio.wait_for(claude.messages.with_raw_response.create(
                        model="demo", max_tokens=64, messages=history,  # type: ignore[arg-type]
                        extra_headers={"x-session-id": "frozen-redis"}), 60)
                    message = await reply.parse()
                    history.append({"role": "assistant", "content": message.content[0].text})
                    return reply

                first = await turn()
                assert first.headers["x-gateway-compaction"].startswith("summarized")
                proxy.frozen.set()  # Redis hangs from here on
                for i in range(10, 16):
                    history.append({"role": "user", "content": f"task {i}: review this\n"
                                    + file_text(i)})
                    reply = await turn()
                assert "x-gateway-compaction" in reply.headers
            assert all(prompt_tokens(b["messages"]) <= 2_000
                       for b, status in server.chats() if status == 200)


# --- overflow with images, and one message larger than the whole window ---------------------

def png_data_url(side: int, shade: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (shade, 90, 160)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize("phrasing", ["openai", "anthropic", "bedrock_unnumbered"])
async def test_an_overflowing_history_with_screenshots_is_answered(
    gateway_factory: GatewayFactory, phrasing: str,
) -> None:
    async with PhrasedServer(phrasing, window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id=f"screenshots-{phrasing}")
        for i in range(10):
            turn = agent_turn(i, lines=60)
            turn[0] = user([text_part(f"Step {i}: here is the screen, fix module_{i}.py"),
                            image_part(png_data_url(8, i * 20))])
            s.history.extend(turn)
        assert prompt_tokens(s.history) > TRUE_WINDOW
        first = await s.send()
        assert compaction_header(first) is not None
        await s.send([user([text_part("and this one?"), image_part(png_data_url(8, 250))])])
        for body, status in server.chats():
            if status == 200:
                assert prompt_tokens(body["messages"]) <= TRUE_WINDOW


def huge_text(tokens: int) -> str:
    line = "The log line of a failing build step, repeated: error in module foo.\n"
    return line * (tokens * 4 // len(line) + 1)


async def test_one_messages_turn_larger_than_the_window_is_answered(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("anthropic", window=2_000) as server:
        gw = await gateway_factory(translated_config(server))
        messages = [{"role": "user", "content": "fix the build"},
                    {"role": "assistant", "content": "Paste the log."},
                    {"role": "user", "content": "here it is:\n" + huge_text(6_000)}]
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            # The summary carries a clipped copy of the message (sized from the window), the
            # compacted turn keeps the part of it that fits.
            reply = await claude.messages.with_raw_response.create(
                model="demo", max_tokens=64, messages=messages,  # type: ignore[arg-type]
                extra_headers={"x-session-id": "one-huge-message"})
        assert reply.headers["x-gateway-compaction"].startswith("summarized")
        assert (await reply.parse()).content[0].text == "Done."  # type: ignore[union-attr]
        assert prompt_tokens(last_answered(server)["messages"]) <= 2_000


async def test_one_responses_input_larger_than_the_window_is_answered(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("openai", window=2_000) as server:
        gw = await gateway_factory(translated_config(server))
        items = [{"role": "user", "content": "summarize this file"},
                 {"type": "function_call", "call_id": "call_1", "name": "read_file",
                  "arguments": "{}"},
                 {"type": "function_call_output", "call_id": "call_1",
                  "output": huge_text(6_000)}]
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            reply = await gpt.responses.with_raw_response.create(
                model="demo", input=items,  # type: ignore[arg-type]
                extra_headers={"x-session-id": "one-huge-output"})
        assert reply.headers["x-gateway-compaction"].startswith("summarized")
        assert reply.parse().output_text == "Done."
        assert prompt_tokens(last_answered(server)["messages"]) <= 2_000


# --- a provider that refuses everything: bounded, and its error in the client's wire ------

@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
async def test_a_provider_that_refuses_every_size_ends_in_a_bounded_clear_error(
    gateway_factory: GatewayFactory, wire: str, stream: bool,
) -> None:
    # Window 0: every request, summaries included, is "too long" whatever compaction does.
    async with PhrasedServer("anthropic", window=0) as server:
        gw = await gateway_factory(translated_config(server))
        history = messages_history(6)
        headers = {"x-session-id": f"refuses-all-{wire}-{stream}"}
        if wire == "messages":
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                                max_retries=0) as claude:
                with pytest.raises(anthropic.BadRequestError) as caught:
                    await claude.messages.create(
                        model="demo", max_tokens=64, messages=history,  # type: ignore[arg-type]
                        stream=stream, extra_headers=headers)
            body = caught.value.body
            assert isinstance(body, dict) and body["type"] == "error"
            assert "prompt is too long" in body["error"]["message"]
        else:
            async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                          max_retries=0) as gpt:
                with pytest.raises(openai.BadRequestError) as refused:
                    if wire == "chat":
                        await gpt.chat.completions.create(
                            model="demo", stream=stream, extra_headers=headers,
                            messages=[user(f"task {i}: " + file_text(i)) for i in range(6)])
                    else:
                        await gpt.responses.create(
                            model="demo", stream=stream, extra_headers=headers,
                            input=responses_history(6))  # type: ignore[arg-type]
            assert "prompt is too long" in refused.value.message
        # Bounded: the first try, at most 3 compactions with their summary attempts.
        assert 2 <= len(server.requests) <= 25, len(server.requests)


@pytest.mark.parametrize("model", ["claude", "resp"])
async def test_a_native_summarizer_that_never_answers_falls_back_within_the_deadline(
    gateway_factory: GatewayFactory, model: str,
) -> None:
    hold = asyncio.Event()
    async with NativeOverflow(window=1_500, summary_hold=hold) as up:
        raw = native_config(up)
        raw["recovery"]["deadline"] = 3.0
        raw["compaction"]["summary_time_share"] = 0.3
        gw = await gateway_factory(raw)
        try:
            if model == "claude":
                async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                                    max_retries=0) as claude:
                    reply = await asyncio.wait_for(claude.messages.with_raw_response.create(
                        model="claude", max_tokens=64,
                        messages=messages_history(8),  # type: ignore[arg-type]
                        extra_headers={"x-session-id": "native-slow-claude"}), 30)
                    assert (await reply.parse()).content[0].text == "hello there"  # type: ignore[union-attr]
            else:
                async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                              max_retries=0) as gpt:
                    reply = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                        model="resp", input=responses_history(8),  # type: ignore[arg-type]
                        extra_headers={"x-session-id": "native-slow-resp"}), 30)
                    assert reply.parse().output_text == "hello there"
        finally:
            hold.set()
        assert reply.headers["x-gateway-compaction"].startswith("trimmed")
        if model == "resp":  # (Anthropic's summary goes through LiteLLM, loaded on first use)
            assert up.summaries, "a summary was asked for"
        assert estimate(up.answered()[-1]) <= 1_500


@pytest.mark.parametrize("phrasing", ["openai", "anthropic", "vertex"])
async def test_an_overflow_sent_as_the_first_event_of_a_chat_stream_is_compacted(
    gateway_factory: GatewayFactory, phrasing: str,
) -> None:
    async with PhrasedServer(phrasing, window=TRUE_WINDOW, refuse_in_stream=True) as server:
        gw = await gateway_factory(phrased_config(server))
        history = [*Session(gw).history,
                   *(turn for i in range(10) for turn in agent_turn(i, lines=60))]
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                      max_retries=0) as gpt:
            raw = await gpt.chat.completions.with_raw_response.create(
                model="demo", messages=history, stream=True,  # type: ignore[arg-type]
                extra_headers={"x-session-id": f"stream-event-{phrasing}"})
            text = "".join([c.choices[0].delta.content or "" async for c in raw.parse()
                            if c.choices])
        assert text == "Done."
        assert raw.headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        assert server.chats()[0][1] != 200


@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
async def test_overflow_with_the_recall_tool_on_is_answered_on_every_wire(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    # The default config: compaction offers the recall tool on compacted requests.
    async with PhrasedServer("vllm_v1", window=TRUE_WINDOW) as server:
        raw = translated_config(server)
        raw["compaction"] = {"reserved_context_size": 0}
        gw = await gateway_factory(raw)
        headers = {"x-session-id": f"recall-on-{wire}"}
        if wire == "chat":
            s = Session(gw, session_id=headers["x-session-id"])
            s.history.extend(turn for i in range(10) for turn in agent_turn(i, lines=60))
            reply: Any = await s.send()
        elif wire == "messages":
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                                max_retries=0) as claude:
                reply = await claude.messages.with_raw_response.create(
                    model="demo", max_tokens=64, messages=messages_history(30),  # type: ignore[arg-type]
                    extra_headers=headers)
                assert (await reply.parse()).content[0].text == "Done."  # type: ignore[union-attr]
        else:
            async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                          max_retries=0) as gpt:
                reply = await gpt.responses.with_raw_response.create(
                    model="demo", input=responses_history(30),  # type: ignore[arg-type]
                    extra_headers=headers)
                assert reply.parse().output_text == "Done."
        assert reply.headers["x-gateway-compaction"].startswith("summarized")
        sent = last_answered(server)
        assert prompt_tokens(sent["messages"]) <= TRUE_WINDOW
        names = [t["function"]["name"] for t in sent.get("tools") or []]
        assert "context_recall" in names


async def test_a_large_tool_table_leaves_less_room_and_the_compaction_fits_what_is_left(
    gateway_factory: GatewayFactory,
) -> None:
    tools = [{"type": "function", "function": {
        "name": f"tool_{n}", "description": f"Tool number {n}: " + "does a careful thing. " * 12,
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "the file to work on"}}}}}
        for n in range(25)]
    async with PhrasedServer("openai", window=TRUE_WINDOW, count_tools=True) as server:
        table = prompt_tokens([{"content": tools}])
        assert TRUE_WINDOW // 3 < table < TRUE_WINDOW // 2  # a third to a half of the window
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id="big-tool-table")
        s.history.extend(turn for i in range(8) for turn in agent_turn(i, lines=60))
        async with s.client() as c:
            for extra in range(3):
                s.history.extend(agent_turn(100 + extra, lines=60))
                raw = await c.chat.completions.with_raw_response.create(
                    model="demo", messages=s.history, tools=tools,  # type: ignore[arg-type]
                    extra_headers={"x-session-id": s.session_id})
                s.history.append({"role": "assistant", "content":
                                  raw.parse().choices[0].message.content})
        for body, status in server.chats():
            if status == 200:
                assert body["tools"] == tools  # the table is never touched
                assert prompt_tokens(body["messages"]) + table <= TRUE_WINDOW


async def test_a_recall_result_that_overflows_a_small_window_still_gets_an_answer(
    gateway_factory: GatewayFactory,
) -> None:
    # The model recalls a whole range of the archive right after the compaction; in a
    # 2,000-token window the result overflows: the client is answered anyway.
    async with PhrasedServer("openai", window=2_000, calls_recall=True) as server:
        raw = phrased_config(server)
        raw["compaction"] = {"reserved_context_size": 0}  # (recall on: the default)
        gw = await gateway_factory(raw)
        s = Session(gw, session_id="recall-overflow")
        s.history.extend(turn for i in range(6) for turn in agent_turn(i, lines=60))
        reply = await s.send()
        assert reply.parse().choices[0].message.content == "Done."
        assert reply.headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        # The recall was answered (and the follow-up refused or not), never shown as an error.
        assert any(m.get("role") == "tool" and m.get("tool_call_id", "").startswith(
            "call_recall") for b, _ in server.chats() for m in b["messages"])


@pytest.mark.parametrize("wire", ["messages", "responses"])
async def test_an_overflow_without_any_session_id_is_answered_twice_in_a_row(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    # Agent SDKs send no x-session-id: the session is recognized by its start, and a second
    # turn of the same conversation is answered as well (reusing or compacting again).
    async with PhrasedServer("anthropic", window=2_000) as server:
        gw = await gateway_factory(translated_config(server))
        if wire == "messages":
            history = messages_history(10)
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                                max_retries=0) as claude:
                for _ in range(2):
                    reply = await claude.messages.with_raw_response.create(
                        model="demo", max_tokens=64, messages=history,  # type: ignore[arg-type]
                        metadata={"user_id": "user_abc_account_def_session_123"})
                    text = (await reply.parse()).content[0].text  # type: ignore[union-attr]
                    assert text == "Done."
                    history += [{"role": "assistant", "content": text},
                                {"role": "user", "content": "and the next module?"}]
        else:
            items = responses_history(10)
            async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                          max_retries=0) as gpt:
                for _ in range(2):
                    answered = await gpt.responses.create(model="demo", input=items)  # type: ignore[arg-type]
                    assert answered.output_text == "Done."
                    items += [{"role": "assistant", "content": "Done."},
                              {"role": "user", "content": "and the next module?"}]
        assert all(prompt_tokens(b["messages"]) <= 2_000
                   for b, status in server.chats() if status == 200)


async def test_a_window_that_shrinks_under_a_compacted_session_is_followed(
    gateway_factory: GatewayFactory,
) -> None:
    # The session was compacted for a 6,000-token window; then the deployment behind the
    # name is swapped for one with 1,500 (a smaller model, a cheaper tier): the stored
    # compaction itself no longer fits, and the next turns are answered all the same.
    async with PhrasedServer("openai", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id="shrinking-window")
        s.history.extend(turn for i in range(10) for turn in agent_turn(i, lines=60))
        await s.send()
        for i in range(10, 13):
            await s.send(agent_turn(i, lines=20))
        server.window = 1_500
        for i in range(13, 16):
            raw = await s.send(agent_turn(i, lines=20))
        assert compaction_header(raw) is not None
        answered = [b for b, status in server.chats() if status == 200]
        assert prompt_tokens(answered[-1]["messages"]) <= 1_500
        assert (await model_card(gw))["context_window"] == 1_500


async def test_a_redis_that_never_answers_from_the_start_still_lets_overflows_be_answered(
    gateway_factory: GatewayFactory, tmp_path: Path,
) -> None:
    # Redis hangs before the first overflow: the window learned from it cannot be shared,
    # the compaction cannot be stored; both wait no longer than the deadline allows.
    with run_redis_server(tmp_path) as url:
        async with FreezingProxy(int(url.rsplit(":", 1)[1].split("/")[0])) as proxy, \
                PhrasedServer("openai", window=TRUE_WINDOW) as server:
            proxy.frozen.set()
            raw = phrased_config(server, sessions={
                "data_dir": str(tmp_path / "data"),
                "redis_url": f"redis://127.0.0.1:{proxy.port}/0"})
            raw["recovery"]["deadline"] = 4.0
            gw = await gateway_factory(raw)
            s = Session(gw, session_id="frozen-from-start")
            s.history.extend(turn for i in range(10) for turn in agent_turn(i, lines=60))
            first = await asyncio.wait_for(s.send(), 60)
            assert compaction_header(first) is not None
            await asyncio.wait_for(s.send(agent_turn(10, lines=60)), 60)


async def test_a_hung_redis_from_the_start_never_costs_a_plain_request_its_deadline(
    gateway_factory: GatewayFactory, tmp_path: Path,
) -> None:
    with run_redis_server(tmp_path) as url:
        async with FreezingProxy(int(url.rsplit(":", 1)[1].split("/")[0])) as proxy, \
                NativeOverflow(window=100_000) as up:
            proxy.frozen.set()
            raw = native_config(up)
            raw["sessions"] = {"data_dir": str(tmp_path / "data"),
                               "redis_url": f"redis://127.0.0.1:{proxy.port}/0"}
            raw["recovery"]["deadline"] = 3.0
            gw = await gateway_factory(raw)
            headers = {"x-session-id": "hung-redis-plain"}
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                                max_retries=0) as claude:
                message = await asyncio.wait_for(claude.messages.create(
                    model="claude", max_tokens=16, extra_headers=headers,
                    messages=[{"role": "user", "content": "hi"}]), 60)
                assert message.content[0].text == "hello there"  # type: ignore[union-attr]
            async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                          max_retries=0) as gpt:
                first = await asyncio.wait_for(gpt.responses.create(
                    model="resp", input="hi", extra_headers=headers), 60)
                assert first.output_text == "hello there"
                # Continuing it needs the response state (in the hung Redis): answered or
                # refused clearly, in time.
                try:
                    later = await asyncio.wait_for(gpt.responses.create(
                        model="resp", input="and?", previous_response_id=first.id,
                        extra_headers=headers), 60)
                    assert later.output_text == "hello there"
                except openai.APIStatusError as refused:
                    assert refused.status_code in (400, 503), refused
