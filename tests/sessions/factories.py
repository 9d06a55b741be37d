"""Message and record builders shared by the session store tests."""

from __future__ import annotations

from typing import Any

from gateway.sessions import CompactionRecord, prefix_chain


def history(n: int, tag: str = "") -> list[dict[str, Any]]:
    """n alternating user/assistant messages."""
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": f"{tag}message {i}"} for i in range(n)]


def record_for(
    session_id: str,
    messages: list[dict[str, Any]],
    prefix_len: int,
    summary: str,
    kind: str = "summarized",
) -> CompactionRecord:
    """A record replacing messages[:prefix_len] by a summary message."""
    return CompactionRecord.create(
        session_id=session_id,
        prefix_len=prefix_len,
        prefix_hash=prefix_chain(messages)[prefix_len - 1],
        replacement=[{"role": "user", "content": summary}],
        tokens_before=prefix_len * 100,
        tokens_after=10,
        archive_from=1,
        archive_to=prefix_len,
        kind=kind,
    )
