"""Condensing tool outputs: each rule, what is never touched, and the prefix kept turn to
turn (a property test over generated agent histories)."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.projection.condense import (
    MIN_CHARS,
    REPEATED_LINE,
    SAME_OUTPUT,
    ToolOutputCondenser,
    condense_text,
)
from tests.factories import calls, tool, user

FILE = "def main():\n    return 42\n" * 20  # a file an agent reads twice
TREE = {"name": "gateway", "files": [{"path": f"src/{n}.py", "lines": n * 10}
                                     for n in range(12)], "ok": True, "ratio": 0.25}
PRETTY = json.dumps(TREE, indent=2)
LOG = ("\x1b[32mPASSED\x1b[0m tests/test_a.py::test_one  \n"
       + "Downloading 10%\rDownloading 55%\rDownloading 100%\n"
       + "warning: retrying connection\n" * 40 + "done\n" + "x" * 60)


def test_indented_json_is_written_compactly_with_the_same_values() -> None:
    out = condense_text(PRETTY)
    assert out == orjson.dumps(TREE).decode()
    assert json.loads(out) == TREE and list(json.loads(out)) == list(TREE)


def test_json_that_would_not_come_back_the_same_keeps_its_values_as_written() -> None:
    # A duplicate key (a parser keeps one), a number orjson cannot hold, a 128-bit integer.
    pad = '",\n  "pad": "' + "p" * MIN_CHARS + '"\n}'
    for value in ('1,\n  "a": 2', "1e400", "340282366920938463463374607431768211456"):
        text = '{\n  "a": ' + value + pad.replace('",', ",", 1)
        assert condense_text(text) == text, value


def test_terminal_noise_goes_and_repeated_lines_are_counted() -> None:
    out = condense_text(LOG)
    assert "\x1b" not in out and "\r" not in out
    assert out.startswith("PASSED tests/test_a.py::test_one\nDownloading 100%\n")
    assert ("warning: retrying connection\n" + REPEATED_LINE.format(times=39) + "\ndone\n"
            in out)
    assert len(out) < len(LOG) // 3


def test_text_with_nothing_to_condense_is_the_same_object() -> None:
    text = "plain output, each line different\n" + "\n".join(str(n) for n in range(100))
    assert condense_text(text) is text


def test_repeated_results_reference_the_first_and_nothing_else_changes() -> None:
    messages = [user("read main.py"), calls("call_1"), tool("call_1", FILE),
                {"role": "assistant", "content": PRETTY},  # not a tool result: as sent
                user("again"), calls("call_2"), tool("call_2", FILE),
                calls("call_3"), tool("call_3", "short"),
                calls("call_4"), tool("call_4", PRETTY)]
    before = copy.deepcopy(messages)
    condensed = ToolOutputCondenser().condense(messages)
    assert messages == before  # the client's messages are never edited
    out = condensed.messages
    assert out[2] is messages[2]  # the first read: as sent (nothing to condense in it)
    assert out[6] == {**messages[6], "content": SAME_OUTPUT.format(call_id="call_1")}
    assert out[3] is messages[3] and out[8] is messages[8]
    assert out[10]["content"] == orjson.dumps(TREE).decode()
    assert (condensed.outputs, condensed.referenced) == (2, 1)
    assert condensed.indexes == (6, 10)
    assert condensed.chars_before == len(FILE) + len(PRETTY)
    assert condensed.saved_chars > len(FILE)


def test_text_parts_are_condensed_and_other_parts_kept() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    block = {"type": "text", "text": PRETTY, "cache_control": {"type": "ephemeral"}}
    messages = [user("q"), calls("call_1"),
                {"role": "tool", "tool_call_id": "call_1", "content": [block, image]}]
    out = ToolOutputCondenser().condense(messages).messages
    parts = out[2]["content"]
    assert parts[1] is image
    assert parts[0] == {**block, "text": orjson.dumps(TREE).decode()}


def test_a_history_without_anything_to_condense_is_the_same_list() -> None:
    messages = [user("q"), calls("call_1"), tool("call_1", "ok")]
    condensed = ToolOutputCondenser().condense(messages)
    assert condensed.messages is messages and condensed.outputs == 0


_OUTPUTS = st.sampled_from([FILE, PRETTY, LOG, "short", "line\n" * 80, FILE + "changed"])


@settings(max_examples=60, deadline=None)
@given(st.lists(_OUTPUTS, min_size=1, max_size=12), st.integers(min_value=1, max_value=12))
def test_an_earlier_turn_is_condensed_into_the_very_same_bytes(
    outputs: list[str], cut: int
) -> None:
    # Turn N+1 resends turn N's messages: condensed, they are a prefix of turn N+1's, so
    # the provider's prompt cache keeps hitting.
    messages: list[Any] = [user("work")]
    for n, text in enumerate(outputs):
        messages += [calls(f"call_{n}"), tool(f"call_{n}", text)]
    earlier = messages[: 1 + 2 * min(cut, len(outputs))]
    condenser = ToolOutputCondenser()
    whole = orjson.dumps(condenser.condense(messages).messages)
    turn = orjson.dumps(ToolOutputCondenser().condense(earlier).messages)
    assert whole.startswith(turn[:-1])


def test_the_memory_of_condensed_texts_is_bounded_by_characters() -> None:
    condenser = ToolOutputCondenser(max_chars=10 * len(PRETTY))
    texts = [PRETTY + " " * n + "x" for n in range(40)]  # distinct live strings
    for text in texts:
        assert condenser.text(text) == condense_text(text)
    assert condenser._chars <= 10 * len(PRETTY) + len(texts[-1])
    assert len(condenser._texts) <= 10
    assert condenser.text(texts[-1]) == condense_text(texts[-1])  # the latest, remembered
