"""Chat streams as real OpenAI-compatible servers send them, through the gateway, read by the
official SDKs on all three client wires: Chat Completions (relayed), Anthropic Messages and
OpenAI Responses (translated from the chat stream of a chat-only model).

Each case is the exact bytes of one or two upstream answers (``tests/fakes/real_world_chat``)
and what a user must see on every wire: the SDK parses every event; text, reasoning (where
the wire carries it), tool calls, usage and the finish arrive complete and in order; a
failure before any output is retried and the client sees only the answer that succeeded; a
failure after output is not retried and ends the stream in the wire's own error shape.
The upstreams reached through LiteLLM's own client (Azure) are read the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest

from gateway.providers.sse import is_chat_opening
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.faulty_upstream import FaultyUpstream, stream
from tests.fakes.real_world_chat import (
    AZURE_PROMPT_FILTER,
    AZURE_SAFE,
    DONE,
    OPENROUTER_COMMENT,
    azure_annotation,
    call,
    chunk,
    chunked,
    openrouter_error,
    plain,
    sse,
    texts,
    usage,
    vllm_error,
)

ROLE = {"role": "assistant", "content": ""}
A_TOOLS: list[Any] = [
    {"name": n, "description": n, "input_schema": {"type": "object", "properties": {}}}
    for n in ("read_file", "get_weather", "list_dir")]
R_TOOLS: list[Any] = [
    {"type": "function", "name": n, "description": n,
     "parameters": {"type": "object", "properties": {}}}
    for n in ("read_file", "get_weather", "list_dir")]
RETRIED = plain("second", " answer", use=usage(9, 2))  # what a retry gets


@dataclass(frozen=True)
class Case:
    """One upstream behaviour: the answers it gives, in order, and what every client sees.

    ``finish`` is the chat finish reason (the translated wires map it); ``usage`` is
    (prompt, completion, cached) or None when no usage is sent; ``error`` is a part of the
    message the client's error carries (None: the stream succeeds)."""

    answers: tuple[bytes | tuple[bytes, ...], ...]
    text: str = ""
    reasoning: str = ""
    calls: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    usage: tuple[int, int, int] | None = None
    finish: str | None = "stop"
    error: str | None = None
    requests: int = 1
    status: int = 200  # not 200: the request fails before its first byte, with this status
    # The translated wires' finish when it differs from ``finish`` (Gemini's "stop" after
    # a call is a tool use there).
    translated_finish: str | None = None


@dataclass
class Seen:
    """What a client read off its stream."""

    text: str = ""
    reasoning: str = ""
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    usage: tuple[int, int, int] | None = None
    finish: str | None = None
    error: str | None = None
    status: int = 200  # the HTTP status of the answer
    # How many times the answer opened (a role chunk, message_start, response.created):
    # one, however many attempts the gateway made.
    starts: int = field(default=0, compare=False)


def _ev(*parts: bytes) -> tuple[bytes, ...]:
    return parts


CASES: dict[str, Case] = {
    # --- Ordinary streams, each server's own dialect ----------------------------------
    "vllm_role_words_usage_chunk": Case(
        (plain("Hello", ", ", "world", use=usage(11, 3)),), text="Hello, world",
        usage=(11, 3, 0)),
    "sglang_explicit_nulls_and_matched_stop": Case((b"".join([
        sse(chunk({"role": "assistant", "content": None, "reasoning_content": None,
                   "tool_calls": None})),
        sse(chunk({"role": None, "content": "Sure", "reasoning_content": None,
                   "tool_calls": None})),
        sse(chunk({"role": None, "content": " thing", "reasoning_content": None,
                   "tool_calls": None})),
        sse(chunk({"role": None, "content": None, "reasoning_content": None,
                   "tool_calls": None}, "stop", choice_extra={"matched_stop": 151645})),
        sse(chunk(choices=[], usage=usage(20, 2, prompt_tokens_details=None))),
        DONE]),), text="Sure thing", usage=(20, 2, 0)),
    "llamacpp_null_content_role_and_timings": Case((b"".join([
        sse(chunk({"role": "assistant", "content": None})),
        sse(chunk({"content": "Hi"})), sse(chunk({"content": " there"})),
        sse(chunk({}, "stop", usage=usage(5, 2),
                  timings={"prompt_n": 5, "predicted_n": 2, "predicted_ms": 31.2})),
        DONE]),), text="Hi there", usage=(5, 2, 0)),
    "ollama_role_in_every_chunk": Case((b"".join([
        sse(chunk({"role": "assistant", "content": "The"}, system_fingerprint="fp_ollama")),
        sse(chunk({"role": "assistant", "content": " sky"}, system_fingerprint="fp_ollama")),
        sse(chunk({"role": "assistant", "content": ""}, "stop",
                  system_fingerprint="fp_ollama")),
        sse(chunk(choices=[], usage=usage(26, 2), system_fingerprint="fp_ollama")),
        DONE]),), text="The sky", usage=(26, 2, 0)),
    "lmstudio_empty_delta_finish": Case((b"".join([
        *texts("Local", " model", role={"role": "assistant", "content": ""}),
        sse(chunk({}, "stop", system_fingerprint="qwen2.5-7b-instruct")), DONE]),),
        text="Local model"),
    "mistral_usage_in_finish_chunk": Case((b"".join([
        *texts("Bonjour", role={"role": "assistant", "content": ""}),
        sse(chunk({"content": ""}, "stop", usage=usage(8, 1))), DONE]),),
        text="Bonjour", usage=(8, 1, 0)),
    "together_text_and_token_fields": Case((b"".join([
        sse(chunk({"role": "assistant", "content": "Hey"}, choice_extra={"text": "Hey"},
                  token={"id": 1, "text": "Hey", "logprob": -0.1})),
        sse(chunk({"content": ""}, "length", choice_extra={"text": ""},
                  usage=usage(4, 1))), DONE]),),
        text="Hey", usage=(4, 1, 0), finish="length"),
    "fireworks_usage_with_empty_delta_finish": Case((b"".join([
        *texts("Quick", role={"role": "assistant"}),
        sse(chunk({}, "stop", usage=usage(3, 1))), DONE]),), text="Quick", usage=(3, 1, 0)),
    "cerebras_time_info_usage": Case((b"".join([
        *texts("Fast", role={"role": "assistant"}),
        sse(chunk({}, "stop", usage=usage(6, 1),
                  time_info={"queue_time": 0.0001, "total_time": 0.01})), DONE]),),
        text="Fast", usage=(6, 1, 0)),
    "groq_x_groq_usage_in_last_chunk": Case((b"".join([
        sse(chunk({"role": "assistant", "content": ""}, x_groq={"id": "req_01"})),
        sse(chunk({"content": "Groq"})),
        sse(chunk({}, "stop", x_groq={"id": "req_01", "usage": usage(10, 1)})),
        DONE]),), text="Groq", usage=(10, 1, 0)),
    "groq_empty_content_chunks_before_text": Case((b"".join([
        sse(chunk({"role": "assistant", "content": ""})), sse(chunk({"content": ""})),
        sse(chunk({"content": ""})), sse(chunk({"content": "late"})),
        sse(chunk({}, "stop")), DONE]),), text="late"),
    "gemini_no_role_chunk_usage_last": Case((b"".join([
        sse(chunk({"content": "Gem", "role": "assistant"})),
        sse(chunk({"content": "ini", "role": "assistant"}, "stop")),
        sse(chunk({"content": "", "role": "assistant"}, usage=usage(7, 2))), DONE]),),
        text="Gemini", usage=(7, 2, 0)),
    "openai_cached_tokens_usage_chunk": Case((plain("Cached", use=usage(
        120, 1, prompt_tokens_details={"cached_tokens": 100},
        completion_tokens_details={"reasoning_tokens": 0})),),
        text="Cached", usage=(120, 1, 100)),
    "token_counts_as_floats": Case((plain("Float", use=usage(12.0, 3.0)),),
                                   text="Float", usage=(12, 3, 0)),
    "tgi_eos_token_finish_and_null_usage": Case((b"".join([
        sse(chunk({"role": "assistant", "content": "T"}, system_fingerprint="2.0.4-native",
                  usage=None)),
        sse(chunk({"role": "assistant", "content": "GI"}, "eos_token",
                  system_fingerprint="2.0.4-native")), DONE]),),
        text="TGI", finish="eos_token", translated_finish="stop"),
    "xai_usage_before_an_empty_last_chunk": Case((b"".join([
        *texts("Grok", role=ROLE), sse(chunk({}, "stop", usage=usage(14, 1))),
        sse(chunk(choices=[])), DONE]),), text="Grok", usage=(14, 1, 0)),
    "sse_starlette_pings_and_mixed_line_ends": Case((b"".join([
        b": ping - 2025-01-01 00:00:00.000000\r\n\r\n",
        sse(chunk(ROLE), end=b"\r\n\r\n"),
        b": ping - 2025-01-01 00:00:15.000000\r\n\r\n",
        sse(chunk({"content": "llama"})), sse(chunk({"content": "-cpp"}), end=b"\r\n\r\n"),
        sse(chunk({}, "stop")), b"data: [DONE]\r\n\r\n"]),), text="llama-cpp"),
    "done_without_any_finish_reason": Case((b"".join([
        *texts("no", " finish", role=ROLE), DONE]),), text="no finish", finish=None),
    # --- Reasoning before content -----------------------------------------------------
    "deepseek_reasoning_content_then_content": Case((b"".join([
        sse(chunk({"role": "assistant", "content": None, "reasoning_content": ""})),
        sse(chunk({"content": None, "reasoning_content": "Think"})),
        sse(chunk({"content": None, "reasoning_content": "ing."})),
        sse(chunk({"content": "Answer", "reasoning_content": None})),
        sse(chunk({"content": "", "reasoning_content": None}, "stop", usage=usage(
            12, 5, prompt_cache_hit_tokens=0, prompt_cache_miss_tokens=12,
            completion_tokens_details={"reasoning_tokens": 3}))),
        DONE]),), text="Answer", reasoning="Thinking.", usage=(12, 5, 0)),
    "qwen_vllm_reasoning_parser": Case((b"".join([
        sse(chunk(ROLE)), sse(chunk({"reasoning_content": "Let me"})),
        sse(chunk({"reasoning_content": " see"})), sse(chunk({"content": "42"})),
        sse(chunk({}, "stop")), sse(chunk(choices=[], usage=usage(9, 4))), DONE]),),
        text="42", reasoning="Let me see", usage=(9, 4, 0)),
    "openrouter_reasoning_with_comments": Case((b"".join([
        OPENROUTER_COMMENT, OPENROUTER_COMMENT,
        sse(chunk({"role": "assistant", "content": "", "reasoning": "Hmm",
                   "reasoning_details": [{"type": "reasoning.text", "text": "Hmm"}]})),
        OPENROUTER_COMMENT,
        sse(chunk({"role": "assistant", "content": "Yes", "reasoning": None})),
        sse(chunk({"role": "assistant", "content": ""}, "stop",
                  choice_extra={"native_finish_reason": "stop"})),
        sse(chunk({"role": "assistant", "content": ""}, usage=usage(
            30, 4, cost=0.0001, is_byok=False))), DONE]),),
        text="Yes", reasoning="Hmm", usage=(30, 4, 0)),
    "magistral_thinking_and_text_parts": Case((b"".join([
        sse(chunk({"role": "assistant", "content": ""})),
        sse(chunk({"content": [{"type": "thinking", "thinking": [
            {"type": "text", "text": "It's a greeting"}]}]})),
        sse(chunk({"content": [{"type": "thinking", "thinking": [
            {"type": "text", "text": ", reply."}]}]})),
        sse(chunk({"content": [{"type": "text", "text": "Hello"}]})),
        sse(chunk({"content": "!"})),
        sse(chunk({"content": ""}, "stop", usage=usage(6, 9))), DONE]),),
        text="Hello!", reasoning="It's a greeting, reply.", usage=(6, 9, 0)),
    "vllm_reasoning_and_reasoning_content_both": Case((b"".join([
        sse(chunk(ROLE)),
        sse(chunk({"reasoning": "Same", "reasoning_content": "Same"})),
        sse(chunk({"reasoning": " words", "reasoning_content": " words"})),
        sse(chunk({"content": "Once"})), sse(chunk({}, "stop")), DONE]),),
        text="Once", reasoning="Same words"),
    # --- Tool calls ---------------------------------------------------------------------
    "vllm_call_id_only_in_first_delta_args_split": Case((b"".join([
        sse(chunk(ROLE)),
        sse(chunk({"tool_calls": [call(0, id="chatcmpl-tool-1", name="read_file",
                                       args="")]})),
        sse(chunk({"tool_calls": [call(0, args='{"pa')]})),
        sse(chunk({"tool_calls": [call(0, args='th": "caf\\u00')]})),
        sse(chunk({"tool_calls": [call(0, args='e9.txt"}')]})),
        sse(chunk({}, "tool_calls")), DONE]),),
        calls=(("chatcmpl-tool-1", "read_file", {"path": "café.txt"}),), finish="tool_calls"),
    "mistral_text_then_whole_call": Case((b"".join([
        *texts("Checking.", role=ROLE),
        sse(chunk({"tool_calls": [call(0, id="D681PevKs", name="get_weather",
                                       args='{"city": "Paris"}')]}, "tool_calls",
                  usage=usage(40, 12))), DONE]),),
        text="Checking.", calls=(("D681PevKs", "get_weather", {"city": "Paris"}),),
        usage=(40, 12, 0), finish="tool_calls"),
    "ollama_whole_call_in_one_chunk": Case((b"".join([
        sse(chunk({"role": "assistant", "content": "", "tool_calls": [
            call(0, id="call_wq1", name="get_weather", args='{"city":"Oslo"}')]})),
        sse(chunk({"role": "assistant", "content": ""}, "tool_calls")), DONE]),),
        calls=(("call_wq1", "get_weather", {"city": "Oslo"}),), finish="tool_calls"),
    "two_calls_one_after_the_other": Case((b"".join([
        sse(chunk(ROLE)),
        sse(chunk({"tool_calls": [call(0, id="call_a", name="read_file", args="")]})),
        sse(chunk({"tool_calls": [call(0, args='{"path": "a"}')]})),
        sse(chunk({"tool_calls": [call(1, id="call_b", name="list_dir", args="")]})),
        sse(chunk({"tool_calls": [call(1, args='{"dir": "/"}')]})),
        sse(chunk({}, "tool_calls")), DONE]),),
        calls=(("call_a", "read_file", {"path": "a"}), ("call_b", "list_dir", {"dir": "/"})),
        finish="tool_calls"),
    "interleaved_parallel_calls": Case((b"".join([
        sse(chunk({"role": "assistant", "content": None})),
        sse(chunk({"tool_calls": [call(0, id="call_a", name="read_file", args="")]})),
        sse(chunk({"tool_calls": [call(1, id="call_b", name="list_dir", args="")]})),
        sse(chunk({"tool_calls": [call(0, args='{"path": ')]})),
        sse(chunk({"tool_calls": [call(1, args='{"dir": "/tmp"}')]})),
        sse(chunk({"tool_calls": [call(0, args='"x"}')]})),
        sse(chunk({}, "tool_calls")), DONE]),),
        calls=(("call_a", "read_file", {"path": "x"}), ("call_b", "list_dir", {"dir": "/tmp"})),
        finish="tool_calls"),
    "call_name_split_across_chunks": Case((b"".join([
        sse(chunk(ROLE)),
        sse(chunk({"tool_calls": [call(0, id="call_s", name="read_")]})),
        sse(chunk({"tool_calls": [call(0, name="file", args="")]})),
        sse(chunk({"tool_calls": [call(0, args='{"path": "n"}')]})),
        sse(chunk({}, "tool_calls")), DONE]),),
        calls=(("call_s", "read_file", {"path": "n"}),), finish="tool_calls"),
    "gemini_call_whole_no_index_finish_stop": Case((b"".join([
        sse(chunk({"role": "assistant", "tool_calls": [
            call(None, id="function-call-1", name="get_weather",
                 args='{"city":"Sydney"}')]})),
        sse(chunk({"role": "assistant"}, "stop", usage=usage(15, 6))), DONE]),),
        calls=(("function-call-1", "get_weather", {"city": "Sydney"}),),
        usage=(15, 6, 0), translated_finish="tool_calls"),
    "gemini_parallel_calls_no_index_one_chunk": Case((b"".join([
        sse(chunk({"role": "assistant", "tool_calls": [
            call(None, id="function-call-1", name="get_weather", args='{"city":"Rome"}'),
            call(None, id="function-call-2", name="get_weather", args='{"city":"Lima"}'),
        ]})),
        sse(chunk({"role": "assistant"}, "stop")), DONE]),),
        calls=(("function-call-1", "get_weather", {"city": "Rome"}),
               ("function-call-2", "get_weather", {"city": "Lima"})),
        translated_finish="tool_calls"),
    "gemini_parallel_calls_no_index_own_chunks": Case((b"".join([
        sse(chunk({"role": "assistant", "tool_calls": [
            call(None, id="function-call-1", name="read_file", args='{"path":"a"}')]})),
        sse(chunk({"role": "assistant", "tool_calls": [
            call(None, id="function-call-2", name="list_dir", args='{"dir":"b"}')]})),
        sse(chunk({"role": "assistant"}, "tool_calls")), DONE]),),
        calls=(("function-call-1", "read_file", {"path": "a"}),
               ("function-call-2", "list_dir", {"dir": "b"})), finish="tool_calls"),
    "proxy_sends_every_call_at_index_0": Case((b"".join([
        sse(chunk(ROLE)),
        sse(chunk({"tool_calls": [call(0, id="toolu_1", name="read_file", args="")]})),
        sse(chunk({"tool_calls": [call(0, args='{"path": "*"}')]})),
        sse(chunk({"tool_calls": [call(0, id="toolu_2", name="list_dir", args="")]})),
        sse(chunk({"tool_calls": [call(0, args='{"dir": "wiki"}')]})),
        sse(chunk({}, "tool_calls")), DONE]),),
        calls=(("toolu_1", "read_file", {"path": "*"}), ("toolu_2", "list_dir", {"dir": "wiki"})),
        finish="tool_calls"),
    "name_and_id_repeated_in_every_delta": Case((b"".join([
        sse(chunk(ROLE)),
        sse(chunk({"tool_calls": [call(0, id="call_r", name="read_file", args='{"path"')]})),
        sse(chunk({"tool_calls": [call(0, id="call_r", name="read_file", args=': "r"}')]})),
        sse(chunk({}, "tool_calls")), DONE]),),
        calls=(("call_r", "read_file", {"path": "r"}),), finish="tool_calls"),
    "gemini_thought_signature_delta_after_the_call": Case((b"".join([
        sse(chunk({"role": "assistant", "tool_calls": [
            call(None, id="function-call-7", name="list_dir", args='{"dir":"."}')]})),
        sse(chunk({"tool_calls": [{"extra_content": {"google": {
            "thought_signature": "CiQBVKhc7w=="}}}]})),
        sse(chunk({"role": "assistant"}, "stop")), DONE]),),
        calls=(("function-call-7", "list_dir", {"dir": "."}),),
        translated_finish="tool_calls"),
    "gemini_thought_signature_delta_before_the_call": Case((b"".join([
        sse(chunk({"role": "assistant", "tool_calls": [{"extra_content": {"google": {
            "thought_signature": "CiQBVKhc7w=="}}}]})),
        sse(chunk({"role": "assistant", "tool_calls": [
            call(None, id="function-call-8", name="list_dir", args='{"dir":"/"}')]})),
        sse(chunk({"role": "assistant"}, "stop")), DONE]),),
        calls=(("function-call-8", "list_dir", {"dir": "/"}),),
        translated_finish="tool_calls"),
    # --- Framing ------------------------------------------------------------------------
    "crlf_line_ends": Case((plain("Windows", " proxy").replace(b"\n", b"\r\n"),),
                           text="Windows proxy"),
    "data_without_a_space": Case((b"".join([
        sse(chunk(ROLE), prefix=b"data:"), sse(chunk({"content": "tight"}), prefix=b"data:"),
        sse(chunk({}, "stop"), prefix=b"data:"), b"data:[DONE]\n\n"]),), text="tight"),
    "multi_line_data": Case((b"".join([
        sse(chunk(ROLE)),
        b'data: {"id": "chatcmpl-rw", "object": "chat.completion.chunk",\n'
        b'data:  "choices": [{"index": 0, "delta": {"content": "two lines"}}]}\n\n',
        sse(chunk({}, "stop")), DONE]),), text="two lines"),
    "bytes_split_mid_character": Case((_ev(*(lambda b: [b[i:i + 5] for i in range(
        0, len(b), 5)])(plain("naïve ", "日本", use=usage(2, 2)))),),
        text="naïve 日本", usage=(2, 2, 0)),
    "event_and_id_lines": Case((b"".join([
        b"id: 1\nevent: message\n" + sse(chunk(ROLE)),
        b"id: 2\nretry: 3000\n" + sse(chunk({"content": "fields"})),
        sse(chunk({}, "stop")), DONE]),), text="fields"),
    # --- Azure content filtering ---------------------------------------------------------
    "azure_prompt_filter_then_annotations": Case((b"".join([
        AZURE_PROMPT_FILTER,
        sse(chunk({"role": "assistant", "content": ""}, choice_extra=AZURE_SAFE)),
        sse(chunk({"content": "Filtered"}, choice_extra=AZURE_SAFE)),
        sse(chunk({"content": " fine"}, choice_extra=AZURE_SAFE)),
        sse(chunk({}, "stop", choice_extra=AZURE_SAFE)), azure_annotation(), DONE]),),
        text="Filtered fine"),
    "azure_content_filter_finish": Case((b"".join([
        AZURE_PROMPT_FILTER, *texts("Once upon", role=ROLE),
        sse(chunk({}, "content_filter", choice_extra={"content_filter_results": {
            "violence": {"filtered": True, "severity": "medium"}}})), DONE]),),
        text="Once upon", finish="content_filter"),
    # --- Failures before any output: retried, the client sees only the retry ------------
    "vllm_error_after_role_chunk": Case(
        (sse(chunk(ROLE)) + vllm_error("EngineCore encountered an issue"), RETRIED),
        text="second answer", usage=(9, 2, 0), requests=2),
    "openrouter_error_chunk_after_role_and_comment": Case(
        (OPENROUTER_COMMENT + sse(chunk(ROLE)) + OPENROUTER_COMMENT
         + openrouter_error("Provider returned error") + DONE, RETRIED),
        text="second answer", usage=(9, 2, 0), requests=2),
    "azure_filter_chunk_then_hang_up": Case(
        (AZURE_PROMPT_FILTER + sse(chunk(ROLE)), RETRIED),
        text="second answer", usage=(9, 2, 0), requests=2),
    "azure_filter_chunk_then_bare_done": Case(
        (AZURE_PROMPT_FILTER + DONE, RETRIED), text="second answer", usage=(9, 2, 0),
        requests=2),
    "rate_limit_error_after_role_chunk": Case(
        (sse(chunk(ROLE)) + sse({"error": {"message": "Rate limit reached for requests",
                                            "type": "requests", "code": "rate_limit_exceeded"}}),
         RETRIED), text="second answer", usage=(9, 2, 0), requests=2),
    "llamacpp_error_field_after_role_chunk": Case(
        (sse(chunk({"role": "assistant", "content": None}))
         + b'error: {"code": 500, "message": "failed to decode", "type": "server_error"}\n\n',
         RETRIED), text="second answer", usage=(9, 2, 0), requests=2),
    "string_error_after_empty_content_chunks": Case(
        (sse(chunk(ROLE)) + sse(chunk({"content": ""})) + sse({"error": "upstream timeout"}),
         RETRIED), text="second answer", usage=(9, 2, 0), requests=2),
    "error_then_done_as_first_event": Case(
        (vllm_error("queue full", 503, "ServiceUnavailableError") + DONE, RETRIED),
        text="second answer", usage=(9, 2, 0), requests=2),
    "vllm_continuous_usage_role_chunk_then_error": Case(
        (sse(chunk(ROLE, usage=usage(9, 0))) + vllm_error("engine dead"), RETRIED),
        text="second answer", usage=(9, 2, 0), requests=2),
    "role_chunk_empty_delta_and_comment_then_error_bytes_split": Case(
        (_ev(*(lambda b: [b[i:i + 3] for i in range(0, len(b), 3)])(
            sse(chunk(ROLE)) + b": keep-alive\n\n" + sse(chunk({}))
            + vllm_error("preempted"))), RETRIED),
        text="second answer", usage=(9, 2, 0), requests=2),
    "deepseek_opening_chunk_then_error": Case(
        (sse(chunk({"role": "assistant", "content": None, "reasoning_content": ""}))
         + vllm_error("Server busy, please try again later", 503), RETRIED),
        text="second answer", usage=(9, 2, 0), requests=2),
    "azure_role_chunk_with_filter_results_then_error": Case(
        (AZURE_PROMPT_FILTER + sse(chunk(ROLE, choice_extra=AZURE_SAFE))
         + sse({"error": {"message": "The server had an error processing your request.",
                          "type": "server_error", "code": None}}), RETRIED),
        text="second answer", usage=(9, 2, 0), requests=2),
    "openrouter_rate_limit_as_first_event": Case(
        (OPENROUTER_COMMENT + openrouter_error("Rate limit exceeded: free-models-per-min",
                                               429) + DONE, RETRIED),
        text="second answer", usage=(9, 2, 0), requests=2),
    "anthropic_shaped_error_event_after_role_chunk": Case(
        (sse(chunk(ROLE)) + b"event: error\n" + sse(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
         RETRIED), text="second answer", usage=(9, 2, 0), requests=2),
    "sglang_null_role_chunk_then_hang_up": Case(
        (sse(chunk({"role": "assistant", "content": None, "reasoning_content": None,
                    "tool_calls": None})), RETRIED),
        text="second answer", usage=(9, 2, 0), requests=2),
    "role_chunk_with_empty_tool_calls_then_error": Case(
        (sse(chunk({"role": "assistant", "content": "", "tool_calls": [],
                    "refusal": None})) + vllm_error("worker died"), RETRIED),
        text="second answer", usage=(9, 2, 0), requests=2),
    # --- Failures after output: not retried, the wire's error ends the stream -----------
    "openrouter_error_chunk_after_text": Case(
        (b"".join([*texts("Half", " way", role=ROLE),
                   openrouter_error("Provider disconnected unexpectedly"), DONE]), RETRIED),
        text="Half way", error="Provider disconnected unexpectedly", finish=None),
    "error_after_reasoning_before_content": Case(
        (b"".join([sse(chunk(ROLE)), sse(chunk({"reasoning_content": "Pondering"})),
                   vllm_error("CUDA out of memory")]), RETRIED),
        reasoning="Pondering", error="CUDA out of memory", finish=None),
    "ollama_error_after_first_word": Case(
        (b"".join([sse(chunk({"role": "assistant", "content": "One"})),
                   sse({"error": {"message": "model runner has unexpectedly stopped",
                                  "type": "api_error", "param": None, "code": None}})]),
         RETRIED),
        text="One", error="model runner has unexpectedly stopped", finish=None),
    "hang_up_after_text": Case(
        (b"".join(texts("Cut", role=ROLE)), RETRIED), text="Cut", error="ended",
        finish=None),
    "done_missing_after_finish": Case(
        (b"".join([*texts("Almost", role=ROLE), sse(chunk({}, "stop"))]), RETRIED),
        text="Almost", error="ended", finish="stop"),  # (chat relays the finish chunk)
    # --- A client error right after the role chunk: not retried, a 4xx before any byte --
    "vllm_bad_request_after_role_chunk": Case(
        (sse(chunk(ROLE)) + vllm_error("max_tokens must be at most 4096", 400,
                                       "BadRequestError"), RETRIED),
        error="max_tokens must be at most 4096", finish=None, status=400),
    "error_in_the_middle_of_a_call": Case(
        (b"".join([sse(chunk(ROLE)), sse(chunk({"tool_calls": [
            call(0, id="call_m", name="read_file", args='{"pa')]})),
            vllm_error("detokenizer failed")]), RETRIED),
        error="detokenizer failed", finish=None),
}


@pytest.fixture
async def up() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, up: FaultyUpstream) -> RunningGateway:
    return await gateway_factory({
        "model_list": [model_entry("m", up.base_url, responses_api=False)],  # chat only
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.02, "max_transient_retries": 1,
                     "deadline": 20.0},
    })


def _get(obj: Any, name: str) -> Any:
    """A field of an SDK model built from whatever the server sent (missing: None)."""
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(name)
    return value


def _content(content: Any) -> tuple[str, str]:
    """(text, reasoning) of a chat delta's content: a string, or Magistral's parts."""
    if not isinstance(content, list):
        return content or "", ""
    text = "".join(p.get("text", "") for p in content if p.get("type") == "text")
    thought = "".join(inner.get("text", "") for p in content if p.get("type") == "thinking"
                      for inner in p.get("thinking") or ())
    return text, thought


def _chat_calls(deltas: list[Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Tool calls put together from chat deltas as a tolerant client does: by ``index``,
    or by ``id`` when the index is missing (Gemini)."""
    calls: dict[Any, dict[str, str]] = {}
    moved: dict[Any, Any] = {}
    last: Any = None
    for delta in deltas:
        index, call_id = _get(delta, "index"), _get(delta, "id")
        key = moved.get(index, index) if index is not None else (call_id or last)
        if call_id and key in calls and calls[key]["id"] not in ("", call_id):
            key = moved[index] = call_id  # (a proxy that sends every call at index 0)
        last = key
        held = calls.setdefault(key, {"id": "", "name": "", "args": ""})
        held["id"] = held["id"] or _get(delta, "id") or ""
        function = _get(delta, "function")
        name = _get(function, "name") or ""
        if name and name != held["name"]:
            held["name"] += name
        held["args"] += _get(function, "arguments") or ""
    try:  # (a delta of metadata only, as Gemini's thought signature, is no call)
        return [(c["id"], c["name"], json.loads(c["args"] or "{}")) for c in calls.values()
                if any(c.values())]
    except json.JSONDecodeError:  # (a stream cut in the middle of a call)
        return []


def _usage(raw: Any, cached: Any) -> tuple[int, int, int] | None:
    if raw is None:
        return None
    return (_get(raw, "prompt_tokens"), _get(raw, "completion_tokens"), cached or 0)


async def read_chat(gw: RunningGateway) -> tuple[Seen, Any]:
    seen = Seen()
    deltas: list[Any] = []
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0,
                                  timeout=30) as client:
        try:
            got = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "go"}], stream=True,
                stream_options={"include_usage": True})
        except openai.APIStatusError as exc:
            return Seen(error=exc.message, status=exc.status_code), exc.response.headers
        try:
            async for part in got:
                for choice in part.choices or ():
                    delta = choice.delta
                    if delta is not None:
                        seen.starts += _get(delta, "role") is not None
                        text, thought = _content(_get(delta, "content"))
                        seen.text += text
                        seen.reasoning += (_get(delta, "reasoning_content")
                                           or _get(delta, "reasoning") or thought)
                        deltas += _get(delta, "tool_calls") or []
                    if choice.finish_reason is not None:
                        seen.finish = choice.finish_reason
                raw_usage = part.usage or (_get(part, "x_groq") or {}).get("usage")
                if raw_usage:
                    details = _get(raw_usage, "prompt_tokens_details")
                    seen.usage = _usage(raw_usage, details and _get(details, "cached_tokens"))
        except openai.APIError as exc:
            seen.error = exc.message
    seen.calls = _chat_calls(deltas)
    return seen, got.response.headers


ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                  "content_filter": "refusal", None: "end_turn"}


async def read_messages(gw: RunningGateway) -> tuple[Seen, Any]:
    seen = Seen()
    headers: Any = {}
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="k",
                                        max_retries=0) as client:
        try:
            async with client.messages.stream(
                    model="m", max_tokens=256, tools=A_TOOLS,
                    messages=[{"role": "user", "content": "go"}]) as s:
                headers = s.response.headers
                async for event in s:
                    seen.starts += event.type == "message_start"
                    if event.type == "text":
                        seen.text += event.text
                    elif event.type == "thinking":
                        seen.reasoning += event.thinking
                final = await s.get_final_message()
        except anthropic.APIStatusError as exc:
            seen.error = exc.message
            if not headers:  # (failed before the stream began)
                seen.status, headers = exc.status_code, exc.response.headers
            return seen, headers
    # The final message is what the SDK put together: it must say what the deltas said.
    assert "".join(b.text for b in final.content if b.type == "text") == seen.text
    assert "".join(b.thinking for b in final.content if b.type == "thinking") == seen.reasoning
    seen.calls = [(b.id, b.name, b.input) for b in final.content if b.type == "tool_use"]
    seen.finish = final.stop_reason
    u = final.usage
    cached = u.cache_read_input_tokens or 0
    seen.usage = (u.input_tokens + cached, u.output_tokens, cached)
    return seen, headers


async def read_responses(gw: RunningGateway) -> tuple[Seen, Any]:
    seen = Seen()
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0,
                                  timeout=30) as client:
        try:
            got = await client.responses.create(model="m", input="go", tools=R_TOOLS,
                                                stream=True)
        except openai.APIStatusError as exc:
            return Seen(error=exc.message, status=exc.status_code), exc.response.headers
        events = [event async for event in got]
    for event in events:
        if event.type == "response.output_text.delta":
            seen.text += event.delta
        elif event.type == "response.reasoning_text.delta":
            seen.reasoning += event.delta
        elif event.type == "error":
            seen.error = event.message
        seen.starts += event.type == "response.created"
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
    last = events[-1]
    if seen.error is not None:
        assert [e.type for e in events[-2:]] == ["error", "response.failed"]
        return seen, got.response.headers
    assert last.type in ("response.completed", "response.incomplete"), last.type
    final = last.response
    assert final.output_text == seen.text
    assert "".join(part.text for item in final.output if item.type == "reasoning"
                   for part in item.content or ()) == seen.reasoning
    seen.calls = [(item.call_id, item.name, json.loads(item.arguments))
                  for item in final.output if item.type == "function_call"]
    details = final.incomplete_details
    seen.finish = details.reason if details is not None else final.status
    u = final.usage
    seen.usage = (u.input_tokens, u.output_tokens, u.input_tokens_details.cached_tokens)
    return seen, got.response.headers


RESPONSES_FINISH = {"stop": "completed", "tool_calls": "completed", None: "completed",
                    "length": "max_output_tokens", "content_filter": "content_filter"}
READERS = {"chat": read_chat, "messages": read_messages, "responses": read_responses}


def expected(case: Case, wire: str) -> Seen:
    """What the client of ``wire`` must read for ``case``."""
    want = Seen(case.text, case.reasoning, list(case.calls), case.usage, case.finish)
    if case.error is not None:
        # A failed stream: what came before the error, then the error (no finish).
        want.error, want.usage, want.calls = case.error, None, []
        want.status = case.status
        if wire != "chat":
            want.finish = None
        return want
    finish = case.translated_finish or case.finish
    if wire == "messages":
        want.finish = ANTHROPIC_STOP[finish]
    elif wire == "responses":
        want.finish = RESPONSES_FINISH[finish]
    if wire != "chat" and want.usage is None:
        want.usage = (0, 0, 0)  # (the translated wires always report a usage)
    return want


def _events(answer: bytes | tuple[bytes, ...]) -> tuple[bytes, ...]:
    """An answer's writes: as given, or one write an SSE event."""
    if isinstance(answer, tuple):
        return answer
    return tuple(event for event in re.split(rb"(?<=\n\n)", answer) if event)


@pytest.mark.parametrize("framing", ["close", "chunked"])
@pytest.mark.parametrize("wire", sorted(READERS))
@pytest.mark.parametrize("name", sorted(CASES))
async def test_a_real_world_chat_stream_reaches_every_wire_whole(
        gw: RunningGateway, up: FaultyUpstream, name: str, wire: str, framing: str) -> None:
    # (framing: the body ends when the connection closes, or is sent with
    # Transfer-Encoding: chunked, one HTTP chunk an event)
    case = CASES[name]
    for answer in case.answers:
        up.then(stream(*_events(answer)) if framing == "close" else chunked(*_events(answer)))
    seen, headers = await READERS[wire](gw)
    want = expected(case, wire)
    if want.error is not None:
        assert seen.error is not None and want.error in seen.error, seen
        assert "Traceback" not in seen.error and "/site-packages/" not in seen.error
        seen.error = want.error
        seen.calls, seen.usage = [], None
    assert seen == want
    if wire != "chat" and seen.usage is not None:  # (integers, as the wires define them)
        assert all(type(n) is int for n in seen.usage), seen.usage
    assert len(up.received) == case.requests
    if case.requests > 1:
        assert headers.get("x-gateway-recovery") == "retry"
        assert seen.starts == 1  # the failed attempt's opening never reached the client
    # What the gateway sent upstream is a chat request, streamed.
    assert all(r.path == "/v1/chat/completions" and r.json()["stream"] is True
               for r in up.received)


# Azure OpenAI is reached through LiteLLM's own Azure client (``azure/<deployment>``): its
# streams, read and re-chunked by LiteLLM, must reach the client as the direct ones do.
VIA_LITELLM = sorted(name for name in CASES if name.startswith(("azure", "openrouter",
                                                                  "vllm", "deepseek"))
                     # (LiteLLM reports an in-stream 400 as a 500: see docs/wires.md)
                     and name != "vllm_bad_request_after_role_chunk")


@pytest.fixture
async def azure_gw(gateway_factory: GatewayFactory, up: FaultyUpstream) -> RunningGateway:
    return await gateway_factory({
        "model_list": [{"model_name": "m", "litellm_params": {
            "model": "azure/gpt-4o-deployment", "api_base": f"http://127.0.0.1:{up.port}",
            "api_key": "upstream-secret-key", "api_version": "2024-10-21"},
            "model_info": {"responses_api": False}}],
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.02, "max_transient_retries": 1,
                     "deadline": 20.0},
    })


# (LiteLLM's streaming handler reads a pydantic attribute pydantic 2.11 deprecates; only a
# warning outside tests, where warnings are errors.)
@pytest.mark.filterwarnings("ignore:Accessing the 'model_")
@pytest.mark.parametrize("wire", sorted(READERS))
@pytest.mark.parametrize("name", VIA_LITELLM)
async def test_the_same_streams_through_litellm_azure(
        azure_gw: RunningGateway, up: FaultyUpstream, name: str, wire: str) -> None:
    case = CASES[name]
    for answer in case.answers:
        up.then(stream(*(answer if isinstance(answer, tuple) else (answer,))))
    seen, _ = await READERS[wire](azure_gw)
    want = expected(case, wire)
    if want.error is not None:
        assert seen.error is not None and want.error in seen.error, seen
        seen.error = want.error
        seen.calls, seen.usage = [], None
    if case.usage is None:
        seen.usage = want.usage  # (LiteLLM counts the tokens itself when none are sent)
    assert seen == want, (seen, want)
    assert len(up.received) == case.requests
    assert all("/openai/deployments/gpt-4o-deployment/chat/completions" in r.path
               for r in up.received)


@pytest.mark.parametrize(("data", "opening"), [
    (chunk(ROLE, usage=usage(16, 0)), True),  # vLLM's role chunk with per-chunk usage
    (chunk({"content": "!"}, usage=usage(16, 1)), False),
    (chunk(ROLE, usage=usage(16, 1)), False),  # a token was generated: not an opening
    (chunk(choices=[], usage=usage(16, 0)), False),  # a usage-only chunk ends an answer
    (chunk({}, "stop", usage=usage(16, 0)), False),
])
def test_a_role_chunk_that_counts_no_tokens_yet_only_opens_the_answer(
        data: dict[str, Any], opening: bool) -> None:
    assert is_chat_opening(data) is opening
