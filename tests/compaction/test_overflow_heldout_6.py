"""Held-out overflow, sixth round: overflow where agents meet it and earlier rounds did not
look. Responses ``truncation: "auto"`` (the provider's own truncation), an output budget equal
to the window, an assistant prefill, a 2 MB tool result in a thinking history and as the
newest turn, one giant screenshot, a summarizer model with a smaller window (SPEC 4.4's
shrinks), a native summarizer answering nothing or a cut summary, the SQLite store deleted
mid-session, two requests of one session overflowing at once (one summary, on one gateway
and on two replicas sharing Redis), a continued Responses chain whose new turn answers a held
call, a native provider refusing every size mid-stream, a configured window smaller than the
true one, a newest message of several parts (an ask, then a paste) bigger than the window,
and a chat stream asking for usage. Real gateways on 127.0.0.1,
the real ``openai``/``anthropic`` SDKs, fake upstreams refusing in their providers' words;
each case asserts what the agent notices: an answer (or a clear error in its wire's format,
in time), the compaction headers, and a request its upstream accepted as valid.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
from aiohttp import web
from PIL import Image

from tests.compaction.conftest import Session, agent_turn, compaction_header
from tests.compaction.test_overflow_heldout import (
    TRUE_WINDOW,
    file_text,
    last_answered,
    messages_history,
    native_config,
    phrased_config,
    responses_history,
)
from tests.compaction.test_overflow_heldout_3 import (
    READ_FILE,
    SYSTEM,
    WindowedAnthropic,
    WindowedResponses,
    assert_thinking_whole,
    claude_config,
    gpt_config,
    thinking_history,
)
from tests.conftest import GatewayFactory, gateway_state, model_entry
from tests.factories import user
from tests.fakes.llamacpp_server import prompt_tokens
from tests.fakes.native_base import rough_tokens
from tests.fakes.native_overflow import NativeOverflow, estimate, is_summary
from tests.fakes.phrased_overflow import PHRASINGS, PhrasedServer

BOUND = 60  # seconds: every request here ends well before this (never a hang)
TWO_MB = 2 * 1024 * 1024


def big_log(chars: int) -> str:
    """A tool output of about ``chars`` characters (a build log, not one repeated token)."""
    lines = (f"[{n:07d}] compiling src/module_{n % 97}.rs ... warning: unused variable "
             f"`x{n}`\n" for n in range(chars // 60 + 1))
    return "".join(lines)[:chars]


# --- Responses truncation: "auto" is the provider's own truncation -------------------------

class TruncatingResponses(WindowedResponses):
    """A Responses API that honours ``truncation: "auto"``: it drops items itself and never
    refuses such a request as too long (as OpenAI does)."""

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        if body.get("truncation") == "auto" and not is_summary(body):
            self.verdicts.append((body, 200))
            return await super(WindowedResponses, self)._responses(request)
        return await super()._responses(request)


async def test_truncation_auto_on_responses_passes_as_sent(
    gateway_factory: GatewayFactory,
) -> None:
    async with TruncatingResponses(window=3_000) as fake:
        raw = gpt_config(fake.base_url)
        raw["model_list"][0]["model_info"]["max_input_tokens"] = 3_000  # stated right
        gw = await gateway_factory(raw)
        items = responses_history(12)
        assert rough_tokens(items) > 3_000
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            reply = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                model="gpt", input=items, truncation="auto",  # type: ignore[arg-type]
                extra_headers={"x-session-id": "truncation-auto"}), BOUND)
        assert reply.parse().output_text
        # The client asked the provider to truncate: nothing summarized, the input as sent.
        assert "x-gateway-compaction" not in reply.headers, reply.headers
        assert not fake.summaries
        sent = fake.accepted()[-1]
        assert sent["truncation"] == "auto"
        assert sent["input"] == items


async def test_truncation_auto_refused_anyway_is_still_compacted_and_answered(
    gateway_factory: GatewayFactory,
) -> None:
    # A proxy (or an older deployment) ignoring truncation refuses in OpenAI's words: the
    # ladder compacts as for any overflow.
    async with WindowedResponses(window=3_000) as fake:
        gw = await gateway_factory(gpt_config(fake.base_url))
        items = responses_history(12)
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            reply = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                model="gpt", input=items, truncation="auto",  # type: ignore[arg-type]
                extra_headers={"x-session-id": "truncation-ignored"}), BOUND)
        assert reply.parse().output_text
        assert reply.headers["x-gateway-compaction"].startswith("summarized"), reply.headers
        assert [v for _, v in fake.verdicts] == [400, 200]
        assert fake.accepted()[-1]["truncation"] == "auto"


# --- an output budget equal to the window --------------------------------------------------

# Refusals of a prompt of t tokens whose output budget is the whole window w, as vLLM/OpenAI
# and Anthropic-compatible chat endpoints word them (the completion they name is the client's).
BUDGET_REFUSALS = {
    "vllm": lambda w, t: (400, {
        "object": "error", "type": "BadRequestError", "param": None, "code": 400,
        "message": f"This model's maximum context length is {w} tokens. However, you requested "
                   f"{t + w} tokens ({t} in the messages, {w} in the completion). Please reduce "
                   "the length of the messages or completion."}, {}),
    "anthropic_sum": lambda w, t: (400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": f"input length and `max_tokens` exceed context limit: {t} + {w} > {w}, "
                   "decrease input length or `max_tokens` and try again"}}, {}),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wording", sorted(BUDGET_REFUSALS))
async def test_max_tokens_equal_to_the_window_is_lowered_and_answered(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, wording: str,
    stream: bool,
) -> None:
    monkeypatch.setitem(PHRASINGS, wording, BUDGET_REFUSALS[wording])
    async with PhrasedServer(wording, window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        messages = [user("write the release notes for version 2.4")]
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            raw = await asyncio.wait_for(gpt.chat.completions.with_raw_response.create(
                model="demo", messages=messages, max_tokens=TRUE_WINDOW,  # type: ignore[arg-type]
                stream=stream, extra_headers={"x-session-id": f"budget-eq-{stream}"}), BOUND)
            parsed = raw.parse()
            if stream:
                text = "".join([c.choices[0].delta.content or "" async for c in parsed
                                if c.choices])
            else:
                text = parsed.choices[0].message.content or ""
        assert text == "Done."
        assert raw.headers["x-gateway-compaction"].startswith("output_lowered"), raw.headers
        sent = last_answered(server)
        assert sent["messages"] == messages, "the history went as it was"
        assert 256 <= sent["max_tokens"] < TRUE_WINDOW
        assert prompt_tokens(sent["messages"]) + sent["max_tokens"] <= TRUE_WINDOW


# --- Messages: a prefill, a 2 MB tool result, the newest tool result bigger than the window -

async def test_an_overflowing_history_ending_in_a_prefill_is_answered_validly(
    gateway_factory: GatewayFactory,
) -> None:
    async with WindowedAnthropic(window=3_000) as fake:
        gw = await gateway_factory(claude_config(fake.base_url))
        history = messages_history(12)
        prefill = '{"modules": ['
        history += [{"role": "assistant", "content": prefill}]
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            raw = await asyncio.wait_for(claude.messages.with_raw_response.create(
                model="claude", max_tokens=512, messages=history,  # type: ignore[arg-type]
                extra_headers={"x-session-id": "prefill-over"}), BOUND)
            assert (await raw.parse()).content
        assert raw.headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        sent = fake.accepted()[-1]
        # The answer continues the client's prefill: it is still the last message sent.
        last = sent["messages"][-1]
        assert last["role"] == "assistant"
        assert last["content"] in (prefill, [{"type": "text", "text": prefill}])


@pytest.mark.parametrize("where", ["middle", "newest"])
async def test_a_two_megabyte_tool_result_in_a_thinking_history_is_answered_validly(
    gateway_factory: GatewayFactory, where: str,
) -> None:
    async with WindowedAnthropic(window=4_000) as fake:
        gw = await gateway_factory(claude_config(fake.base_url))
        history = thinking_history(6, ends_in_tool_result=True)
        at = 2 if where == "middle" else len(history) - 1
        assert history[at]["content"][0]["type"] == "tool_result"
        history[at]["content"][0]["content"] = big_log(TWO_MB)
        kwargs: dict[str, Any] = {
            "model": "claude", "max_tokens": 2_048, "system": SYSTEM, "tools": [READ_FILE],
            "thinking": {"type": "enabled", "budget_tokens": 1_024},
            "extra_headers": {"x-session-id": f"two-mb-{where}",
                              "anthropic-beta": "interleaved-thinking-2025-05-14"}}
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c", max_retries=0,
                                            timeout=BOUND) as claude, \
                claude.messages.stream(messages=history, **kwargs) as events:
            text = "".join([t async for t in events.text_stream])
            headers = events.response.headers
        assert text
        assert headers["x-gateway-compaction"].split(";")[0] in ("reduced", "summarized", "trimmed")
        sent = fake.accepted()[-1]
        assert_thinking_whole(sent, history)
        assert len(orjson.dumps(fake.summaries)) < TWO_MB // 4, "the summary read a clip"


# --- one giant screenshot, priced by its pixels --------------------------------------------

def noisy_png(width: int, height: int, noisy_rows: int) -> str:
    """A base64 PNG of ``width`` x ``height`` whose first rows are noise (megabytes of it)."""
    image = Image.new("RGB", (width, height), (30, 30, 30))
    image.paste(Image.frombytes("RGB", (width, noisy_rows), os.urandom(width * noisy_rows * 3)))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


class PixelPricedAnthropic(WindowedAnthropic):
    """Anthropic pricing an image by its pixels (long edge scaled to 1,568, 750 pixels a
    token), text at a quarter of its JSON."""

    def _priced(self, body: dict[str, Any]) -> int:
        tokens = 0

        def walk(value: Any) -> None:
            nonlocal tokens
            if isinstance(value, dict) and value.get("type") == "image":
                raw = base64.b64decode(value["source"]["data"])
                with Image.open(io.BytesIO(raw)) as image:
                    w, h = image.size
                scale = min(1.0, 1_568 / max(w, h))
                tokens += int(w * scale * h * scale / 750)
            elif isinstance(value, dict):
                tokens += 4
                for v in value.values():
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)
            else:
                tokens += len(orjson.dumps(value)) // 4
        walk([body.get("system"), body.get("tools"), body["messages"]])
        return tokens

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        tokens = self._priced(body)
        if not is_summary(body) and tokens > self.context_window:
            await self.record(request)
            self.priced.append((body, 400))
            return web.json_response({"type": "error", "error": {
                "type": "invalid_request_error",
                "message": f"prompt is too long: {tokens} tokens > {self.context_window} "
                           "maximum"}}, status=400)
        if not is_summary(body):
            self.priced.append((body, 200))
            body = {**body, "messages": [{"role": "user", "content": "(priced)"}]}
            await self.record(request)
            return web.json_response({
                "id": "msg_px", "type": "message", "role": "assistant", "model": "claude",
                "content": [{"type": "text", "text": "I see a terminal."}],
                "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": tokens, "output_tokens": 5}})
        return await super()._messages(request)

    def __init__(self, window: int) -> None:
        super().__init__(window)
        self.priced: list[tuple[dict[str, Any], int]] = []


async def test_a_history_that_is_one_giant_screenshot_is_answered(
    gateway_factory: GatewayFactory,
) -> None:
    data = noisy_png(1_568, 1_568, noisy_rows=300)
    assert len(data) > 1_500_000
    async with PixelPricedAnthropic(window=3_000) as fake:
        gw = await gateway_factory(claude_config(fake.base_url))
        history = [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": data}},
            {"type": "text", "text": "what does this terminal say?"}]}]
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c", max_retries=0,
                                            timeout=BOUND) as claude:
            raw = await asyncio.wait_for(claude.messages.with_raw_response.create(
                model="claude", max_tokens=256, messages=history,  # type: ignore[arg-type]
                extra_headers={"x-session-id": "one-screenshot"}), BOUND)
            message = await raw.parse()
        assert message.content[0].text == "I see a terminal."  # type: ignore[union-attr]
        sent = [b for b, status in fake.priced if status == 200][-1]
        assert "what does this terminal say?" in orjson.dumps(sent).decode()
        assert [status for _, status in fake.priced] == [400, 200]
        assert raw.headers["x-gateway-compaction"].startswith("summarized")
        # The screenshot did not fit what the refusal left: the model is told something was
        # left out (the archive keeps it), never sent a request refused again.
        assert "were left out" in orjson.dumps(sent).decode()


def test_a_trailing_prefill_stays_last_in_the_compacted_shape() -> None:
    from gateway.compaction import CONTINUATION_TEXT
    from gateway.compaction.pipeline import compact
    history = [user("list the modules as JSON"), {"role": "assistant", "content": "{"}]
    out = compact(history, "Work so far.", count_tokens=lambda ms: 10 * len(ms)).messages
    assert out[-2] == {"role": "user", "content": CONTINUATION_TEXT}
    assert out[-1] == {"role": "assistant", "content": "{"}
    calling = [user("go"), {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]
    assert compact(calling, "s", count_tokens=len).messages[-1]["content"] == CONTINUATION_TEXT


# --- a summarizer model with a smaller window (SPEC 4.4: its own overflow) -----------------

@pytest.mark.parametrize("wording", ["openai", "bedrock_unnumbered"])
async def test_a_summarizer_model_with_a_smaller_window_is_shrunk_to_fit(
    gateway_factory: GatewayFactory, wording: str,
) -> None:
    # Its refusal names its window (learned), or does not (the summary input shrinks).
    async with PhrasedServer("openai", window=TRUE_WINDOW) as main, \
            PhrasedServer(wording, window=2_500) as small:
        raw = phrased_config(main)
        raw["model_list"].append(model_entry("small", small.base_url, model="openai/small",
                                             max_input_tokens=100_000))
        raw["compaction"]["summarizer_model"] = "small"
        gw = await gateway_factory(raw)
        s = Session(gw, session_id=f"small-summarizer-{wording}")
        s.history.extend(m for i in range(12) for m in agent_turn(i, lines=60))
        assert prompt_tokens(s.history) > TRUE_WINDOW
        reply = await asyncio.wait_for(s.send(), BOUND)
        assert compaction_header(reply) is not None
        assert reply.headers["x-gateway-compaction"].startswith("summarized"), reply.headers
        summaries = small.summaries()
        assert summaries[-1][1] == 200, "the summary was made by the summarizer model"
        assert 1 <= len(summaries) <= 5
        sizes = [prompt_tokens(b["messages"]) for b, _ in summaries]
        assert sizes == sorted(sizes, reverse=True), "each retry sends less"
        assert not main.summaries()
        assert prompt_tokens(last_answered(main)["messages"]) <= TRUE_WINDOW


# --- a native summarizer answering nothing, or a summary cut at its length (SPEC 4.4) ------

class BadSummaries(WindowedAnthropic):
    """Anthropic whose summary answers are empty (``content: []``), blank, or cut at
    ``max_tokens``."""

    def __init__(self, window: int, how: str) -> None:
        super().__init__(window)
        self.how = how

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        if not is_summary(body):
            return await super()._messages(request)
        await self.record(request)
        self.summaries.append(body)
        content = {"empty": [], "blank": [{"type": "text", "text": " \n "}],
                   "cut": [{"type": "text", "text": "## Task\nExplain the mod"}]}[self.how]
        return web.json_response({
            "id": "msg_bad", "type": "message", "role": "assistant", "model": body["model"],
            "content": content, "stop_reason": "max_tokens" if self.how == "cut" else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 0}})


@pytest.mark.parametrize("how", ["empty", "blank", "cut"])
async def test_a_native_summarizer_answering_no_usable_summary_still_gets_an_answer(
    gateway_factory: GatewayFactory, how: str,
) -> None:
    async with BadSummaries(3_000, how) as fake:
        gw = await gateway_factory(claude_config(fake.base_url))
        history = thinking_history(10, ends_in_tool_result=True)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            raw = await asyncio.wait_for(claude.messages.with_raw_response.create(
                model="claude", max_tokens=2_048, system=SYSTEM, tools=[READ_FILE],
                messages=history, thinking={"type": "enabled", "budget_tokens": 1_024},
                extra_headers={"x-session-id": f"bad-summary-{how}"}), BOUND)
            assert (await raw.parse()).content
        assert raw.headers["x-gateway-compaction"].startswith("trimmed"), raw.headers
        assert raw.headers["x-gateway-compaction-summary-failed"]
        assert 1 <= len(fake.summaries) <= 5, "bounded summary attempts"
        if how == "cut" and len(fake.summaries) > 1:
            sizes = [len(orjson.dumps(b["messages"])) for b in fake.summaries]
            assert sizes == sorted(sizes, reverse=True) and sizes[-1] < sizes[0], \
                "each retry drops the oldest message"
        assert_thinking_whole(fake.accepted()[-1], history)


# --- the SQLite store deleted mid-session --------------------------------------------------

async def test_the_sqlite_store_deleted_mid_session_still_answers_every_turn(
    gateway_factory: GatewayFactory, tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    async with PhrasedServer("openai", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(
            server, sessions={"data_dir": str(data)},
            gateway={"api_keys": [{"key": "client-key", "owner": "me"}]}))
        s = Session(gw, session_id="deleted-store")
        s.history.extend(m for i in range(10) for m in agent_turn(i, lines=60))
        assert compaction_header(await asyncio.wait_for(s.send(), BOUND)) is not None
        deleted = [p for p in data.iterdir() if p.name.startswith("sessions.sqlite3")]
        assert deleted
        for path in deleted:  # an operator's cleanup job removes the database files
            path.unlink()
        headers = []
        for i in range(10, 22):  # grows past the window again: a new compaction is due
            raw = await asyncio.wait_for(s.send(agent_turn(i, lines=60)), BOUND)
            headers.append(compaction_header(raw))
        assert any(h is not None for h in headers)
        assert all(prompt_tokens(b["messages"]) <= TRUE_WINDOW
                   for b, status in server.chats() if status == 200)
        # What was archived after the deletion is readable (never a 500).
        async with aiohttp.ClientSession() as http, http.get(
                f"{gw.base_url}/gateway/sessions/{s.session_id}/archive",
                headers={"Authorization": "Bearer client-key"}) as archive:
            assert archive.status == 200, await archive.text()
            assert "module_1" in await archive.text()


# --- two requests of one session overflowing at once: one summary --------------------------

async def test_two_overflowing_requests_of_one_session_at_once_make_one_summary(
    gateway_factory: GatewayFactory,
) -> None:
    hold = asyncio.Event()
    async with NativeOverflow(window=1_500, summary_hold=hold) as up:
        gw = await gateway_factory(native_config(up))
        history = messages_history(8)

        async def ask() -> Any:
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                                max_retries=0) as claude:
                return await claude.messages.with_raw_response.create(
                    model="claude", max_tokens=64, messages=history,  # type: ignore[arg-type]
                    extra_headers={"x-session-id": "two-at-once"})

        tasks = [asyncio.create_task(ask()) for _ in range(2)]
        metrics = gateway_state(gw).telemetry.metrics
        try:
            # One summary in flight (held) while both requests are: the second was refused
            # too, or it waits for that summary (when it came after the first refusal told
            # the window, it is not sent as it is at all).
            for _ in range(2000):
                if up.summaries and metrics.value("gateway_in_flight_requests") >= 2:
                    break
                await asyncio.sleep(0.005)
            else:
                raise AssertionError("both requests never overflowed at once")
        finally:
            hold.set()
        first, second = await asyncio.wait_for(asyncio.gather(*tasks), BOUND)
        for reply in (first, second):
            assert (await reply.parse()).content[0].text == "hello there"
            assert reply.headers["x-gateway-compaction"].startswith(("summarized", "reused"))
        assert len(up.summaries) == 1, "one compaction for the session, not two"
        assert all(estimate(b) <= 1_500 for b in up.answered())


# --- Responses: a continued chain whose new turn answers a call held upstream ---------------

RESP_TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file.",
               "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]


class TerseResponses(WindowedResponses):
    """Its answers to a tool output are one short sentence (the chain grows by the outputs
    the agent sends, so the turn that overflows is the one answering a call)."""

    def _reply(self, body: dict[str, Any], items: list[Any]) -> list[dict[str, Any]]:
        out = super()._reply(body, items)
        if out[0]["type"] == "message":
            out[0]["content"][0]["text"] = "read."
        return out


async def test_a_chain_overflowing_on_a_call_output_is_compacted_with_the_pair_whole(
    gateway_factory: GatewayFactory,
) -> None:
    async with TerseResponses(window=3_000) as fake:
        gw = await gateway_factory(gpt_config(fake.base_url))
        headers = {"x-session-id": "held-call"}
        compacted: list[bool] = []
        on_output: list[bool] = []
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            previous: str | None = None
            for i in range(12):
                # The model calls the tool (its call is held upstream), the agent answers it.
                asking = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                    model="gpt", input=f"task {i}: TOOL read module_{i}.py", tools=RESP_TOOLS,
                    extra_headers=headers,  # type: ignore[arg-type]
                    **({"previous_response_id": previous} if previous else {})), BOUND)
                asked = asking.parse()
                compacted.append("x-gateway-compaction" in asking.headers)
                (call,) = [o for o in asked.output if o.type == "function_call"]
                answer = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                    model="gpt", previous_response_id=asked.id, tools=RESP_TOOLS,
                    input=[{"type": "function_call_output", "call_id": call.call_id,
                            "output": file_text(i) * 2}],  # type: ignore[arg-type]
                    extra_headers=headers), BOUND)
                assert answer.parse().output  # (a summary loses the call: it may be made again)
                previous = answer.parse().id
                compacted.append("x-gateway-compaction" in answer.headers)
                on_output.append("x-gateway-compaction" in answer.headers)
                if on_output[-1]:
                    break
        assert any(v == 400 for _, v in fake.verdicts), "the window was passed upstream"
        assert any(on_output), "the turn answering a held call was compacted and answered"
        for sent in fake.accepted():
            items = sent.get("input") or []
            items = [] if isinstance(items, str) else items
            calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
            outputs = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
            if "previous_response_id" not in sent:  # whole: every output has its call
                assert outputs <= calls, sent


# --- a native provider refusing every size on a stream: bounded, in the wire's format -----

@pytest.mark.parametrize("model", ["claude", "resp"])
async def test_a_native_stream_refused_at_every_size_ends_in_a_clear_error(
    gateway_factory: GatewayFactory, model: str,
) -> None:
    async with NativeOverflow(window=1) as up:
        gw = await gateway_factory(native_config(up))
        sid = {"x-session-id": f"refuses-all-native-{model}"}
        if model == "claude":
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                                max_retries=0) as claude:
                with pytest.raises(anthropic.APIError) as caught:
                    async with claude.messages.stream(
                            model="claude", max_tokens=64, extra_headers=sid,
                            messages=messages_history(6)) as events:  # type: ignore[arg-type]
                        await asyncio.wait_for(events.get_final_text(), BOUND)
            assert "prompt is too long" in str(caught.value.body or caught.value.message)
        else:
            async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c",
                                          max_retries=0) as gpt:
                failure = ""
                try:
                    stream = await asyncio.wait_for(gpt.responses.create(
                        model="resp", input=responses_history(6), stream=True,  # type: ignore[arg-type]
                        extra_headers=sid), BOUND)
                    async for event in stream:
                        if event.type in ("error", "response.failed"):
                            failure = orjson.dumps(event.model_dump()).decode()
                except openai.APIStatusError as refused:
                    failure = str(refused.body or refused.message)
            assert "context" in failure, failure
        assert 2 <= len(up.received) <= 25, len(up.received)


# --- a configured window smaller than the true one -----------------------------------------

async def test_a_configured_window_below_the_true_one_compacts_before_any_refusal(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("openai", window=20_000) as server:
        raw = phrased_config(server)
        raw["model_list"][0]["model_info"]["max_input_tokens"] = 4_000  # stated too small
        gw = await gateway_factory(raw)
        s = Session(gw, session_id="small-config")
        s.history.extend(m for i in range(8) for m in agent_turn(i, lines=60))
        assert 4_000 < prompt_tokens(s.history) < 20_000
        first = await asyncio.wait_for(s.send(), BOUND)
        second = await asyncio.wait_for(s.send(agent_turn(8, lines=60)), BOUND)
        assert compaction_header(first) is not None and compaction_header(second) is not None
        assert all(status == 200 for _, status in server.requests), "never refused"
        # The configured window is not replaced by a guess: it is what the gateway plans for.
        assert prompt_tokens(last_answered(server)["messages"]) <= 4_000 * 1.2


# --- Responses: a 2 MB function output among encrypted reasoning ---------------------------

async def test_a_two_megabyte_function_output_among_reasoning_items_is_answered(
    gateway_factory: GatewayFactory,
) -> None:
    from tests.compaction.test_overflow_heldout_3 import TOOLS, reasoning_history
    async with WindowedResponses(window=4_000) as fake:
        gw = await gateway_factory(gpt_config(fake.base_url))
        items = reasoning_history(6, ends_in_output=False)
        outputs = [n for n, i in enumerate(items) if i.get("type") == "function_call_output"]
        items[outputs[2]]["output"] = big_log(TWO_MB)
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0,
                                      timeout=BOUND) as gpt:
            raw = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                model="gpt", input=items, tools=TOOLS, store=False,  # type: ignore[arg-type]
                reasoning={"effort": "low"}, stream=False,
                extra_headers={"x-session-id": "two-mb-output"}), BOUND)
        assert raw.parse().output_text
        assert raw.headers["x-gateway-compaction"].split(";")[0] in (
            "reduced", "summarized", "trimmed")
        sent = fake.accepted()[-1]
        assert len(orjson.dumps(sent)) < TWO_MB // 4
        for n, item in enumerate(sent["input"]):
            if item.get("type") == "reasoning":
                assert sent["input"][n + 1].get("type") == "function_call"


# --- two replicas on one Redis, one session overflowing on both at once ---------------------

async def test_two_replicas_overflowing_one_session_at_once_make_one_summary(
    gateway_factory: GatewayFactory, tmp_path: Path,
) -> None:
    from tests.sessions.conftest import run_redis_server
    hold = asyncio.Event()
    with run_redis_server(tmp_path) as url:
        async with NativeOverflow(window=1_500, summary_hold=hold) as up:
            raw = native_config(up)
            raw["sessions"] = {"redis_url": url}
            replicas = [await gateway_factory({**raw, "sessions": {
                "redis_url": url, "data_dir": str(tmp_path / f"data-{n}")}}) for n in range(2)]
            history = messages_history(8)

            async def ask(root: str) -> Any:
                async with anthropic.AsyncAnthropic(base_url=root, api_key="c",
                                                    max_retries=0) as claude:
                    return await claude.messages.with_raw_response.create(
                        model="claude", max_tokens=64, messages=history,  # type: ignore[arg-type]
                        extra_headers={"x-session-id": "two-replicas"})

            tasks = [asyncio.create_task(ask(gw.root)) for gw in replicas]
            try:
                for _ in range(2000):  # both refused, one summary in flight (held)
                    if len(up.refused()) >= 2 and up.summaries:
                        break
                    await asyncio.sleep(0.005)
                else:
                    raise AssertionError("both replicas never overflowed at once")
            finally:
                hold.set()
            replies = await asyncio.wait_for(asyncio.gather(*tasks), BOUND)
            for reply in replies:
                assert (await reply.parse()).content[0].text == "hello there"
                assert reply.headers["x-gateway-compaction"].startswith(
                    ("summarized", "reused")), reply.headers
            assert len(up.summaries) == 1, "one compaction for the session, not one a replica"
            assert all(estimate(b) <= 1_500 for b in up.answered())


# --- the newest message in several text blocks, larger than the window ----------------------

async def test_a_newest_message_of_several_blocks_bigger_than_the_window_keeps_its_ask(
    gateway_factory: GatewayFactory,
) -> None:
    ask = "Why does this build fail? Answer in one line."
    async with WindowedAnthropic(window=3_000) as fake:
        gw = await gateway_factory(claude_config(fake.base_url))
        history = [*messages_history(3)[:-1], {"role": "user", "content": [
            {"type": "text", "text": ask},
            {"type": "text", "text": big_log(60_000), "cache_control": {"type": "ephemeral"}}]}]
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="c",
                                            max_retries=0) as claude:
            raw = await asyncio.wait_for(claude.messages.with_raw_response.create(
                model="claude", max_tokens=256, messages=history,  # type: ignore[arg-type]
                extra_headers={"x-session-id": "blocks-over"}), BOUND)
            assert (await raw.parse()).content
        assert raw.headers["x-gateway-compaction"].split(";")[0] in ("summarized", "trimmed")
        sent = fake.accepted()[-1]
        assert ask in orjson.dumps(sent["messages"]).decode(), "the question is not lost"


def test_the_newest_message_of_several_parts_cut_by_the_tail_keeps_its_ask_and_its_end(
) -> None:
    from gateway.compaction.kept import TRUNCATION_MARK, select_kept_user_messages
    ask = {"type": "text", "text": "Why does this build fail? Answer in one line."}
    log = big_log(60_000)
    paste = {"type": "text", "text": log, "cache_control": {"type": "ephemeral"}}
    newest = {"role": "user", "content": [ask, paste]}
    earlier = {"role": "user", "content": "task 0 " * 30}

    def count(ms: Any) -> int:
        return sum(len(orjson.dumps(m)) // 4 for m in ms)

    kept = select_kept_user_messages([earlier, newest], count, head=60, tail=600, limit=300)
    last = kept.messages[-1]
    assert last["content"][0] == ask, "the ask opening the paste is kept"
    cut = last["content"][-1]
    assert cut["text"].startswith(TRUNCATION_MARK) and log.endswith(cut["text"][-500:])
    assert cut["cache_control"] == {"type": "ephemeral"}
    assert count([last]) <= 600


# --- a chat stream asking for usage, overflowing --------------------------------------------

async def test_an_overflowing_chat_stream_asking_for_usage_is_compacted_with_its_options(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("openai", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        history = [m for i in range(10) for m in agent_turn(i, lines=60)]
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            raw = await asyncio.wait_for(gpt.chat.completions.with_raw_response.create(
                model="demo", messages=history, stream=True,  # type: ignore[arg-type]
                stream_options={"include_usage": True},
                extra_headers={"x-session-id": "stream-usage"}), BOUND)
            chunks = [c async for c in raw.parse()]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Done."
        assert compaction_header(raw) is not None
        sent = last_answered(server)
        assert sent["stream_options"] == {"include_usage": True}
        assert prompt_tokens(sent["messages"]) <= TRUE_WINDOW
