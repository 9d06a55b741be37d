"""Round 4 of Chat Completions histories as agent clients write them (the data of
tests/projection/test_heldout_histories_4.py).

Each case names the client and the situation that produced it: the messy shapes of real
adapters (results named but without ids, legacy ``function`` messages beside tools, calls
without ``type``, refusal and audio on assistant turns, ids reused, long or emoji ids), and
what trimmers, summarizers and retry loops leave behind. None repeats a case of rounds 1-3.
"""

from __future__ import annotations

from typing import Any

Msg = dict[str, Any]


def call(cid: str, name: str, arguments: str = "{}") -> Msg:
    """One tool call as OpenAI adapters write it."""
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def result(cid: str, content: Any) -> Msg:
    """One tool result."""
    return {"role": "tool", "tool_call_id": cid, "content": content}


# --------------------------------------------------------------------------------------
# Broken on every wire: project() repairs them up front.
# name -> (messages, the kinds project() names, indexes of messages that reach an OpenAI
# upstream as sent, request fields besides the messages)
# --------------------------------------------------------------------------------------

BROKEN: dict[str, tuple[list[Msg], set[str], set[int], dict[str, Any]]] = {
    # n8n's AI Agent node replays LangChain ToolMessages from its memory without the
    # tool_call_id (only the tool's name survives the memory's serialization).
    "n8n memory replay results named without ids": (
        [{"role": "system", "content": "You are the n8n assistant."},
         {"role": "user", "content": "What's on my calendar tomorrow?"},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_n8n_cal", "google_calendar", "{\"day\": \"2026-12-03\"}")]},
         {"role": "tool", "name": "google_calendar", "content": "09:00 standup"},
         {"role": "user", "content": "Move it to 10."}],
        {"call_id_synthesized"}, {0, 1, 2, 4}, {}),
    # A custom retry loop re-sent the turn after a timeout: the user message was appended
    # again between the call and its late result.
    "retry loop put the user message between call and result": (
        [{"role": "user", "content": "Fetch the open issues."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_rt_iss", "list_issues", "{\"state\": \"open\"}")]},
         {"role": "user", "content": "Fetch the open issues."},
         result("call_rt_iss", "[#12, #15]")],
        {"tool_result_reordered"}, {0, 1, 3}, {}),
    # LangGraph ToolNode answered the calls of two turns ago after the model had already
    # started a new assistant turn (a human-in-the-loop interrupt resumed late).
    "langgraph interrupt resumed results of two turns ago": (
        [{"role": "user", "content": "Deploy staging, then run the smoke tests."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_lg_dep", "deploy", "{\"env\": \"staging\"}")]},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_lg_smk", "smoke_tests", "{}")]},
         result("call_lg_smk", "12 passed"),
         {"role": "assistant", "content": "Smoke tests passed."},
         result("call_lg_dep", "deployed 4f2a9c")],
        {"tool_result_reordered"}, {0, 1, 2, 3, 4, 5}, {}),
    # A trimmer keeping the last 6 messages cut the assistant turn that made the call.
    "last n trimmer kept a result without its call": (
        [{"role": "system", "content": "You are a shell assistant."},
         result("call_tr_ls", "README.md\nsrc\n"),
         {"role": "assistant", "content": "There is a README and a src folder."},
         {"role": "user", "content": "Open the README."},
         {"role": "assistant", "content": "Opening it.", "tool_calls": [
             call("call_tr_cat", "cat", "{\"path\": \"README.md\"}")]},
         result("call_tr_cat", "# Demo")],
        {"orphan_tool_result_dropped"}, {0, 2, 3, 4, 5}, {}),
    # A token trimmer (tiktoken budget) cut the oldest results of a parallel fan-out.
    "token trimmer cut the first results of a fan-out": (
        [{"role": "user", "content": "Weather in Oslo, Bergen and Tromsø?"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_tk_1", "weather", "{\"city\": \"Oslo\"}"),
             call("call_tk_2", "weather", "{\"city\": \"Bergen\"}"),
             call("call_tk_3", "weather", "{\"city\": \"Tromsø\"}")]},
         result("call_tk_3", "-4°C, snow")],
        {"tool_result_synthesized"}, {0, 1, 2}, {}),
    # Open WebUI's native tool calling wrote an empty assistant turn and whitespace-only
    # text while streaming was cancelled.
    "open webui cancelled stream left whitespace messages": (
        [{"role": "system", "content": "You are Open WebUI's assistant."},
         {"role": "user", "content": "Summarize this page."},
         {"role": "assistant", "content": "  \n "},
         {"role": "user", "content": "   "},
         {"role": "user", "content": "Summarize https://example.org"}],
        {"empty_content_dropped"}, {0, 1, 4}, {}),
    # LibreChat's agents endpoint: a second result for the same call after the user
    # pressed "regenerate" on the tool step.
    "librechat regenerate wrote a second result": (
        [{"role": "user", "content": "Convert 100 USD to EUR."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_lc_fx", "fx", "{\"amount\": 100, \"from\": \"USD\", \"to\": \"EUR\"}")]},
         result("call_lc_fx", "92.10 EUR"),
         result("call_lc_fx", "92.14 EUR")],
        {"duplicate_tool_result_dropped"}, {0, 1, 3}, {}),
    # smolagents' ToolCallingAgent stored three planning steps, each an assistant message
    # with its own call, and wrote the observations after the last one.
    "smolagents three assistant steps then their observations": (
        [{"role": "system", "content": "You are an expert assistant who can solve any task."},
         {"role": "user", "content": "How old is the Eiffel Tower in dog years?"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_sm_1", "web_search", "{\"query\": \"Eiffel Tower built\"}")]},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_sm_2", "python_interpreter", "{\"code\": \"2026-1889\"}")]},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_sm_3", "python_interpreter", "{\"code\": \"137*7\"}")]},
         result("call_sm_1", "1889"),
         result("call_sm_2", "137"),
         result("call_sm_3", "959")],
        {"tool_result_reordered"}, {0, 1, 2, 3, 4, 5, 6, 7}, {}),
    # A summarizer rewrote the start of the thread into a system message and kept the
    # tail, whose first message is a result of a call it summarized away.
    "summarizer rewrote the start and kept a dangling result": (
        [{"role": "system", "content": "You are a travel agent."},
         {"role": "system", "content": "Summary: the user booked a flight to Rome."},
         result("call_sum_old", "Flight AZ 211 confirmed"),
         {"role": "user", "content": "Now a hotel near Termini."}],
        {"orphan_tool_result_dropped"}, {0, 1, 3}, {}),
    # Dify's agent node: a call whose result the workflow never wrote (the node timed out),
    # then the user moved on.
    "dify agent node timed out before writing the result": (
        [{"role": "system", "content": "You are Dify's agent."},
         {"role": "user", "content": "Look up order 5521."},
         {"role": "assistant", "content": "Checking.", "tool_calls": [
             call("call_dify_ord", "order_lookup", "{\"id\": 5521}")]},
         {"role": "user", "content": "Hello? Any news?"}],
        {"tool_result_synthesized"}, {0, 1, 2, 3}, {}),
    # Continue's agent mode: the tool's output arrived as text + image parts of a
    # screenshot tool, after a user message typed while it ran.
    "continue user typed while a tool ran and the result came late": (
        [{"role": "user", "content": "Run the tests."},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_ct_run", "run_terminal_command", "{\"command\": \"pytest -q\"}")]},
         {"role": "user", "content": "and show me failures only"},
         result("call_ct_run", [{"type": "text", "text": "2 failed, 40 passed"}])],
        {"tool_result_reordered"}, {0, 1, 3}, {}),
    # OpenAI Agents SDK on chat: the instructions changed (a developer message) between a
    # call and its result when a guardrail ran.
    "agents sdk developer message between call and result": (
        [{"role": "developer", "content": "You are the support agent."},
         {"role": "user", "content": "Reset my password."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_as_rst", "reset_password", "{\"user\": \"me\"}")]},
         {"role": "developer", "content": "Never reveal the reset token."},
         result("call_as_rst", "Reset link sent to m***@example.org")],
        {"tool_result_reordered"}, {0, 1, 2, 3, 4}, {}),
    # A custom retry loop appended the calling assistant turn again after a timeout; the
    # result came once, after the second copy.
    "retry loop appended the calling turn twice": (
        [{"role": "user", "content": "What is the disk usage?"},
         {"role": "assistant", "content": None, "tool_calls": [call("call_du_1", "du")]},
         {"role": "assistant", "content": None, "tool_calls": [call("call_du_1", "du")]},
         result("call_du_1", "/: 71% used")],
        {"tool_result_synthesized"}, {0, 1, 2, 3}, {}),
}

# --------------------------------------------------------------------------------------
# Valid on OpenAI, refused by strict providers. name -> (messages, the kinds
# project_strict() names)
# --------------------------------------------------------------------------------------

STRICT_ONLY: dict[str, tuple[list[Msg], set[str]]] = {
    # A Cursor-like client reuses the call ids of the first turn ("call_0", "call_1") on
    # every turn: OpenAI takes it, Anthropic refuses duplicate tool_use ids.
    "cursor-like client restarts call ids at call_0 every turn": (
        [{"role": "user", "content": "Read main.py."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_0", "read_file", "{\"path\": \"main.py\"}")]},
         result("call_0", "print('hi')"),
         {"role": "assistant", "content": "It prints hi."},
         {"role": "user", "content": "Now read setup.py."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_0", "read_file", "{\"path\": \"setup.py\"}")]},
         result("call_0", "from setuptools import setup")],
        {"duplicate_tool_call_deduped"}),
    # AutoGen's group chat: three agents spoke in a row, each as an assistant message.
    "autogen group chat three assistants in a row": (
        [{"role": "system", "content": "You are in a group chat."},
         {"role": "user", "content": "Plan a launch.", "name": "pm"},
         {"role": "assistant", "content": "Marketing: a blog post.", "name": "marketer"},
         {"role": "assistant", "content": "Engineering: feature flag.", "name": "engineer"},
         {"role": "assistant", "content": "QA: regression suite.", "name": "qa"}],
        {"assistant_messages_merged"}),
    # A trimmer keeping the last N messages started the window on an assistant turn.
    "last n trimmer started on an assistant turn": (
        [{"role": "system", "content": "You are a coding assistant."},
         {"role": "assistant", "content": "Here is the refactor."},
         {"role": "user", "content": "Add type hints too."}],
        {"leading_non_user_dropped"}),
    # A summarizer replaced everything but the last exchange: no user message left.
    "summarizer left no user message": (
        [{"role": "system", "content": "Summary: the user asked for the release notes."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_rn_gen", "release_notes", "{\"tag\": \"v2.1\"}")]},
         result("call_rn_gen", "- faster startup\n- new CLI")],
        {"user_placeholder_inserted"}),
    # Aider: an assistant message right after another when the edit reply was split.
    "aider split the edit reply in two assistant messages": (
        [{"role": "user", "content": "Rename foo to bar in util.py."},
         {"role": "assistant", "content": "util.py\n```python\n<<<<<<< SEARCH\ndef foo():"},
         {"role": "assistant", "content": "=======\ndef bar():\n>>>>>>> REPLACE\n```"},
         {"role": "user", "content": "Thanks."}],
        {"assistant_messages_merged"}),
    # OpenAI Agents SDK on chat: a handoff wrote the same call twice across two
    # assistant turns (the model retried the handoff call with the same id).
    "agents sdk handoff call repeated with the same id": (
        [{"role": "system", "content": "You are the triage agent."},
         {"role": "user", "content": "I need a refund."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_ho_refund", "transfer_to_refund_agent", "{}")]},
         result("call_ho_refund", "{\"assistant\": \"Refund Agent\"}"),
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_ho_refund", "transfer_to_refund_agent", "{}")]},
         result("call_ho_refund", "{\"assistant\": \"Refund Agent\"}"),
         {"role": "assistant", "content": "You're with the refund agent now."}],
        {"duplicate_tool_call_deduped"}),
}

# --------------------------------------------------------------------------------------
# Valid and unusual: the upstream gets the client's own bytes.
# --------------------------------------------------------------------------------------

VALID: dict[str, Msg] = {
    # An id of exactly 40 characters (OpenAI's limit) stays as sent.
    "call id of exactly forty characters": {"model": "agent", "messages": [
        {"role": "user", "content": "Status of job 7?"},
        {"role": "assistant", "content": None, "tool_calls": [call("c" * 40, "job_status")]},
        result("c" * 40, "running"),
        {"role": "assistant", "content": "Job 7 is running."}]},
    # An assistant turn that refused, written back as content parts with a refusal part.
    "assistant refusal part in a content list": {"model": "agent", "messages": [
        {"role": "user", "content": "Write malware."},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help."}]},
        {"role": "user", "content": "Then explain how antivirus works."}]},
    # gpt-4o-audio: the assistant's audio answer is replayed by id, content null.
    "assistant audio by id with null content": {"model": "agent", "messages": [
        {"role": "user", "content": "Say hello in French."},
        {"role": "assistant", "content": None, "audio": {"id": "audio_6744555cc6d48190b6"}},
        {"role": "user", "content": "And in German?"}]},
    # A developer message in the middle (Agents SDK instructions changing at a handoff).
    "developer message in the middle": {"model": "agent", "messages": [
        {"role": "developer", "content": "You are the triage agent."},
        {"role": "user", "content": "Billing question."},
        {"role": "assistant", "content": "Handing you to billing."},
        {"role": "developer", "content": "You are the billing agent."},
        {"role": "user", "content": "Why was I charged twice?"}]},
    # Open WebUI / LibreChat multi-user rooms put a `name` on user messages.
    "names on user messages": {"model": "agent", "messages": [
        {"role": "user", "name": "alice", "content": "Lunch at 12?"},
        {"role": "user", "name": "bob_2", "content": "12:30 works better."},
        {"role": "assistant", "content": "12:30 it is."}]},
    # Legacy function calling (function_call + role function) on an old LangChain chain.
    "legacy function call and function result": {"model": "agent", "messages": [
        {"role": "user", "content": "What's 2 ** 10?"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "calc", "arguments": "{\"expr\": \"2**10\"}"}},
        {"role": "function", "name": "calc", "content": "1024"},
        {"role": "user", "content": "Thanks."}]},
    # An empty tool output and an assistant text with the tool call (Semantic Kernel).
    "empty tool output and text beside the call": {"model": "agent", "messages": [
        {"role": "user", "content": "Clear the cache."},
        {"role": "assistant", "content": "Clearing it now.", "tool_calls": [
            call("call_sk_clr", "Cache-clear")]},
        result("call_sk_clr", ""),
        {"role": "assistant", "content": "Done."}]},
    # Unicode and emoji in content, tool output as text parts (LangChain content blocks).
    "emoji text and a tool result of text parts": {"model": "agent", "messages": [
        {"role": "user", "content": "Translate 🍕 to Japanese 🇯🇵"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("call_tl_jp", "translate", "{\"text\": \"🍕\"}")]},
        result("call_tl_jp", [{"type": "text", "text": "ピザ"},
                              {"type": "text", "text": "(piza)"}]),
        {"role": "assistant", "content": "ピザ (piza) 🍕"}]},
}

# Valid on OpenAI as sent, refused by strict providers until the strict rung repairs them.
STRICT_ONLY.update({
    "legacy function call and function result": (
        VALID["legacy function call and function result"]["messages"],
        {"function_call_converted"}),
    "assistant audio by id with null content": (
        VALID["assistant audio by id with null content"]["messages"],
        {"empty_content_dropped"}),
    "empty tool output and text beside the call": (
        VALID["empty tool output and text beside the call"]["messages"],
        {"tool_result_rendered"}),
})

# --------------------------------------------------------------------------------------
# A provider's own refusal: (quirk, messages, the kinds the strict rung names). The quirk
# is a function of tests/fakes/picky_chat.py or of test_heldout_histories_4.py.
# --------------------------------------------------------------------------------------

LONG_ID = "call_" + "n8nAgentToolExecutorRun" + "0123456789abcdefghijk"  # 49 characters
EMOJI_ID = "call_🔧_weather_ü"

PICKY: dict[str, tuple[str, list[Msg], set[str]]] = {
    # Dify's plugin daemon prefixes its own run id: 49 characters, over OpenAI's 40.
    "dify plugin id of 49 characters": (
        "openai_call_id_limits",
        [{"role": "user", "content": "Search the knowledge base for VPN setup."},
         {"role": "assistant", "content": None, "tool_calls": [
             call(LONG_ID, "kb_search", "{\"q\": \"VPN\"}")]},
         result(LONG_ID, "Use WireGuard; see page 4."),
         {"role": "user", "content": "Thanks, and for Windows?"}],
        {"tool_call_id_rewritten"}),
    # An OpenAI-style id sent to vLLM serving Mistral: the template demands nine letters
    # and digits.
    "openai ids to vllm serving mistral": (
        "mistral_nine_alnum_ids",
        [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": "Time in Paris?"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_abc123DEF456", "get_time", "{\"tz\": \"Europe/Paris\"}")]},
         result("call_abc123DEF456", "14:05"),
         {"role": "assistant", "content": "It is 14:05 in Paris."},
         {"role": "user", "content": "And Tokyo?"}],
        {"tool_call_id_rewritten"}),
    # A homegrown client generated ids with an emoji (its tool's icon) in them.
    "emoji in a call id to vllm serving mistral": (
        "mistral_nine_alnum_ids",
        [{"role": "user", "content": "Weather in Zürich?"},
         {"role": "assistant", "content": None, "tool_calls": [
             call(EMOJI_ID, "weather", "{\"city\": \"Zürich\"}")]},
         result(EMOJI_ID, "3°C, fog")],
        {"tool_call_id_rewritten"}),
    # A Mistral-templated vLLM that demands user/assistant alternation: two user turns.
    "librechat two user turns to an alternating template": (
        "alternating_roles",
        [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello! How can I help?"},
         {"role": "assistant", "content": "(I can also search the web.)"},
         {"role": "user", "content": "Search for the EU AI Act dates."}],
        {"assistant_messages_merged"}),
    # vLLM parses every call's arguments: a streamed call cut mid-arguments.
    "crewai streamed call cut mid arguments to vllm": (
        "vllm_json_arguments",
        [{"role": "user", "content": "Find flights to Lima."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_cw_fl", "flight_search", "{\"to\": \"LIM\", \"date\": \"2026-")]},
         result("call_cw_fl", "No flights found: bad date."),
         {"role": "user", "content": "Try 2026-12-20."}],
        {"tool_arguments_wrapped"}),
}

# --------------------------------------------------------------------------------------
# Refused by every provider as sent: repaired before the first attempt.
# name -> (messages, kinds, the repaired messages by index, None for a message dropped)
# --------------------------------------------------------------------------------------

EMPTY = "<system>Tool output is empty.</system>"
PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8"
         "z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")

UP_FRONT: dict[str, tuple[list[Msg], set[str], dict[int, Msg | None]]] = {
    # A JS client stored the parsed arguments object instead of the JSON string.
    "arguments stored as an object": (
        [{"role": "user", "content": "Set a timer for 5 minutes."},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "call_js_tm", "type": "function",
              "function": {"name": "timer", "arguments": {"minutes": 5}}}]},
         result("call_js_tm", "timer set"),
         {"role": "user", "content": "Thanks."}],
        {"tool_value_serialized"}, {1: {"role": "assistant", "content": None, "tool_calls": [
            call("call_js_tm", "timer", "{\"minutes\":5}")]}}),
    # A framework wrote `tool_calls: []` on every plain assistant turn.
    "empty tool_calls list on a plain answer": (
        [{"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello!", "tool_calls": []},
         {"role": "user", "content": "Bye"}],
        {"empty_content_dropped"}, {1: {"role": "assistant", "content": "Hello!"}}),
    # null content on the user and tool messages of a LangChain.js replay.
    "null content on a user message and a result": (
        [{"role": "user", "content": "Ping the server."},
         {"role": "assistant", "content": None, "tool_calls": [call("call_nl_p", "ping")]},
         result("call_nl_p", None),
         {"role": "user", "content": None},
         {"role": "user", "content": "Is it up?"}],
        {"empty_content_dropped", "tool_result_rendered"},
        {2: result("call_nl_p", EMPTY), 3: None}),
    # A legacy function message mixed with tool calls (a half-migrated LangChain agent).
    "legacy function message mixed with tool calls": (
        [{"role": "user", "content": "Weather in Rome, then convert to Fahrenheit."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_mx_w", "weather", "{\"city\": \"Rome\"}")]},
         {"role": "function", "name": "weather", "content": "18°C"},
         {"role": "user", "content": "In Fahrenheit please."}],
        {"function_call_converted"}, {2: result("call_mx_w", "18°C")}),
}

# --------------------------------------------------------------------------------------
# Refused by every provider as sent, and left for the strict rung: the first attempt is
# refused, the strict projection answers in the second. name -> (messages, kinds)
# --------------------------------------------------------------------------------------

ON_REFUSAL: dict[str, tuple[list[Msg], set[str]]] = {
    # Semantic Kernel's older Python connector wrote tool_calls without "type".
    "semantic kernel tool_calls without type": (
        [{"role": "user", "content": "Add milk to the list."},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "call_sk_add", "function": {"name": "List-add",
                                                "arguments": "{\"item\": \"milk\"}"}}]},
         result("call_sk_add", "added"),
         {"role": "user", "content": "And eggs."}],
        {"tool_call_type_added"}),
    # A screenshot tool's result as text + image parts (OpenAI takes only text in tool
    # messages).
    "tool result with a screenshot image part": (
        [{"role": "user", "content": "Open example.org and describe it."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_br_shot", "screenshot", "{\"url\": \"https://example.org\"}")]},
         result("call_br_shot", [
             {"type": "text", "text": "Screenshot taken."},
             {"type": "image_url", "image_url": {
                 "url": PIXEL}}])],
        {"tool_media_moved"}),
}

ALL: dict[str, list[Msg]] = {
    **{k: v[0] for k, v in BROKEN.items()},
    **{k: v[0] for k, v in STRICT_ONLY.items()},
    **{k: v["messages"] for k, v in VALID.items()},
    **{k: v[1] for k, v in PICKY.items()},
    **{k: v[0] for k, v in UP_FRONT.items()},
    **{k: v[0] for k, v in ON_REFUSAL.items()},
}
