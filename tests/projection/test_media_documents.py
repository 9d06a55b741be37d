"""Documents on the media rung: PDFs and other files sent inline cannot be shrunk, so a
request refused as too large leaves out the earlier turns' documents (degraded), then all
of them (strip), each replaced by a note naming it. Pure: no I/O."""

from __future__ import annotations

import copy
from typing import Any

from gateway.projection.media import (
    REASON_DOCUMENT_STRIPPED,
    REASON_EARLIER_DOCUMENT,
    MediaLimits,
    degrade_messages,
    has_media_parts,
)

PDF = "JVBERi0xLjcK" * 100_000  # ~1.1 MB of base64


def chat_file(name: str) -> dict[str, Any]:
    return {"type": "file", "file": {"filename": name,
                                     "file_data": f"data:application/pdf;base64,{PDF}"}}


def anthropic_document(title: str) -> dict[str, Any]:
    return {"type": "document", "title": title,
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}}


def history(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [old, {"type": "text", "text": "read the spec"}]},
        {"role": "assistant", "content": "I read it."},
        {"role": "user", "content": [new, {"type": "text", "text": "compare with this"}]},
    ]


def notes(messages: list[dict[str, Any]]) -> list[str]:
    return [p["text"] for m in messages if isinstance(m.get("content"), list)
            for p in m["content"] if p.get("type") == "text" and p["text"].startswith("[doc")]


def test_degraded_leaves_out_the_earlier_turns_documents_and_keeps_the_newest() -> None:
    messages = history(chat_file("spec.pdf"), chat_file("draft.pdf"))
    before = copy.deepcopy(messages)
    result = degrade_messages(messages, MediaLimits(), "degraded")
    assert messages == before  # never mutated
    assert notes(result.messages) == [
        f"[document removed: spec.pdf (1.1 MB): {REASON_EARLIER_DOCUMENT}]"]
    assert result.messages[2] is messages[2]  # the newest turn's document goes as sent
    assert result.messages[0]["content"][1] == {"type": "text", "text": "read the spec"}
    assert result.counts() == {"removed": 1}
    assert result.changes[0].before_bytes == len(messages[0]["content"][0]["file"]["file_data"])


def test_strip_leaves_out_every_document() -> None:
    messages = history(anthropic_document("spec.pdf"), anthropic_document("draft.pdf"))
    result = degrade_messages(messages, MediaLimits(), "strip")
    assert notes(result.messages) == [
        f"[document removed: spec.pdf (1.1 MB): {REASON_DOCUMENT_STRIPPED}]",
        f"[document removed: draft.pdf (1.1 MB): {REASON_DOCUMENT_STRIPPED}]"]


def test_a_document_an_agent_just_read_stays_on_the_degraded_step() -> None:
    # Claude Code's Read tool returns the PDF in the tool result the model answers now.
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "summarize docs/a.pdf"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [anthropic_document("a.pdf")]},
    ]
    assert degrade_messages(messages, MediaLimits(), "degraded").messages == messages
    assert notes(degrade_messages(messages, MediaLimits(), "strip").messages) == [
        f"[document removed: a.pdf (1.1 MB): {REASON_DOCUMENT_STRIPPED}]"]


def test_documents_by_reference_and_other_parts_stay() -> None:
    by_id = {"type": "input_file", "file_id": "file-abc"}
    by_url = {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    messages = history({"type": "text", "text": "x"}, {"type": "text", "text": "y"})
    messages[0]["content"] += [by_id, by_url, audio]
    assert not has_media_parts(messages)
    assert degrade_messages(messages, MediaLimits(), "strip").messages == messages


def test_an_inline_document_is_media_for_the_ladder() -> None:
    responses_file = {"type": "input_file", "filename": "q3.pdf",
                      "file_data": f"data:application/pdf;base64,{PDF}"}
    assert has_media_parts([{"role": "user", "content": [responses_file]}])
    text_document = {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                                    "data": "plain words " * 10}}
    result = degrade_messages(history(text_document, {"type": "text", "text": "z"}),
                              MediaLimits(), "degraded")
    assert notes(result.messages) == [
        f"[document removed: (1 KB): {REASON_EARLIER_DOCUMENT}]"]

