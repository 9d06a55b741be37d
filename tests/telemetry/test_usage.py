"""Token usage is read from answers without parsing them whole, however a stream is cut."""

from __future__ import annotations

import json

import orjson

from gateway.telemetry.usage import StreamUsage, Usage, answer_usage, response_model, usage_in


def sse(obj: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


CHUNKS = [
    sse({"id": "c", "model": "gpt-x", "choices": [{"delta": {"content": 'say "usage": {'}}],
         "usage": None}),
    sse({"id": "c", "model": "gpt-x", "choices": [{"delta": {"content": "}"}}],
         "usage": None}),
    sse({"id": "c", "model": "gpt-x", "choices": [],
         "usage": {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40,
                   "prompt_tokens_details": {"cached_tokens": 0}}}),
    b"data: [DONE]\n\n",
]


def test_non_streamed_usage_and_model() -> None:
    body = json.dumps({"model": "gpt-x", "choices": [{"message": {
        "content": 'a "usage": {"prompt_tokens": 1} lookalike in text'}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3}}).encode()
    assert usage_in(body) == (Usage(12, 3), False)
    assert response_model(body) == "gpt-x"
    assert usage_in(b'{"choices": []}') == (None, False)


def test_stream_usage_whatever_the_chunk_boundaries() -> None:
    whole = b"".join(CHUNKS)
    for size in (1, 2, 7, 16, 33, 100, len(whole)):
        scan = StreamUsage()
        for i in range(0, len(whole), size):
            scan.feed(whole[i:i + size])
        assert scan.usage == Usage(31, 9), size
        assert scan.model == "gpt-x" or size < 40


def test_anthropic_style_usage_is_merged_across_events() -> None:
    scan = StreamUsage()
    scan.feed(b'event: message_start\ndata: {"type":"message_start","message":{"model":"claude",'
              b'"usage":{"input_tokens":50,"output_tokens":1}}}\n\n')
    scan.feed(b'event: message_delta\ndata: {"type":"message_delta","usage":'
              b'{"output_tokens":17}}\n\n')
    assert scan.usage == Usage(50, 17)


def test_a_whole_answer_uses_its_parsed_object_when_there_is_one() -> None:
    answer = {"id": "c1", "model": "gpt-x", "choices": [],
              "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
    data = orjson.dumps(answer)
    usage, model = answer_usage(data, answer)
    assert (usage, model) == (Usage(12, 3), "gpt-x")
    assert answer_usage(data, None) == (usage, model)  # the same from the bytes alone
    # Anthropic-style names; a model that is not a string is no model.
    usage, model = answer_usage(b"{}", {"model": 5, "usage": {"input_tokens": 7,
                                                              "output_tokens": 2}})
    assert (usage, model) == (Usage(7, 2), "")
    # No top-level usage in the object: what the bytes say (here: nothing).
    assert answer_usage(b'{"model": "m"}', {"model": "m"}) == (None, "m")
