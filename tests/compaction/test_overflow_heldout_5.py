"""Held-out overflow, fifth round: ``repair.tool_outputs: condense`` deciding compaction on
the condensed history (a history overflowing even condensed, a stored compaction under
condensing, the native wires, the report policy), teams (two owners with one session id, an
owner reading another's archive), windows stated in wordings not seen before, a learned
window shared by two gateways over one data dir, and an output budget alone larger than the
window. Real gateways on 127.0.0.1, the real ``openai``/``anthropic`` SDKs, fake upstreams
refusing in their providers' words."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from tests.compaction.conftest import Gateways, Session, agent_turn, compaction_header
from tests.compaction.test_overflow_heldout import (
    TRUE_WINDOW,
    file_text,
    messages_history,
    model_card,
    phrased_config,
)
from tests.compaction.test_overflow_heldout_3 import (
    READ_FILE,
    SYSTEM,
    WindowedResponses,
    assert_thinking_whole,
    breakpoints,
    gpt_config,
    thinking_history,
)
from tests.conftest import GatewayFactory
from tests.factories import assistant, tool, tool_call, user
from tests.fakes.llamacpp_server import prompt_tokens
from tests.fakes.native_overflow import RESPONSES_OVERFLOW, NativeOverflow, estimate
from tests.fakes.phrased_overflow import PHRASINGS, PhrasedServer
from tests.fakes.three_wires import anthropic_events, anthropic_whole, responses_whole
from tests.sessions.conftest import run_redis_server

BOUND = 60  # seconds: every request here ends well before this (never a hang)
KEYS = {"team-a": "key-a", "team-b": "key-b", "team-r": "key-r"}


def teams(**extra: Any) -> dict[str, Any]:
    """Config: three keys of three owners; team-a and team-b condense tool outputs."""
    return {"gateway": {"api_keys": [{"key": k, "owner": o} for o, k in KEYS.items()]},
            "repair": {"owners": {"team-a": {"tool_outputs": "condense"},
                                  "team-b": {"tool_outputs": "condense"},
                                  "team-r": {"tool_outputs": "condense", "policy": "report"}}},
            **extra}


def repeated_reads(turns: int, lines: int = 60) -> list[dict[str, Any]]:
    """Agent steps that each read a *different* file: condensing saves little of it."""
    return [m for i in range(turns) for m in agent_turn(i, lines=lines)]


SOURCE = "".join(f"def handler_{n}(request):\n    return route(request, {n})\n\n"
                 for n in range(60))


def same_file_reads(times: int) -> list[dict[str, Any]]:
    """An agent reading one big file again and again (condensing folds all but one)."""
    out: list[dict[str, Any]] = [user("fix the router")]
    for n in range(times):
        out += [assistant(None, [tool_call(f"call_r{n}", "read_file", {"path": "router.py"})]),
                tool(f"call_r{n}", SOURCE)]
    return [*out, user("what did you find?")]


# --- condense: the decision is made on the condensed history --------------------------------

async def test_a_history_overflowing_even_condensed_is_compacted_and_answered(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("openai", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server, **teams()))
        s = Session(gw, session_id="condensed-over", key=KEYS["team-a"])
        s.history.extend(repeated_reads(10))
        assert prompt_tokens(s.history) > TRUE_WINDOW
        first = await asyncio.wait_for(s.send(), BOUND)
        header = compaction_header(first)
        assert header is not None and header[0] in ("summarized", "trimmed"), first.headers
        # The next turn is planned with the learned window over the stored compaction.
        second = await asyncio.wait_for(s.send(agent_turn(10, lines=60)), BOUND)
        assert compaction_header(second) is not None
        answered = [b for b, status in server.chats() if status == 200]
        assert len(answered) == 2
        assert all(prompt_tokens(b["messages"]) <= TRUE_WINDOW for b in answered)
        refused = [b for b, status in server.chats() if status != 200]
        assert len(refused) <= 1, "once the window is learned the next turn is not refused"


async def test_a_stored_compaction_is_reused_under_condensing_and_same_reads_fold(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("anthropic", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server, **teams()))
        s = Session(gw, session_id="condensed-stored", key=KEYS["team-b"])
        s.history.extend(repeated_reads(10))
        first = await asyncio.wait_for(s.send(), BOUND)
        assert compaction_header(first) is not None
        # Then the agent reads one file again and again: only condensed does it fit.
        s.history.extend(same_file_reads(4))
        second = await asyncio.wait_for(s.send(), BOUND)
        header = compaction_header(second)
        assert header is not None and header[0] in ("reused", "summarized", "trimmed",
                                                    "background-applied"), second.headers
        last = [b for b, status in server.chats() if status == 200][-1]
        assert prompt_tokens(last["messages"]) <= TRUE_WINDOW
        # No tool result is sent twice whole: a repeat read is folded.
        texts = [m.get("content") for m in last["messages"] if m.get("role") == "tool"]
        assert sum(1 for t in texts if t == SOURCE) <= 1, texts


async def test_the_archive_of_a_condensed_session_keeps_every_tool_result_whole(
    gateway_factory: GatewayFactory,
) -> None:
    # Condensing shapes what is sent, never what is archived: the folded repeat reads are
    # in the archive as the tool returned them, for the agent to read back.
    async with PhrasedServer("openai", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server, **teams()))
        s = Session(gw, session_id="condensed-archive", key=KEYS["team-a"])
        s.history.extend([*same_file_reads(5)[:-1], *repeated_reads(10)])
        raw = await asyncio.wait_for(s.send(), BOUND)
        assert compaction_header(raw) is not None
        sent = [b for b, status in server.chats() if status == 200][-1]
        assert not any(m.get("content") == SOURCE for m in sent["messages"])
        status, archive = await read_archive(gw, KEYS["team-a"], "condensed-archive")
        assert status == 200
        reads = [m for m in archive["messages"] if m.get("role") == "tool"
                 and m.get("tool_call_id", "").startswith("call_r")]
        assert len(reads) == 5 and all(m["content"] == SOURCE for m in reads), reads


async def test_under_the_report_policy_an_overflow_is_measured_as_written_and_answered(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("openai", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server, **teams()))
        s = Session(gw, session_id="report-over", key=KEYS["team-r"])
        s.history.extend(same_file_reads(8))
        assert prompt_tokens(s.history) > TRUE_WINDOW
        raw = await asyncio.wait_for(s.send(), BOUND)
        header = compaction_header(raw)
        # (the repeated reads folded as a reduction, or a summary: never the refusal)
        assert header is not None and header[0] in ("reduced", "summarized", "trimmed"), \
            raw.headers
        first = server.chats()[0][0]
        # As written: the first attempt carried every repeated read whole.
        assert sum(1 for m in first["messages"] if m.get("content") == SOURCE) == 8
        answered = [b for b, status in server.chats() if status == 200]
        assert answered and prompt_tokens(answered[-1]["messages"]) <= TRUE_WINDOW


NATIVE_WINDOW = 2_500


def native_teams(up: NativeOverflow) -> dict[str, Any]:
    """Claude and a Responses model on ``up``, configured with its true window."""
    return {
        "model_list": [
            {"model_name": "claude", "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5", "api_base": up.base_url, "api_key": "k"},
             "model_info": {"max_input_tokens": NATIVE_WINDOW}},
            {"model_name": "resp", "litellm_params": {
                "model": "openai/gpt-5", "api_base": up.base_url, "api_key": "k"},
             "model_info": {"max_input_tokens": NATIVE_WINDOW, "responses_api": True}},
        ],
        "compaction": {"reserved_context_size": 0, "recall": False},
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
        **teams(),
    }


def native_same_reads(wire: str, times: int) -> list[dict[str, Any]]:
    """One file read ``times`` times, on the Messages or the Responses wire."""
    out: list[dict[str, Any]] = [{"role": "user", "content": "fix the router"}]
    for n in range(times):
        if wire == "messages":
            out += [{"role": "assistant", "content": [
                        {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "read_file",
                         "input": {"path": "router.py"}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": f"toolu_{n:04d}",
                         "content": SOURCE}]}]
        else:
            out += [{"type": "function_call", "call_id": f"call_{n}", "name": "read_file",
                     "arguments": '{"path": "router.py"}'},
                    {"type": "function_call_output", "call_id": f"call_{n}", "output": SOURCE}]
    return [*out, {"role": "user", "content": "what did you find?"}]


async def native_send(gw: Any, wire: str, history: list[dict[str, Any]], key: str,
                      session: str, *, stream: bool = False,
                      **extra: Any) -> tuple[str, Any]:
    """One request on ``wire`` with the real SDK: (the answer's text, its headers)."""
    headers = {"x-session-id": session}
    if wire == "messages":
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=key,
                                            max_retries=0) as claude:
            if stream:
                async with claude.messages.stream(
                        model="claude", max_tokens=64, messages=history,  # type: ignore[arg-type]
                        extra_headers=headers, **extra) as s:
                    return await s.get_final_text(), s.response.headers
            raw = await claude.messages.with_raw_response.create(
                model="claude", max_tokens=64, messages=history,  # type: ignore[arg-type]
                extra_headers=headers, **extra)
            message = await raw.parse()
            return message.content[0].text, raw.headers  # type: ignore[union-attr]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0) as gpt:
        if stream:
            raw = await gpt.responses.with_raw_response.create(
                model="resp", input=history, stream=True,  # type: ignore[arg-type]
                extra_headers=headers, **extra)
            events = [e async for e in raw.parse()]
            assert events[-1].type == "response.completed", [e.type for e in events]
            return events[-1].response.output_text, raw.headers  # type: ignore[union-attr]
        raw = await gpt.responses.with_raw_response.create(
            model="resp", input=history, extra_headers=headers, **extra)  # type: ignore[arg-type]
        return raw.parse().output_text, raw.headers


@pytest.mark.parametrize("wire", ["messages", "responses"])
async def test_condense_on_a_native_wire_decides_on_the_condensed_history(
    gateway_factory: GatewayFactory, wire: str,
) -> None:
    async with NativeOverflow(window=NATIVE_WINDOW) as up:
        gw = await gateway_factory(native_teams(up))
        history = native_same_reads(wire, 6)
        field = "messages" if wire == "messages" else "input"
        assert estimate({field: history}) > NATIVE_WINDOW
        text, headers = await asyncio.wait_for(
            native_send(gw, wire, history, KEYS["team-a"], f"native-condense-{wire}"), BOUND)
        assert text == "hello there"
        # Condensed it fits: sent condensed, never summarized, never refused.
        assert "x-gateway-compaction" not in headers, dict(headers)
        assert not up.refused() and not up.summaries
        sent = up.answered()[-1]
        assert estimate(sent) <= NATIVE_WINDOW
        assert str(sent[field]).count("handler_59") == 1  # one read whole, the rest folded
        # The same history from an owner sending it as written overflows: compacted first.
        text, headers = await asyncio.wait_for(
            native_send(gw, wire, history, KEYS["team-r"], f"report-{wire}"), BOUND)
        assert text == "hello there"
        assert headers["x-gateway-compaction"].startswith(
            ("reduced", "summarized", "trimmed")), dict(headers)
        assert estimate(up.answered()[-1]) <= NATIVE_WINDOW


# --- teams: one session id, two owners ---------------------------------------------------

A_MARK = re.compile(r"module_(\d|10)\.py")  # team-a's files: module_0.py .. module_10.py
B_MARK = re.compile(r"module_1\d\d\.py")  # team-b's: module_100.py .. module_109.py


async def read_archive(gw: Any, key: str, session: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(
            f"{gw.base_url}/gateway/sessions/{session}/archive?from=1&to=500",
            headers={"Authorization": f"Bearer {key}"}) as r:
        return r.status, await r.json()


async def test_two_owners_with_one_session_id_never_share_a_compaction_or_archive(
    gateway_factory: GatewayFactory,
) -> None:
    async with PhrasedServer("openai", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server, **teams()))
        a = Session(gw, session_id="shared-id", key=KEYS["team-a"])
        a.history.extend(repeated_reads(10))
        b = Session(gw, session_id="shared-id", key=KEYS["team-b"])
        b.history.extend(m for i in range(100, 110) for m in agent_turn(i, lines=60))
        first_a = await asyncio.wait_for(a.send(), BOUND)
        assert compaction_header(first_a) is not None
        first_b = await asyncio.wait_for(b.send(), BOUND)
        header_b = compaction_header(first_b)
        assert header_b is not None and header_b[0] != "reused", first_b.headers
        # B's summary and B's answered prompt hold none of A's conversation.
        summaries = [body for body, _ in server.summaries()]
        b_summary = [s for s in summaries if B_MARK.search(str(s))]
        assert b_summary and not any(A_MARK.search(str(s)) for s in b_summary)
        b_sent = [body for body, status in server.chats() if status == 200][-1]
        assert B_MARK.search(str(b_sent)) and not A_MARK.search(str(b_sent))
        # A's next turn goes on from A's own compaction, never B's.
        second_a = await asyncio.wait_for(a.send(agent_turn(10, lines=60)), BOUND)
        assert compaction_header(second_a) is not None
        a_sent = [body for body, status in server.chats() if status == 200][-1]
        assert A_MARK.search(str(a_sent)) and not B_MARK.search(str(a_sent))

        # Each owner reads its own archive under the shared id, and only its own.
        status, archive_a = await read_archive(gw, KEYS["team-a"], "shared-id")
        assert status == 200 and A_MARK.search(str(archive_a))
        assert not B_MARK.search(str(archive_a))
        status, archive_b = await read_archive(gw, KEYS["team-b"], "shared-id")
        assert status == 200 and B_MARK.search(str(archive_b))
        assert not A_MARK.search(str(archive_b))
        # An owner with no session of that id reads nothing: a clear refusal.
        status, body = await read_archive(gw, KEYS["team-r"], "shared-id")
        assert status in (403, 404) and "handler_" not in str(body), body
        # And with no key at all: refused, nothing leaked.
        async with aiohttp.ClientSession() as http, http.get(
                f"{gw.base_url}/gateway/sessions/shared-id/archive") as r:
            assert r.status in (401, 403) and "handler_" not in await r.text()


# --- the agent wires: thinking under condensing, a chain held upstream refused in-stream ---

@pytest.mark.parametrize("stream", [False, True])
async def test_a_condensed_thinking_history_still_overflowing_compacts_wire_valid(
    gateway_factory: GatewayFactory, stream: bool,
) -> None:
    # A signed-thinking history with breakpoints, condensed (the owner asks for it), still
    # over the window: refused (in-stream after message_start when streamed), compacted.
    async with NativeOverflow(window=1_500) as up:
        raw = native_teams(up)
        raw["model_list"][0]["model_info"]["max_input_tokens"] = 200_000  # (not known)
        gw = await gateway_factory(raw)
        history = thinking_history(8, ends_in_tool_result=False)
        assert estimate({"messages": history}) > 1_500
        text, headers = await asyncio.wait_for(native_send(
            gw, "messages", history, KEYS["team-a"], f"thinking-condensed-{stream}",
            stream=stream, system=SYSTEM, tools=[READ_FILE]), BOUND)
        assert text == "hello there"
        assert headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        refused = up.refused()
        assert refused and refused[0].get("stream", False) is stream
        sent = up.answered()[-1]
        assert estimate(sent) <= 1_500 and sent.get("stream", False) is stream
        assert_thinking_whole(sent, history)
        assert len(breakpoints(sent)) <= 4, "Anthropic takes at most four breakpoints"
        roles = [m["role"] for m in sent["messages"]]
        assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))


class InStreamResponses(WindowedResponses):
    """A windowed Responses API that, streamed, refuses after ``response.created`` (a 200
    stream whose second event is ``response.failed`` with ``context_length_exceeded``)."""

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        answer = await super()._responses(request)
        if not body.get("stream") or answer.status != 400:
            return answer
        failed = {**responses_whole("gpt-5", "failed"), "error": {
            "code": "context_length_exceeded", "message": RESPONSES_OVERFLOW}}
        stream = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await stream.prepare(request)
        for event in ({"type": "response.created", "sequence_number": 0,
                       "response": responses_whole("gpt-5", "in_progress")},
                      {"type": "response.failed", "sequence_number": 1, "response": failed}):
            await stream.write(f"event: {event['type']}\ndata: ".encode()
                               + orjson.dumps(event) + b"\n\n")
        await stream.write_eof()
        return stream


@pytest.mark.parametrize("stream", [False, True])
async def test_a_chain_held_upstream_overflowing_on_a_stream_is_compacted_from_the_kept_copy(
    gateway_factory: GatewayFactory, stream: bool,
) -> None:
    async with InStreamResponses(window=3_000) as fake:
        gw = await gateway_factory(gpt_config(fake.base_url))
        headers = {"x-session-id": f"held-stream-{stream}"}
        compacted: list[bool] = []
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as gpt:
            previous: str | None = None
            for i in range(14):
                chained = {"previous_response_id": previous} if previous else {}
                if stream:
                    raw = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                        model="gpt", input=f"task {i}: explain this file\n{file_text(i)}",
                        stream=True, extra_headers=headers, **chained), BOUND)
                    events = [e async for e in raw.parse()]
                    kinds = [e.type for e in events]
                    assert kinds[-1] == "response.completed", kinds
                    assert "response.failed" not in kinds and "error" not in kinds
                    done = events[-1].response  # type: ignore[union-attr]
                else:
                    raw = await asyncio.wait_for(gpt.responses.with_raw_response.create(
                        model="gpt", input=f"task {i}: explain this file\n{file_text(i)}",
                        extra_headers=headers, **chained), BOUND)
                    done = raw.parse()
                assert done.output_text
                previous = done.id
                compacted.append("x-gateway-compaction" in raw.headers)
        assert any(v == 400 for _, v in fake.verdicts), "the window was passed upstream"
        assert any(compacted), "answered by compacting the kept conversation"
        sent = fake.accepted()[compacted.index(True) - len(compacted)]
        assert "previous_response_id" not in sent, "the compacted copy went whole"


# --- windows: unusual wordings, one learned window for two gateways, the output budget ----

# Wordings providers really send (shapes from their servers and users' reports), for a
# prompt of t tokens against a window of w; each states the window.
UNUSUAL_PHRASINGS: dict[str, Any] = {
    # Alibaba DashScope (Qwen): the window as the upper end of an allowed range
    "dashscope_range": lambda w, t: (400, {"error": {
        "message": f"<400> InternalError.Algo.InvalidParameter: Range of input length should "
                   f"be [1, {w}]", "type": "invalid_request_error", "param": None,
        "code": "invalid_parameter_error"}}),
    # ByteDance Volcano Engine (Ark)
    "volcengine_ark": lambda w, t: (400, {"error": {
        "code": "InvalidParameter", "param": "", "type": "BadRequest",
        "message": f"Input length {t} exceeds the maximum length {w}. Request id: "
                   "021733112233445566778899aabbccddeeff"}}),
    # LM Studio: the prompt it was asked to keep against the length the model was loaded with
    "lmstudio": lambda w, t: (400, {"error": (
        f"Trying to keep the first {t} tokens when context the overflows. However, the model "
        f"is loaded with context length of only {w} tokens, which is not enough. Try to load "
        "the model with a larger context length, or provide a shorter input")}),
    # LM Studio's older server
    "lmstudio_input": lambda w, t: (400, {"error": f"Input length {t} exceeds context "
                                                   f"length {w}"}),
    # Cloudflare Workers AI's OpenAI-compatible endpoint, counting input and completion
    "workers_ai_total": lambda w, t: (400, {"errors": [{"code": 5021, "message": (
        f"Requested token count exceeds the model's maximum context length of {w} tokens. "
        f"You requested a total of {t} tokens: {t} tokens from the input messages and 0 "
        "tokens for the completion.")}], "success": False, "result": {}, "messages": []}),
    # Cohere
    "cohere": lambda w, t: (400, {"message": (
        f"too many tokens: total number of tokens in the prompt cannot exceed {w} - received "
        f"{t}. Try using a shorter prompt, or enabling prompt truncating. See "
        "https://docs.cohere.com/reference/generate for more details.")}),
    # llama-cpp-python's server
    "llama_cpp_python": lambda w, t: (400, {"error": {
        "message": f"Requested tokens ({t}) exceed context window of {w}",
        "type": "invalid_request_error", "param": "messages", "code": None}}),
}


@pytest.fixture
def unusual_phrasings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, phrasing in UNUSUAL_PHRASINGS.items():
        monkeypatch.setitem(PHRASINGS, name, lambda w, t, p=phrasing: (*p(w, t), {}))


@pytest.mark.usefixtures("unusual_phrasings")
@pytest.mark.parametrize("phrasing", sorted(UNUSUAL_PHRASINGS))
async def test_a_window_stated_in_an_unusual_wording_is_learned_and_compacted(
    gateway_factory: GatewayFactory, phrasing: str,
) -> None:
    async with PhrasedServer(phrasing, window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id=f"unusual-{phrasing}")
        s.history.extend(repeated_reads(10))
        assert prompt_tokens(s.history) > TRUE_WINDOW
        first = await asyncio.wait_for(s.send(), BOUND)
        header = compaction_header(first)
        assert header is not None and header[0] in ("summarized", "trimmed"), first.headers
        card = await model_card(gw)
        assert card["context_window"] == TRUE_WINDOW, card
        assert card["context_window_source"] == "learned"
        assert first.headers["x-gateway-context"]
        await asyncio.wait_for(s.send(agent_turn(10, lines=60)), BOUND)
        refused = [b for b, status in server.chats() if status != 200]
        assert len(refused) == 1, "once learned, the next turn is compacted before sending"


@pytest.mark.parametrize("store", ["sqlite", "redis"])
async def test_a_window_learned_by_one_gateway_is_used_by_another_on_the_same_data_dir(
    gateways: Gateways, tmp_path: Path, store: str,
) -> None:
    # Two gateway processes' worth of state: one data dir (SQLite), or one Redis with a
    # data dir each (so only Redis can carry the window over).
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(run_redis_server(tmp_path)) if store == "redis" else None
        await _window_learned_once(gateways, tmp_path, url)


async def _window_learned_once(gateways: Gateways, tmp_path: Path, url: str | None) -> None:
    def config(server: PhrasedServer, n: int) -> dict[str, Any]:
        raw = phrased_config(server)
        if url is not None:
            raw["sessions"] = {"data_dir": str(tmp_path / f"data-{n}"), "redis_url": url}
        return raw

    async with PhrasedServer("mistral", window=TRUE_WINDOW) as server:
        first = await gateways.start(config(server, 1))
        second = await gateways.start(config(server, 2))
        one = Session(first, session_id="shared-window-1")
        one.history.extend(repeated_reads(10))
        await asyncio.wait_for(one.send(), BOUND)
        assert (await model_card(first))["context_window"] == TRUE_WINDOW
        refused_before = sum(1 for _, status in server.chats() if status != 200)
        assert refused_before == 1
        # The other process never met the refusal: it plans with the window from the store.
        two = Session(second, session_id="shared-window-2")
        two.history.extend(m for i in range(20, 30) for m in agent_turn(i, lines=60))
        raw = await asyncio.wait_for(two.send(), BOUND)
        assert compaction_header(raw) is not None
        assert sum(1 for _, status in server.chats() if status != 200) == refused_before, \
            "the second gateway compacted before sending: no refusal of its own"
        card = await model_card(second)
        assert card["context_window"] == TRUE_WINDOW, card
        assert card["context_window_source"] == "learned"


OUTPUT_BUDGET = 8_000  # alone more than the true window of TRUE_WINDOW tokens

# Refusals naming both the prompt and the output budget (t: the prompt's tokens).
BUDGET_PHRASINGS: dict[str, Any] = {
    "vllm_budget": lambda w, t: (400, {
        "object": "error", "type": "BadRequestError", "param": None, "code": 400,
        "message": f"This model's maximum context length is {w} tokens. However, you "
                   f"requested {t + OUTPUT_BUDGET} tokens ({t} in the messages, "
                   f"{OUTPUT_BUDGET} in the completion). Please reduce the length of the "
                   "messages or completion."}),
    "workers_ai_parts": lambda w, t: (400, {"errors": [{"code": 5021, "message": (
        f"Requested token count exceeds the model's maximum context length of {w} tokens. "
        f"You requested a total of {t + OUTPUT_BUDGET} tokens: {t} tokens from the input "
        f"messages and {OUTPUT_BUDGET} tokens for the completion. Please reduce the number "
        "of tokens in the input messages or the completion to fit the model's context "
        "length.")}], "success": False, "result": {}, "messages": []}),
    "anthropic_sum": lambda w, t: (400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": f"input length and `max_tokens` exceed context limit: {t} + "
                   f"{OUTPUT_BUDGET} > {w}, decrease input length or `max_tokens` and try "
                   "again"}}),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("phrasing", sorted(BUDGET_PHRASINGS))
async def test_an_output_budget_alone_larger_than_the_window_is_lowered_and_answered(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, phrasing: str,
    stream: bool,
) -> None:
    monkeypatch.setitem(PHRASINGS, phrasing,
                        lambda w, t: (*BUDGET_PHRASINGS[phrasing](w, t), {}))
    async with PhrasedServer(phrasing, window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        history = [user("hello"), *repeated_reads(2)]
        assert prompt_tokens(history) < TRUE_WINDOW < OUTPUT_BUDGET
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="c", max_retries=0) as c:
            raw = await asyncio.wait_for(c.chat.completions.with_raw_response.create(
                model="demo", messages=history, max_completion_tokens=OUTPUT_BUDGET,
                stream=stream, extra_headers={"x-session-id": f"budget-{phrasing}"}), BOUND)
            if stream:
                chunks = [chunk async for chunk in raw.parse()]
                text = "".join(ch.choices[0].delta.content or "" for ch in chunks
                               if ch.choices)
            else:
                text = raw.parse().choices[0].message.content
        assert text == "Done."
        header = compaction_header(raw)
        assert header is not None and header[0] == "output_lowered", raw.headers
        sent = [b for b, status in server.chats() if status == 200][-1]
        budget = sent.get("max_completion_tokens") or sent.get("max_tokens")
        assert 256 <= budget < OUTPUT_BUDGET
        assert prompt_tokens(sent["messages"]) + budget <= TRUE_WINDOW
        assert sent["messages"] == history, "the history went as it was"


async def test_the_recall_tool_of_one_owner_never_reads_another_owners_archive(
    gateway_factory: GatewayFactory,
) -> None:
    # Two owners, one session id, the recall tool on: after B's compaction the model
    # recalls a whole range, and what comes back is B's archive, never A's.
    async with PhrasedServer("openai", window=TRUE_WINDOW, calls_recall=True) as server:
        raw = phrased_config(server, **teams())
        raw["compaction"] = {"reserved_context_size": 0}  # (recall on: the default)
        gw = await gateway_factory(raw)
        a = Session(gw, session_id="shared-recall", key=KEYS["team-a"])
        a.history.extend(repeated_reads(10))
        await asyncio.wait_for(a.send(), BOUND)
        b = Session(gw, session_id="shared-recall", key=KEYS["team-b"])
        b.history.extend(m for i in range(100, 110) for m in agent_turn(i, lines=60))
        since = len(server.requests)
        reply = await asyncio.wait_for(b.send(), BOUND)
        assert reply.headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        recalled = [m["content"] for body, _ in server.requests[since:]
                    for m in body["messages"] if m.get("role") == "tool"
                    and m.get("tool_call_id", "").startswith("call_recall")]
        assert recalled, "the model's recall was answered"
        assert all(not A_MARK.search(str(r)) for r in recalled), recalled
        assert any(B_MARK.search(str(r)) for r in recalled), recalled


@pytest.mark.parametrize("stream", [False, True])
async def test_a_condensed_responses_input_still_overflowing_is_compacted(
    gateway_factory: GatewayFactory, stream: bool,
) -> None:
    # Reads of one file folded by condensing, plus reads of many different files: still
    # over a window the gateway does not know; refused (after response.created when
    # streamed) and compacted.
    async with NativeOverflow(window=1_500) as up:
        raw = native_teams(up)
        raw["model_list"][1]["model_info"]["max_input_tokens"] = 200_000
        gw = await gateway_factory(raw)
        history = native_same_reads("responses", 3)[:-1]
        for i in range(8):
            history += [{"type": "function_call", "call_id": f"call_f{i}", "name": "read_file",
                         "arguments": f'{{"path": "module_{i}.py"}}'},
                        {"type": "function_call_output", "call_id": f"call_f{i}",
                         "output": file_text(i)}]
        history.append({"role": "user", "content": "what did you find?"})
        text, headers = await asyncio.wait_for(native_send(
            gw, "responses", history, KEYS["team-a"], f"resp-condensed-{stream}",
            stream=stream), BOUND)
        assert text == "hello there"
        assert headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        assert up.refused()
        sent = up.answered()[-1]
        assert estimate(sent) <= 1_500
        calls = {i["call_id"] for i in sent["input"] if i.get("type") == "function_call"}
        outputs = {i["call_id"] for i in sent["input"]
                   if i.get("type") == "function_call_output"}
        assert calls == outputs, "every call sent has its output and the reverse"


async def test_two_owners_overflowing_at_once_under_one_session_id_stay_apart(
    gateway_factory: GatewayFactory,
) -> None:
    # Both compactions run at the same moment: neither waits for nor takes the other's.
    async with PhrasedServer("openai", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server, **teams()))
        a = Session(gw, session_id="shared-at-once", key=KEYS["team-a"])
        a.history.extend(repeated_reads(10))
        b = Session(gw, session_id="shared-at-once", key=KEYS["team-b"])
        b.history.extend(m for i in range(100, 110) for m in agent_turn(i, lines=60))
        replies = await asyncio.wait_for(asyncio.gather(a.send(), b.send()), BOUND)
        assert all(compaction_header(r) is not None for r in replies)
        for history, mark, other in ((a.history, A_MARK, B_MARK), (b.history, B_MARK, A_MARK)):
            asks = {m["content"] for m in history if m["role"] == "user"}
            sent = [body for body, status in server.chats() if status == 200
                    and any(m.get("content") in asks for m in body["messages"])]
            assert sent, "each owner's compacted request was answered"
            assert all(mark.search(str(s)) and not other.search(str(s)) for s in sent)
        for key, mark, other in ((KEYS["team-a"], A_MARK, B_MARK),
                                 (KEYS["team-b"], B_MARK, A_MARK)):
            status, archive = await read_archive(gw, key, "shared-at-once")
            assert status == 200 and mark.search(str(archive))
            assert not other.search(str(archive))


# Anthropic-compatible endpoints of other vendors: Anthropic's envelope, their own words.
MESSAGES_PHRASINGS: dict[str, Any] = {
    "moonshot_anthropic": lambda w, t: (
        f"Invalid request: Your request exceeded model token limit: {w} (requested: {t})"),
    "deepseek_anthropic": lambda w, t: (
        f"This model's maximum context length is {w} tokens. However, you requested {t} "
        f"tokens ({t} in the messages, 0 in the completion). Please reduce the length of the "
        "messages or completion."),
    "volcengine_anthropic": lambda w, t: (
        f"Input length {t} exceeds the maximum length {w}. Request id: 0217331122334455"),
    "dashscope_anthropic": lambda w, t: (
        f"<400> InternalError.Algo.InvalidParameter: Range of input length should be "
        f"[1, {w}]"),
}


class PhrasedMessages(NativeOverflow):
    """The native Messages fake refusing in another vendor's words (whole, or in-stream
    after ``message_start``)."""

    phrasing: str = "moonshot_anthropic"

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        await self._hold(body)
        tokens = estimate(body)
        if tokens <= self.window:
            self.received.append((request.path, body, 200))
            if body.get("stream"):
                return await self._stream(request, anthropic_events("up-model"))
            return web.json_response(anthropic_whole("up-model"))
        error = {"type": "error", "error": {
            "type": "invalid_request_error",
            "message": MESSAGES_PHRASINGS[self.phrasing](self.window, tokens)}}
        if not body.get("stream"):
            self.received.append((request.path, body, 400))
            return web.json_response(error, status=400)
        self.received.append((request.path, body, "stream-error"))
        events = [anthropic_events("up-model")[0],
                  b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"]
        return await self._stream(request, events)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("phrasing", sorted(MESSAGES_PHRASINGS))
async def test_a_messages_endpoint_stating_its_window_in_its_own_words_is_learned(
    gateway_factory: GatewayFactory, phrasing: str, stream: bool,
) -> None:
    up = PhrasedMessages(window=1_500)
    up.phrasing = phrasing
    async with up:
        raw = native_teams(up)
        raw["model_list"][0]["model_info"]["max_input_tokens"] = 200_000  # (not known)
        gw = await gateway_factory(raw)
        history = messages_history(8)
        assert estimate({"messages": history}) > 1_500
        text, headers = await asyncio.wait_for(native_send(
            gw, "messages", history, KEYS["team-b"], f"vendor-{phrasing}-{stream}",
            stream=stream),
            BOUND)
        assert text == "hello there"
        assert headers["x-gateway-compaction"].startswith(("summarized", "trimmed"))
        assert estimate(up.answered()[-1]) <= 1_500
        async with aiohttp.ClientSession() as http, http.get(
                gw.base_url + "/models", headers={"Authorization": f"Bearer {KEYS['team-b']}"},
        ) as r:
            card = {m["id"]: m for m in (await r.json())["data"]}["claude"]
        assert card["context_window"] == 1_500, card
        assert card["context_window_source"] == "learned"


async def test_the_context_report_after_a_compaction_on_refusal_is_what_was_sent(
    gateway_factory: GatewayFactory,
) -> None:
    # The configured window is 100,000; the provider says 6,000 and the history is
    # compacted after its refusal. The turn's x-gateway-context tells the window as sent:
    # the summary counted, the usage on the learned window (as the next turn says it).
    async with PhrasedServer("openai", window=TRUE_WINDOW) as server:
        gw = await gateway_factory(phrased_config(server))
        s = Session(gw, session_id="context-after-refusal")
        s.history.extend(turn for i in range(16) for turn in agent_turn(i, lines=60))
        first = await asyncio.wait_for(s.send(), BOUND)
        header = compaction_header(first)
        assert header is not None and header[0] == "summarized", first.headers
        _level, *pairs = [p.strip() for p in first.headers["x-gateway-context"].split(";")]
        told = {k: float(v) for k, v in (p.split("=") for p in pairs)}
        assert told["summary"] > 0
        assert abs(told["used"] - header[2] / TRUE_WINDOW) < 0.011, (told, header)
        assert told["history"] + told["turn"] < header[1] / 2
