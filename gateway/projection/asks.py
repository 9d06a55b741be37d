"""What a provider's refusal asks of a strict resend, beyond the strict rules themselves.

The recovery classifier reads these from the refusal's words; the strict projection applies
each only when asked, so a resend changes no more than that provider refused.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StrictAsks:
    """What one refusal asks of the strict projection of a chat history.

    ``call_ids``: a form of ``call_ids.CALL_ID_FORMS``; tool call ids outside it are
    rewritten (``tool_call_id_rewritten``). ``drop_thinking``: Anthropic thinking parts in
    an assistant turn were named as an invalid part type; they go
    (``thinking_part_dropped``). ``merge_identical``: function calls were counted against
    their responses (Gemini); a call repeating an earlier call of its turn merges into it
    (``identical_tool_calls_merged``). ``developer_role``: the ``developer`` role was
    refused; those messages go as ``system`` (``developer_role_converted``).
    ``tools_then_assistant``: only an assistant turn may follow tool results (Mistral); one
    is put before a user or system message that follows them (``assistant_turn_inserted``).
    ``arguments``: a call's arguments were refused as not JSON (vLLM parses every call of
    the history); arguments that are no JSON object are sent inside one
    (``tool_arguments_wrapped``).
    """

    call_ids: str | None = None
    drop_thinking: bool = False
    merge_identical: bool = False
    developer_role: bool = False
    tools_then_assistant: bool = False
    arguments: bool = False


NOTHING_ASKED = StrictAsks()
