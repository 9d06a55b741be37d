"""The prefix comparison itself, turn by turn: the same verdicts whether the previous turn's
messages are still kept (compared as they are) or were let go (compared by hashes), and a
one-off session that returns after being let go is a first turn again."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.telemetry.context import PROBATION, ContextMemo, EdgeTurn, RecentSessions
from gateway.telemetry.prefix import PrefixTracker, PromptHead
from tests.factories import assistant, system, tool, tool_call, user

HEAD = PromptHead.of({"tools": [{"type": "function", "function": {"name": "read"}}]})


def history(turns: int, note: str = "") -> list[dict[str, Any]]:
    messages = [system(note + "You are a coding agent. " * 20), user("fix the parser")]
    for i in range(turns):
        messages += [assistant(None, tool_calls=[tool_call(f"c{i}", "read")]),
                     tool(f"c{i}", f"contents of file {i} " * 30)]
    return messages


def fresh(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same messages as new objects (a turn read whole, on another worker say)."""
    return [dict(m) for m in messages]


def let_go(tracker: PrefixTracker, sessions: int) -> None:
    """Other sessions' turns, enough to push the first sessions' messages out."""
    for n in range(sessions):
        for turn in (1, 2):
            tracker.observe(f"other-{n}", HEAD, history(turn), None)


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "hashed"])
def test_verdicts_are_the_same_with_kept_and_hashed_turns(kept: bool) -> None:
    tracker = PrefixTracker(keep_messages=4)
    assert tracker.observe("s", HEAD, history(1), None).cause == "first"
    assert tracker.observe("s", HEAD, history(2), None).cause == "appended"  # seen twice

    def after_others(messages: list[dict[str, Any]], sent: Any = None) -> Any:
        if not kept:
            let_go(tracker, 4)
        return tracker.observe("s", HEAD, messages, sent)

    assert after_others(fresh(history(3))).cause == "appended"
    assert after_others(fresh(history(3))).cause == "unchanged"
    # A volatile note at the start of the system prompt: everything after it is lost.
    moved = after_others(fresh(history(4, note="Now: 12:01. ")))
    assert (moved.cause, moved.index) == ("system", 0)
    assert moved.field == ("content" if kept else None)  # which field: from kept messages
    assert moved.lost_tokens > 500  # the whole previous history
    # A tool result edited in the middle: the break is at that message.
    edited = history(4, note="Now: 12:01. ")
    edited[3] = tool("c0", "a shorter result")
    broke = after_others(edited)
    assert (broke.cause, broke.index) == ("message", 3)
    assert broke.lost_tokens > 0
    assert (broke.before is not None) is kept  # the side-by-side needs the kept messages
    # New tool schemas: the whole previous prompt is lost.
    tools = tracker.observe("s", PromptHead.of({"tools": []}), edited, None)
    assert tools.cause == "tools" and tools.lost_tokens >= broke.lost_tokens


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "hashed"])
def test_a_break_the_client_did_not_make_is_the_gateways(kept: bool) -> None:
    tracker = PrefixTracker(keep_messages=4)
    tracker.observe("s", HEAD, history(1), None)
    tracker.observe("s", HEAD, history(2), None)
    if not kept:
        let_go(tracker, 4)
    # The client appended; what the gateway sent changed an earlier message.
    grown = history(3)
    sent = [*grown[:2], assistant("(call dropped)"), *grown[3:]]
    verdict = tracker.observe("s", HEAD, grown, sent)
    assert (verdict.cause, verdict.index) == ("gateway", 2)


def test_a_one_off_session_let_go_is_a_first_turn_again() -> None:
    tracker = PrefixTracker(keep_messages=2)
    tracker.observe("once", HEAD, history(1), None)
    for n in range(PROBATION):  # other one-off requests push it out of the probation
        tracker.observe(f"one-off-{n}", HEAD, history(1), None)
    assert tracker.observe("once", HEAD, history(2), None).cause == "first"
    # A session seen twice keeps its hashes when let go, and is compared.
    tracker.observe("once", HEAD, history(3), None)
    let_go(tracker, 2)
    assert tracker.observe("once", HEAD, history(4), None).cause == "appended"


class _Message(dict[str, Any]):
    """A message that can be watched with a weak reference (plain dicts cannot)."""


def test_one_off_requests_do_not_keep_their_histories_alive() -> None:
    # A stream of requests the gateway never sees again (each its own session) keeps only
    # the probation's few histories in the context memo and the prefix tracker.
    memo, tracker = ContextMemo(), PrefixTracker()
    watched = []
    for n in range(40):
        messages = [_Message(m) for m in history(2, note=f"request {n}. ")]
        watched.append(weakref.ref(messages[-1]))
        memo.breakdown(f"s-{n}", messages, {})
        tracker.observe(f"s-{n}", HEAD, messages, None)
        del messages
    gc.collect()
    alive = [n for n, ref in enumerate(watched) if ref() is not None]
    assert alive == list(range(40 - PROBATION, 40))


def test_sessions_starting_together_outrun_the_probation_and_are_still_kept() -> None:
    # Sixteen agents start at once: each one's first turn is pushed out of the probation
    # before its second turn comes; that second turn keeps it (and its next turns reuse it).
    recent: RecentSessions[int] = RecentSessions(32)
    keys = [f"agent-{n}" for n in range(16)]
    for turn in (1, 2):
        for key in keys:
            previous = recent.pop(key)
            recent.put(key, turn, again=previous is not None)
    assert [recent.pop(key) for key in keys] == [2] * 16


def test_a_turn_read_over_the_previous_body_is_appended_without_comparing_it() -> None:
    tracker = PrefixTracker()
    first, second = history(2), history(3)
    second[:len(first)] = first  # read over the previous body: its very message objects
    one, two = object(), object()
    tracker.observe("s", HEAD, first, None, EdgeTurn(one))
    assert tracker.observe("s", HEAD, second, None, EdgeTurn(two, one, len(first))).cause == (
        "appended")
    # Read over another body than the previous turn's: the lists are compared.
    edited = [*second[:3], tool("c0", "changed"), *second[4:]]
    verdict = tracker.observe("s", HEAD, edited, None, EdgeTurn(object(), one, len(first)))
    assert (verdict.cause, verdict.index) == ("message", 3)



def test_a_turn_read_over_a_let_go_body_is_appended_without_reading_its_messages() -> None:
    """A session pushed out of the kept ones (many sessions at once) keeps its last turn's
    hashes; its next turn, read by the edge over that turn's body, is appended without its
    messages being read, so the ones the typed read left unparsed stay so."""
    import orjson

    from gateway.projection.lazy_messages import LazyMessages

    tracker = PrefixTracker(keep_messages=4)
    first, second = history(2), history(3)
    one, two = object(), object()
    tracker.observe("s", HEAD, first, None, EdgeTurn(one))
    tracker.observe("s", HEAD, first, None, EdgeTurn(one))  # (seen twice: kept, then let go)
    let_go(tracker, 4)
    unparsed = LazyMessages(orjson.dumps(second), len(second))
    verdict = tracker.observe("s", HEAD, unparsed, None, EdgeTurn(two, one, len(first)))
    assert verdict.cause == "appended" and not unparsed.parsed
    # Read over some other body: compared by hashes (and so read).
    edited = [*second[:3], tool("c0", "changed"), *second[4:]]
    let_go(tracker, 4)
    verdict = tracker.observe("s", HEAD, edited, None, EdgeTurn(object(), one, len(first)))
    assert (verdict.cause, verdict.index) == ("message", 3)


def test_a_repaired_turn_laid_over_the_previous_one_is_not_compared_and_agrees(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A history with a break in it is repaired on every turn; each turn's projection is
    laid out over the previous turn's (TurnLayouts), so its first messages are the previous
    sent list's very objects. The prefix verdict and the context breakdown of what was sent
    then need no comparison of the two lists, and are what the comparison gives."""
    from gateway.projection.incremental import TurnLayouts
    from gateway.telemetry import context, prefix

    compared: list[int] = []
    real = context.common_prefix

    def counting(old: Any, new: Any) -> int:
        compared.append(len(old))
        return real(old, new)

    monkeypatch.setattr(prefix, "common_prefix", counting)
    monkeypatch.setattr(context, "common_prefix", counting)
    broken = [*history(2)[:3], user("an interjection"), *history(2)[3:],
              tool("gone", "a result whose call was trimmed away")]
    turns: list[list[dict[str, Any]]] = [broken]
    for i in range(3):
        turns.append([*turns[-1], assistant(None, tool_calls=[tool_call(f"n{i}", "read")]),
                      tool(f"n{i}", f"more {i}")])
    fast, slow = PrefixTracker(), PrefixTracker()
    fast_memo, slow_memo = ContextMemo(), ContextMemo()
    layouts = TurnLayouts()
    for n, turn in enumerate(turns):
        projection = layouts.project(turn)
        assert projection.repaired
        sent = projection.messages
        extends = layouts.extends(sent)
        assert (extends is None) == (n == 0)
        before = len(compared)
        got = fast.observe("s", HEAD, turn, sent, None, extends)
        got_context = fast_memo.breakdown("s", sent, {}, extends=extends)
        assert len(compared) == before  # nothing walked
        assert got == slow.observe("s", HEAD, turn, sent, None)
        assert got_context == slow_memo.breakdown("s", sent, {})
        assert got.cause == ("first" if n == 0 else "appended")
        layouts = TurnLayouts(layouts.current)
    # A sent list that is not the one the previous turn was given is compared as before.
    turn = [*turns[-1], user("and now?")]
    projection = layouts.project(turn)
    extends = layouts.extends(projection.messages)
    assert extends is not None
    other = PrefixTracker()
    other.observe("s", HEAD, turns[-1], list(extends), None)
    before = len(compared)
    assert other.observe("s", HEAD, turn, projection.messages, None, extends).cause == (
        "appended")
    assert len(compared) > before


def test_a_history_sent_again_from_an_earlier_point_is_compared_by_its_bytes() -> None:
    """An agent that starts its session over from an earlier turn sends a body the gateway
    no longer keeps: both turns are unparsed (``LazyMessages``) and the new one is the
    other's cut after a message. The verdict is the one the parsed lists give, and this
    turn's messages are not parsed to get it."""
    import orjson

    from gateway.projection.lazy_messages import LazyMessages

    long, short = history(6), history(3)
    parsed = PrefixTracker()
    parsed.observe("s", HEAD, long, None)
    want = parsed.observe("s", HEAD, short, None)
    tracker = PrefixTracker()
    before = LazyMessages(orjson.dumps(long), len(long))
    tracker.observe("s", HEAD, before, None)
    again = LazyMessages(orjson.dumps(short), len(short))
    got = tracker.observe("s", HEAD, again, None)
    assert got == want and got.cause != "appended" and got.lost_tokens > 0
    assert not again.parsed and not before.parsed  # (the lost messages: from their bytes)
    memo = ContextMemo()
    memo.breakdown("s", LazyMessages(orjson.dumps(long), len(long)), {})
    again = LazyMessages(orjson.dumps(short), len(short))
    assert memo.breakdown("s", again, {}) == ContextMemo().breakdown("s", short, {})


_TEXT = st.text(max_size=40)
_PART = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT}),
    st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT,
                           "cache_control": st.just({"type": "ephemeral"})}),
    st.fixed_dictionaries({"type": st.just("image_url"),
                           "image_url": st.fixed_dictionaries({"url": _TEXT})}),
)
_MESSAGES = st.lists(st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]),
                           "content": st.one_of(_TEXT, st.none(), st.lists(_PART, max_size=3))},
                          optional={"name": _TEXT}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none(),
                           "tool_calls": st.lists(st.fixed_dictionaries({
                               "id": _TEXT, "type": st.just("function"),
                               "function": st.fixed_dictionaries(
                                   {"name": _TEXT, "arguments": _TEXT})}), max_size=2)}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": _TEXT,
                           "content": _TEXT}),
), max_size=8)


@settings(max_examples=200, deadline=None)
@given(_MESSAGES)
def test_lost_tokens_are_what_the_digests_count(messages: list[dict[str, Any]]) -> None:
    """The tokens a break puts out of the prefix are counted without hashing the messages,
    and come to what the hashed turns' estimates give (a kept turn and a let-go one name
    the same break)."""
    from gateway.telemetry.prefix import _message_digest, _tokens

    assert _tokens(messages) == sum(_message_digest(m)[1] for m in messages)
