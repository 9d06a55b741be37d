"""Held-out attacks on condensing tool outputs: hostile and odd tool texts (JSON the
compactor must not reword, terminal output a naive cleaner would lose words of, inputs
that took the event loop quadratic time), references that could point at the wrong
result, and properties over generated texts: condensing twice changes nothing, a JSON
document's values are unchanged, the client's messages are never edited."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.projection.condense import (
    MIN_CHARS,
    REPEATED_LINE,
    SAME_OUTPUT,
    ToolOutputCondenser,
    condense_text,
)
from tests.factories import calls, tool, user

PAD = "p" * MIN_CHARS


def test_a_line_ending_in_a_carriage_return_keeps_its_words() -> None:
    # "Done\r" and a CR before a CRLF print the text and only move the cursor.
    assert condense_text("Building 10%\rBuilding 100%\nDone\r\n" + PAD) == (
        "Building 100%\nDone\n" + PAD)
    text = ("a" * 210 + "\r\r\n") * 2
    assert condense_text(text) == ("a" * 210 + "\n") * 2


def test_a_shorter_rewrite_after_a_carriage_return_is_kept_as_written() -> None:
    # A terminal would still show the tail of the first text: nothing is dropped.
    text = "Downloading package 100%\rDone\n" + PAD
    assert condense_text(text) == text
    # Old Mac line endings: rows of different lengths are all kept.
    rows = "id,name\r1,alpha\r2,b\r" + PAD
    assert condense_text(rows) == rows


def test_an_osc8_hyperlink_keeps_its_address() -> None:
    link = "\x1b]8;;https://doc.rust-lang.org/error_codes/E0308.html\x1b\\E0308\x1b]8;;\x1b\\"
    text = f"\x1b[1;31merror[{link}]\x1b[0m: mismatched types\n" + PAD
    out = condense_text(text)
    assert "https://doc.rust-lang.org/error_codes/E0308.html" in out
    assert out == f"error[{link}]: mismatched types\n" + PAD
    # Another OSC (a window title) and an unterminated one go; the words stay.
    assert condense_text("\x1b]0;build\x07ok " + PAD + "\x1b]8;;https://x.test") == (
        "ok " + PAD + "8;;https://x.test")


def test_every_kind_of_escape_goes_and_condensing_again_changes_nothing() -> None:
    text = ("\x1b(B\x1b[m\x1b7\x1b[2K\x1b8\x1bc\x1b[?25lhidden cursor\x1b[?25h\n"
            "\x1b\x1b[0m[31mnested\n" + PAD + "\x1b")
    out = condense_text(text)
    assert out == "hidden cursor\n[31mnested\n" + PAD
    assert condense_text(out) == out


def test_a_trailing_tab_is_an_empty_column_and_stays() -> None:
    rows = "".join(f"{n}\tname-{n}\t\n" for n in range(40))  # last column empty
    assert condense_text("\x1b[1m" + rows + "total   \n") == rows + "total\n"


def test_trailing_spaces_outside_terminal_output_are_content() -> None:
    # A file read for an exact-match edit (indented blank lines), a diff whose change is
    # the trailing whitespace: cutting them would make the edit miss, the change vanish.
    source = "class A:\n    def f(self):\n        return 1\n    \n    def g(self):\n" * 10
    assert condense_text(source) == source
    diff = "@@ -1,3 +1,3 @@\n-value = 1\n+value = 1   \n" + "".join(
        f" context line {n}\n" for n in range(12))
    assert condense_text(diff) == diff
    # Windows line endings alone are no terminal drawing either.
    crlf = source.replace("\n", "\r\n")
    assert condense_text(crlf) == source


def test_text_already_holding_the_repeat_note_is_not_collapsed() -> None:
    # Otherwise "x" followed by a literal note would read as seven x's.
    text = "x\n" + REPEATED_LINE.format(times=5) + "\n" + "y\n" * 30 + PAD
    assert condense_text(text) == text


def test_short_repeated_lines_are_not_replaced_by_a_longer_note() -> None:
    text = "".join(f"row {n}\n.\n.\n.\n" for n in range(60))
    assert condense_text(text) == text


def test_trailing_spaces_on_a_long_run_take_linear_time() -> None:
    # Took minutes (a backtracking pattern): the event loop serves everyone.
    text = "\x1b[0mx \n" + " " * 1_000_000 + "y" + PAD
    assert condense_text(text) == "x\n" + " " * 1_000_000 + "y" + PAD


def test_json_nested_deeper_than_orjson_writes_is_left_as_written() -> None:
    for depth in (300, 1100):
        text = "[\n" * depth + "]\n" * depth
        assert condense_text(text) == text, depth  # not collapsed into notes


def test_json_with_carriage_return_layout_is_compacted_not_cut() -> None:
    text = '{"a": [1,\r2,\r3],\r"pad": "' + PAD + '"}'
    assert json.loads(condense_text(text)) == json.loads(text)
    assert condense_text(text) == orjson.dumps(json.loads(text)).decode()


def test_json_that_only_orjson_would_reword_is_left_as_written() -> None:
    for value in ("1e5", "1E5", "-0", "1.10", '"\\u00e9"', '"\\ud800"', '"\\/"',
                  "123456789012345678901234567890"):
        text = '{\n  "v": ' + value + ',\n  "pad": "' + PAD + '"\n}'
        assert condense_text(text) == text, value
    dup = '{\n  "a": 1,\n  "a": 2,\n  "pad": "' + PAD + '"\n}'
    assert condense_text(dup) == dup


def test_coloured_json_is_compacted_to_its_values() -> None:
    doc = {"files": [{"path": f"src/{n}.py", "lines": n} for n in range(10)]}
    coloured = json.dumps(doc, indent=2).replace('"path"', '\x1b[34m"path"\x1b[0m')
    assert condense_text(coloured) == orjson.dumps(doc).decode()


def test_json_followed_by_text_keeps_its_values() -> None:
    text = json.dumps({"a": ["line\none"] * 20}, indent=2) + "\n3 results\n"
    out = condense_text(text)
    # Not one document: not rewritten as one, only the repeated lines counted.
    assert out == ('{\n  "a": [\n    "line\\none",\n' + REPEATED_LINE.format(times=18)
                   + '\n    "line\\none"\n  ]\n}\n3 results\n')


def test_a_reference_never_names_a_call_id_two_results_carry() -> None:
    text = "same listing\n" + PAD
    messages = [user("q"), calls("call_1"), tool("call_1", "other\n" + PAD),
                calls("call_1"), tool("call_1", text),
                calls("call_2"), tool("call_2", text)]
    out = ToolOutputCondenser().condense(messages).messages
    assert out[6] is messages[6]  # "call_1" would not say which of the two
    unique = [user("q"), calls("call_1"), tool("call_1", text), calls("call_2"),
              tool("call_2", text), calls("call_2"), tool("call_2", text)]
    out = ToolOutputCondenser().condense(unique).messages
    assert out[4]["content"] == SAME_OUTPUT.format(call_id="call_1")
    assert out[6]["content"] == SAME_OUTPUT.format(call_id="call_1")


def test_only_tool_results_change_and_the_client_objects_stay_as_sent() -> None:
    noisy = "\x1b[31mred\x1b[0m line   \n" * 40
    messages: list[Any] = [
        {"role": "system", "content": noisy}, user(noisy),
        {"role": "assistant", "content": noisy, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": noisy}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [
            {"type": "text", "text": noisy, "cache_control": {"type": "ephemeral"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
    ]
    before = copy.deepcopy(messages)
    out = ToolOutputCondenser().condense(messages).messages
    assert messages == before
    assert all(a is b for a, b in zip(out[:3], messages[:3], strict=True))
    assert out[3]["content"][1] is messages[3]["content"][1]
    assert out[3]["content"][0] == {"type": "text", "text": "red line\n"
                                    + REPEATED_LINE.format(times=39) + "\n",
                                    "cache_control": {"type": "ephemeral"}}


_PIECES = st.sampled_from(["\x1b", "[", "]", "8;;", "0m", "\x07", "\\", "\r", "\n", "\r\n",
                           " ", "\t", "\f", "a", "b", "{", "}", '"', ",", ":", "1", "\x1b[32m",
                           "[previous line repeated 2 more times]", "line\n" * 3])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=60).map("".join))
@example("[[\r[\r\r\n")  # a line kept as written keeps its CR before the LF
@example("\n[[\r ")  # a trailing space cut before deciding what the line shows
def test_condensing_twice_changes_nothing(text: str) -> None:
    once = condense_text(text)
    assert condense_text(once) == once
    assert len(once) <= len(text)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(st.lists(_JSON, min_size=1, max_size=4) | st.dictionaries(st.text(max_size=8), _JSON,
                                                                  min_size=1, max_size=4),
       st.sampled_from([1, 2, 4, "\t"]), st.booleans(), st.sampled_from(["\n", "\r\n"]))
def test_a_json_document_reads_as_the_same_values(
    value: Any, indent: int | str, ascii_only: bool, newline: str
) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only).replace("\n", newline)
    out = condense_text(text)
    assert json.loads(out) == json.loads(text)
    assert condense_text(out) == out


def test_a_reference_is_only_made_when_shorter_than_the_result() -> None:
    text = "listing\n" + PAD
    long_id = "call_" + "x" * 400  # chat puts no limit on a call id
    messages = [user("q"), calls(long_id), tool(long_id, text), calls("call_2"),
                tool("call_2", text)]
    out = ToolOutputCondenser().condense(messages).messages
    assert out[4] is messages[4]


def test_a_text_block_carrying_citations_is_sent_as_written() -> None:
    cited = {"type": "text", "text": "\x1b[1mquoted\x1b[0m   \n" * 30, "citations": [
        {"type": "char_location", "cited_text": "quoted", "document_index": 0,
         "start_char_index": 0, "end_char_index": 6}]}
    messages = [user("q"), calls("call_1"),
                {"role": "tool", "tool_call_id": "call_1", "content": [cited]}]
    condensed = ToolOutputCondenser().condense(messages)
    assert condensed.messages is messages and condensed.outputs == 0


def test_a_moved_cache_breakpoint_does_not_change_an_earlier_turns_bytes() -> None:
    # Turn N marks its last result's text for caching; turn N+1 moves the mark on. The
    # repeat is a reference both times (the mark kept where it was), so turn N's bytes
    # are a prefix of turn N+1's.
    text = "same listing\n" + PAD
    mark = {"type": "ephemeral"}
    turn = [user("q"), calls("call_1"), tool("call_1", text), calls("call_2"),
            {"role": "tool", "tool_call_id": "call_2",
             "content": [{"type": "text", "text": text, "cache_control": mark}]}]
    later = [*turn[:4], tool("call_2", [{"type": "text", "text": text}]), calls("call_3"),
             {"role": "tool", "tool_call_id": "call_3",
              "content": [{"type": "text", "text": "new\n" + PAD, "cache_control": mark}]}]
    first = ToolOutputCondenser().condense(turn)
    second = ToolOutputCondenser().condense(later)
    reference = SAME_OUTPUT.format(call_id="call_1")
    assert first.messages[4]["content"] == [{"type": "text", "text": reference,
                                             "cache_control": mark}]
    assert second.messages[4]["content"] == reference
    assert first.chars_after == len(reference)


_RESULTS = st.sampled_from([
    "\x1b[31mfail\x1b[0m   \n" * 30, json.dumps({"k": list(range(60))}, indent=2),
    "a\rb\r" + PAD + "\n", "row\t\n" * 50, "same\n" + PAD, "same\n" + PAD + "  ",
    "[\n" * 300 + "]\n" * 300, '{\n "a": 1e5, "pad": "' + PAD + '"\n}', "short"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_RESULTS, st.sampled_from(["c1", "c2", "c3", "c4", "c5"])),
                min_size=1, max_size=10),
       st.integers(min_value=1, max_value=10), st.booleans())
def test_hostile_histories_condense_stably_and_once(
    results: list[tuple[str, str]], cut: int, as_block: bool
) -> None:
    # Call ids repeat (a history with duplicate ids), results are hostile; the client's
    # messages stay as sent, an earlier turn condenses into the same bytes, a condensed
    # history condenses into itself, and a JSON document still reads as its values.
    messages: list[Any] = [user("work")]
    for text, call_id in results:
        content: Any = [{"type": "text", "text": text}] if as_block else text
        messages += [calls(call_id), tool(call_id, content)]
    before = copy.deepcopy(messages)
    condenser = ToolOutputCondenser()
    out = condenser.condense(messages).messages
    assert messages == before
    earlier = ToolOutputCondenser().condense(messages[: 1 + 2 * min(cut, len(results))])
    assert orjson.dumps(out).startswith(orjson.dumps(earlier.messages)[:-1])
    assert ToolOutputCondenser().condense(out).messages == out
    for sent, (text, _) in zip(out[2::2], results, strict=True):
        got = sent["content"] if isinstance(sent["content"], str) else sent["content"][0]["text"]
        if got.startswith("[Same output"):
            continue
        try:
            value = json.loads(text)
        except ValueError:
            continue
        assert json.loads(got) == value
