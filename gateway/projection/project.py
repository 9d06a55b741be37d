"""project() and project_strict(): repair a chat history into a wire-valid shape (SPEC §2).

Both are pure: the input list and its dicts are never mutated; the result shares every
message that needed no repair. The pipeline's steps, in the order they report anomalies:

0. a legacy ``function`` message answering a tool call of its name made that call's result
   (``function_call_converted``, call_ids.function_results; in strict, after step 1);
1. blank text removed, empty messages dropped (``empty_content_dropped``);
2. strict only: legacy function calls turned into tool calls, message names OpenAI refuses
   rewritten, ``developer`` messages sent as ``system`` when a refusal named the role, tool
   calls without a type typed, tool call ids in a form a refusal named rewritten, a refusal
   or audio-only assistant turn made readable, duplicate tool call ids deduped, then
   leading non-user messages dropped;
3. exchanges laid out: results paired, moved, deduplicated, synthesized (exchanges.py);
4. tool results rendered (render.py);
5. strict only: consecutive assistants merged, a user placeholder put in front if the
   history has no user message, media in tool results moved to the next user turn, an
   assistant turn put after tool results a user message follows when a refusal asked
   for one, the trailing whitespace of a final assistant turn (a prefill) trimmed;
6. strict only: adjacent plain user messages merged (OpenAI accepts users in a row, so
   project() leaves them as sent).

Strict steps 2 run before pairing rather than after it: the output is the same as pairing
first and re-pairing afterwards, without synthesizing results for calls that are dropped.

Steps 1 and 3 to 6, bar the placeholder, happen in one walk over the history plus one pass
laying it out (exchanges.lay_out), with the same result as a pass per step: rendering
changes only tool messages, merging assistants never makes two users adjacent nor merging
users two assistants, and a placeholder only goes into a history with no user message,
where no users merge. project_strict() runs step 1 on its own first, as steps 2 need it.
"""

from __future__ import annotations

from typing import Any

from gateway.projection.anomalies import EMPTY_CONTENT_DROPPED, Anomaly, Projection
from gateway.projection.asks import NOTHING_ASKED, StrictAsks
from gateway.projection.call_ids import add_call_ids, function_results, rewrite_call_ids
from gateway.projection.content import clean_message
from gateway.projection.exchanges import Entry, Found, lay_out
from gateway.projection.fastpath import is_clean
from gateway.projection.strict import (
    add_call_types,
    assistant_after_tools,
    convert_legacy_functions,
    dedupe_tool_calls,
    developer_as_system,
    drop_leading_non_user,
    has_user,
    insert_user_placeholder,
    merge_identical_calls,
    move_tool_media,
    readable_assistant_turns,
    rewrite_names,
    trim_final_assistant,
    wrap_unparsed_arguments,
)


def project(messages: list[dict[str, Any]], *, partial: bool = False) -> Projection:
    """Project a history into a wire-valid shape; a valid history comes out identical.

    Pairs tool calls with results (orphans dropped, results moved next to their call,
    duplicates dropped, missing ones synthesized), drops blank text and empty messages,
    renders tool results. What OpenAI accepts stays as sent: blank content beside tool
    calls, empty tool output, user messages in a row. Never mutates the input.

    ``partial`` says ``messages`` is a slice of a history (for estimating or trimming), not
    a whole request: then the SPEC sizing guard applies, and a slice holding no assistant
    message keeps its tool messages unpaired instead of dropping them as orphans. A request
    is a whole history, so the server projects with ``partial=False``: its output always
    satisfies the pairing rules.
    """
    if is_clean(messages, partial=partial):
        return Projection(list(messages))
    return run_pipeline(messages, strict=False, partial=partial)


def project_strict(messages: list[dict[str, Any]], *,
                   asks: StrictAsks = NOTHING_ASKED) -> Projection:
    """project() plus the strict passes, for a request a provider refused as invalid.

    On top of project(): duplicate tool call ids keep their first occurrence, consecutive
    assistant messages merge, so do adjacent plain user messages, blank content beside
    tool calls becomes null and empty tool output gets its placeholder text, and the first
    message after the system/developer preamble is a user message (leading non-user
    messages dropped, or a placeholder user message put in front when the history has
    none). The sizing guard does not apply. ``asks``: what the refusal asked beyond that
    (:class:`~gateway.projection.asks.StrictAsks`), each applied only when asked.
    """
    return run_pipeline(messages, strict=True, asks=asks)


def run_pipeline(messages: list[Any], *, strict: bool, partial: bool = False,
                 asks: StrictAsks = NOTHING_ASKED) -> Projection:
    """The full projection, without the fast path (public for tests that compare the two)."""
    found = Found()
    if not strict:
        indexes = range(len(messages))
        entries, found.converted = function_results(list(enumerate(messages)))
        if found.converted:
            messages = [m for _, m in entries]
        out = lay_out(messages, indexes, found, guard=partial, merge_assistants=False)
        return Projection(out, found.in_step_order())
    # The strict passes 2 need the blank text gone first; the walk then finds none.
    before: list[Anomaly] = []
    entries = _step(convert_legacy_functions(_drop_blank(messages, before)), before)
    entries = _step(function_results(entries), before)
    entries = _step(rewrite_names(entries), before)
    if asks.developer_role:
        entries = _step(developer_as_system(entries), before)
    entries = _step(add_call_types(entries), before)
    entries = _step(add_call_ids(entries), before)
    if asks.call_ids is not None:
        entries = _step(rewrite_call_ids(entries, asks.call_ids), before)
    if asks.arguments:
        entries = _step(wrap_unparsed_arguments(entries), before)
    entries = _step(readable_assistant_turns(entries, drop_thinking=asks.drop_thinking), before)
    entries = _step(dedupe_tool_calls(entries), before)
    if asks.merge_identical:
        entries = _step(merge_identical_calls(entries), before)
    user_present = has_user(entries)
    if user_present:
        entries = _step(drop_leading_non_user(entries), before)
    walked = [m for _, m in entries]
    out = lay_out(walked, [i for i, _ in entries], found, guard=False, merge_assistants=True,
                  strict=True)
    placed: list[Anomaly] = []
    if not user_present:
        out, placed = insert_user_placeholder(out)
    out, moved = move_tool_media(out)
    inserted: list[Anomaly] = []
    if asks.tools_then_assistant:
        out, inserted = assistant_after_tools(out)
    out, trimmed = trim_final_assistant(out)
    return Projection(out, (*before, *found.in_step_order(placed), *moved, *inserted,
                            *trimmed))


def _step(result: tuple[list[Entry], list[Anomaly]], anomalies: list[Anomaly]) -> list[Entry]:
    entries, found = result
    anomalies.extend(found)
    return entries


def _drop_blank(messages: list[Any], anomalies: list[Anomaly]) -> list[Entry]:
    """Entries for the messages, blank text removed (clean_message) and empty ones dropped."""
    entries: list[Entry] = []
    for index, message in enumerate(messages):
        cleaned = clean_message(message, strict=True)
        if cleaned is not message:
            anomalies.append(Anomaly(EMPTY_CONTENT_DROPPED, index))
        if cleaned is not None:
            entries.append((index, cleaned))
    return entries


def project_with_call_ids(messages: list[Any], strict: bool,
                          asks: StrictAsks = NOTHING_ASKED) -> Projection:
    """The projection (strict or not) of ``messages`` with ids given first: for a history
    whose results without a ``tool_call_id`` the plain projection would drop as orphans."""
    entries, given = add_call_ids(list(enumerate(messages)))
    if not given:
        return project_strict(messages, asks=asks) if strict else project(messages)
    with_ids = [m for _, m in entries]
    projection = project_strict(with_ids, asks=asks) if strict else project(with_ids)
    return Projection(projection.messages, (*given, *projection.anomalies))
