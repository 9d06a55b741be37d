"""Round 4 of broken Chat Completions histories, through the real ``openai`` SDK.

The histories (tests/projection/heldout_histories_4.py) are the messy shapes real clients
write: results named but without ids, legacy ``function`` messages beside tool calls,
calls without ``type`` or with object arguments, ``tool_calls: []``, refusal and audio on
assistant turns, a ``developer`` message mid-thread, named users, ids reused across turns,
ids too long or with emoji, results of two turns ago, and what trimmers, summarizers and
retry loops leave. The upstream is the referee (OpenAI's rules, or strict rules worded as
OpenAI or Anthropic refuse) or a provider with its own quirk (Mistral's nine-character ids,
a template demanding alternating roles, vLLM's JSON arguments, OpenAI's id lengths).

- Broken everywhere: answered 200 in one attempt on OpenAI, the repair named in
  ``x-gateway-repairs``, untouched messages as sent, no user text lost.
- Valid on OpenAI, refused by strict providers: the client's bytes go first; after the
  refusal the strict rung repairs and names what it changed.
- Valid and unusual: the upstream receives the client's own bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from itertools import pairwise
from typing import Any

import httpx
import openai
import pytest

from gateway.projection import project, project_strict
from gateway.projection.asks import StrictAsks
from gateway.projection.incremental import TurnLayouts
from gateway.projection.project import project_with_call_ids
from gateway.referee import Referee
from gateway.referee.rules import find_problem
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes import picky_chat
from tests.fakes.picky_chat import PickyChat
from tests.projection.heldout_histories_4 import (
    BROKEN,
    ON_REFUSAL,
    PICKY,
    STRICT_ONLY,
    UP_FRONT,
    VALID,
    Msg,
)

UPSTREAM_MODEL = "referee"
EXTRA_FIELDS: dict[str, Any] = {"metadata": {"round": "4"}, "x_vendor": {"keep": [1.5, "ü"]}}
NINE = re.compile(r"[A-Za-z0-9]{9}")


def mistral_nine_alnum_ids(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """Mistral's API (and vLLM's Mistral template): every call id nine letters and digits."""
    for message in body.get("messages", []):
        ids = [c.get("id") for c in message.get("tool_calls") or ()]
        if message.get("role") == "tool":
            ids.append(message.get("tool_call_id"))
        for cid in ids:
            if not (isinstance(cid, str) and NINE.fullmatch(cid)):
                return 400, {"object": "error", "message": f"Tool call id was {cid} but must "
                             "be a-z, A-Z, 0-9, with a length of 9.",
                             "type": "invalid_request_message_order", "param": None,
                             "code": "3280"}
    return None


def alternating_roles(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """A Mistral chat template on vLLM/TGI: after the system message, user and assistant
    turns alternate (tool messages aside)."""
    turns = [m.get("role") for m in body.get("messages", [])
             if m.get("role") in ("user", "assistant")]
    if any(a == b for a, b in pairwise(turns)):
        return 400, {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
                     "message": "After the optional system message, conversation roles must "
                                "alternate user/assistant/user/assistant/..."}
    return None


QUIRKS: dict[str, picky_chat.Quirk] = {
    "mistral_nine_alnum_ids": mistral_nine_alnum_ids,
    "alternating_roles": alternating_roles,
    "openai_call_id_limits": picky_chat.openai_call_id_limits,
    "vllm_json_arguments": picky_chat.vllm_json_arguments,
}


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


async def _ask(gw: RunningGateway, messages: list[Msg], **extra: Any) -> Any:
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as client:
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
    messages, kinds, kept, _ = BROKEN[case]
    assert find_problem({"model": "m", "messages": messages}, "strict") is not None
    projection = project_with_call_ids(messages, False)
    assert set(projection.counts()) == kinds
    assert find_problem({"model": "m", "messages": projection.messages}, "openai") is None
    out = [canonical(m) for m in projection.messages]
    for index in kept:
        assert canonical(messages[index]) in out, index
    assert project(projection.messages).anomalies == ()  # idempotent
    strict = project_with_call_ids(messages, True)
    assert find_problem({"model": "m", "messages": strict.messages}, "strict") is None
    assert project_strict(strict.messages).anomalies == ()


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
        assert kinds_of(raw) == kinds  # only the real repairs are named
        received = [canonical(m) for m in body["messages"]]
        for index in kept:
            assert canonical(messages[index]) in received, index


async def test_results_of_two_turns_ago_go_back_after_their_call(
    gateway_factory: GatewayFactory, openai_referee: Referee,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee.base_url)
    messages = BROKEN["langgraph interrupt resumed results of two turns ago"][0]
    raw = await _ask(gw, messages)
    assert raw.headers["x-gateway-repairs"] == "tool_result_reordered=1"
    sent = openai_referee.requests[-1].json()["messages"]
    assert sent == [messages[0], messages[1], messages[5], messages[2], messages[3],
                    messages[4]]


async def test_named_results_without_ids_keep_their_real_output(
    gateway_factory: GatewayFactory, openai_referee: Referee,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee.base_url)
    messages = BROKEN["n8n memory replay results named without ids"][0]
    raw = await _ask(gw, messages)
    assert raw.headers["x-gateway-repairs"] == "call_id_synthesized=1"
    sent = openai_referee.requests[-1].json()["messages"]
    assert sent[3] == {**messages[3], "tool_call_id": "call_n8n_cal"}


# --------------------------------------------------------------------------------------
# Valid on OpenAI, refused by strict providers.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(STRICT_ONLY))
def test_strict_only_cases_are_valid_on_openai_and_refused_by_strict_rules(case: str) -> None:
    messages, kinds = STRICT_ONLY[case]
    assert find_problem({"model": "m", "messages": messages}, "openai") is None
    assert project(messages).anomalies == ()
    assert project(messages).messages == messages
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
    assert raw.headers["x-gateway-attempts"] == "2"
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


# --------------------------------------------------------------------------------------
# Valid and unusual: the client's bytes.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(VALID))
def test_valid_cases_are_valid_and_project_unchanged(case: str) -> None:
    messages = VALID[case]["messages"]
    assert find_problem(VALID[case], "openai") is None
    projection = project_with_call_ids(messages, False)
    assert projection.anomalies == ()
    assert canonical(projection.messages) == canonical(messages)


@pytest.mark.parametrize("case", list(VALID))
async def test_valid_history_reaches_the_upstream_as_the_clients_bytes(
    gateway_factory: GatewayFactory, openai_referee: Referee, case: str,
) -> None:
    gw = await _gateway(gateway_factory, openai_referee.base_url)
    # Python's json.dumps (non-ASCII escaped, spaces) with the model last, where the
    # gateway splices the upstream's model name into the client's own bytes.
    body = {"messages": VALID[case]["messages"], "model": "agent"}
    raw = json.dumps(body).encode()
    expected = raw.replace(b'"model": "agent"}', f'"model": "{UPSTREAM_MODEL}"}}'.encode())
    async with httpx.AsyncClient(timeout=30) as http:
        resp = await http.post(f"{gw.base_url}/chat/completions", content=raw,
                               headers={"content-type": "application/json",
                                        "authorization": "Bearer client-key"})
    assert resp.status_code == 200, resp.text
    assert "x-gateway-repairs" not in resp.headers
    assert resp.headers.get("x-gateway-attempts") == "1"
    received = openai_referee.requests[-1]
    assert received.status == 200
    assert received.body == expected


# --------------------------------------------------------------------------------------
# A provider's own refusal.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(PICKY))
def test_a_providers_refusal_is_met_by_the_strict_projection_it_asks_for(case: str) -> None:
    quirk_name, messages, _ = PICKY[case]
    quirk = QUIRKS[quirk_name]
    assert find_problem({"model": "m", "messages": messages}, "openai") is None
    assert project(messages).anomalies == ()
    assert quirk({"model": "m", "messages": messages}) is not None


@pytest.mark.parametrize("case", list(PICKY))
async def test_a_providers_own_refusal_is_repaired_on_the_strict_rung(
    gateway_factory: GatewayFactory, case: str,
) -> None:
    quirk_name, messages, kinds = PICKY[case]
    async with PickyChat([QUIRKS[quirk_name]]) as upstream:
        gw = await _gateway(gateway_factory, upstream.base_url)
        raw = await _ask(gw, messages, **EXTRA_FIELDS)
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert raw.headers["x-gateway-attempts"] == "2"
    assert kinds <= kinds_of(raw)
    assert upstream.statuses == [400, 200]
    assert upstream.bodies[0]["messages"] == messages  # tried as sent first
    body = upstream.bodies[1]
    assert QUIRKS[quirk_name](body) is None
    assert find_problem(body, "openai") is None
    for key, value in EXTRA_FIELDS.items():
        assert body[key] == value, key
    assert [texts(body["messages"], r) for r in ("user", "tool", "system")] == [
        texts(messages, r) for r in ("user", "tool", "system")]


def test_rewritten_ids_pair_the_same_call_and_result() -> None:
    messages = PICKY["emoji in a call id to vllm serving mistral"][1]
    fixed = project_strict(messages, asks=StrictAsks(call_ids="nine_alnum")).messages
    cid = fixed[1]["tool_calls"][0]["id"]
    assert NINE.fullmatch(cid)
    assert fixed[2] == {**messages[2], "tool_call_id": cid}


# --------------------------------------------------------------------------------------
# Refused by every provider: repaired before the first attempt.
# --------------------------------------------------------------------------------------


def _expected(messages: list[Msg], repaired: dict[int, Msg | None]) -> list[Msg]:
    out = [repaired.get(i, m) for i, m in enumerate(messages)]
    return [m for m in out if m is not None]


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
    if referee.config.rules == "openai":
        assert raw.headers["x-gateway-attempts"] == "1"
        assert kinds_of(raw) == kinds  # only the real repairs are named
        assert body["messages"] == _expected(messages, repaired)


# --------------------------------------------------------------------------------------
# Refused by every provider, repaired by the strict rung.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(ON_REFUSAL))
def test_what_the_strict_rung_repairs_is_left_as_sent_by_project(case: str) -> None:
    messages, kinds = ON_REFUSAL[case]
    assert find_problem({"model": "m", "messages": messages}, "openai") is not None
    assert project(messages).messages == messages
    strict = project_strict(messages)
    assert set(strict.counts()) == kinds
    assert find_problem({"model": "m", "messages": strict.messages}, "strict") is None


@pytest.mark.parametrize("case", list(ON_REFUSAL))
async def test_what_every_provider_refuses_is_answered_on_the_strict_rung(
    gateway_factory: GatewayFactory, referee: Referee, case: str,
) -> None:
    messages, kinds = ON_REFUSAL[case]
    gw = await _gateway(gateway_factory, referee.base_url)
    raw = await _ask(gw, messages, **EXTRA_FIELDS)
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert raw.headers["x-gateway-attempts"] == "2"
    assert kinds <= kinds_of(raw)
    first, last = referee.requests[-2:]
    assert (first.status, last.status) == (400, 200)
    assert first.json()["messages"] == messages  # tried as sent first
    body = last.json()
    assert find_problem(body, referee.config.rules) is None
    for key, value in EXTRA_FIELDS.items():
        assert body[key] == value, key


# --------------------------------------------------------------------------------------
# A legacy function message as a tool call's result.
# --------------------------------------------------------------------------------------


def test_a_function_message_answers_only_an_unanswered_call_of_its_name() -> None:
    messages = UP_FRONT["legacy function message mixed with tool calls"][0]
    # The call answered by its tool result already: the function message is valid as sent.
    answered = [*messages[:2], {"role": "tool", "tool_call_id": "call_mx_w", "content": "18"},
                *messages[2:]]
    assert find_problem({"model": "m", "messages": answered}, "openai") is None
    assert project(answered).messages == answered
    assert project(answered).anomalies == ()
    # Another function's name answers nothing: the call gets its stand-in, the message stays.
    other = [*messages[:2], {**messages[2], "name": "convert"}, messages[3]]
    projected = project(other)
    assert projected.counts() == {"tool_result_synthesized": 1}
    assert {**messages[2], "name": "convert"} in projected.messages


def test_a_later_turn_over_the_previous_layout_keeps_the_function_repair() -> None:
    messages = UP_FRONT["legacy function message mixed with tool calls"][0]
    first = TurnLayouts()
    assert first.project(messages).counts() == {"function_call_converted": 1}
    later = [*messages, {"role": "assistant", "content": "64.4°F."},
             {"role": "user", "content": "Thanks."}]
    again = TurnLayouts(first.current).project(later)
    assert again.messages == project(later).messages
    assert again.anomalies == project(later).anomalies
    assert again.counts() == {"function_call_converted": 1}
    # A function message arriving in a later turn answers a call of the earlier one.
    split = TurnLayouts()
    split.project(messages[:2])
    whole = TurnLayouts(split.current).project(messages)
    assert whole.messages == project(messages).messages
    assert whole.counts() == {"function_call_converted": 1}
