"""The client's bytes go upstream unchanged when nothing was repaired (the model name spliced
in when renamed); everything else is serialized from the projected body."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.providers.splice import (
    MESSAGES_SENTINEL,
    SkeletonCache,
    client_bytes,
    exact_integers,
    splice_trailing_model,
    with_client_history,
    with_messages_json,
)
from gateway.referee import Referee
from tests.conftest import GatewayFactory, model_entry
from tests.factories import calls, tool, user


def parsed(raw: bytes) -> tuple[dict[str, Any], list[Any]]:
    body = orjson.loads(raw)
    return body, body["messages"]


def upstream(client: dict[str, Any], model: str, messages: list[Any]) -> dict[str, Any]:
    body = dict(client)
    body["model"] = model
    body["messages"] = messages
    return body


def test_same_model_sends_the_client_bytes() -> None:
    raw = b'{ "model" : "m",\n "messages": [{"role": "user", "content": "caf\\u00e9"}], "x": 1}'
    client, messages = parsed(raw)
    assert client_bytes(raw, client, upstream(client, "m", messages), messages) is raw


@pytest.mark.parametrize("raw", [
    b'{"messages": [{"role": "user", "content": "hi"}], "model": "alias"}',
    b'{"messages": [], "temperature": 0, "model" :  "alias" }\n',
    b'{"messages":[],"model":"alias"}',
])
def test_a_trailing_model_is_spliced(raw: bytes) -> None:
    client, messages = parsed(raw)
    out = client_bytes(raw, client, upstream(client, "up/model-1", messages), messages)
    assert out is not None
    assert orjson.loads(out) == {**client, "model": "up/model-1"}
    assert out.replace(b'"up/model-1"', b'"alias"') == raw


@pytest.mark.parametrize("raw", [
    # not the last member: finding it would need a scan of the whole body
    b'{"model": "alias", "messages": []}',
    # the last member is a key that merely ends in model (escaped quote inside the key)
    b'{"model": "alias", "messages": [], "say \\"model": "alias"}',
    # the model spelled with an escape
    b'{"messages": [], "model": "\\u0061lias"}',
    # "model": "alias" at the end of a nested object, not the top-level one
    b'{"model": "alias", "messages": [], "meta": {"model": "alias"}}',
])
def test_no_splice_unless_provably_the_top_level_member(raw: bytes) -> None:
    client, messages = parsed(raw)
    assert client_bytes(raw, client, upstream(client, "up", messages), messages) is None
    assert splice_trailing_model(raw, "alias", "up") is None


def test_any_other_change_is_serialized() -> None:
    raw = b'{"messages": [], "model": "m"}'
    client, messages = parsed(raw)
    assert client_bytes(raw, client, {**upstream(client, "m", messages), "k": 1}, messages) is None
    assert client_bytes(raw, client, upstream(client, "m", []), messages) is None
    tools = {**client, "tools": []}
    assert client_bytes(raw, tools, upstream(client, "m", messages), messages) is None


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as ref:
        yield ref


async def test_valid_requests_reach_the_upstream_byte_for_byte(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await gateway_factory({"model_list": [
        model_entry("same", referee.base_url, model="openai/same"),
        model_entry("alias", referee.base_url, model="openai/upstream-name"),
    ]})
    history = [user("read"), calls("call_1"), tool("call_1", "done ✓"), user("thanks")]
    # Key order, spacing and escapes of the client's own serializer, and unknown fields.
    same = json.dumps({"messages": history, "model": "same", "x_vendor": {"a": [1.50]}},
                      indent=1).encode()
    aliased = json.dumps({"messages": history, "temperature": 0, "model": "alias"}).encode()
    broken = json.dumps({"messages": [*history[:2], user("next")], "model": "same"}).encode()
    async with aiohttp.ClientSession() as s:
        for raw in (same, aliased, broken):
            async with s.post(f"{gw.base_url}/chat/completions", data=raw,
                              headers={"Content-Type": "application/json"}) as r:
                assert r.status == 200, await r.text()
    got = [r.body for r in referee.requests]
    assert got[0] == same
    assert got[1] == aliased.replace(b'"model": "alias"', b'"model": "upstream-name"')
    # A repaired history is the projected body, serialized.
    repaired = json.loads(got[2])
    assert [m["role"] for m in repaired["messages"]] == ["user", "assistant", "tool", "user"]
    assert repaired["model"] == "same"


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(fields=st.dictionaries(st.text(max_size=6), _VALUES, max_size=5),
       messages=st.lists(st.dictionaries(st.text(max_size=4), _VALUES, max_size=3), max_size=4),
       at=st.integers(0, 5))
def test_messages_json_spliced_into_the_rest_is_the_whole_body(
        fields: dict[str, Any], messages: list[Any], at: int) -> None:
    items = list(fields.items())
    items.insert(min(at, len(items)), ("messages", messages))
    body = dict(items)  # "messages" anywhere among the fields (or replacing one of them)
    body["messages"] = messages
    assert with_messages_json(body, (orjson.dumps(messages),)) == orjson.dumps(body)
    cache = SkeletonCache()
    for _ in range(2):  # serialized, then found again: the same bytes both times
        assert with_messages_json(body, (orjson.dumps(messages),), cache) == orjson.dumps(body)


def test_kept_skeletons_follow_the_values_of_the_body() -> None:
    tools = [{"type": "function", "function": {"name": "read", "parameters": {}}}]
    cache = SkeletonCache(size=2)
    first = {"model": "m", "messages": [], "tools": tools, "temperature": 1}
    later = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools,
             "temperature": 1}  # the next turn: its own dict, the same tools object
    assert cache.json_of(first) is cache.json_of(later)
    # A new value (another object, another scalar, True for 1, another model) is serialized
    # again, never answered with the kept bytes.
    edited = [{**tools[0], "function": {"name": "write", "parameters": {}}}]
    for changed in ({"tools": edited}, {"temperature": 2}, {"temperature": True},
                    {"model": "n"}):
        body = {**later, **changed}
        sentinel_body = {**body, "messages": MESSAGES_SENTINEL}
        assert cache.json_of(body) == orjson.dumps(sentinel_body)
    assert len(cache._entries) == 2  # bounded: the least recently used went first


def test_integers_past_64_bits_are_written_back_as_the_client_wrote_them() -> None:
    sent = (b'{"model": "a", "seed": 123456789012345678901234567890, "ids": '
            b'[18446744073709551616, -9223372036854775809, 9223372036854775807], '
            b'"note": "12345678901234567890123", "x": 1.5e+30}')
    out = orjson.dumps({**orjson.loads(sent), "model": "b"})
    assert b"e+29" in out  # what orjson alone writes
    assert exact_integers(sent, out) == (
        b'{"model":"b","seed":123456789012345678901234567890,"ids":[18446744073709551616,'
        b'-9223372036854775809,9223372036854775807],"note":"12345678901234567890123",'
        b'"x":1.5e+30}')
    plain = orjson.dumps({"model": "b", "n": 3})
    assert exact_integers(b'{"model": "a", "n": 3}', plain) is plain  # nothing to restore


@pytest.mark.parametrize("filler", ["the reviewer wrote e+ and x+y here. ", "thé — café+ ",
                                    "an exponent in text: 1e+5 "])
def test_integers_past_64_bits_are_restored_in_a_history_sized_body(filler: str) -> None:
    # A body past the vectorized search's threshold, its text full of "e" and "e+".
    history = [{"role": "user", "content": filler * 40} for _ in range(20)]
    sent = (orjson.dumps({"model": "a", "messages": history})[:-1]
            + b', "seed": 123456789012345678901234567890}')  # (as a client writes it)
    assert len(sent) > 8192
    out = orjson.dumps({**orjson.loads(sent), "model": "b"})
    assert b'"seed":1.2345678901234568e+29' in out
    restored = exact_integers(sent, out)
    assert b'"seed":123456789012345678901234567890}' in restored
    assert orjson.loads(restored)["messages"] == history
    plain = orjson.dumps({"model": "b", "messages": history, "seed": 7})
    assert exact_integers(orjson.dumps({"model": "a", "messages": history, "seed": 7}),
                          plain) is plain  # nothing to restore: the body itself


@pytest.mark.parametrize("seed", [b"7", b"123456789012345678901234567890"])
def test_a_renamed_model_around_the_clients_history_keeps_every_integer(seed: bytes) -> None:
    """The body serialized around the client's own history bytes (a renamed model that
    cannot be spliced in): an integer past 64 bits among the other fields is written back
    as sent, and the history's own numbers (an exponent the client wrote, a huge integer in
    a tool call) stay byte for byte, whether or not the rest needed that."""
    history = (b'[{"role":"user","content":"big: 98765432109876543210987654321"},'
               b'{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":'
               b'"function","function":{"name":"f","arguments":"{\\"n\\": 1e+5}"}}]},'
               b'{"role":"tool","tool_call_id":"c","content":"ok"}]')
    sent = b'{"messages": ' + history + b', "model": "a", "seed": ' + seed + b', "n": 1}'
    body = {**orjson.loads(sent), "model": "b"}
    written = memoryview(sent)[len(b'{"messages": '):len(b'{"messages": ') + len(history)]
    out = with_client_history(sent, body, written, SkeletonCache())
    assert history in out
    assert out.endswith(b',"model":"b","seed":' + seed + b',"n":1}')
    assert json.loads(out) == json.loads(sent.replace(b'"model": "a"', b'"model": "b"'))
