"""Round 3 of Chat Completions histories as agent frameworks write them (the data of
tests/projection/test_heldout_histories_3.py).

Each case names the framework and the situation that produced it. The shapes follow what
each framework's OpenAI adapter (or the message trimmer / summarizer / retry around it)
puts on the wire; none repeats a case of tests/fidelity/test_framework_histories*.py.
"""

from __future__ import annotations

from typing import Any

Msg = dict[str, Any]


def call(cid: str, name: str, arguments: str = "{}") -> Msg:
    """One tool call as OpenAI adapters write it."""
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


# --------------------------------------------------------------------------------------
# Broken on every wire: project() repairs them up front.
# name -> (messages, the kinds project() names, indexes of messages that reach an OpenAI
# upstream as sent, request fields besides the messages)
# --------------------------------------------------------------------------------------

BROKEN: dict[str, tuple[list[Msg], set[str], set[int], dict[str, Any]]] = {
    # LangGraph: a cleanup node returned RemoveMessage(id=ai.id) for the AIMessage that
    # made two parallel calls; its two ToolMessages stayed in the state.
    "langgraph RemoveMessage deleted the calling AIMessage": (
        [{"role": "system", "content": "You are a research assistant."},
         {"role": "user", "content": "Compare the populations of Lyon and Lille."},
         {"role": "tool", "tool_call_id": "call_lg_pop1", "content": "Lyon: 522,250"},
         {"role": "tool", "tool_call_id": "call_lg_pop2", "content": "Lille: 236,710"},
         {"role": "assistant", "content": "Lyon is about twice as large."},
         {"role": "user", "content": "And Marseille?"}],
        {"orphan_tool_result_dropped"}, {0, 1, 4, 5}, {}),
    # LangGraph summarize node: `delete_messages = [RemoveMessage(id=m.id) for m in
    # state["messages"][:-2]]` counted messages, not exchanges, and took one of two results.
    "langgraph summarize node removed one of two parallel results": (
        [{"role": "system", "content": "Summary of the conversation so far: the user is "
          "planning a trip to Japan."},
         {"role": "user", "content": "Book the flight and the hotel."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_fl", "book_flight", "{\"to\": \"HND\"}"),
             call("call_ht", "book_hotel", "{\"city\": \"Tokyo\"}")]},
         {"role": "tool", "tool_call_id": "call_ht", "content": "Hotel booked: #H-221"},
         {"role": "assistant", "content": "Your hotel is booked."},
         {"role": "user", "content": "and the flight?"}],
        {"tool_result_synthesized"}, {0, 1, 2, 3, 4, 5}, {}),
    # LangGraph trim_messages(strategy="first", max_tokens=...) kept the head of a long
    # thread and cut its tail inside an exchange.
    "langgraph trim_messages strategy first cut the tail mid exchange": (
        [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": "Check the status of both services."},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_s1", "status", "{\"svc\": \"api\"}"),
             call("call_s2", "status", "{\"svc\": \"db\"}")]},
         {"role": "tool", "tool_call_id": "call_s1", "content": "api: healthy"}],
        {"tool_result_synthesized"}, {0, 1, 2, 3}, {}),
    # LangGraph ToolNode ran after the model streamed a second AIMessage chunk that the
    # add_messages reducer stored as its own message (a different id).
    "langgraph tool result after a second AIMessage chunk": (
        [{"role": "user", "content": "What's 17 * 23?"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_mul", "multiply", "{\"a\": 17, \"b\": 23}")]},
         {"role": "assistant", "content": "Let me compute that."},
         {"role": "tool", "tool_call_id": "call_mul", "content": "391"}],
        {"tool_result_reordered"}, {0, 1, 2, 3}, {}),
    # A ConversationSummaryBufferMemory-style summarizer dropped the middle: the call
    # survived, its results were summarized away.
    "summary buffer dropped the results of a kept call": (
        [{"role": "system", "content": "You are a data analyst."},
         {"role": "user", "content": "Load sales.csv and plot revenue by month."},
         {"role": "assistant", "content": "Loading the file first.", "tool_calls": [
             call("call_load", "python", "{\"code\": \"df = pd.read_csv('sales.csv')\"}")]},
         {"role": "user", "content": "[Summary of 14 earlier messages] The file was loaded "
          "and a bar chart of monthly revenue was produced."},
         {"role": "assistant", "content": "The chart is ready."},
         {"role": "user", "content": "Now by region."}],
        {"tool_result_synthesized"}, {0, 1, 2, 3, 4, 5}, {}),
    # A retry wrapper (tenacity around the agent step) appended the user's message again
    # while the tool of the first attempt was still running; its result landed after.
    "retry appended the user turn again before the tool result": (
        [{"role": "user", "content": "deploy the staging branch"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_dep", "deploy", "{\"branch\": \"staging\"}")]},
         {"role": "user", "content": "deploy the staging branch"},
         {"role": "tool", "tool_call_id": "call_dep", "content": "deployed in 41s"}],
        {"tool_result_reordered"}, {0, 1, 2, 3}, {}),
    # AG2 (autogen 0.2 ConversableAgent) with tools: a raw tool-responses message as the
    # agent stores it, `tool_responses` holding each result and no `tool_call_id` on it.
    "ag2 raw tool_responses message without tool_call_id": (
        [{"role": "user", "content": "What's the weather in Paris?", "name": "user_proxy"},
         {"role": "assistant", "content": None, "name": "assistant", "tool_calls": [
             call("call_ag2_w", "get_weather", "{\"city\": \"Paris\"}")]},
         {"role": "tool", "content": "14C, light rain",
          "tool_responses": [{"tool_call_id": "call_ag2_w", "role": "tool",
                              "content": "14C, light rain"}]},
         {"role": "user", "content": "Thanks. TERMINATE", "name": "user_proxy"}],
        {"call_id_synthesized"}, {0, 1, 3}, {}),
    # CrewAI native function calling through LiteLLM: three parallel calls, two to the
    # same tool; the results carry the tool's name and no tool_call_id.
    "crewai named results without ids and a tool called twice": (
        [{"role": "system", "content": "You are Senior Researcher. Find facts."},
         {"role": "user", "content": "Current Task: research EV sales in 2024"},
         {"role": "assistant", "content": "", "tool_calls": [
             call("call_cr1", "search_internet", "{\"query\": \"EV sales 2024 Europe\"}"),
             call("call_cr2", "search_internet", "{\"query\": \"EV sales 2024 China\"}"),
             call("call_cr3", "scrape_website", "{\"url\": \"https://iea.org/ev\"}")]},
         {"role": "tool", "name": "search_internet", "content": "Europe: 3.2M"},
         {"role": "tool", "name": "search_internet", "content": "China: 11M"},
         {"role": "tool", "name": "scrape_website", "content": "IEA: 17M worldwide"}],
        {"call_id_synthesized"}, {0, 1, 2}, {}),
    # Haystack with an Ollama-backed generator: ToolCall.id is None, and so is the
    # ToolCallResult's origin id.
    "haystack null tool_call_id on the result": (
        [{"role": "user", "content": "How many files are in /tmp?"},
         {"role": "assistant", "content": "", "tool_calls": [
             {"id": "call_hs_1", "type": "function",
              "function": {"name": "count_files", "arguments": "{\"path\": \"/tmp\"}"}}]},
         {"role": "tool", "tool_call_id": None, "content": "12"},
         {"role": "user", "content": "and in /var/tmp?"}],
        {"call_id_synthesized"}, {0, 1, 3}, {}),
    # DSPy ChatAdapter few-shot demos: the demo's output fields came back whitespace only
    # (a model that answered with blank lines), kept as the assistant turn.
    "dspy demo with a blank lines output": (
        [{"role": "system", "content": "Your input fields are:\n1. `question` (str)"},
         {"role": "user", "content": "[[ ## question ## ]]\nWhat is 2+2?"},
         {"role": "assistant", "content": "\n\n"},
         {"role": "user", "content": "[[ ## question ## ]]\nWhat is 3+3?"}],
        {"empty_content_dropped"}, {0, 1, 3}, {}),
    # smolagents planning step with an empty plan: the planning message is a text part
    # with no text, between the task and the first step.
    "smolagents empty planning step": (
        [{"role": "system", "content": [{"type": "text", "text": "You are an expert "
                                         "assistant."}]},
         {"role": "user", "content": [{"type": "text", "text": "New task:\nSum 1..10"}]},
         {"role": "assistant", "content": [{"type": "text", "text": ""}]},
         {"role": "user", "content": [{"type": "text", "text": "Now proceed and carry out "
                                       "this plan."}]}],
        {"empty_content_dropped"}, {0, 1, 3}, {}),
    # Mastra memory: a workflow step retried after a timeout wrote the same tool's result
    # again with newer output; the later one is the one that counts.
    "mastra retried step wrote a newer result": (
        [{"role": "system", "content": "You are a stock agent."},
         {"role": "user", "content": "Price of ACME?"},
         {"role": "assistant", "content": [{"type": "text", "text": "Checking."}],
          "tool_calls": [call("call_ms_px", "stockPrice", "{\"symbol\": \"ACME\"}")]},
         {"role": "tool", "tool_call_id": "call_ms_px", "content": "timeout"},
         {"role": "tool", "tool_call_id": "call_ms_px", "content": "ACME: 42.10 USD"}],
        {"duplicate_tool_result_dropped"}, {0, 1, 2, 4}, {}),
    # Agno: `num_history_runs=2` cut at a run boundary; the first kept run began with the
    # result of a call made in the run before it.
    "agno history window starts with a result of an older run": (
        [{"role": "system", "content": "You are a finance agent."},
         {"role": "tool", "tool_call_id": "call_agno_old", "name": "get_stock_price",
          "content": "187.3"},
         {"role": "user", "content": "And Microsoft?"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_agno_new", "get_stock_price", "{\"symbol\": \"MSFT\"}")]},
         {"role": "tool", "tool_call_id": "call_agno_new", "name": "get_stock_price",
          "content": "412.9"}],
        {"orphan_tool_result_dropped"}, {0, 2, 3, 4}, {}),
    # OpenHands: the user pressed stop while a CmdRunAction ran; the next user message
    # carries a screenshot.
    "openhands stopped command then a screenshot from the user": (
        [{"role": "system", "content": "You are OpenHands agent."},
         {"role": "user", "content": "Start the dev server."},
         {"role": "assistant", "content": "Starting it.", "tool_calls": [
             call("toolu_oh_run", "execute_bash", "{\"command\": \"npm run dev\"}")]},
         {"role": "user", "content": [
             {"type": "text", "text": "It hangs, see:"},
             {"type": "image_url", "image_url": {"url": "https://example.com/hang.png"}}]}],
        {"tool_result_synthesized"}, {0, 1, 2, 3}, {}),
    # Continue: the user edited an earlier message and resent from there; the result of
    # the call the edit removed stayed in the history.
    "continue edited message left a result behind": (
        [{"role": "system", "content": "You are an expert software developer."},
         {"role": "user", "content": "Rename foo to bar in utils.py"},
         {"role": "tool", "tool_call_id": "toolu_ct_edit", "content": "Edited utils.py"},
         {"role": "assistant", "content": "Done: foo is now bar."},
         {"role": "user", "content": "Also in tests"}],
        {"orphan_tool_result_dropped"}, {0, 1, 3, 4}, {}),
    # A system message between two parallel results (a LangGraph node injecting its own
    # prompt while the tool node ran).
    "system prompt injected between two parallel results": (
        [{"role": "user", "content": "Fetch both pages."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_pa", "fetch", "{\"url\": \"a\"}"),
             call("call_pb", "fetch", "{\"url\": \"b\"}")]},
         {"role": "tool", "tool_call_id": "call_pa", "content": "page A"},
         {"role": "system", "content": "You are now the summarizer."},
         {"role": "tool", "tool_call_id": "call_pb", "content": "page B"}],
        {"tool_result_reordered"}, {0, 1, 2, 3, 4}, {}),
    # A history serializer that lost the calls (`tool_calls: null`) but kept the result.
    "tool_calls null beside a result": (
        [{"role": "user", "content": "List my repos."},
         {"role": "assistant", "content": None, "tool_calls": None},
         {"role": "tool", "tool_call_id": "call_lost", "content": "[\"a\", \"b\"]"},
         {"role": "assistant", "content": "You have two repos: a and b."},
         {"role": "user", "content": "Open a."}],
        {"orphan_tool_result_dropped", "empty_content_dropped"}, {0, 3, 4}, {}),
    # The Vercel AI SDK: an assistant turn of an empty text part beside its call.
    "vercel ai sdk empty text part beside a call": (
        [{"role": "user", "content": "Weather in Oslo?"},
         {"role": "assistant", "content": [{"type": "text", "text": ""}], "tool_calls": [
             call("call_vc_w", "weather", "{\"city\": \"Oslo\"}")]},
         {"role": "tool", "tool_call_id": "call_vc_w", "content": "-3C"},
         {"role": "user", "content": "And tomorrow?"}],
        {"empty_content_dropped"}, {0, 2, 3}, {}),
    # DeepSeek-reasoner hit max_tokens while thinking: the stored turn has reasoning and an
    # empty answer.
    "deepseek reasoning only turn with an empty answer": (
        [{"role": "user", "content": "Prove there are infinitely many primes."},
         {"role": "assistant", "content": "", "reasoning_content": "Suppose finitely many"},
         {"role": "user", "content": "Go on."}],
        {"empty_content_dropped"}, {0, 2}, {}),
    # A Japanese IME sent a full-width space as the whole message (U+3000), and a
    # no-break space from a pasted cell (U+00A0).
    "ideographic and no-break spaces as whole messages": (
        [{"role": "user", "content": "翻訳してください: good morning"},
         {"role": "assistant", "content": "おはようございます"},
         {"role": "user", "content": "\u3000"},
         {"role": "user", "content": "\u00a0"},
         {"role": "user", "content": "ありがとう"}],
        {"empty_content_dropped"}, {0, 1, 4}, {}),
    # AG2 mixing tools and functions: the agent called a tool, the executor answered with
    # a legacy `function` message naming the function.
    "ag2 tool call answered by a function message": (
        [{"role": "user", "content": "Convert 100 USD to EUR."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_fx", "currency_calculator", "{\"amount\": 100, \"to\": \"EUR\"}")]},
         {"role": "function", "name": "currency_calculator", "content": "92.3 EUR"},
         {"role": "user", "content": "And to GBP?"}],
        {"function_call_converted"}, {0, 1, 3}, {}),
    # Cursor-style client: an edit tool that returned nothing as an empty list of parts.
    "cursor-style edit result as an empty parts list": (
        [{"role": "user", "content": "Delete the unused import."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_cu_edit", "edit_file", "{\"path\": \"a.py\", \"diff\": \"-import os\"}")]},
         {"role": "tool", "tool_call_id": "call_cu_edit", "content": []},
         {"role": "user", "content": "Run the linter."}],
        {"tool_result_rendered"}, {0, 1, 3}, {}),
    # OpenAI Agents SDK in chat mode with a human approval (needs_approval): the user's
    # approval item went between the two parallel calls' outputs.
    "agents sdk approval between parallel outputs": (
        [{"role": "system", "content": "You manage refunds."},
         {"role": "user", "content": "Refund orders 5 and 6."},
         {"role": "assistant", "tool_calls": [
             call("call_r5", "refund", "{\"order\": 5}"),
             call("call_r6", "refund", "{\"order\": 6}")]},
         {"role": "tool", "tool_call_id": "call_r5", "content": "refunded"},
         {"role": "user", "content": "approved"},
         {"role": "tool", "tool_call_id": "call_r6", "content": "refunded"}],
        {"tool_result_reordered"}, {0, 1, 2, 3, 4, 5}, {}),
    # LangGraph RemoveMessage(id=REMOVE_ALL_MESSAGES) then re-added only the latest
    # exchange: no user message left, a result whose call went too.
    "langgraph remove all then re-added the tail": (
        [{"role": "system", "content": "You are a coding agent."},
         {"role": "tool", "tool_call_id": "call_gone_1", "content": "ok"},
         {"role": "assistant", "content": "Tests pass.", "tool_calls": [
             call("call_git", "git", "{\"args\": [\"commit\", \"-am\", \"fix\"]}")]},
         {"role": "tool", "tool_call_id": "call_git", "content": "[main 1a2b3c] fix"}],
        {"orphan_tool_result_dropped"}, {0, 2, 3}, {}),
    # Goose resumed a crashed session: the tool request was written twice with the same
    # id, answered once.
    "goose resumed session wrote the call twice": (
        [{"role": "system", "content": "You are goose."},
         {"role": "user", "content": "show disk usage"},
         {"role": "assistant", "content": "", "tool_calls": [
             call("toolu_gs_df", "developer__shell", "{\"command\": \"df -h\"}")]},
         {"role": "assistant", "content": "", "tool_calls": [
             call("toolu_gs_df", "developer__shell", "{\"command\": \"df -h\"}")]},
         {"role": "tool", "tool_call_id": "toolu_gs_df", "content": "/dev/sda1 40%"}],
        {"tool_result_synthesized"}, {0, 1, 3, 4}, {}),
    # SWE-agent's function-calling parser takes one call per turn: two calls got its
    # format error back as a user message, and neither call a result.
    "swe-agent refused two calls in one turn": (
        [{"role": "system", "content": "SETTING: You are an autonomous programmer."},
         {"role": "user", "content": "<issue>TypeError in parse()</issue>"},
         {"role": "assistant", "content": "Let me look.", "tool_calls": [
             call("call_swe_ls", "bash", "{\"command\": \"ls\"}"),
             call("call_swe_op", "str_replace_editor",
                  "{\"command\": \"view\", \"path\": \"/repo/parse.py\"}")]},
         {"role": "user", "content": "Your last output included multiple tool calls!\nPlease "
          "make sure your output includes exactly _ONE_ function call!"}],
        {"tool_result_synthesized"}, {0, 1, 2, 3}, {}),
}


# --------------------------------------------------------------------------------------
# Valid on OpenAI, refused by strict providers (Anthropic, Bedrock, Gemini rules): sent
# as written first, the strict rung repairs them after the refusal.
# name -> (messages, the kinds the strict rung names)
# --------------------------------------------------------------------------------------

STRICT_ONLY: dict[str, tuple[list[Msg], set[str]]] = {
    # A retry wrapper resent the last user message after a timeout: the same text twice.
    "retry duplicated the last user turn": (
        [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": "Summarize this article: https://example.com/a"},
         {"role": "assistant", "content": "It argues for four-day weeks."},
         {"role": "user", "content": "Give me three bullet points."},
         {"role": "user", "content": "Give me three bullet points."}],
        {"user_messages_merged"}),
    # LlamaIndex ReActAgent: ChatMemoryBuffer(token_limit=...) dropped from the front and
    # the window starts on the agent's answer.
    "llamaindex memory buffer starts on an assistant turn": (
        [{"role": "system", "content": "You are designed to help with a variety of tasks."},
         {"role": "assistant", "content": "Thought: I can answer without tools.\nAnswer: 42"},
         {"role": "user", "content": "Why 42?"}],
        {"leading_non_user_dropped"}),
    # CrewAI ReAct: the observation written back as an assistant message after the
    # action text.
    "crewai observation as a second assistant turn": (
        [{"role": "system", "content": "You are Writer."},
         {"role": "user", "content": "Write a haiku about rain."},
         {"role": "assistant", "content": "Thought: I should search.\nAction: search\n"
          "Action Input: {\"q\": \"rain haiku\"}"},
         {"role": "assistant", "content": "Observation: Basho wrote many."},
         {"role": "user", "content": "Continue."}],
        {"assistant_messages_merged"}),
    # Haystack ToolInvoker(raise_on_failure=False): a tool that printed nothing.
    "haystack tool with empty output": (
        [{"role": "user", "content": "Create the directory."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_hs_mk", "shell", "{\"cmd\": \"mkdir -p out\"}")]},
         {"role": "tool", "tool_call_id": "call_hs_mk", "content": ""},
         {"role": "user", "content": "ls it"}],
        {"tool_result_rendered"}),
    # A tool that printed a newline only (`echo`), kept verbatim by smolagents.
    "tool printed only a newline": (
        [{"role": "user", "content": "Run echo."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_echo", "bash", "{\"cmd\": \"echo\"}")]},
         {"role": "tool", "tool_call_id": "call_echo", "content": "\n"},
         {"role": "user", "content": "ok"}],
        {"tool_result_rendered"}),
    # tenacity retried a whole agent step: the same call (same id) and result written
    # twice, in two turns.
    "retried step wrote the same exchange twice": (
        [{"role": "user", "content": "Create issue: login broken"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_issue_1", "create_issue", "{\"title\": \"login broken\"}")]},
         {"role": "tool", "tool_call_id": "call_issue_1", "content": "#88 created"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_issue_1", "create_issue", "{\"title\": \"login broken\"}")]},
         {"role": "tool", "tool_call_id": "call_issue_1", "content": "#88 created"},
         {"role": "user", "content": "thanks"}],
        {"duplicate_tool_call_deduped"}),
    # OpenAI Agents SDK nest_handoff_history: the transcript summary as an assistant turn
    # before the user's message.
    "agents sdk nested handoff summary before the user": (
        [{"role": "system", "content": "You are the Billing agent."},
         {"role": "assistant", "content": "For context, here is the conversation so far "
          "between the user and the previous agent: ..."},
         {"role": "user", "content": "So can I get the refund?"}],
        {"leading_non_user_dropped"}),
    # A legacy function_call turn (AG2) answered by its `function` message.
    "ag2 legacy function_call round trip": (
        [{"role": "user", "content": "What's 2 to the 10th?"},
         {"role": "assistant", "content": None,
          "function_call": {"name": "python", "arguments": "{\"code\": \"2**10\"}"}},
         {"role": "function", "name": "python", "content": "1024"},
         {"role": "user", "content": "and 2 to the 20th?"}],
        {"function_call_converted"}),
}


# --------------------------------------------------------------------------------------
# Refused by OpenAI itself only on a detail the strict rung rewrites.
# name -> (messages, the kinds the strict rung names)
# --------------------------------------------------------------------------------------

REFUSED_BY_OPENAI: dict[str, tuple[list[Msg], set[str]]] = {
    # AutoGen 0.4 agents named in Chinese (a display name used as `name`).
    "autogen agents named in chinese": (
        [{"role": "user", "content": "写一首诗", "name": "用户"},
         {"role": "assistant", "content": "春眠不觉晓", "name": "诗人"},
         {"role": "user", "content": "再来一首", "name": "用户"}],
        {"message_name_rewritten"}),
}


# --------------------------------------------------------------------------------------
# Valid but unusual: the upstream gets the client's own bytes.
# name -> request body (model "agent")
# --------------------------------------------------------------------------------------

VALID: dict[str, Msg] = {
    # Cursor-style client: an assistant turn with text and refusal parts beside its calls.
    "content parts with a refusal beside calls": {"model": "agent", "messages": [
        {"role": "user", "content": "Delete the prod database and list the tables."},
        {"role": "assistant", "content": [
            {"type": "refusal", "refusal": "I won't delete production data."},
            {"type": "text", "text": "Listing the tables instead."}],
         "tool_calls": [call("call_tbl", "sql", "{\"q\": \"\\\\dt\"}")]},
        {"role": "tool", "tool_call_id": "call_tbl", "content": "users, orders"},
        {"role": "user", "content": "ok"}]},
    # DeepSeek V3.2 thinking mode with tools: reasoning_content kept on the calling turn,
    # as DeepSeek asks for it back.
    "deepseek thinking tool call with reasoning_content": {"model": "agent", "messages": [
        {"role": "user", "content": "What's the date tomorrow?"},
        {"role": "assistant", "content": None, "reasoning_content": "I need today's date.",
         "tool_calls": [call("call_00_dsk", "get_date")]},
        {"role": "tool", "tool_call_id": "call_00_dsk", "content": "2026-12-01"},
        {"role": "assistant", "content": "Tomorrow is 2026-12-02.",
         "reasoning_content": "Add one day."},
        {"role": "user", "content": "and the day after?"}], "temperature": 0},
    # LangGraph per-node prompts: system messages between whole exchanges.
    "system messages between whole exchanges": {"model": "agent", "messages": [
        {"role": "system", "content": "You are the router."},
        {"role": "user", "content": "Plot sales."},
        {"role": "assistant", "content": None, "tool_calls": [
            call("call_route", "route", "{\"to\": \"analyst\"}")]},
        {"role": "tool", "tool_call_id": "call_route", "content": "analyst"},
        {"role": "system", "content": "You are the analyst."},
        {"role": "system", "content": "Today is Tuesday."},
        {"role": "assistant", "content": "Plotting now."},
        {"role": "user", "content": "thanks"}]},
    # OpenAI Agents SDK in chat mode: instructions as system, a developer note after it.
    "system then developer messages": {"model": "agent", "messages": [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Hello"}], "reasoning_effort": "minimal"},
    # Unicode the gateway must not normalize: ZWJ emoji, RTL marks, combining accents
    # (NFD), a line separator, an escaped NUL, a zero-width space alone.
    "unicode edge cases kept": {"model": "agent", "messages": [
        {"role": "user", "content": "👩‍👩‍👧 family \u200f\u05e9\u05dc\u05d5\u05dd\u200e "
         "cafe\u0301 line\u2028sep nul\u0000 end"},
        {"role": "assistant", "content": "\u200b"},
        {"role": "user", "content": "Ｆｕｌｌｗｉｄｔｈ and 𝕞𝕒𝕥𝕙"}]},
    # Arguments with escaped unicode and nested JSON text, as Python's json.dumps writes.
    "arguments with escapes and nested json": {"model": "agent", "messages": [
        {"role": "user", "content": "Save the note."},
        {"role": "assistant", "content": None, "tool_calls": [
            call("call_note", "save", "{\"text\": \"caf\\u00e9 \\ud83d\\ude00\", "
                 "\"meta\": \"{\\\"k\\\": 1}\"}")]},
        {"role": "tool", "tool_call_id": "call_note", "content": "saved"}]},
    # Three parallel calls with 40-character ids (OpenAI's maximum), answered in order.
    "ids of exactly forty characters": {"model": "agent", "messages": [
        {"role": "user", "content": "read three"},
        {"role": "assistant", "content": None, "tool_calls": [
            call(f"call_{n}" + "x" * 34, "read", f"{{\"n\": {n}}}") for n in range(3)]},
        *[{"role": "tool", "tool_call_id": f"call_{n}" + "x" * 34, "content": str(n)}
          for n in range(3)],
        {"role": "user", "content": "ok"}]},
    # Names of 64 characters, hyphens and underscores (AutoGen agent names).
    "names at the pattern's limits": {"model": "agent", "messages": [
        {"role": "user", "content": "hi", "name": "u" * 64},
        {"role": "assistant", "content": "hello", "name": "code-writer_2"},
        {"role": "user", "content": "bye", "name": "A-_-z"}]},
    # Haystack: tool results as several text parts with CRLF and tabs.
    "tool result of several text parts with crlf": {"model": "agent", "messages": [
        {"role": "user", "content": "cat both"},
        {"role": "assistant", "content": None, "tool_calls": [call("call_cat", "cat")]},
        {"role": "tool", "tool_call_id": "call_cat", "content": [
            {"type": "text", "text": "a.txt:\r\n\tline 1\r\n"},
            {"type": "text", "text": "b.txt:\r\n\tline 2"}]},
        {"role": "user", "content": "ok"}]},
    # AG2 with tools and a legacy function in one turn: `tool_calls` and `function_call`
    # side by side, answered by a tool message and a `function` message.
    "tool_calls beside a legacy function_call": {"model": "agent", "messages": [
        {"role": "user", "content": "Weather and time?"},
        {"role": "assistant", "content": None, "tool_calls": [call("call_ag_w", "weather")],
         "function_call": {"name": "time", "arguments": "{}"}},
        {"role": "tool", "tool_call_id": "call_ag_w", "content": "sunny"},
        {"role": "function", "name": "time", "content": "10:00"},
        {"role": "user", "content": "thanks"}]},
    # openai-python model_dump of a tool-calling turn: every null kept, annotations [].
    "model_dump of a calling turn with nulls": {"model": "agent", "messages": [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": None, "refusal": None,
         "annotations": [], "audio": None, "function_call": None,
         "tool_calls": [call("call_tm", "now")]},
        {"role": "tool", "tool_call_id": "call_tm", "content": "10:02"}]},
}


# --------------------------------------------------------------------------------------
# One provider's own refusal (tests/fakes/picky_chat.py), repaired on the strict rung.
# name -> (the quirk's name in picky_chat, messages, the kinds the strict rung names)
# --------------------------------------------------------------------------------------

WS_ID = "ws_689e2d4880a0819d98acca37694989b00b15d90494fc6b87"  # vercel/ai #8132: 51 chars
AUTOGEN_ID = "call_" + "Qm9yZWRBcGlLZXlzQXJlTm90S2V5czQx" + "abcd"  # autogen #6377: 41

PICKY: dict[str, tuple[str, list[Msg], set[str]]] = {
    # The Vercel AI SDK replays a Responses web_search call's id (51 characters) in a chat
    # history sent to OpenAI (vercel/ai #8132).
    "vercel ai sdk web search id of 51 characters": (
        "openai_call_id_limits",
        [{"role": "user", "content": "What's new in Rust 1.90?"},
         {"role": "assistant", "content": None, "tool_calls": [
             call(WS_ID, "web_search_preview", "{\"query\": \"Rust 1.90\"}")]},
         {"role": "tool", "tool_call_id": WS_ID, "content": "Rust 1.90 ships LLD by default."},
         {"role": "user", "content": "Summarize it."}],
        {"tool_call_id_rewritten"}),
    # AutoGen 0.4 with a model client whose ids run one past OpenAI's 40 (autogen #6377).
    "autogen id one past forty characters": (
        "openai_call_id_limits",
        [{"role": "system", "content": "You are a python analyst."},
         {"role": "user", "content": "Mean of 1..9?"},
         {"role": "assistant", "content": [{"type": "text", "text": "Computing."}],
          "tool_calls": [call(AUTOGEN_ID, "run_python", "{\"code\": \"sum(range(1,10))/9\"}")]},
         {"role": "tool", "tool_call_id": AUTOGEN_ID, "content": "5.0"}],
        {"tool_call_id_rewritten"}),
    # Semantic Kernel: a FunctionCallContent whose id the streaming aggregation left
    # empty, and its FunctionResultContent with the same empty id.
    "semantic kernel empty call id from streaming": (
        "openai_call_id_limits",
        [{"role": "system", "content": "You are a lights controller."},
         {"role": "user", "content": "Turn on the porch light."},
         {"role": "assistant", "content": None, "tool_calls": [
             call("", "Lights-change_state", "{\"id\": 3, \"is_on\": true}")]},
         {"role": "tool", "tool_call_id": "", "content": "{\"id\": 3, \"is_on\": true}"},
         {"role": "user", "content": "Thanks!"}],
        {"call_id_synthesized"}),
    # Aider's prefill for Claude behind a LiteLLM proxy ends in a newline.
    "aider prefill ending in a newline to claude behind a proxy": (
        "anthropic_trailing_whitespace",
        [{"role": "system", "content": "Act as an expert software developer."},
         {"role": "user", "content": "Add a --verbose flag to cli.py"},
         {"role": "assistant", "content": "cli.py\n```python\n<<<<<<< SEARCH\n"}],
        {"trailing_whitespace_trimmed"}),
    # Continue's JSON-mode prefill as a text part, ending in a space.
    "continue json prefill part ending in a space": (
        "anthropic_trailing_whitespace",
        [{"role": "user", "content": "Give me the config as JSON."},
         {"role": "assistant", "content": [{"type": "text", "text": "{\"config\": "}]}],
        {"trailing_whitespace_trimmed"}),
}


# --------------------------------------------------------------------------------------
# `developer` sent to upstreams that predate the role (new-api relays, DeepSeek,
# Volcengine, chat templates without it).
# name -> messages
# --------------------------------------------------------------------------------------

DEVELOPER: dict[str, list[Msg]] = {
    # Agno sends the agent's instructions as `developer` to every OpenAI-like model
    # (agno #6697); a new-api relay in front of a provider without that role refuses it.
    "agno developer instructions to a relay without the role":
        [{"role": "developer", "content": "You are a finance agent. Use tables."},
         {"role": "user", "content": "Compare AAPL and MSFT."}],
    # pi (a coding agent) sends its system prompt as `developer` for reasoning models,
    # with a whole tool exchange after it.
    "coding agent developer prompt with a tool exchange":
        [{"role": "system", "content": "Environment: linux, cwd /repo"},
         {"role": "developer", "content": "You are an expert coding assistant."},
         {"role": "user", "content": "list the files"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_pi_ls", "bash", "{\"command\": \"ls\"}")]},
         {"role": "tool", "tool_call_id": "call_pi_ls", "content": "README.md src"},
         {"role": "user", "content": "open the README"}],
    # Codex-style mid-session instruction: a developer note between two turns.
    "developer note in the middle of a session":
        [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello!"},
         {"role": "developer", "content": "From now on, answer in French."},
         {"role": "user", "content": "How are you?"}],
}


# --------------------------------------------------------------------------------------
# Refused by every provider as sent, repaired up front (wires/chat_values.py).
# name -> (messages, the kinds named, what each repaired message becomes: index -> message)
# --------------------------------------------------------------------------------------

UP_FRONT: dict[str, tuple[list[Msg], set[str], dict[int, Msg]]] = {
    # An Agents SDK history (to_input_list) turned into chat messages by hand: the
    # Responses parts kept (sglang #17853 shows the same parts refused).
    "agents sdk history with responses parts": (
        [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": [{"type": "input_text", "text": "Who are you?"}]},
         {"role": "assistant", "content": [
             {"type": "output_text", "text": "An assistant.", "annotations": [],
              "logprobs": []}]},
         {"role": "user", "content": "What can you do?"}],
        {"content_part_typed"},
        {1: {"role": "user", "content": [{"type": "text", "text": "Who are you?"}]},
         2: {"role": "assistant", "content": [{"type": "text", "text": "An assistant."}]}}),
    # A Codex-style converter kept a screenshot as the Responses `input_image` part.
    "responses input_image part in a chat user turn": (
        [{"role": "user", "content": [
            {"type": "input_text", "text": "What's on the screen?"},
            {"type": "input_image", "image_url": "https://example.com/screen.png",
             "detail": "high"}]}],
        {"content_part_typed"},
        {0: {"role": "user", "content": [
            {"type": "text", "text": "What's on the screen?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/screen.png",
                                                "detail": "high"}}]}}),
    # A no-argument call replayed with `arguments: null` (a provider that answered the call
    # that way, stored by a Go client with omitempty off).
    "no-argument call replayed with null arguments": (
        [{"role": "user", "content": "What time is it?"},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "call_now", "type": "function",
              "function": {"name": "get_time", "arguments": None}}]},
         {"role": "tool", "tool_call_id": "call_now", "content": "10:02"},
         {"role": "user", "content": "thanks"}],
        {"tool_value_serialized"},
        {1: {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_now", "type": "function",
             "function": {"name": "get_time", "arguments": "{}"}}]}}),
    # LangChain.js: a tool call with its args omitted when empty.
    "langchain.js call without an arguments key": (
        [{"role": "user", "content": "Roll a die."},
         {"role": "assistant", "content": "", "tool_calls": [
             {"id": "call_die", "type": "function", "function": {"name": "roll_die"}}]},
         {"role": "tool", "tool_call_id": "call_die", "content": "4"}],
        {"tool_value_serialized"},
        {1: {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_die", "type": "function",
             "function": {"name": "roll_die", "arguments": "{}"}}]}}),
    # n8n Code tool that returned a number; a Flowise tool that returned a boolean.
    "tool results as a number and a boolean": (
        [{"role": "user", "content": "How many rows, and is the sheet shared?"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_rows", "count_rows"), call("call_shared", "is_shared")]},
         {"role": "tool", "tool_call_id": "call_rows", "content": 1284},
         {"role": "tool", "tool_call_id": "call_shared", "content": False}],
        {"tool_value_serialized"},
        {2: {"role": "tool", "tool_call_id": "call_rows", "content": "1284"},
         3: {"role": "tool", "tool_call_id": "call_shared", "content": "false"}}),
    # Flowise: a retriever tool's documents as a list of strings.
    "tool result as a list of strings": (
        [{"role": "user", "content": "What does the handbook say about leave?"},
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_docs", "handbook_search", "{\"q\": \"leave\"}")]},
         {"role": "tool", "tool_call_id": "call_docs",
          "content": ["25 days of paid leave.", "Carry over up to 5 days."]}],
        {"content_part_typed"},
        {2: {"role": "tool", "tool_call_id": "call_docs", "content": [
            {"type": "text", "text": "25 days of paid leave."},
            {"type": "text", "text": "Carry over up to 5 days."}]}}),
}


# --------------------------------------------------------------------------------------
# A user (or system) message right after tool results, refused by Mistral ("Unexpected
# role 'user' after role 'tool'", code 3230: Zed, OpenHands, avante.nvim, Onyx, Vibe).
# name -> messages
# --------------------------------------------------------------------------------------

AFTER_TOOLS: dict[str, list[Msg]] = {
    # Zed's agent panel: the user typed the next instruction after the tool's output.
    "zed user message after a tool result": [
        {"role": "system", "content": "You are a highly skilled software engineer."},
        {"role": "user", "content": "grep for TODO"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("toolu_zd_g", "grep", "{\"regex\": \"TODO\"}")]},
        {"role": "tool", "tool_call_id": "toolu_zd_g", "content": "src/a.rs:3: TODO"},
        {"role": "user", "content": "fix it"}],
    # Onyx: a long-conversation reminder written as a user message after the results.
    "onyx reminder after parallel results": [
        {"role": "system", "content": "You are Onyx."},
        {"role": "user", "content": "Find our leave policy."},
        {"role": "assistant", "content": None, "tool_calls": [
            call("dnEN4JsJy", "internal_search", "{\"queries\": [\"leave\"]}"),
            call("kQ2pX8mLz", "internal_search", "{\"queries\": [\"holiday\"]}")]},
        {"role": "tool", "tool_call_id": "dnEN4JsJy", "content": "25 days"},
        {"role": "tool", "tool_call_id": "kQ2pX8mLz", "content": "plus public holidays"},
        {"role": "user", "content": "<long_conversation_reminder>Cite sources."
         "</long_conversation_reminder>"}],
    # Mistral Vibe: the user declined a bash call ("No, run the tests instead"); the
    # call's result is missing, then the user's message.
    "vibe declined bash call then the user's message": [
        {"role": "user", "content": "Run the unit tests."},
        {"role": "assistant", "content": None, "tool_calls": [
            call("call_vb_sh", "bash", "{\"command\": \"rm -rf .venv\"}")]},
        {"role": "user", "content": "No. Use the existing .venv and unittest."}],
    # A LangGraph node's system prompt right after the tool node's results.
    "system prompt after a tool result": [
        {"role": "user", "content": "Translate the page."},
        {"role": "assistant", "content": None, "tool_calls": [
            call("call_tr_f", "fetch", "{\"url\": \"https://example.com\"}")]},
        {"role": "tool", "tool_call_id": "call_tr_f", "content": "<h1>Bonjour</h1>"},
        {"role": "system", "content": "You are now the translator."}],
}
