"""project_strict(): the three strict passes, alone and combined, and re-pairing after them."""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.projection import (
    SYNTHETIC_TOOL_RESULT_TEXT,
    USER_PLACEHOLDER_TEXT,
    Anomaly,
    project,
    project_strict,
)
from gateway.projection.anomalies import (
    ASSISTANT_MESSAGES_MERGED,
    DUPLICATE_TOOL_CALL_DEDUPED,
    DUPLICATE_TOOL_RESULT_DROPPED,
    EMPTY_CONTENT_DROPPED,
    FUNCTION_CALL_CONVERTED,
    LEADING_NON_USER_DROPPED,
    MESSAGE_NAME_REWRITTEN,
    ORPHAN_TOOL_RESULT_DROPPED,
    REFUSAL_MOVED_TO_CONTENT,
    TOOL_CALL_ID_REWRITTEN,
    TOOL_CALL_TYPE_ADDED,
    TOOL_MEDIA_MOVED,
    TOOL_RESULT_REORDERED,
    TOOL_RESULT_SYNTHESIZED,
    USER_MESSAGES_MERGED,
    USER_PLACEHOLDER_INSERTED,
)
from gateway.projection.asks import StrictAsks
from gateway.projection.strict import TOOL_MEDIA_NOTE, tool_media_caption
from tests.factories import (
    assistant,
    calls,
    developer,
    exchange,
    image_part,
    system,
    text_part,
    tool,
    tool_call,
    user,
)
from tests.projection.rules import strict_violations

Message = dict[str, Any]


def test_placeholder_text_is_a_system_reminder_about_the_missing_start() -> None:
    assert USER_PLACEHOLDER_TEXT.startswith("<system-reminder>")
    assert USER_PLACEHOLDER_TEXT.endswith("</system-reminder>")
    assert "not available" in USER_PLACEHOLDER_TEXT
    assert "Continue" in USER_PLACEHOLDER_TEXT


def test_strictly_valid_history_comes_out_as_the_same_objects() -> None:
    history = [system("s"), user("q"), *exchange("call_a", "call_b"), assistant("done")]
    result = project_strict(history)
    assert result.anomalies == ()
    assert all(a is b for a, b in zip(result.messages, history, strict=True))


def test_only_system_messages_or_nothing_stay_as_they_are() -> None:
    assert project_strict([]).messages == []
    history = [system("s"), developer("d")]
    result = project_strict(history)
    assert result.anomalies == ()
    assert result.messages == history


# --- duplicate_tool_call_deduped -------------------------------------------------------


def test_reused_id_keeps_the_first_call_and_its_results_pair_with_it() -> None:
    history = [
        user("a"),
        calls("call_0"),
        tool("call_0", "first"),
        user("b"),
        calls("call_0"),
        tool("call_0", "second"),
        assistant("done"),
    ]
    result = project_strict(history)
    # The second call message is left empty and goes; both results now answer the first
    # call, and the last one wins.
    assert result.messages == [history[0], history[1], history[5], history[3], history[6]]
    assert set(result.anomalies) == {
        Anomaly(DUPLICATE_TOOL_CALL_DEDUPED, 4, "call_0"),
        Anomaly(DUPLICATE_TOOL_RESULT_DROPPED, 2, "call_0"),
        Anomaly(TOOL_RESULT_REORDERED, 5, "call_0"),
    }


def test_duplicate_call_is_removed_from_a_message_that_keeps_other_calls() -> None:
    history = [user("q"), calls("call_a", "call_a", "call_b"), tool("call_a"), tool("call_b")]
    result = project_strict(history)
    assert result.messages[1]["tool_calls"] == [tool_call("call_a"), tool_call("call_b")]
    assert result.messages[2:] == history[2:]
    assert result.anomalies == (Anomaly(DUPLICATE_TOOL_CALL_DEDUPED, 1, "call_a"),)


def test_deduped_message_with_text_keeps_its_text_without_tool_calls() -> None:
    history = [user("q"), *exchange("call_a"), user("r"), calls("call_a", content="Again.")]
    result = project_strict(history)
    assert result.messages[-1] == assistant("Again.")


def test_dedupe_that_empties_a_message_lets_neighbours_merge() -> None:
    history = [
        user("q"),
        *exchange("call_a"),
        user("one"),
        calls("call_a"),
        user("two"),
    ]
    result = project_strict(history)
    assert result.messages[-1] == user("one\n\ntwo")
    assert USER_MESSAGES_MERGED in result.counts()
    assert strict_violations(result.messages) == []


# --- assistant_messages_merged ---------------------------------------------------------


def test_consecutive_assistant_texts_merge() -> None:
    history = [user("q"), assistant("a", reasoning_content="r1"), assistant("b")]
    result = project_strict(history)
    assert result.messages == [history[0], assistant("a\n\nb", reasoning_content="r1")]
    assert result.anomalies == (Anomaly(ASSISTANT_MESSAGES_MERGED, 2),)


def test_text_then_calls_merge_and_the_results_still_follow() -> None:
    history = [user("q"), assistant("Let me look."), *exchange("call_a", "call_b")]
    result = project_strict(history)
    assert result.messages[1] == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": history[2]["tool_calls"],
    }
    assert result.messages[2:] == history[3:]
    assert result.anomalies == (Anomaly(ASSISTANT_MESSAGES_MERGED, 2),)


def test_assistant_parts_and_string_merge_as_parts() -> None:
    history = [user("q"), assistant([text_part("a")]), assistant("b"), assistant("c")]
    result = project_strict(history)
    assert result.messages[1]["content"] == [text_part("a"), text_part("b"), text_part("c")]
    assert result.counts() == {ASSISTANT_MESSAGES_MERGED: 2}


def test_exchanges_laid_out_by_project_are_not_merged() -> None:
    # In the input the two call messages are consecutive; once each result sits after its
    # call they are not, so nothing merges. Both results were separated from their call.
    history = [user("q"), calls("call_a"), calls("call_b"), tool("call_a"), tool("call_b")]
    result = project_strict(history)
    assert result.messages == [history[0], history[1], history[3], history[2], history[4]]
    assert result.counts() == {TOOL_RESULT_REORDERED: 2}


# --- leading_non_user_dropped ----------------------------------------------------------


def test_messages_before_the_first_user_are_dropped_but_the_preamble_kept() -> None:
    history = [
        system("s"),
        assistant("Where were we?"),
        developer("d"),
        tool("call_lost", "stale"),
        user("q"),
        assistant("a"),
    ]
    result = project_strict(history)
    assert result.messages == [history[0], history[2], history[4], history[5]]
    assert result.anomalies == (
        Anomaly(LEADING_NON_USER_DROPPED, 1),
        Anomaly(LEADING_NON_USER_DROPPED, 3, "call_lost"),
    )


def test_results_of_a_dropped_leading_call_become_orphans() -> None:
    history = [calls("call_a"), user("q"), tool("call_a", "late"), assistant("ok")]
    result = project_strict(history)
    assert result.messages == [history[1], history[3]]
    assert result.anomalies == (
        Anomaly(LEADING_NON_USER_DROPPED, 0),
        Anomaly(ORPHAN_TOOL_RESULT_DROPPED, 2, "call_a"),
    )


def test_strict_pairs_tool_messages_even_without_an_assistant() -> None:
    history = [user("q"), tool("call_a", "out")]
    assert project(history, partial=True).anomalies == ()
    result = project_strict(history)
    assert result.messages == [history[0]]
    assert result.anomalies == (Anomaly(ORPHAN_TOOL_RESULT_DROPPED, 1, "call_a"),)


# --- user_placeholder_inserted ---------------------------------------------------------


def test_history_without_user_gets_a_placeholder_after_the_preamble() -> None:
    history = [system("s"), calls("call_a"), tool("call_a", "out"), assistant("done")]
    result = project_strict(history)
    assert result.messages == [
        history[0],
        {"role": "user", "content": USER_PLACEHOLDER_TEXT},
        *history[1:],
    ]
    assert result.anomalies == (Anomaly(USER_PLACEHOLDER_INSERTED),)


def test_blank_user_counts_as_no_user() -> None:
    history = [user("  "), assistant("hello")]
    result = project_strict(history)
    assert result.messages == [{"role": "user", "content": USER_PLACEHOLDER_TEXT}, history[1]]


def test_no_placeholder_when_only_orphans_would_follow() -> None:
    history = [system("s"), tool("call_a", "out")]
    result = project_strict(history)
    assert result.messages == [history[0]]
    assert result.counts() == {ORPHAN_TOOL_RESULT_DROPPED: 1}


# --- combined --------------------------------------------------------------------------


def test_trimmed_session_starting_mid_exchange() -> None:
    history = [
        system("s"),
        tool("call_cut", "orphaned by the trimmer"),
        assistant("I'll continue."),
        calls("call_x"),
        tool("call_x", "x"),
        calls("call_x"),  # a client that restarts its ids
        assistant("Done."),
    ]
    result = project_strict(history)
    assert strict_violations(result.messages) == []
    assert result.messages == [
        history[0],
        {"role": "user", "content": USER_PLACEHOLDER_TEXT},
        {**history[3], "content": "I'll continue."},
        history[4],
        history[6],
    ]
    assert result.counts() == {
        DUPLICATE_TOOL_CALL_DEDUPED: 1,
        ORPHAN_TOOL_RESULT_DROPPED: 1,
        ASSISTANT_MESSAGES_MERGED: 1,
        USER_PLACEHOLDER_INSERTED: 1,
    }
    assert project_strict(result.messages).anomalies == ()


def test_strict_synthesizes_like_project() -> None:
    history = [user("q"), calls("call_a")]
    result = project_strict(history)
    assert result.messages[-1]["content"] == SYNTHETIC_TOOL_RESULT_TEXT
    assert result.anomalies == (Anomaly(TOOL_RESULT_SYNTHESIZED, None, "call_a", trailing=True),)


# --- the strict rung's wire conversions ---------------------------------------------------


def test_legacy_function_call_becomes_a_tool_call_and_its_result_a_tool_result() -> None:
    # AG2 / AutoGen 0.2 with the deprecated functions API, on an upstream that pairs tools.
    history = [
        user("What's 3 ** 7?"),
        {"role": "assistant", "content": None, "name": "assistant",
         "function_call": {"name": "python", "arguments": '{"cell": "3 ** 7"}'}},
        {"role": "function", "name": "python", "content": "2187"},
        assistant("2187."),
        user("thanks"),
    ]
    result = project_strict(history)
    assert result.messages[1] == {
        "role": "assistant", "content": None, "name": "assistant",
        "tool_calls": [{"id": "call_fn_1", "type": "function",
                        "function": {"name": "python", "arguments": '{"cell": "3 ** 7"}'}}]}
    assert result.messages[2] == {"role": "tool", "tool_call_id": "call_fn_1", "content": "2187"}
    assert [(a.kind, a.index, a.tool_call_id) for a in result.anomalies] == [
        (FUNCTION_CALL_CONVERTED, 1, "call_fn_1")]
    assert strict_violations(result.messages) == []
    assert project_strict(result.messages).anomalies == ()
    assert project(history).anomalies == ()  # OpenAI takes it as sent: only strict converts


def test_a_legacy_call_without_its_function_result_gets_the_synthetic_one() -> None:
    history = [user("go"), {"role": "assistant", "content": "",
                            "function_call": {"name": "run", "arguments": None}},
               user("stop"), {"role": "function", "name": "other", "content": "late"}]
    result = project_strict(history)
    call_ids = [c["id"] for c in result.messages[1]["tool_calls"]]
    assert call_ids == ["call_fn_1"]
    assert result.messages[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    # The only function result answers the only call: moved back to it.
    assert result.messages[2] == {"role": "tool", "tool_call_id": "call_fn_1",
                                  "content": "late"}
    assert strict_violations(result.messages) == []


def test_converted_ids_never_collide_with_the_client_ids() -> None:
    history = [user("a"), calls("call_fn_1"), tool("call_fn_1", "x"),
               {"role": "assistant", "content": None,
                "function_call": {"name": "f", "arguments": "{}"}},
               {"role": "function", "name": "f", "content": "y"}, user("b")]
    result = project_strict(history)
    converted = result.messages[3]["tool_calls"][0]["id"]
    assert converted != "call_fn_1" and converted.startswith("call_fn_3")
    assert result.messages[4]["tool_call_id"] == converted


def test_message_names_outside_openais_pattern_are_rewritten() -> None:
    history = [
        system("debate", name="Debate Moderator"),
        user("start", name="UserProxy Agent"),
        assistant("Bonjour", name="Élodie"),
        user("go on", name="alice_01"),
        assistant("ok", name="助手"),
        user("x", name="a" * 70),
    ]
    result = project_strict(history)
    assert [m["name"] for m in result.messages] == [
        "Debate_Moderator", "UserProxy_Agent", "Elodie", "alice_01", "7frs77a", "a" * 64]
    assert [a.index for a in result.anomalies if a.kind == MESSAGE_NAME_REWRITTEN] == [
        0, 1, 2, 4, 5]
    assert project_strict(result.messages).anomalies == ()
    assert project(history).anomalies == ()  # a name is rewritten only after a refusal


def test_media_a_tool_returned_move_to_the_next_user_turn() -> None:
    # A Playwright/OpenHands screenshot tool: OpenAI takes only text in a tool message.
    shot = image_part("data:image/png;base64,iVBORw0KGgo=", detail="high")
    history = [
        user("open the page"),
        calls("call_shot", "call_read"),
        tool("call_shot", [text_part("Screenshot taken."), shot]),
        tool("call_read", [{"type": "file", "file": {"file_id": "file-abc"}}]),
        user("what do you see?", name="tester"),
    ]
    result = project_strict(history)
    assert result.messages[2] == tool("call_shot", [text_part("Screenshot taken."),
                                                    text_part(TOOL_MEDIA_NOTE)])
    assert result.messages[3] == tool("call_read", [text_part(TOOL_MEDIA_NOTE)])
    assert result.messages[4] == user(
        [text_part(tool_media_caption("call_shot")), shot,
         text_part(tool_media_caption("call_read")),
         {"type": "file", "file": {"file_id": "file-abc"}},
         text_part("what do you see?")], name="tester")
    assert [(a.kind, a.tool_call_id) for a in result.anomalies] == [
        (TOOL_MEDIA_MOVED, "call_shot"), (TOOL_MEDIA_MOVED, "call_read")]
    assert strict_violations(result.messages) == []
    assert project_strict(result.messages).anomalies == ()
    assert project(history).anomalies == ()  # Anthropic takes images in tool results


def test_tool_media_get_their_own_user_turn_before_an_assistant_or_at_the_end() -> None:
    shot = image_part()
    for tail in ([assistant("It is a cat.")], []):
        history = [user("look"), calls("call_1"), tool("call_1", [shot]), *tail]
        result = project_strict(history)
        assert result.messages[3] == user([text_part(tool_media_caption("call_1")), shot])
        assert result.messages[4:] == tail
        assert strict_violations(result.messages) == []


def test_tool_calls_without_a_type_get_the_function_type() -> None:
    # langchain-azure-ai writes calls without "type"; OpenAI requires it.
    untyped = {"id": "call_az", "function": {"name": "dummy_tool", "arguments": "{}"}}
    history = [user("q"), assistant(None, [untyped, tool_call("call_ok")]),
               tool("call_az", "a"), tool("call_ok", "b"), user("thanks")]
    result = project_strict(history)
    assert result.messages[1]["tool_calls"] == [
        {"id": "call_az", "type": "function",
         "function": {"name": "dummy_tool", "arguments": "{}"}}, tool_call("call_ok")]
    assert [(a.kind, a.index, a.tool_call_id) for a in result.anomalies] == [
        (TOOL_CALL_TYPE_ADDED, 1, "call_az")]
    assert project_strict(result.messages).anomalies == ()


def test_refusal_and_audio_only_assistant_turns_become_readable() -> None:
    # openai-python's message.model_dump(): a refused answer, a spoken answer (audio id).
    refused = {"content": None, "refusal": "I can't help with that.", "role": "assistant"}
    spoken = {"content": None, "role": "assistant", "audio": {"id": "audio_6747"}}
    history = [user("pick a lock"), refused, user("say hi"), spoken, user("again")]
    result = project_strict(history)
    assert result.messages == [
        user("pick a lock"), {**refused, "content": "I can't help with that."},
        user("say hi\n\nagain")]
    assert [(a.kind, a.index) for a in result.anomalies] == [
        (REFUSAL_MOVED_TO_CONTENT, 1), (EMPTY_CONTENT_DROPPED, 3), (USER_MESSAGES_MERGED, 4)]
    assert strict_violations(result.messages) == []
    assert project(history).anomalies == ()  # valid on OpenAI as sent


# -- tool call ids in a form the upstream refused (call_ids.rewrite_call_ids) ---------------

OPENAI_IDS = ["call_7f3a2b1c9d8e4f60a1b2c3d4", "call_0d1e2f3a4b5c6d7e8f9a0b1c"]
KIMI_IDS = ["functions.get_weather:0", "functions.read_file:1"]
LONG_ID = "toolu_" + "x" * 60  # past OpenAI's 40 characters


def _call_ids(messages: list[Any]) -> list[str]:
    return [c["id"] for m in messages if m.get("tool_calls") for c in m["tool_calls"]]


def _result_ids(messages: list[Any]) -> list[str]:
    return [m["tool_call_id"] for m in messages if m["role"] == "tool"]


def test_ids_mistral_refuses_become_nine_letters_and_digits_with_their_results() -> None:
    history = [user("weather and file"), *exchange(*OPENAI_IDS), user("thanks"),
               *exchange("call_abc"), user("more")]
    snapshot = json.dumps(history)
    out = project_strict(history, asks=StrictAsks(call_ids="nine_alnum"))
    ids = _call_ids(out.messages)
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids) and len(set(ids)) == 3
    assert _result_ids(out.messages) == ids  # each result still answers its call
    assert [a.kind for a in out.anomalies] == [TOOL_CALL_ID_REWRITTEN] * 3
    assert {a.tool_call_id for a in out.anomalies} == {*OPENAI_IDS, "call_abc"}
    assert json.dumps(history) == snapshot  # the client's objects are not edited
    # The same ids every time (an agent's next turn keeps its prompt prefix), idempotent.
    nine = StrictAsks(call_ids="nine_alnum")
    assert _call_ids(project_strict([*history, assistant("ok"), user("again")],
                                    asks=nine).messages) == ids
    assert project_strict(out.messages, asks=nine).messages == out.messages
    # Everything else as project_strict() alone writes it.
    plain = project_strict(history).messages
    assert [{k: v for k, v in m.items() if k not in ("tool_calls", "tool_call_id")}
            for m in out.messages] == [{k: v for k, v in m.items()
                                        if k not in ("tool_calls", "tool_call_id")}
                                       for m in plain]


def test_only_ids_outside_the_portable_form_are_rewritten() -> None:
    history = [user("go"), *exchange(KIMI_IDS[0], "call_ok_1"), user("and"),
               *exchange(LONG_ID), *exchange(KIMI_IDS[1]), user("done?")]
    out = project_strict(history, asks=StrictAsks(call_ids="portable"))
    ids = _call_ids(out.messages)
    assert ids[1] == "call_ok_1" and ids[0] not in KIMI_IDS and ids[2] != LONG_ID
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,40}", i) for i in ids)
    assert _result_ids(out.messages) == ids
    assert sorted(a.tool_call_id or "" for a in out.anomalies
                  if a.kind == TOOL_CALL_ID_REWRITTEN) == sorted([*KIMI_IDS, LONG_ID])
    assert project_strict(history).messages[1]["tool_calls"][0]["id"] == KIMI_IDS[0]


def test_a_rewritten_id_never_takes_one_the_history_uses() -> None:
    # The id a hash would give, already in the history: the rewrite picks another.
    from gateway.projection.call_ids import _fresh_id
    taken = _fresh_id(OPENAI_IDS[0], set())
    history = [user("go"), *exchange(OPENAI_IDS[0]), user("more"), *exchange(taken),
               user("end")]
    ids = _call_ids(project_strict(history, asks=StrictAsks(call_ids="nine_alnum")).messages)
    assert ids[1] == taken and ids[0] != taken and re.fullmatch(r"[A-Za-z0-9]{9}", ids[0])


def test_duplicate_and_unanswered_ids_are_rewritten_consistently() -> None:
    history = [user("go"), *exchange(OPENAI_IDS[0]), user("again"), *exchange(OPENAI_IDS[0]),
               calls(OPENAI_IDS[1]), user("stop")]
    out = project_strict(history, asks=StrictAsks(call_ids="nine_alnum"))
    ids = _call_ids(out.messages)
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids)
    assert set(_result_ids(out.messages)) == set(ids)  # deduped, synthesized, all paired


def test_arguments_that_are_no_json_object_are_sent_inside_one_when_asked() -> None:
    calls = [{"id": "call_1", "type": "function",
              "function": {"name": "f", "arguments": '{"a": 1'}},  # cut off
             {"id": "call_2", "type": "function",
              "function": {"name": "f", "arguments": '["a"]'}},  # JSON, no object
             {"id": "call_3", "type": "function",
              "function": {"name": "f", "arguments": '{"a": 2}'}}]
    history = [user("go"), {"role": "assistant", "content": None, "tool_calls": calls},
               *({"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls),
               user("again")]
    snapshot = json.dumps(history)
    out = project_strict(history, asks=StrictAsks(arguments=True))
    assert json.dumps(history) == snapshot  # never mutated
    sent = [c["function"]["arguments"] for c in out.messages[1]["tool_calls"]]
    assert [json.loads(a) for a in sent] == [
        {"unparsed_arguments": '{"a": 1'}, {"unparsed_arguments": '["a"]'}, {"a": 2}]
    assert [(a.kind, a.tool_call_id) for a in out.anomalies] == [
        ("tool_arguments_wrapped", "call_1"), ("tool_arguments_wrapped", "call_2")]
    assert project_strict(out.messages, asks=StrictAsks(arguments=True)).anomalies == ()
    # Not asked: the arguments go as sent.
    assert project_strict(history).messages[1]["tool_calls"] == calls
