"""Round 3 of broken Chat Completions histories, through the real ``openai`` SDK.

The histories (tests/projection/heldout_histories_3.py) are what trimmers, summarizers,
retries and framework adapters not covered before leave behind: LangGraph RemoveMessage and
trim_messages, summary buffers, AG2 tool_responses, CrewAI, Semantic Kernel, Haystack,
DSPy, smolagents, Mastra, Agno, OpenHands, Continue, Goose, the OpenAI Agents SDK, the
Vercel AI SDK, DeepSeek, Cursor-style clients. The upstream is the referee (OpenAI's rules,
or strict rules worded as OpenAI or Anthropic refuse), or a provider with its own quirk.

- Broken everywhere: answered 200, the repair named in ``x-gateway-repairs``, the upstream
  got a shape its rules take, no user text lost, untouched messages arrived as sent.
- Valid on OpenAI, refused by a strict provider: the client's bytes go first; after the
  refusal the strict rung repairs and names what it changed.
- Valid and unusual: the upstream receives the client's own bytes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from gateway.projection import EMPTY_TOOL_OUTPUT_TEXT, project, project_strict
from gateway.projection.asks import StrictAsks
from gateway.projection.project import project_with_call_ids
from gateway.projection.strict import TOOL_RESULTS_RECEIVED_TEXT
from gateway.referee import Referee
from gateway.referee.rules import find_problem
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes import picky_chat
from tests.fakes.picky_chat import PickyChat
from tests.projection.heldout_histories_3 import (
    AFTER_TOOLS,
    BROKEN,
    DEVELOPER,
    PICKY,
    REFUSED_BY_OPENAI,
    STRICT_ONLY,
    UP_FRONT,
    VALID,
    Msg,
)

UPSTREAM_MODEL = "referee"
EXTRA_FIELDS: dict[str, Any] = {"metadata": {"round": "3"}, "x_vendor": {"keep": [None, "é"]}}


def canonical(value: Any) -> str:
    """JSON text with key order kept: equal exactly when fields, order and values are."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def kinds_of(raw: Any) -> set[str]:
    """The anomaly kinds of ``x-gateway-repairs``."""
    return {item.split("=")[0] for item in raw.headers["x-gateway-repairs"].split(",")}


def texts(messages: list[Msg], role: str) -> list[str]:
    """The non-blank texts of the messages of ``role``."""
    out: list[str] = []
    for m in messages:
        if m.get("role") != role:
            continue
        content = m.get("content")
        parts = [content] if isinstance(content, str) else [
            p.get("text", "") for p in content if isinstance(p, dict)
        ] if isinstance(content, list) else []
        out.extend(t for t in parts if isinstance(t, str) and t.strip())
    return out


async def _gateway(factory: GatewayFactory, base_url: str) -> RunningGateway:
    return await factory({
        "model_list": [model_entry("agent", base_url, model=f"openai/{UPSTREAM_MODEL}")],
    })


def _client(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key", max_retries=0)


async def _ask(gw: RunningGateway, messages: list[Msg], **extra: Any) -> Any:
    async with _client(gw) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="agent", messages=messages, extra_body=extra or None)  # type: ignore[arg-type]
    assert raw.parse().choices[0].message.content
    return raw


@pytest.fixture(params=[("openai", "openai"), ("strict", "openai"), ("strict", "anthropic")],
                ids=["openai", "strict-openai", "strict-anthropic"])
async def referee(request: pytest.FixtureRequest) -> AsyncIterator[Referee]:
    rules, style = request.param
    async with Referee(rules=rules, style=style) as ref:
        yield ref


@pytest.fixture(params=["openai", "anthropic"])
async def strict_referee(request: pytest.FixtureRequest) -> AsyncIterator[Referee]:
    async with Referee(rules="strict", style=request.param) as ref:
        yield ref


@pytest.fixture
async def openai_referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as ref:
        yield ref


# --------------------------------------------------------------------------------------
# Broken everywhere.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_history_is_refused_as_sent_and_projected_valid(case: str) -> None:
    messages, kinds, _, _ = BROKEN[case]
    assert find_problem({"model": "m", "messages": messages}, "strict") is not None
    # (the server gives calls ids before projecting when results lack theirs)
    projection = project_with_call_ids(messages, False)
    assert set(projection.counts()) == kinds
    assert find_problem({"model": "m", "messages": projection.messages}, "openai") is None
    assert project(projection.messages).anomalies == ()  # idempotent
    strict = project_with_call_ids(messages, True)
    assert find_problem({"model": "m", "messages": strict.messages}, "strict") is None


@pytest.mark.parametrize("case", list(BROKEN))
async def test_broken_history_is_answered_with_the_repair_named(
    gateway_factory: GatewayFactory, referee: Referee, case: str,
) -> None:
    gw = await _gateway(gateway_factory, referee.base_url)
    messages, kinds, kept, _ = BROKEN[case]
    raw = await _ask(gw, messages, **EXTRA_FIELDS)
    if "x-gateway-recovery" in raw.headers:
        # A strict upstream refused project()'s output: the strict rung answered.
        assert referee.config.rules == "strict"
        assert raw.headers["x-gateway-recovery"].startswith("strict")
    else:
        assert kinds <= kinds_of(raw)
    sent = referee.requests[-1]
    assert sent.status == 200
    body = sent.json()
    assert find_problem(body, referee.config.rules) is None
    for key, value in EXTRA_FIELDS.items():
        assert body[key] == value, key
    upstream = "\n\n".join(texts(body["messages"], "user"))
    for text in texts(messages, "user"):
        assert text in upstream
    if referee.config.rules == "openai":
        assert "x-gateway-recovery" not in raw.headers
        assert raw.headers["x-gateway-attempts"] == "1"
        received = [canonical(m) for m in body["messages"]]
        for index in kept:
            assert canonical(messages[index]) in received, index


async def test_named_results_without_ids_answer_the_calls_in_order(
    gateway_factory: GatewayFactory, openai_referee: Referee,
) -> None:
    # CrewAI: two results name the same tool; each answers the next call of that name, so
    # every real output reaches the model instead of the synthetic "not available" text.
    gw = await _gateway(gateway_factory, openai_referee.base_url)
    messages = BROKEN["crewai named results without ids and a tool called twice"][0]
    raw = await _ask(gw, messages)
    assert "call_id_synthesized=3" in raw.headers["x-gateway-repairs"]
    sent = openai_referee.requests[-1].json()["messages"]
    assert [(m["tool_call_id"], m["content"]) for m in sent[3:]] == [
        ("call_cr1", "Europe: 3.2M"), ("call_cr2", "China: 11M"),
        ("call_cr3", "IEA: 17M worldwide")]


async def test_a_retried_result_keeps_its_newer_text(
    gateway_factory: GatewayFactory, openai_referee: Referee,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee.base_url)
    messages = BROKEN["mastra retried step wrote a newer result"][0]
    raw = await _ask(gw, messages)
    assert raw.headers["x-gateway-repairs"] == "duplicate_tool_result_dropped=1"
    sent = openai_referee.requests[-1].json()["messages"]
    assert sent == [*messages[:3], messages[4]]


async def test_ag2_tool_responses_text_answers_the_call(
    gateway_factory: GatewayFactory, openai_referee: Referee,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee.base_url)
    messages = BROKEN["ag2 raw tool_responses message without tool_call_id"][0]
    await _ask(gw, messages)
    sent = openai_referee.requests[-1].json()["messages"]
    assert sent[2] == {**messages[2], "tool_call_id": "call_ag2_w"}


# --------------------------------------------------------------------------------------
# Valid on OpenAI, refused by strict providers.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(STRICT_ONLY))
def test_strict_only_cases_are_valid_on_openai_and_refused_by_strict_rules(case: str) -> None:
    messages, kinds = STRICT_ONLY[case]
    assert find_problem({"model": "m", "messages": messages}, "openai") is None
    assert project(messages).anomalies == ()
    assert find_problem({"model": "m", "messages": messages}, "strict") is not None
    strict = project_strict(messages)
    assert kinds <= set(strict.counts())
    assert find_problem({"model": "m", "messages": strict.messages}, "strict") is None
    assert project_strict(strict.messages).anomalies == ()


@pytest.mark.parametrize("case", list(STRICT_ONLY))
async def test_strict_only_history_is_answered_after_one_refusal(
    gateway_factory: GatewayFactory, strict_referee: Referee, case: str,
) -> None:
    gw = await _gateway(gateway_factory, strict_referee.base_url)
    messages, kinds = STRICT_ONLY[case]
    raw = await _ask(gw, messages, **EXTRA_FIELDS)
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert kinds <= kinds_of(raw)
    first, last = strict_referee.requests[-2:]
    assert (first.status, last.status) == (400, 200)
    assert first.json()["messages"] == messages  # tried as sent first
    body = last.json()
    assert find_problem(body, "strict") is None
    for key, value in EXTRA_FIELDS.items():
        assert body[key] == value, key
    upstream = "\n\n".join(texts(body["messages"], "user"))
    for text in dict.fromkeys(texts(messages, "user")):
        assert text in upstream


@pytest.mark.parametrize("case", list(STRICT_ONLY))
async def test_strict_only_history_reaches_openai_as_the_clients_bytes(
    gateway_factory: GatewayFactory, openai_referee: Referee, case: str,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee.base_url)
    await _assert_bytes_unchanged(gw, openai_referee, {"model": "agent",
                                                       "messages": STRICT_ONLY[case][0]})


async def test_an_empty_tool_output_says_so_on_a_strict_upstream(
    gateway_factory: GatewayFactory, strict_referee: Referee,
) -> None:
    gw = await _gateway(gateway_factory, strict_referee.base_url)
    messages = STRICT_ONLY["tool printed only a newline"][0]
    await _ask(gw, messages)
    sent = strict_referee.requests[-1].json()["messages"]
    assert sent[2] == {"role": "tool", "tool_call_id": "call_echo",
                       "content": EMPTY_TOOL_OUTPUT_TEXT}


# --------------------------------------------------------------------------------------
# Refused by OpenAI on a message name.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(REFUSED_BY_OPENAI))
async def test_names_openai_refuses_are_rewritten_on_the_strict_rung(
    gateway_factory: GatewayFactory, openai_referee: Referee, case: str,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee.base_url)
    messages, kinds = REFUSED_BY_OPENAI[case]
    raw = await _ask(gw, messages)
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert kinds <= kinds_of(raw)
    first, last = openai_referee.requests[-2:]
    assert (first.status, last.status) == (400, 200)
    sent = last.json()["messages"]
    assert [m["content"] for m in sent] == [m["content"] for m in messages]


def test_names_in_scripts_without_latin_letters_stay_apart() -> None:
    # "用户" and "诗人" both became "__": the model could no longer tell the speakers
    # apart. Each name keeps its own valid spelling, the same on every turn.
    messages = REFUSED_BY_OPENAI["autogen agents named in chinese"][0]
    names = [m["name"] for m in project_strict(messages).messages]
    assert names[0] == names[2] != names[1]
    assert find_problem({"model": "m", "messages": project_strict(messages).messages},
                        "openai") is None
    later = project_strict([*messages, {"role": "assistant", "content": "夜来风雨声",
                                        "name": "诗人"}])
    assert later.messages[-1]["name"] == names[1]  # the same speaker, the same name


# --------------------------------------------------------------------------------------
# Valid and unusual: the client's bytes.
# --------------------------------------------------------------------------------------


async def _assert_bytes_unchanged(gw: RunningGateway, referee: Referee,
                                  body: dict[str, Any]) -> None:
    # Python's json.dumps (non-ASCII escaped, spaces) with the model last, where the
    # gateway splices the upstream's model name into the client's own bytes.
    ordered = {**{k: v for k, v in body.items() if k != "model"}, "model": "agent"}
    raw = json.dumps(ordered).encode()
    expected = raw.replace(b'"model": "agent"}', f'"model": "{UPSTREAM_MODEL}"}}'.encode())
    async with httpx.AsyncClient(timeout=30) as http:
        resp = await http.post(f"{gw.base_url}/chat/completions", content=raw,
                               headers={"content-type": "application/json",
                                        "authorization": "Bearer client-key"})
    assert resp.status_code == 200, resp.text
    assert "x-gateway-repairs" not in resp.headers
    assert resp.headers.get("x-gateway-attempts") == "1"
    received = referee.requests[-1]
    assert received.status == 200
    assert received.body == expected


@pytest.mark.parametrize("case", list(VALID))
def test_valid_cases_are_valid_and_project_unchanged(case: str) -> None:
    messages = VALID[case]["messages"]
    assert find_problem(VALID[case], "openai") is None
    projection = project(messages)
    assert projection.anomalies == ()
    assert canonical(projection.messages) == canonical(messages)


@pytest.mark.parametrize("case", list(VALID))
async def test_valid_history_reaches_the_upstream_as_the_clients_bytes(
    gateway_factory: GatewayFactory, openai_referee: Referee, case: str,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee.base_url)
    await _assert_bytes_unchanged(gw, openai_referee, VALID[case])


# --------------------------------------------------------------------------------------
# A provider's own refusal.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(PICKY))
async def test_a_providers_own_refusal_is_repaired_on_the_strict_rung(
    gateway_factory: GatewayFactory, case: str,
) -> None:
    quirk, messages, kinds = PICKY[case]
    async with PickyChat([getattr(picky_chat, quirk)]) as upstream:
        gw = await _gateway(gateway_factory, upstream.base_url)
        raw = await _ask(gw, messages, **EXTRA_FIELDS)
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert kinds <= kinds_of(raw)
    assert upstream.statuses[-2:] == [400, 200]
    assert upstream.bodies[-2]["messages"] == messages  # tried as sent first
    body = upstream.bodies[-1]
    for key, value in EXTRA_FIELDS.items():
        assert body[key] == value, key
    assert [texts(body["messages"], r) for r in ("user", "tool")] == [
        texts(messages, r) for r in ("user", "tool")]
    # Instructions stay instructions, in their place.
    assert texts(body["messages"], "system") == [
        t for m in messages if m["role"] in ("system", "developer")
        for t in texts([{**m, "role": "system"}], "system")]


@pytest.mark.parametrize("quirk", [picky_chat.no_developer_role_new_api,
                                   picky_chat.no_developer_role_deepseek])
@pytest.mark.parametrize("case", list(DEVELOPER))
def test_developer_messages_go_as_system_when_the_refusal_names_the_role(
    case: str, quirk: picky_chat.Quirk,
) -> None:
    messages = DEVELOPER[case]
    assert quirk({"model": "m", "messages": messages}) is not None  # refused as sent
    assert find_problem({"model": "m", "messages": messages}, "openai") is None
    assert quirk({"model": "m", "messages": project_strict(messages).messages}) is not None
    converted = project_strict(messages, asks=StrictAsks(developer_role=True))
    assert quirk({"model": "m", "messages": converted.messages}) is None
    assert find_problem({"model": "m", "messages": converted.messages}, "strict") is None
    developers = [i for i, m in enumerate(messages) if m["role"] == "developer"]
    assert [(a.kind, a.index) for a in converted.anomalies] == [
        ("developer_role_converted", i) for i in developers]
    # The same instructions in the same place; nothing else changed.
    assert converted.messages == [{**m, "role": "system"} if m["role"] == "developer" else m
                                  for m in messages]
    assert project_strict(converted.messages, asks=StrictAsks(developer_role=True)).anomalies == ()


# --------------------------------------------------------------------------------------
# Refused by every provider: repaired before the first attempt.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(UP_FRONT))
async def test_what_every_provider_refuses_is_repaired_up_front(
    gateway_factory: GatewayFactory, referee: Referee, case: str,
) -> None:
    messages, kinds, repaired = UP_FRONT[case]
    assert find_problem({"model": "m", "messages": messages}, "openai") is not None
    gw = await _gateway(gateway_factory, referee.base_url)
    raw = await _ask(gw, messages, **EXTRA_FIELDS)
    assert kinds <= kinds_of(raw)
    sent = referee.requests[-1]
    assert sent.status == 200
    body = sent.json()
    assert find_problem(body, referee.config.rules) is None
    for key, value in EXTRA_FIELDS.items():
        assert body[key] == value, key
    if "x-gateway-recovery" not in raw.headers:  # (a strict upstream may refuse "" text)
        assert raw.headers["x-gateway-attempts"] == "1"
        expected = [repaired.get(i, m) for i, m in enumerate(messages)]
        assert body["messages"] == expected  # only the repaired messages changed


def test_only_the_final_assistant_texts_trailing_whitespace_is_trimmed() -> None:
    messages = PICKY["aider prefill ending in a newline to claude behind a proxy"][1]
    assert project(messages).anomalies == ()  # as sent until a refusal
    strict = project_strict(messages)
    assert strict.messages == [*messages[:2], {
        "role": "assistant", "content": "cli.py\n```python\n<<<<<<< SEARCH"}]
    assert strict.counts() == {"trailing_whitespace_trimmed": 1}
    assert project_strict(strict.messages).anomalies == ()
    # Not a prefill: an answer before the user's turn, or a turn that calls tools.
    answered = [*messages, {"role": "user", "content": "go on "}]
    assert project_strict(answered).messages == answered
    calling = [messages[1], {"role": "assistant", "content": "Reading. ", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}]
    assert "trailing_whitespace_trimmed" not in project_strict(calling).counts()


@pytest.mark.parametrize("case", list(AFTER_TOOLS))
def test_an_assistant_turn_goes_after_tool_results_when_the_refusal_asks_for_one(
    case: str,
) -> None:
    messages = AFTER_TOOLS[case]
    refused = picky_chat.mistral_message_order
    assert refused({"model": "m", "messages": project(messages).messages}) is not None
    assert refused({"model": "m", "messages": project_strict(messages).messages}) is not None
    fixed = project_strict(messages, asks=StrictAsks(tools_then_assistant=True))
    assert refused({"model": "m", "messages": fixed.messages}) is None
    assert find_problem({"model": "m", "messages": fixed.messages}, "strict") is None
    assert fixed.counts()["assistant_turn_inserted"] == 1
    at = next(i for i, m in enumerate(fixed.messages) if m.get("content")
              == TOOL_RESULTS_RECEIVED_TEXT)
    assert fixed.messages[at - 1]["role"] == "tool"
    assert fixed.messages[at] == {"role": "assistant", "content": TOOL_RESULTS_RECEIVED_TEXT}
    # Nothing else is added or lost: the same messages around the inserted turn.
    assert fixed.messages[:at] + fixed.messages[at + 1:] == project_strict(messages).messages
    again = project_strict(fixed.messages, asks=StrictAsks(tools_then_assistant=True))
    assert again.anomalies == ()


@pytest.mark.parametrize("quirk", ["no_developer_role_new_api", "no_developer_role_deepseek"])
@pytest.mark.parametrize("case", list(DEVELOPER))
async def test_a_refused_developer_role_is_answered_with_system_messages(
    gateway_factory: GatewayFactory, case: str, quirk: str,
) -> None:
    messages = DEVELOPER[case]
    async with PickyChat([getattr(picky_chat, quirk)]) as upstream:
        gw = await _gateway(gateway_factory, upstream.base_url)
        raw = await _ask(gw, messages, **EXTRA_FIELDS)
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert "developer_role_converted" in kinds_of(raw)
    assert upstream.statuses == [400, 200]
    assert upstream.bodies[0]["messages"] == messages  # tried as sent first
    assert upstream.bodies[1]["messages"] == [
        {**m, "role": "system"} if m["role"] == "developer" else m for m in messages]
    for key, value in EXTRA_FIELDS.items():
        assert upstream.bodies[1][key] == value, key


@pytest.mark.parametrize("case", list(AFTER_TOOLS))
async def test_mistral_gets_an_assistant_turn_after_tool_results(
    gateway_factory: GatewayFactory, case: str,
) -> None:
    messages = AFTER_TOOLS[case]
    async with PickyChat([picky_chat.mistral_message_order]) as upstream:
        gw = await _gateway(gateway_factory, upstream.base_url)
        raw = await _ask(gw, messages, **EXTRA_FIELDS)
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert "assistant_turn_inserted" in kinds_of(raw)
    assert upstream.statuses[-2:] == [400, 200]
    sent = upstream.bodies[-1]["messages"]
    assert picky_chat.mistral_message_order({"messages": sent}) is None
    assert {"role": "assistant", "content": TOOL_RESULTS_RECEIVED_TEXT} in sent
    assert texts(sent, "user") == texts(messages, "user")
