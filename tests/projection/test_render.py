"""Tool-result rendering (SPEC §2.3) as project() applies it."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.projection import (
    EMPTY_TOOL_OUTPUT_TEXT,
    TOOL_ERROR_PREFIX,
    Anomaly,
    project,
    project_strict,
)
from gateway.projection.anomalies import (
    EMPTY_CONTENT_DROPPED,
    ORPHAN_TOOL_RESULT_DROPPED,
    TOOL_RESULT_RENDERED,
)
from tests.factories import calls, image_part, text_part, tool, user

Message = dict[str, Any]


def render(result: Message) -> tuple[Message, tuple[Anomaly, ...]]:
    """Project a one-call exchange ending in ``result``; return the result as sent."""
    projection = project([user("q"), calls("call_a"), result])
    return projection.messages[2], projection.anomalies


def test_error_result_is_prefixed_and_the_flag_consumed() -> None:
    message, anomalies = render(tool("call_a", "Traceback: boom", is_error=True))
    assert message == tool("call_a", f"{TOOL_ERROR_PREFIX}\nTraceback: boom")
    assert "is_error" not in message
    assert anomalies == (Anomaly(TOOL_RESULT_RENDERED, 2, "call_a"),)


@pytest.mark.parametrize("content", [None, []])
def test_missing_output_is_replaced(content: Any) -> None:
    message, anomalies = render(tool("call_a", content))
    assert message["content"] == EMPTY_TOOL_OUTPUT_TEXT
    assert anomalies == (Anomaly(TOOL_RESULT_RENDERED, 2, "call_a"),)


@pytest.mark.parametrize("content", ["", "  \n"])
def test_empty_string_output_stays_as_sent_and_is_replaced_only_when_strict(
    content: str,
) -> None:
    # SPEC §2.3: real tools return empty output all the time; OpenAI-style wires accept it.
    history = [user("q"), calls("call_a"), tool("call_a", content)]
    assert project(history).messages == history
    assert project(history).anomalies == ()
    strict = project_strict(history)
    assert strict.messages[2]["content"] == EMPTY_TOOL_OUTPUT_TEXT
    assert strict.anomalies == (Anomaly(TOOL_RESULT_RENDERED, 2, "call_a"),)


def test_missing_content_is_replaced() -> None:
    message, _ = render({"role": "tool", "tool_call_id": "call_a"})
    assert message == tool("call_a", EMPTY_TOOL_OUTPUT_TEXT)


def test_model_note_is_appended_on_a_new_line() -> None:
    message, _ = render(tool("call_a", "42 files", model_note="Output was truncated."))
    assert message == tool("call_a", "42 files\nOutput was truncated.")


def test_error_with_empty_output_and_note() -> None:
    message, _ = render(tool("call_a", " ", is_error=True, model_note="Exit code 1."))
    assert message["content"] == f"{TOOL_ERROR_PREFIX}\n{EMPTY_TOOL_OUTPUT_TEXT}\nExit code 1."


def test_already_prefixed_error_is_not_prefixed_again() -> None:
    message, _ = render(tool("call_a", f"{TOOL_ERROR_PREFIX}\nboom", is_error=True))
    assert message["content"] == f"{TOOL_ERROR_PREFIX}\nboom"


def test_false_error_flag_and_blank_note_are_only_consumed() -> None:
    message, anomalies = render(tool("call_a", "fine", is_error=False, model_note=" "))
    assert message == tool("call_a", "fine")
    assert anomalies == (Anomaly(TOOL_RESULT_RENDERED, 2, "call_a"),)


def test_list_content_gets_prefix_and_note_as_text_parts() -> None:
    image = image_part()
    message, _ = render(
        tool("call_a", [text_part("shot"), image], is_error=True, model_note="see image")
    )
    assert message["content"] == [
        text_part(TOOL_ERROR_PREFIX),
        text_part("shot"),
        image,
        text_part("see image"),
    ]


def test_blank_parts_of_a_result_are_removed() -> None:
    message, anomalies = render(tool("call_a", [text_part(" "), text_part("out")]))
    assert message["content"] == [text_part("out")]
    assert anomalies == (Anomaly(EMPTY_CONTENT_DROPPED, 2, "call_a"),)


def test_result_of_only_blank_parts_becomes_the_empty_text() -> None:
    message, _ = render(tool("call_a", [text_part("  ")]))
    assert message["content"] == EMPTY_TOOL_OUTPUT_TEXT


def test_other_fields_survive_rendering() -> None:
    message, _ = render(tool("call_a", None, name="lookup", x_custom=1))
    assert message == tool("call_a", EMPTY_TOOL_OUTPUT_TEXT, name="lookup", x_custom=1)


def test_rendering_is_idempotent() -> None:
    history = [user("q"), calls("call_a"), tool("call_a", "", is_error=True, model_note="n")]
    once = project(history)
    twice = project(once.messages)
    assert twice.anomalies == ()
    assert twice.messages == once.messages


def test_dropped_orphan_is_not_rendered() -> None:
    history = [user("q"), *[calls("call_a"), tool("call_a")], tool("call_x", "", is_error=True)]
    result = project(history)
    assert result.anomalies == (Anomaly(ORPHAN_TOOL_RESULT_DROPPED, 3, "call_x"),)


def test_tool_messages_under_the_sizing_guard_are_still_rendered() -> None:
    result = project([tool("call_a", None), user("q")], partial=True)
    assert result.messages == [tool("call_a", EMPTY_TOOL_OUTPUT_TEXT), user("q")]
