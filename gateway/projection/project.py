"""project() and project_strict(): repair a chat history into a wire-valid shape (SPEC §2).

Both are pure: the input list and its dicts are never mutated; the result shares every
message that needed no repair. The pipeline, each step over (input index, message) entries:

1. blank text removed, empty messages dropped (``empty_content_dropped``);
2. strict only: duplicate tool call ids deduped, then leading non-user messages dropped;
3. exchanges laid out: results paired, moved, deduplicated, synthesized (exchanges.py);
4. tool results rendered (render.py);
5. strict only: consecutive assistants merged, a user placeholder put in front if the
   history has no user message;
6. adjacent plain user messages merged.

Strict steps 2 run before pairing rather than after it: the output is the same as pairing
first and re-pairing afterwards, without synthesizing results for calls that are dropped.
"""

from __future__ import annotations

from typing import Any

from gateway.projection.anomalies import (
    EMPTY_CONTENT_DROPPED,
    TOOL_RESULT_RENDERED,
    USER_MESSAGES_MERGED,
    Anomaly,
    Projection,
)
from gateway.projection.content import clean_message, join_contents
from gateway.projection.exchanges import Entry, lay_out, role_of, tool_call_id_of
from gateway.projection.fastpath import is_clean
from gateway.projection.render import render_tool_result
from gateway.projection.strict import (
    dedupe_tool_calls,
    drop_leading_non_user,
    has_user,
    insert_user_placeholder,
    merge_assistants,
)


def project(messages: list[dict[str, Any]], *, partial: bool = False) -> Projection:
    """Project a history into a wire-valid shape; a valid history comes out identical.

    Pairs tool calls with results (orphans dropped, results moved next to their call,
    duplicates dropped, missing ones synthesized), drops blank text and empty messages,
    renders tool results and merges adjacent plain user messages. Never mutates the input.

    ``partial`` says ``messages`` is a slice of a history (for estimating or trimming), not
    a whole request: then the SPEC sizing guard applies, and a slice holding no assistant
    message keeps its tool messages unpaired instead of dropping them as orphans. A request
    is a whole history, so the server projects with ``partial=False``: its output always
    satisfies the pairing rules.
    """
    if is_clean(messages, partial=partial):
        return Projection(list(messages))
    return run_pipeline(messages, strict=False, partial=partial)


def project_strict(messages: list[dict[str, Any]]) -> Projection:
    """project() plus the strict passes, for a request a provider refused as invalid.

    On top of project(): duplicate tool call ids keep their first occurrence, consecutive
    assistant messages merge, and the first message after the system/developer preamble is
    a user message (leading non-user messages dropped, or a placeholder user message put in
    front when the history has none). The sizing guard does not apply.
    """
    return run_pipeline(messages, strict=True)


def run_pipeline(messages: list[Any], *, strict: bool, partial: bool = False) -> Projection:
    """The full projection, without the fast path (public for tests that compare the two)."""
    anomalies: list[Anomaly] = []
    entries = _drop_blank(messages, anomalies)
    user_present = True
    if strict:
        entries = _step(dedupe_tool_calls(entries), anomalies)
        user_present = has_user(entries)
        if user_present:
            entries = _step(drop_leading_non_user(entries), anomalies)
    entries = _step(lay_out(entries, guard=partial and not strict), anomalies)
    entries = _render(entries, anomalies)
    if strict:
        entries = _step(merge_assistants(entries), anomalies)
        if not user_present:
            entries = _step(insert_user_placeholder(entries), anomalies)
    entries = _merge_users(entries, anomalies)
    return Projection([m for _, m in entries], tuple(anomalies))


def _step(result: tuple[list[Entry], list[Anomaly]], anomalies: list[Anomaly]) -> list[Entry]:
    entries, found = result
    anomalies.extend(found)
    return entries


def _drop_blank(messages: list[Any], anomalies: list[Anomaly]) -> list[Entry]:
    entries: list[Entry] = []
    for index, message in enumerate(messages):
        cleaned = clean_message(message)
        if cleaned is not message:
            anomalies.append(Anomaly(EMPTY_CONTENT_DROPPED, index))
        if cleaned is not None:
            entries.append((index, cleaned))
    return entries


def _render(entries: list[Entry], anomalies: list[Anomaly]) -> list[Entry]:
    out = entries
    for pos, (index, message) in enumerate(entries):
        if index is None or role_of(message) != "tool":
            continue  # synthesized results need no rendering
        result = render_tool_result(message)
        if result.message is message:
            continue
        if out is entries:
            out = list(entries)
        out[pos] = (index, result.message)
        tid = tool_call_id_of(message)
        if result.parts_dropped:
            anomalies.append(Anomaly(EMPTY_CONTENT_DROPPED, index, tid))
        if result.rendered:
            anomalies.append(Anomaly(TOOL_RESULT_RENDERED, index, tid))
    return out


def _is_plain_user(message: Any) -> bool:
    return (
        type(message) is dict
        and len(message) == 2
        and message.get("role") == "user"
        and isinstance(message.get("content"), str | list)
    )


def _merge_users(entries: list[Entry], anomalies: list[Anomaly]) -> list[Entry]:
    out: list[Entry] = []
    merged = False
    for index, message in entries:
        if out and _is_plain_user(message) and _is_plain_user(out[-1][1]):
            first_index, first = out[-1]
            content = join_contents(first["content"], message["content"])
            out[-1] = (first_index, {"role": "user", "content": content})
            anomalies.append(Anomaly(USER_MESSAGES_MERGED, index))
            merged = True
        else:
            out.append((index, message))
    return out if merged else entries
