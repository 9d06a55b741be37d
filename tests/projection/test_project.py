"""project(): one test per repair kind, alone and combined."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.projection import SYNTHETIC_TOOL_RESULT_TEXT, Anomaly, project, project_strict
from gateway.projection.anomalies import (
    DUPLICATE_TOOL_RESULT_DROPPED,
    EMPTY_CONTENT_DROPPED,
    ORPHAN_TOOL_RESULT_DROPPED,
    TOOL_RESULT_REORDERED,
    TOOL_RESULT_SYNTHESIZED,
    USER_MESSAGES_MERGED,
)
from tests.factories import (
    assistant,
    calls,
    developer,
    exchange,
    image_part,
    system,
    text_part,
    tool,
    user,
)

Message = dict[str, Any]


def synthetic(call_id: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": SYNTHETIC_TOOL_RESULT_TEXT}


def roles(messages: list[Message]) -> list[str]:
    return [m["role"] for m in messages]


# --- valid histories -------------------------------------------------------------------


def test_valid_history_comes_out_as_the_same_objects() -> None:
    history = [
        system("be brief", x_unknown={"a": 1}),
        user([text_part("look", cache_control={"type": "ephemeral"}), image_part()]),
        *exchange("call_a", "call_b", content="Checking."),
        assistant("Both done.", reasoning_content="thought"),
        user("thanks", name="alice"),
        user("and more"),
    ]
    result = project(history)
    assert result.anomalies == ()
    assert not result.repaired
    assert result.messages == history
    assert all(a is b for a, b in zip(result.messages, history, strict=True))


def test_returned_list_is_a_new_list() -> None:
    history = [user("hi"), assistant("hello")]
    result = project(history)
    result.messages.append(user("more"))
    assert len(history) == 2


def test_tool_call_ids_reused_across_turns_are_valid() -> None:
    history = [user("a"), *exchange("call_0"), user("b"), *exchange("call_0"), assistant("done")]
    result = project(history)
    assert result.anomalies == ()
    assert all(a is b for a, b in zip(result.messages, history, strict=True))


def test_empty_history_stays_empty() -> None:
    assert project([]).messages == []
    assert project([]).anomalies == ()


# --- orphan_tool_result_dropped --------------------------------------------------------


def test_orphan_result_is_dropped() -> None:
    history = [user("q"), *exchange("call_a"), tool("call_ghost", "stale"), assistant("ok")]
    result = project(history)
    assert result.messages == [history[0], history[1], history[2], history[4]]
    assert result.anomalies == (Anomaly(ORPHAN_TOOL_RESULT_DROPPED, 3, "call_ghost"),)


def test_result_before_its_call_is_an_orphan_and_the_call_gets_a_synthetic_result() -> None:
    history = [user("q"), tool("call_a", "early"), calls("call_a")]
    result = project(history)
    assert result.messages == [history[0], history[2], synthetic("call_a")]
    assert result.anomalies == (
        Anomaly(ORPHAN_TOOL_RESULT_DROPPED, 1, "call_a"),
        Anomaly(TOOL_RESULT_SYNTHESIZED, None, "call_a", trailing=True),
    )


def test_tool_message_without_id_is_an_orphan() -> None:
    history = [user("q"), assistant("a"), {"role": "tool", "content": "x"}]
    result = project(history)
    assert result.messages == history[:2]
    assert result.anomalies == (Anomaly(ORPHAN_TOOL_RESULT_DROPPED, 2, None),)


def test_sizing_guard_keeps_tool_messages_of_a_slice_without_assistant() -> None:
    history = [tool("call_a", "out"), user("q"), tool("call_b", "out")]
    result = project(history, partial=True)
    assert result.anomalies == ()
    assert result.messages == history


def test_a_whole_request_without_assistant_drops_its_orphans() -> None:
    history = [tool("call_a", "out"), user("q"), tool("call_b", "out")]
    result = project(history)
    assert result.messages == [history[1]]
    assert [a.kind for a in result.anomalies] == [ORPHAN_TOOL_RESULT_DROPPED] * 2


# --- tool_result_reordered -------------------------------------------------------------


def test_result_separated_by_a_user_message_moves_back() -> None:
    history = [user("q"), calls("call_a"), user("hurry"), tool("call_a", "out")]
    result = project(history)
    assert result.messages == [history[0], history[1], history[3], history[2]]
    assert result.anomalies == (Anomaly(TOOL_RESULT_REORDERED, 3, "call_a"),)


def test_parallel_results_right_after_their_calls_stay_in_their_order() -> None:
    # Results appended as the tools finished: valid on every wire as sent.
    history = [user("q"), calls("call_a", "call_b", "call_c"), tool("call_c", "c"),
               tool("call_a", "a"), tool("call_b", "b"), assistant("done")]
    result = project(history)
    assert result.messages == history and result.anomalies == ()
    # A strict upstream gets them in call order.
    strict = project_strict(history)
    assert strict.messages == [*history[:2], history[3], history[4], history[2], history[5]]
    assert {a.kind for a in strict.anomalies} == {TOOL_RESULT_REORDERED}


def test_parallel_results_are_put_in_call_order_when_one_is_moved() -> None:
    history = [user("q"), calls("call_a", "call_b"), tool("call_b", "b"), user("x"),
               tool("call_a", "a")]
    result = project(history)
    assert result.messages[:4] == [history[0], history[1], history[4], history[2]]
    assert {a.kind for a in result.anomalies} == {TOOL_RESULT_REORDERED}
    assert {a.tool_call_id for a in result.anomalies} == {"call_a", "call_b"}


def test_system_message_between_call_and_results_goes_after_them() -> None:
    history = [user("q"), calls("call_a"), system("note"), tool("call_a", "a"), assistant("ok")]
    result = project(history)
    assert roles(result.messages) == ["user", "assistant", "tool", "system", "assistant"]
    assert result.anomalies == (Anomaly(TOOL_RESULT_REORDERED, 3, "call_a"),)


def test_only_the_moved_result_is_reported() -> None:
    history = [user("q"), calls("call_a", "call_b"), tool("call_a"), user("x"), tool("call_b")]
    result = project(history)
    assert roles(result.messages) == ["user", "assistant", "tool", "tool", "user"]
    assert result.anomalies == (Anomaly(TOOL_RESULT_REORDERED, 4, "call_b"),)


# --- tool_result_synthesized -----------------------------------------------------------


def test_missing_result_mid_history_is_synthesized_and_not_trailing() -> None:
    history = [user("q"), calls("call_a"), user("next"), assistant("ok")]
    result = project(history)
    assert result.messages == [history[0], history[1], synthetic("call_a"), *history[2:]]
    assert result.anomalies == (Anomaly(TOOL_RESULT_SYNTHESIZED, None, "call_a"),)


def test_missing_result_at_the_end_is_trailing() -> None:
    history = [user("q"), calls("call_a", "call_b"), tool("call_a", "a")]
    result = project(history)
    assert result.messages == [*history, synthetic("call_b")]
    assert result.anomalies == (Anomaly(TOOL_RESULT_SYNTHESIZED, None, "call_b", trailing=True),)


def test_synthesized_result_takes_its_slot_without_reordering_the_others() -> None:
    history = [user("q"), calls("call_a", "call_b"), tool("call_b", "b"), user("go on")]
    result = project(history)
    assert result.messages == [history[0], history[1], synthetic("call_a"), *history[2:]]
    assert result.anomalies == (Anomaly(TOOL_RESULT_SYNTHESIZED, None, "call_a"),)


# --- duplicate_tool_result_dropped -----------------------------------------------------


def test_duplicate_result_keeps_the_last_one() -> None:
    history = [user("q"), calls("call_a"), tool("call_a", "first"), tool("call_a", "second")]
    result = project(history)
    assert result.messages == [history[0], history[1], history[3]]
    assert result.anomalies == (Anomaly(DUPLICATE_TOOL_RESULT_DROPPED, 2, "call_a"),)


def test_late_duplicate_wins_and_moves_back() -> None:
    history = [user("q"), *exchange("call_a"), user("again"), tool("call_a", "retry")]
    result = project(history)
    assert result.messages == [history[0], history[1], history[4], history[3]]
    assert set(result.anomalies) == {
        Anomaly(DUPLICATE_TOOL_RESULT_DROPPED, 2, "call_a"),
        Anomaly(TOOL_RESULT_REORDERED, 4, "call_a"),
    }


# --- empty_content_dropped -------------------------------------------------------------


def test_whitespace_user_message_is_dropped() -> None:
    history = [user("q"), assistant("a"), user(" \n\t"), assistant("b")]
    result = project(history)
    assert result.messages == [history[0], history[1], history[3]]
    assert result.anomalies == (Anomaly(EMPTY_CONTENT_DROPPED, 2),)


def test_whitespace_parts_are_removed_and_media_kept() -> None:
    image = image_part()
    history = [user([text_part(" "), image, text_part("see"), text_part("")])]
    result = project(history)
    assert result.messages == [user([image, text_part("see")])]
    assert result.messages[0]["content"][0] is image
    assert result.anomalies == (Anomaly(EMPTY_CONTENT_DROPPED, 0),)


@pytest.mark.parametrize("content", ["", "  ", None])
def test_blank_content_of_a_calling_assistant_stays_as_sent(content: Any) -> None:
    # OpenAI accepts it, and many SDKs and agent frameworks send "" there by default.
    history = [user("q"), *exchange("call_a", content=content)]
    result = project(history)
    assert result.messages == history
    assert result.messages[1] is history[1]
    assert result.anomalies == ()


def test_blank_content_of_a_calling_assistant_becomes_none_only_when_strict() -> None:
    history = [user("q"), *exchange("call_a", content="  ")]
    result = project_strict(history)
    assert result.messages[1] == {**history[1], "content": None}
    assert result.messages[2] is history[2]
    assert result.anomalies == (Anomaly(EMPTY_CONTENT_DROPPED, 1),)


def test_empty_system_developer_and_assistant_messages_are_dropped() -> None:
    history = [
        system(""),
        developer([text_part(" ")]),
        system("kept"),
        user("q"),
        assistant(None),
        assistant([]),
        assistant("answer"),
    ]
    result = project(history)
    assert result.messages == [history[2], history[3], history[6]]
    assert [a.index for a in result.anomalies] == [0, 1, 4, 5]
    assert {a.kind for a in result.anomalies} == {EMPTY_CONTENT_DROPPED}


def test_assistant_with_only_a_refusal_or_audio_is_kept() -> None:
    history = [
        user("q"),
        assistant(None, refusal="I can't"),
        user("r"),
        assistant(audio={"id": "a1"}),
    ]
    assert project(history).anomalies == ()


def test_image_only_user_message_is_kept() -> None:
    history = [user([image_part()]), assistant("nice")]
    assert project(history).anomalies == ()


# --- user_messages_merged --------------------------------------------------------------


def test_adjacent_users_are_valid_as_sent() -> None:
    # OpenAI accepts user messages in a row (a text then an image, two quick messages):
    # project() leaves them; only project_strict() merges them for alternating wires.
    image = image_part()
    history = [user("first"), user("second"), user([image, text_part("at this")])]
    result = project(history)
    assert result.messages == history and result.anomalies == ()


def test_strict_merges_adjacent_plain_users_with_a_blank_line() -> None:
    history = [user("first"), user("second"), user("third")]
    result = project_strict(history)
    assert result.messages == [user("first\n\nsecond\n\nthird")]
    assert result.anomalies == (
        Anomaly(USER_MESSAGES_MERGED, 1),
        Anomaly(USER_MESSAGES_MERGED, 2),
    )


def test_strict_merges_string_and_parts_as_parts() -> None:
    image = image_part()
    history = [user("look"), user([image, text_part("at this")])]
    result = project_strict(history)
    assert result.messages == [user([text_part("look"), image, text_part("at this")])]


def test_users_with_extra_fields_are_not_merged() -> None:
    history = [user("a", name="alice"), user("b"), user("c", name="bob")]
    assert project(history).anomalies == ()
    assert project_strict(history).anomalies == ()


def test_users_made_adjacent_by_a_dropped_message_stay_apart() -> None:
    history = [user("a"), assistant("   "), user("b"), assistant("ok")]
    result = project(history)
    assert result.messages == [user("a"), user("b"), history[3]]
    assert result.anomalies == (Anomaly(EMPTY_CONTENT_DROPPED, 1),)
    strict = project_strict(history)
    assert strict.messages == [user("a\n\nb"), history[3]]
    assert strict.anomalies == (
        Anomaly(EMPTY_CONTENT_DROPPED, 1),
        Anomaly(USER_MESSAGES_MERGED, 2),
    )


def test_users_made_adjacent_by_a_dropped_orphan_merge_when_strict() -> None:
    history = [user("a"), assistant("x"), user("b"), tool("call_gone"), user("c")]
    assert project(history).messages == [user("a"), history[1], user("b"), user("c")]
    assert project_strict(history).messages == [user("a"), history[1], user("b\n\nc")]


# --- combined --------------------------------------------------------------------------


def test_cancelled_trimmed_and_forked_history_is_repaired() -> None:
    history = [
        system("sys"),
        tool("call_trimmed", "old output"),  # trimmer cut its call away
        user("fix the bug"),
        calls("call_read", "call_grep", content="Looking."),
        tool("call_grep", "grep out"),  # parallel tools finished out of order
        user("   "),  # an empty message slipped in
        tool("call_read", "file body"),
        tool("call_read", "file body again"),  # retried
        user("also check tests"),
        calls("call_test"),  # user cancelled: no result
        user("stop"),
    ]
    snapshot = copy.deepcopy(history)
    result = project(history)
    assert history == snapshot
    assert result.messages == [
        history[0],
        history[2],
        history[3],
        history[4],  # results in completion order, one after the other once the blank
        history[7],  # message and the first of the retried results are gone: kept so
        history[8],
        history[9],
        synthetic("call_test"),
        history[10],
    ]
    assert result.counts() == {
        EMPTY_CONTENT_DROPPED: 1,
        ORPHAN_TOOL_RESULT_DROPPED: 1,
        DUPLICATE_TOOL_RESULT_DROPPED: 1,
        TOOL_RESULT_SYNTHESIZED: 1,
    }
    assert not any(a.trailing for a in result.anomalies)
    assert project(result.messages).anomalies == ()
