"""The recall tool's pure parts: the tool and its name, arguments, archive search and reads,
redaction, the size bound, and reading tool calls off the wire (body and SSE)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.recall.tool import (
    MAX_RANGE_LINES,
    RecallArgs,
    answer_call,
    client_tool_names,
    offers_recall,
    parse_args,
    pick_tool_name,
    render_lines,
    tool_schema,
    with_tool,
)
from gateway.recall.wire import (
    SseEvents,
    StreamAssembler,
    answer_from_completion,
    signal,
)
from tests.factories import assistant, tool, tool_call, user


def fn_tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def archive(*messages: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return list(enumerate(messages, start=1))


def ask(arguments: dict[str, Any], last_line: int) -> RecallArgs:
    args = parse_args(json.dumps(arguments), last_line)
    assert isinstance(args, RecallArgs), args
    return args


def test_the_tool_never_takes_a_client_tools_name() -> None:
    body = {"tools": [fn_tool("context_recall"), fn_tool("context_recall_gw")]}
    assert client_tool_names(body) == {"context_recall", "context_recall_gw"}
    assert pick_tool_name("context_recall", client_tool_names(body)) == "context_recall_gw2"
    assert pick_tool_name("context_recall", {"read_file"}) == "context_recall"
    schema = tool_schema("context_recall_gw2", "context_recall")
    assert "`context_recall` tool named in the Context Recovery note" in (
        schema["function"]["description"])
    sent = with_tool(body, schema)
    assert [t["function"]["name"] for t in sent["tools"]] == [
        "context_recall", "context_recall_gw", "context_recall_gw2"]
    assert len(body["tools"]) == 2, "the client's body is not changed"


@pytest.mark.parametrize(("body", "offered"), [
    ({}, True),
    ({"tool_choice": "auto"}, True),
    ({"tool_choice": "required"}, True),
    ({"tool_choice": "none"}, False),
    ({"tool_choice": {"type": "function", "function": {"name": "read_file"}}}, False),
    ({"functions": [{"name": "f"}]}, False),
    ({"n": 2}, False),
])
def test_which_requests_are_offered_the_tool(body: dict[str, Any], offered: bool) -> None:
    assert offers_recall(body) is offered


@pytest.mark.parametrize(("raw", "problem"), [
    ("{not json", "not a JSON object"),
    ("[1]", "must be a JSON object"),
    ('{"path": "x"}', "Unknown argument(s): path"),
    ('{"query": 3}', "`query` must be a string"),
    ('{"regex": "yes", "query": "a"}', "`regex` must be true or false"),
    ('{"from_line": "2"}', "`from_line` must be an integer"),
    ('{"from_line": 50}', "the range asked for is empty"),
    ('{"query": "(unclosed", "regex": true}', "not a valid regular expression"),
    (json.dumps({"query": "x" * 201}), "longer than 200 characters"),
])
def test_bad_arguments_are_told_to_the_model(raw: str, problem: str) -> None:
    found = parse_args(raw, 40)
    assert isinstance(found, str) and problem in found


def test_ranges_are_clamped_to_the_archive_and_to_a_page() -> None:
    assert parse_args("", 40) == RecallArgs(1, 40)
    assert parse_args('{"from_line": 0, "to_line": 999}', 40) == RecallArgs(1, 40)
    assert ask({"from_line": 5}, 10_000) == RecallArgs(5, 4 + MAX_RANGE_LINES)
    # A search covers the whole archive; a plain query is not a regex.
    assert ask({"query": " Code "}, 10_000) == RecallArgs(1, 10_000, "Code", False)


def history() -> list[tuple[int, dict[str, Any]]]:
    return archive(
        user("Open config.py"),
        assistant(None, [tool_call("c1", "read_file", {"path": "config.py"})]),
        tool("c1", "RETRIES = 3\nLAUNCH_CODE = 'ORCHID-7731'\nTIMEOUT = 30"),
        assistant("The launch code is set."),
        user("now the api key sk-live-0123456789abcdef please"),
    )


def test_plain_search_is_case_insensitive_and_shows_the_line_around_the_hit() -> None:
    lines = render_lines(history(), ())
    text = answer_call(lines, ask({"query": "launch_code"}, 5), "s-1", [(1, 5)], 4000)
    assert "Archive of session `s-1`" in text
    assert "2 matching line(s)" not in text and "1 matching line(s)" in text
    assert "[3] tool result for c1: RETRIES = 3\nLAUNCH_CODE = 'ORCHID-7731'" in text
    text = answer_call(lines, ask({"query": "launch"}, 5), "s-1", [(1, 5)], 4000)
    assert "2 matching line(s)" in text and "[4] assistant: The launch code is set." in text


def test_regex_search_and_tool_calls_are_searchable() -> None:
    lines = render_lines(history(), ())
    pattern = ask({"query": r"ORCHID-\d{4}", "regex": True}, 5)
    text = answer_call(lines, pattern, "s", [(1, 5)], 4000)
    assert "1 matching line(s)" in text and "[3]" in text
    text = answer_call(lines, ask({"query": "read_file"}, 5), "s", [(1, 5)], 4000)
    assert '[2] assistant: [calls read_file({"path": "config.py"}) id=c1]' in text


def test_a_catastrophic_pattern_stops_early_instead_of_hanging() -> None:
    lines = render_lines(archive(*(user("a" * 5000 + "!") for _ in range(20))), ())
    text = answer_call(lines, ask({"query": "(a+)+$", "regex": True}, 20), "s", [(1, 20)], 4000)
    assert "took too long and the search stopped early" in text


def test_secrets_are_redacted_before_reading_or_searching() -> None:
    secret = "sk-live-0123456789abcdef"
    lines = render_lines(history(), (secret,))
    text = answer_call(lines, ask({"from_line": 5}, 5), "s", [(1, 5)], 4000)
    assert secret not in text and "api key *** please" in text
    text = answer_call(lines, ask({"query": "sk-live-01"}, 5), "s", [(1, 5)], 4000)
    assert "0 matching line(s)" in text  # a key cannot be probed by searching for it


def test_results_are_bounded_and_say_where_to_go_on() -> None:
    big = archive(*(tool(f"c{i}", f"line {i} " + "x" * 900) for i in range(30)))
    lines = render_lines(big, ())
    text = answer_call(lines, ask({"from_line": 1}, 30), "s", [(1, 30)], 3000)
    assert len(text) <= 3000
    assert "Result size limit reached: continue from line 4 with from_line" in text
    text = answer_call(lines, ask({"query": "x"}, 30), "s", [(1, 30)], 3000)
    assert len(text) <= 3000 and "30 matching line(s)" in text
    assert "narrow the query" in text
    small = answer_call(lines, ask({"from_line": 1, "to_line": 2}, 30), "s", [(1, 30)], 3000)
    assert "archive goes on to line 30" in small


# -- reading answers off the wire -------------------------------------------------------


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks) + (
        b"data: [DONE]\r\n\r\n")


def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def test_sse_tool_calls_are_assembled_across_odd_chunk_boundaries() -> None:
    raw = sse(
        delta({"role": "assistant", "content": ""}),
        delta({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "context_recall",
                                                                   "arguments": "{\"qu"}}]}),
        # some servers repeat the whole name in every delta
        delta({"tool_calls": [{"index": 0, "function": {"name": "context_recall",
                                                        "arguments": "ery\": \"x\"}"}}]}),
        delta({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "read_file",
                                                                   "arguments": "{}"}}]}),
        delta({}, "tool_calls"),
    )
    events = SseEvents()
    seen: list[dict[str, Any]] = []
    for i in range(0, len(raw), 7):  # \r\n pairs split between chunks too
        seen.extend(events.feed(raw[i:i + 7]))
    assert events.done and len(seen) == 5
    assert [signal(e) for e in seen[:2]] == [None, "tools"]
    assembler = StreamAssembler()
    for event in seen:
        assembler.add(event)
    answer = assembler.answer()
    assert [(c.id, c.name, c.arguments) for c in answer.tool_calls] == [
        ("a", "context_recall", '{"query": "x"}'), ("b", "read_file", "{}")]
    assert [c.name for c in answer.calls_named("context_recall")] == ["context_recall"]
    assert answer.finish_reason == "tool_calls"


def test_text_streams_are_recognised_at_their_first_text() -> None:
    assert signal(delta({"role": "assistant", "content": ""})) is None
    assert signal({"choices": [], "usage": {"total_tokens": 3}}) is None
    assert signal(delta({"content": "Hi"})) == "text"
    assert signal(delta({}, "stop")) == "text"
    assert signal({"error": {"message": "boom"}}) == "text"


def test_completion_bodies() -> None:
    body = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Let me look.",
        "tool_calls": [{"id": "c", "type": "function",
                        "function": {"name": "context_recall", "arguments": "{}"}}]}}]}
    answer = answer_from_completion(json.dumps(body).encode())
    assert answer is not None and answer.content == "Let me look."
    assert [c.name for c in answer.tool_calls] == ["context_recall"]
    assert answer_from_completion(b"not json") is None
    assert answer_from_completion(b'{"choices": []}') is None
