"""The compacted shape, the HEAD / TAIL budget, TODO carry and Context Recovery."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

from gateway.compaction import (
    CONTINUATION_TEXT,
    SUMMARY_PREFIX,
    TRUNCATION_MARK,
    ArchiveRef,
    KeptUsers,
    build_compacted_messages,
    compact,
    context_recovery_section,
    find_todo_list,
    select_kept_user_messages,
    token_counter,
)
from tests.factories import user

Message = dict[str, Any]


def words(messages: Sequence[Message]) -> int:
    """A deterministic counter: one token per whitespace-separated word."""
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += len(content.split())
        elif isinstance(content, list):
            total += sum(len(str(p.get("text", "")).split()) for p in content)
    return total



def para(tag: str, n: int) -> str:
    return " ".join(f"{tag}w{i}" for i in range(n))


def _elided_figure(note: str) -> int:
    match = re.search(r"About ([\d,]+) tokens", note)
    assert match, note
    return int(match.group(1).replace(",", ""))


def test_exact_shape_and_order() -> None:
    history = [
        {"role": "system", "content": "sys"},
        {"role": "developer", "content": "dev"},
        user("Write a tokenizer."),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        user("<bash-stdout>ok</bash-stdout>"),
        {"role": "assistant", "content": "Tokenizer written."},
        user("Also handle unicode."),
    ]
    before = copy.deepcopy(history)
    result = compact(history, "  The summary.  ", count_tokens=words)
    out = result.messages
    assert [m["role"] for m in out] == ["system", "developer", "user", "user", "user", "user"]
    assert out[0] is history[0] and out[1] is history[1]
    assert out[2] is history[2] and out[3] is history[7]  # verbatim, same dicts
    assert out[4] == {"role": "user", "content": SUMMARY_PREFIX + "\n\nThe summary."}
    assert out[5] == {
        "role": "user",
        "content": (
            "<system-reminder>Context compaction is complete — continue the work that was in "
            "progress when it began.</system-reminder>"
        ),
    }
    assert out[5]["content"] == CONTINUATION_TEXT
    assert history == before
    assert result.tokens_before == words(history)
    assert result.tokens_after == words(out)
    assert result.kept_user_messages == 2 and result.elided_tokens == 0


def test_under_the_limit_everything_is_kept_without_a_note() -> None:
    history = [user(para(f"m{i}", 1000)) for i in range(20)]  # exactly 20,000
    kept = select_kept_user_messages(history, words)
    assert kept.elided_tokens == 0
    assert kept.messages == history


def test_head_and_tail_budget_with_whole_messages() -> None:
    history: list[Message] = []
    for i in range(30):  # 30,000 tokens of real user input
        history.append(user(para(f"m{i}", 1000)))
        history.append({"role": "assistant", "content": para("a", 500)})
    kept = select_kept_user_messages(history, words)
    users = history[::2]
    assert list(kept.head) == users[:2]  # first 2,000 tokens
    assert list(kept.tail) == users[-18:]  # last 18,000 tokens
    assert all(a is b for a, b in zip(kept.tail, users[-18:], strict=True))
    assert kept.elided_tokens == 10_000
    messages = kept.messages
    assert messages[2]["role"] == "user"
    note = messages[2]["content"]
    assert note.startswith("<system-reminder>") and note.endswith("</system-reminder>")
    assert _elided_figure(note) == 10_000
    assert "summary" in note
    assert words(kept.head) == 2_000 and words(kept.tail) == 18_000


def test_straddling_messages_are_truncated_at_the_boundaries() -> None:
    history = [
        user(para("task", 3000)),  # the original task: longer than the HEAD
        *[user(para(f"m{i}", 700)) for i in range(40)],
    ]
    kept = select_kept_user_messages(history, words)
    assert len(kept.head) == 1
    head_text = kept.head[0]["content"]
    assert head_text.startswith("taskw0 taskw1 ")
    assert head_text.endswith(TRUNCATION_MARK)
    assert 1_900 <= words(kept.head) <= 2_000
    tail_first = kept.tail[0]["content"]
    assert tail_first.startswith(TRUNCATION_MARK)  # the end of a message that straddles
    assert tail_first.rstrip().endswith(history[-26]["content"].split()[-1])
    assert 17_900 <= words(kept.tail) <= 18_000
    assert list(kept.tail[1:]) == history[-25:]
    total = 3000 + 40 * 700
    assert abs(kept.elided_tokens - (total - words(kept.head) - words(kept.tail))) <= 4


def test_one_huge_message_keeps_its_start_and_its_end() -> None:
    text = para("log", 50_000)
    kept = select_kept_user_messages([user(text)], words)
    assert len(kept.head) == 1 and len(kept.tail) == 1
    assert kept.head[0]["content"].startswith("logw0 ")
    assert kept.tail[0]["content"].endswith("logw49999")
    assert 29_000 < kept.elided_tokens < 31_000
    assert _elided_figure(kept.messages[1]["content"]) == round(kept.elided_tokens, -2)


def test_head_tail_budget_with_real_token_counts() -> None:
    count = token_counter("gpt-4o")
    history = [
        user(f"Request {i}: " + "refactor the module and keep tests green. " * 120)
        for i in range(40)
    ]
    assert count(history) > 20_000
    kept = select_kept_user_messages(history, count)
    assert 1_800 <= count(kept.head) <= 2_000
    assert 17_500 <= count(kept.tail) <= 18_000
    assert kept.head[0] is history[0]
    assert kept.tail[-1] is history[-1]
    assert kept.elided_tokens == count(history) - count(kept.head) - count(kept.tail)


def test_list_content_straddling_keeps_whole_parts_then_cuts_text() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://x.invalid/a.png"}}
    first = user(
        [
            {"type": "text", "text": para("intro", 100)},
            image,
            {"type": "text", "text": para("body", 5000)},
        ]
    )
    history = [first, *[user(para(f"m{i}", 1000)) for i in range(25)]]
    kept = select_kept_user_messages(history, words)
    parts = kept.head[0]["content"]
    assert parts[0] is first["content"][0] and parts[1] is image
    assert parts[2]["text"].startswith("bodyw0 ") and parts[2]["text"].endswith(TRUNCATION_MARK)
    assert first["content"][2]["text"].endswith("bodyw4999")  # input untouched


def test_todo_list_is_carried_before_context_recovery() -> None:
    history = [
        user("Build it."),
        {"role": "assistant", "content": "## TODO List\n- [ ] old item\n"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "text",
                    "text": (
                        "Progress.\n\n## TODO List\n- [x] parse\n- [ ] emit\n\n"
                        "## Notes\nnot part of it"
                    ),
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "## TODO List\n- [ ] from a tool"},
    ]
    assert find_todo_list(history) == "## TODO List\n- [x] parse\n- [ ] emit"
    ref = ArchiveRef("sess-42", 1, 57)
    result = compact(history, "Summary text.", count_tokens=words, archive_ref=ref)
    summary = result.messages[-2]["content"]
    assert summary.startswith(SUMMARY_PREFIX + "\n\nSummary text.")
    todo_at = summary.index("## TODO List\n- [x] parse\n- [ ] emit")
    recovery_at = summary.index("## Context Recovery")
    assert summary.index("Summary text.") < todo_at < recovery_at
    assert summary.rstrip().endswith("GET /v1/gateway/sessions/sess-42/archive?from=1&to=57")
    assert "old item" not in summary and "not part of it" not in summary
    assert result.todo_carried


def test_todo_list_already_in_the_summary_is_not_repeated() -> None:
    todo = "## TODO List\n- [ ] ship"
    history = [user("go"), {"role": "assistant", "content": todo}, user("go on")]
    out = compact(history, f"Work so far.\n\n{todo}", count_tokens=words).messages
    assert out[-2]["content"].count("## TODO List") == 1
    assert find_todo_list([user("no list here")]) is None


def test_context_recovery_names_session_lines_and_read_only_endpoint() -> None:
    section = context_recovery_section("a b/c", 120, 348)
    assert section.startswith("## Context Recovery\n\nEverything before this note is still on "
                              "disk in this agent's event log (read-only, append-only):")
    assert "`a b/c`" in section
    assert "120 to 348" in section
    assert section.endswith("GET /v1/gateway/sessions/a%20b%2Fc/archive?from=120&to=348")


def test_context_recovery_lists_one_range_per_compaction_window() -> None:
    ref = ArchiveRef("s", 58, 90, earlier=((1, 40), (41, 57)))
    section = context_recovery_section(ref.session_id, ref.ranges)
    lines = [line for line in section.splitlines() if line.startswith("- compaction")]
    assert lines == [
        "- compaction 1: archive lines 1 to 40 (inclusive): "
        "GET /v1/gateway/sessions/s/archive?from=1&to=40",
        "- compaction 2: archive lines 41 to 57 (inclusive): "
        "GET /v1/gateway/sessions/s/archive?from=41&to=57",
        "- compaction 3: archive lines 58 to 90 (inclusive): "
        "GET /v1/gateway/sessions/s/archive?from=58&to=90",
    ]


def test_build_accepts_kept_users_or_a_plain_list() -> None:
    system = [{"role": "system", "content": "s"}]
    kept = KeptUsers(head=(user("a"),), tail=(user("z"),), elided_tokens=4321)
    out = build_compacted_messages(system, kept, "sum")
    assert [m["content"][:17] for m in out[1:4]] == ["a", "<system-reminder>", "z"]
    assert "About 4,300 tokens" in out[2]["content"]
    plain = build_compacted_messages(system, [user("a")], "sum")
    assert len(plain) == 4 and plain[1]["content"] == "a"
