"""Reading a body over the one its client sent before gives what reading it whole gives.

Every turn goes through the gateway's own sequence (read, parse when nothing was read,
validate, learn) and is checked against the slow path: the same body (keys in the same
order), the same messages and KnownHistory, or the same ClientError.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.compaction.session_view import KnownHistory, media_parts
from gateway.errors import ClientError
from gateway.projection import project, project_strict
from gateway.projection.fastpath import is_clean
from gateway.projection.lazy_messages import last_value_end
from gateway.server.seen import (
    Reading,
    SeenBodies,
    _value_end,
)
from gateway.sessions.hashing import session_fingerprint
from gateway.wires.chat_typed import _MESSAGES_KEY
from gateway.wires.chat_validation import MAX_JSON_DEPTH, parse_json_object, validate_chat_body
from tests.factories import assistant, calls, image_part, system, text_part, tool, tool_call, user
from tests.projection.histories import broken_histories, valid_histories

MB16 = 16 * 1024 * 1024
OWNER = "client-a"
PROMPT = system("You are a careful coding agent: read the code, then answer. " * 2)
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
TRICKY = ["é", "\u2028", "\u2029", '"', "\\", "]", "}", '"messages": [', ']}, "x": {', "😀",
          "\\u0000", "\x00", "\t\n", "],", "{\"role\": \"user\"}"]


def read_like_the_gateway(seen: SeenBodies, raw: bytes, owner: str | None,
                          readings: list[Reading | None] | None = None,
                          ) -> tuple[Reading | None, dict[str, Any], list[Any], KnownHistory]:
    """The sequence of routes.chat_completions (``readings`` records the read, if given)."""
    reading = seen.read(raw, owner)
    if readings is not None:
        readings.append(reading)
    body = reading.body if reading else parse_json_object(raw)
    messages = validate_chat_body(body, checked=reading.checked if reading else 0,
                                  fields_checked=reading is not None
                                  and reading.fields is reading.seen.fields)
    known = seen.learn(raw, owner, body, messages, reading)
    return reading, body, messages, known


def known_of(messages: list[Any]) -> KnownHistory:
    return KnownHistory(is_clean(messages), media_parts(messages), session_fingerprint(messages))


def _outcome(read: Callable[[], tuple[dict[str, Any], list[Any], KnownHistory]]) -> tuple[Any, ...]:
    try:
        body, messages, known = read()
    except ClientError as err:
        return ("error", err.status, err.message, err.code, err.param)
    assert messages is body["messages"]
    return ("ok", body, list(body), messages, known)


def _slow(raw: bytes) -> tuple[dict[str, Any], list[Any], KnownHistory]:
    body = parse_json_object(raw)
    messages = validate_chat_body(body)
    return body, messages, known_of(messages)


def check(seen: SeenBodies, raw: bytes, owner: str | None = OWNER) -> Reading | None:
    """Send ``raw`` through the gateway sequence; assert it gives what the slow path gives."""
    readings: list[Reading | None] = []

    def fast() -> tuple[dict[str, Any], list[Any], KnownHistory]:
        _, body, messages, known = read_like_the_gateway(seen, raw, owner, readings)
        return body, messages, known

    got = _outcome(fast)
    assert got == _outcome(lambda: _slow(raw))
    if got[0] == "ok":
        assert got[1] == orjson.loads(raw)
        assert got[2] == list(orjson.loads(raw))
        assert got[4] == known_of(orjson.loads(raw)["messages"])
    return readings[0] if readings else None


def chat(messages: list[Any], **fields: Any) -> dict[str, Any]:
    return {"model": "agent", "messages": messages, **fields}


def dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


# -- property: turns of one conversation, serialized the ways clients do -------------------


def _orjson(body: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits: sent as the float it reads as
        return orjson.dumps(orjson.loads(json.dumps(body)))


SERIALIZERS: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "json": dumps,
    "compact": lambda b: json.dumps(b, separators=(",", ":")).encode(),
    "orjson": _orjson,
    "indent": lambda b: json.dumps(b, indent=2).encode(),
    "utf8": lambda b: json.dumps(b, ensure_ascii=False).encode(),
}
_tricky_text = st.lists(st.sampled_from(TRICKY) | st.text(min_size=1, max_size=4),
                        min_size=1, max_size=4).map(lambda parts: "x" + "".join(parts))
_tricky_message = st.one_of(
    _tricky_text.map(user),
    _tricky_text.map(assistant),
    _tricky_text.map(lambda t: user([text_part(t), image_part()])),
    _tricky_text.map(lambda t: system(t, name=t)),
)
_odd_message = st.sampled_from([
    {"role": 42, "content": "x"}, {"role": "user", "content": 7}, {"role": "user"}, "text",
    None, {"role": "critic", "content": "x"}, {"role": "function", "name": "f", "content": "r"},
    {"role": "assistant", "content": None}, {"role": "user", "content": [{"type": "text"}]},
    {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": ""}}]},
    {"role": "tool", "tool_call_id": 5, "content": "x"}, {"role": "assistant", "tool_calls": {}},
])
_fields = st.fixed_dictionaries({}, optional={
    "tools": st.sampled_from([TOOLS, [], [*TOOLS, *TOOLS]]),
    "temperature": st.sampled_from([0.2, 0.7, 1.5]),
    "stream": st.booleans(),
    "metadata": st.dictionaries(st.sampled_from(["user", "trace"]), _tricky_text, max_size=2),
})


@st.composite
def conversations(draw: Any) -> tuple[list[Any], list[int]]:
    """A history (with tricky and, rarely, invalid messages) and where its turns end."""
    history: list[Any] = list(draw(valid_histories() | broken_histories()))
    if draw(st.booleans()):
        history.insert(0, PROMPT)  # a first message long enough to share the first bytes
    odd = _tricky_message | _odd_message if draw(st.integers(0, 4)) == 0 else _tricky_message
    for message in draw(st.lists(odd, max_size=3)):
        history.insert(draw(st.integers(0, len(history))), message)
    cuts = draw(st.lists(st.integers(0, len(history)), min_size=1, max_size=3))
    return history, [*sorted(cuts), len(history)]


def _sticky(draw: Any, strategy: st.SearchStrategy[Any], previous: Any) -> Any:
    return previous if previous is not None and draw(st.integers(0, 3)) else draw(strategy)


def _kept_length(raw: bytes) -> int:
    """How much of ``raw`` a kept body compares: up to where its last message ends."""
    found = _MESSAGES_KEY.search(raw)
    assert found is not None
    close = _value_end(raw, found.end() - 1)
    assert close is not None
    return last_value_end(raw, close)


@settings(max_examples=150, deadline=None)
@given(conversations(), st.data())
def test_turns_read_over_each_other_give_what_reading_them_whole_gives(
        conversation: tuple[list[Any], list[int]], data: st.DataObject) -> None:
    history, cuts = conversation
    owner = data.draw(st.sampled_from([OWNER, None]))
    seen = SeenBodies(MB16)
    name = where = fields = None
    previous: tuple[Any, ...] | None = None  # the last kept turn: (serializer, fields, raw, length)
    for cut in cuts:
        name = _sticky(data.draw, st.sampled_from(sorted(SERIALIZERS)), name)
        where = _sticky(data.draw, st.sampled_from(["first", "middle", "last"]), where)
        fields = _sticky(data.draw, _fields, fields)
        keys = ["model", *fields]
        keys.insert({"first": 0, "middle": len(keys) // 2, "last": len(keys)}[where], "messages")
        messages = history[:cut]
        body = {k: messages if k == "messages" else fields.get(k, "agent") for k in keys}
        raw = SERIALIZERS[name](body)
        others = repr([(k, body[k] if k != "messages" else None) for k in keys])
        reading = check(seen, raw, owner)
        # A turn that only adds messages, written the same way as the last kept turn, is read
        # over it (changed fields are read over it too, not always: see the tests below).
        extends = (previous is not None and previous[:2] == (name, others) and previous[3] > 0
                   and _kept_length(previous[2]) >= 64)  # shorter bodies are never kept
        if extends:
            assert reading is not None
            assert reading.checked == previous[3]
            assert reading.added == orjson.loads(raw)["messages"][previous[3]:]
        try:
            _slow(raw)
            previous = (name, others, raw, len(messages))
        except ClientError:
            pass  # refused: nothing kept, the next turn extends the one before


# -- deterministic turns -------------------------------------------------------------------


HISTORY = [PROMPT, user("Find the bug in parse(): it crashes on \"]\" and é.")]
ADDED = [calls("call_1", content=""), tool("call_1", "def parse(): ... ]}")]


def test_two_added_messages_are_read_over_the_first_turn() -> None:
    seen = SeenBodies(MB16)
    assert check(seen, dumps(chat(HISTORY, stream=False))) is None
    reading = check(seen, dumps(chat(HISTORY + ADDED, stream=False)))
    assert reading is not None
    assert reading.added == ADDED
    assert reading.checked == len(HISTORY)
    assert seen.extended == 1


def test_an_identical_body_is_read_with_nothing_added() -> None:
    seen = SeenBodies(MB16)
    raw = dumps(chat(HISTORY, tools=TOOLS))
    check(seen, raw)
    reading = check(seen, raw)
    assert reading is not None
    assert reading.added == []
    assert reading.body == orjson.loads(raw)


@pytest.mark.parametrize("after", [
    {"stream": True}, {"stream": False, "tools": [*TOOLS, *TOOLS]}, {"tools": TOOLS},
    {"stream": False, "tools": TOOLS, "user": "u-1"}, {"tools": TOOLS, "stream": False},
])
def test_changed_fields_after_the_messages_are_read(after: dict[str, Any]) -> None:
    seen = SeenBodies(MB16)
    check(seen, dumps(chat(HISTORY, stream=False, tools=TOOLS)))
    reading = check(seen, dumps(chat(HISTORY + ADDED, **after)))
    assert reading is not None
    assert reading.added == ADDED


def test_another_client_never_reads_over_a_body_it_did_not_send() -> None:
    seen = SeenBodies(MB16)
    check(seen, dumps(chat(HISTORY)))
    turn2 = dumps(chat(HISTORY + ADDED))
    assert seen.read(turn2, "client-b") is None
    assert seen.read(turn2, None) is None
    assert check(seen, turn2, "client-b") is None
    assert check(seen, turn2) is not None


def test_no_budget_keeps_nothing() -> None:
    seen = SeenBodies(0)
    raw = dumps(chat(HISTORY))
    check(seen, raw)
    assert check(seen, raw) is None
    assert check(seen, dumps(chat(HISTORY + ADDED))) is None


def _session(i: int) -> list[Any]:  # sessions that differ in their first bytes
    return [{"content": f"{i:03d}: you are a careful coding agent.", "role": "system"},
            user(f"question {i}")]


def test_old_bodies_are_evicted_past_the_budget() -> None:
    first = dumps(chat(_session(0)))
    assert len({dumps(chat(_session(i)))[:64] for i in range(6)}) == 6
    seen = SeenBodies(4 * len(first))
    check(seen, first)
    turn2 = dumps(chat(_session(0) + ADDED))
    assert seen.read(turn2, OWNER) is not None
    for i in range(1, 6):
        check(seen, dumps(chat(_session(i))))
    assert seen.read(turn2, OWNER) is None
    assert check(seen, turn2) is None
    assert seen.read(dumps(chat(_session(5) + ADDED)), OWNER) is not None  # the latest kept


def test_the_body_just_learned_is_kept_when_it_fits_the_budget() -> None:
    # Sessions sharing a system prompt share their first bytes: past the budget, the
    # newest body must stay kept (the oldest go first), not the whole group with it.
    bodies = [dumps(chat([PROMPT, user(f"question {i}")])) for i in range(5)]
    seen = SeenBodies(len(bodies[0]) * 9 // 2)
    for raw in bodies:
        check(seen, raw)
    assert seen.read(dumps(chat([PROMPT, user("question 4"), *ADDED])), OWNER) is not None


def test_bodies_sharing_their_first_bytes_are_kept_up_to_a_bound() -> None:
    seen = SeenBodies(MB16)
    for i in range(40):
        check(seen, dumps(chat([PROMPT, user(f"question {i}")])))
    assert seen.read(dumps(chat([PROMPT, user("question 0"), *ADDED])), OWNER) is None
    assert seen.read(dumps(chat([PROMPT, user("question 39"), *ADDED])), OWNER) is not None


@pytest.mark.parametrize("turn2", [
    [PROMPT, user("Find the bug in parse(): it crashes on \"]\" and e."), *ADDED],  # edited
    [PROMPT, *ADDED],  # a message dropped
    [PROMPT],  # shorter
    [system("You are a careful coding agent"), *HISTORY[1:], *ADDED],
])
def test_a_turn_that_does_not_extend_the_last_is_read_whole(turn2: list[Any]) -> None:
    seen = SeenBodies(MB16)
    check(seen, dumps(chat(HISTORY)))
    assert check(seen, dumps(chat(turn2))) is None


# -- adversarial second turns --------------------------------------------------------------

TURN1 = dumps(chat(HISTORY, stream=False))
TAIL = b'], "stream": false}'
HEAD = TURN1[:-len(TAIL)]  # up to the end of the last message
M = b'{"role": "user", "content": "more"}'


def _deep(levels: int) -> bytes:
    return b', {"role": "user", "content": "q", "x": ' + b"[" * levels + b"]" * levels + b"}"


JSON, UTF8, DEEP = "not valid JSON", "not valid UTF-8", "nested deeper than"
ADVERSARIAL = {  # the second turn, and the start of the error it gets ("" when accepted)
    "trailing comma": (HEAD + b", " + M + b"," + TAIL, JSON),
    "comma only": (HEAD + b"," + TAIL, JSON),
    "two commas": (HEAD + b",, " + M + TAIL, JSON),
    "no comma": (HEAD + b" " + M + TAIL, JSON),
    "not json": (HEAD + b', {"role": "user", "content": nope}' + TAIL, JSON),
    "unterminated string": (HEAD + b', {"role": "user", "content": "abc}' + TAIL, JSON),
    "invalid utf-8": (HEAD + b', {"role": "user", "content": "\xff\xfe"}' + TAIL, UTF8),
    "lone surrogate": (HEAD + b', {"role": "user", "content": "\\ud800"}' + TAIL, JSON),
    "raw control char": (HEAD + b', {"role": "user", "content": "a\x01b"}' + TAIL, JSON),
    "invalid utf-8, tail changed": (HEAD + b', {"role": "user", "content": "\xc3"}]}', UTF8),
    "invalid utf-8 in a later field": (HEAD + b", " + M + b'], "user": "\xe9"}', UTF8),
    "duplicate messages key": (HEAD + b", " + M + b'], "messages": [' + M + b"]}", ""),
    "duplicate key, same tail": (HEAD + b", " + M + b'], "messages": [' + M + TAIL, ""),
    "messages closed early": (HEAD + b", " + M + b"]}" + TAIL, JSON),
    "literal close in a string":
        (HEAD + b', {"role": "user", "content": "]}, \\"x\\": {"}' + TAIL, ""),
    "literal key in a string":
        (HEAD + b', {"role": "user", "content": "\\"messages\\": ["}]}', ""),
    "deepest allowed": (HEAD + _deep(MAX_JSON_DEPTH - 3) + TAIL, ""),
    "too deep": (HEAD + _deep(MAX_JSON_DEPTH - 2) + TAIL, DEEP),
    "too deep, tail changed": (HEAD + _deep(MAX_JSON_DEPTH) + b'], "stream": true}', DEEP),
    "deep field after":
        (HEAD + b'], "x": ' + b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH + b"}", DEEP),
    "role 42": (HEAD + b", " + M + b', {"role": 42, "content": "x"}' + TAIL, "messages[3].role"),
    "content an int":
        (HEAD + b', {"role": "user", "content": 3}' + TAIL, "messages[2].content must"),
    "not an object": (HEAD + b", 42, " + M + TAIL, "messages[2] must be an object"),
    "tool_calls not a list": (HEAD + b', {"role": "assistant", "tool_calls": {}}' + TAIL,
                              "messages[2].tool_calls must"),
    "stream not a boolean": (HEAD + b", " + M + b'], "stream": "yes"}', "'stream' must"),
    "tail not json": (HEAD + b", " + M + b'], "stream": tru}', JSON),
    "no closing brace": (HEAD + b", " + M + b'], "stream": false', JSON),
    "no closing bracket": (HEAD + b", " + M, JSON),
    "ends with the array": (HEAD + b", " + M + b"]", JSON),
    "trailing data": (HEAD + b", " + M + TAIL + b" {}", JSON),
    "trailing tail": (HEAD + b", " + M + TAIL + TAIL, JSON),
    "whitespace around": (HEAD + b" \n, \t" + M + b"\n  " + TAIL + b"\n", ""),
    "nested object in the tail": (HEAD + b", " + M + b'], "m": {"a": [1]}, "stream": true}', ""),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_an_adversarial_second_turn_reads_as_the_slow_path(name: str) -> None:
    raw, error = ADVERSARIAL[name]
    got = _outcome(lambda: _slow(raw))
    assert got[0] == ("error" if error else "ok")
    if error:
        assert got[1] == 400
        assert error in got[2]
        assert (got[3] == "json_too_deep") == (error == DEEP)
    seen = SeenBodies(MB16)
    check(seen, TURN1)
    check(seen, raw)
    check(seen, raw)  # the same again, over itself when it was kept


@pytest.mark.parametrize("after", [b"]}", b'], "stream": true}'])
def test_a_second_turn_after_an_empty_history_is_read_as_the_slow_path(after: bytes) -> None:
    # Turn 1 has no message: its kept bytes end at the opening bracket, so turn 2's
    # "[, {message}]" reads as one added message although "[," is not JSON.
    turn1 = dumps({"metadata": {"trace": "t" * 64}, **chat([])})  # 64 bytes before "messages"
    turn2 = turn1[:-len(b"]}")] + b", " + M + after
    with pytest.raises(ClientError, match="not valid JSON"):
        parse_json_object(turn2)
    seen = SeenBodies(MB16)
    check(seen, turn1)
    check(seen, turn2)


def test_a_nested_messages_key_before_the_top_level_one() -> None:
    seen = SeenBodies(MB16)
    meta = {"metadata": {"messages": [1], "note": "x" * 64}}
    check(seen, dumps({**meta, **chat(HISTORY)}))
    check(seen, dumps({**meta, **chat(HISTORY + ADDED)}))
    check(seen, dumps({**meta, **chat(HISTORY + ADDED + [user("next")])}))


ARRAY = json.dumps(HISTORY)
# First turns whose first ``"messages": [`` is not the one a parser keeps, or is it with the
# same bytes elsewhere too: a later turn that extends it must still read as parsed whole.
FIRST_TURNS = {
    "nested key, same array, before":
        f'{{"metadata": {{"messages": {ARRAY}}}, "model": "agent", "messages": {ARRAY}}}',
    "duplicate key, same array":
        f'{{"messages": {ARRAY}, "model": "agent", "messages": {ARRAY}}}',
    "nested key, same array, after":
        f'{{"model": "agent", "messages": {ARRAY}, "metadata": {{"messages": {ARRAY}}}}}',
    "key inside a string": json.dumps({"model": "agent", "note": '"messages": ' + ARRAY,
                                       "messages": HISTORY}),
}


@pytest.mark.parametrize("name", sorted(FIRST_TURNS))
def test_a_first_turn_with_its_messages_array_twice_is_read_as_parsed(name: str) -> None:
    turn1 = FIRST_TURNS[name].encode()
    assert orjson.loads(turn1)["messages"] == HISTORY
    first = turn1.index(b'"messages": [') + len(b'"messages": ') + len(ARRAY) - 1
    extend = turn1[:first] + b", " + M + turn1[first:]  # the first array's copy extended
    last = turn1.rindex(b'"messages": [') + len(b'"messages": ') + len(ARRAY) - 1
    extend_last = turn1[:last] + b", " + M + turn1[last:]
    for turn2 in (extend, extend_last):
        seen = SeenBodies(MB16)
        check(seen, turn1)
        check(seen, turn2)


@pytest.mark.parametrize("first, more, clean", [
    ([PROMPT, user("hi"), calls("call_1")], [tool("call_1"), user("thanks")], True),
    ([PROMPT, user("hi"), calls("call_1", "call_2"), tool("call_1")], [tool("call_2")], True),
    ([PROMPT, user("hi"), assistant("x", [tool_call("a"), {"type": "function", "function": {
        "name": "f", "arguments": "{}"}}])], [tool("a")], True),  # a call without an id
    ([PROMPT, user("hi"), tool("call_lost", "stale"), assistant("Hello.")], [user("and?")], False),
])
def test_what_turn_1_leaves_open_is_known_to_turn_2(first: list[Any], more: list[Any],
                                                    clean: bool) -> None:
    seen = SeenBodies(MB16)
    assert read_like_the_gateway(seen, dumps(chat(first)), OWNER)[3].clean is False
    reading, _, _, known = read_like_the_gateway(seen, dumps(chat(first + more)), OWNER)
    assert reading is not None
    assert known == known_of(first + more)
    assert known.clean is clean


def test_the_fingerprint_waits_for_the_first_user_message() -> None:
    seen = SeenBodies(MB16)
    image = user([text_part("look"), image_part()])
    history = [PROMPT, system("more rules"), image, assistant("a cat"), image]
    check(seen, dumps(chat(history[:1])))
    for end in (2, 4, 5):  # check() compares the fingerprint and media with the slow path's
        assert check(seen, dumps(chat(history[:end]))) is not None
    assert known_of(history).media_parts == 2


def test_shared_messages_are_never_mutated() -> None:
    seen = SeenBodies(MB16)
    broken = [PROMPT, user([text_part(" "), text_part("hi")]), calls("a", "a", content=" "),
              tool("a", " ", is_error=True), user("")]
    check(seen, dumps(chat(broken, stream=False)))
    turn2 = dumps(chat([*broken, tool("b", "orphan"), assistant(None)], stream=False))
    reading, body, messages, _ = read_like_the_gateway(seen, turn2, OWNER)
    assert reading is not None
    snapshot = copy.deepcopy(messages)
    assert project(messages).anomalies
    assert project_strict(messages).anomalies
    body.pop("stream")  # a caller takes fields out of its body
    again = check(seen, turn2)
    assert again is not None
    assert again.body["messages"] == snapshot
    assert again.body["messages"] is not messages
    assert again.body["stream"] is False


def test_a_turn_with_new_invalid_fields_is_refused_as_read_whole() -> None:
    # The later fields are trusted only when they are the kept turn's very objects.
    seen = SeenBodies(MB16)
    check(seen, dumps(chat(HISTORY, tools=TOOLS, temperature=0.2)))
    for bad in ({"tools": [{"type": "function", "function": {"name": 7}}]},
                {"tools": TOOLS, "temperature": "hot"}):
        raw = dumps(chat(HISTORY + ADDED, **bad))
        with pytest.raises(ClientError) as refused:
            read_like_the_gateway(seen, raw, OWNER)
        assert refused.value.status == 400
        check(seen, raw)  # (the same error as read whole)


def test_sessions_sending_the_same_tools_share_one_parsed_list() -> None:
    # Every session of an agent sends the same tools: a body read whole takes the list
    # parsed from the same bytes before (counted and digested once, freed once).
    seen = SeenBodies(MB16)
    first = read_like_the_gateway(seen, dumps(chat(HISTORY, tools=TOOLS)), "a")[1]
    other = read_like_the_gateway(
        seen, dumps(chat([PROMPT, user("another task")], tools=TOOLS)), "b")[1]
    assert other["tools"] is first["tools"]
    more = [*TOOLS, {"type": "function", "function": {"name": "edit"}}]
    third = read_like_the_gateway(seen, dumps(chat([PROMPT, user("x")], tools=more)), "c")[1]
    assert third["tools"] == more


def test_a_body_naming_tools_twice_never_lends_its_list_to_other_bytes() -> None:
    first, second = (json.dumps([{"type": "function", "function": {"name": name}}])
                     for name in ("first", "second"))
    history = json.dumps([PROMPT, user("go")])
    twice = (f'{{"model": "agent", "tools": {first}, "messages": {history}, '
             f'"tools": {second}}}').encode()
    seen = SeenBodies(MB16)
    read_like_the_gateway(seen, twice, "a")
    for tools in (first, second):
        raw = f'{{"model": "agent", "messages": {history}, "tools": {tools}}}'.encode()
        body = read_like_the_gateway(seen, raw, "b")[1]
        assert body["tools"] == json.loads(tools)


def test_a_session_that_breaks_later_is_repaired_without_parsing_its_history() -> None:
    """A session begins clean (read without building its messages, kept unparsed), then a
    turn adds a break that stays in the history: from the next turn on, the projection is
    laid out over the previous turn's from the added messages alone. The history itself is
    never parsed again, and the projection is what projecting it whole gives."""
    from gateway.projection.lazy_messages import LazyMessages
    from gateway.wires.chat_typed import read_clean_chat
    from gateway.wires.chat_validation import read_chat_body

    seen = SeenBodies(MB16)
    history = [PROMPT, user("fix the parser")]
    body = {"model": "m", "messages": history, "tools": TOOLS}
    raw = orjson.dumps(body)
    clean = read_clean_chat(raw, count=True)
    assert clean is not None
    seen.learn_clean(raw, OWNER, clean)
    turns = [
        [calls("call_1"), user("stop, do it another way")],  # call_1 never answered
        [calls("call_2"), tool("call_2", "def parse(): ...")],
        [assistant("Fixed."), user("now the tests")],
    ]
    for n, more in enumerate(turns):
        history = [*history, *more]
        raw = orjson.dumps({**body, "messages": history})
        reading = seen.read(raw, OWNER)
        assert reading is not None
        messages, counted = read_chat_body(reading.body, checked=reading.checked,
                                           count=True, added=reading.added)
        assert isinstance(messages, LazyMessages) and not messages.parsed
        known = seen.learn(raw, OWNER, reading.body, messages, reading, counted)
        assert known.layouts is not None and not known.clean
        projection = known.layouts.project(messages)
        want = project(copy.deepcopy(history))
        assert projection.messages == want.messages
        assert projection.anomalies == want.anomalies
        # The turn that brought the break lays it out whole; the later ones do not.
        assert messages.parsed == (n == 0)
