"""The one SSE reader (gateway/providers/sse.py), and every stream reader of the gateway that
now goes through it agreeing on the same events: multi-line ``data``, CRLF, comments,
fields that are not SSE, and bytes cut anywhere."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.providers.answers import CHAT, event_problem
from gateway.providers.sse import SseReader, parse_event
from gateway.recall.stream import RawEvents
from gateway.recall.wire import SseEvents
from gateway.wires.sse import ChunkReader

CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
# One object over two data lines, a comment, CRLF line ends, then the stream's end.
STREAM = (b": keep-alive\r\n\r\n"
          + b'data: {"id": "c1", "object": "chat.completion.chunk", "created": 1,\r\n'
          + b'data: "model": "m", "choices": [{"index": 0, "delta": {"content": "hi"},'
          + b' "finish_reason": null}]}\r\n\r\n'
          + b"event: done\ndata: [DONE]\n\n")


def test_an_event_is_its_fields() -> None:
    event = parse_event(b"event: response.created\ndata: {\"a\": 1}\nid: 7\n\n")
    assert event.name == b"response.created" and event.json() == {"a": 1}
    assert event.stray is None and not event.done
    assert parse_event(b"data:no-space\n").data == b"no-space"
    assert parse_event(b"data:  two spaces\n").data == b" two spaces"  # one space dropped
    assert parse_event(b"HTTP/1.1 500 Internal Server Error\n").stray is not None
    assert parse_event(b"data: [DONE]\n").done


def test_every_reader_reads_a_multi_line_event_as_one() -> None:
    events = SseReader().feed(STREAM)
    assert [e.json() for e in events] == [None, CHUNK, None]
    assert events[-1].done and events[-1].name == b"done"
    assert ChunkReader().feed(STREAM) == [CHUNK]
    recall = SseEvents()
    assert recall.feed(STREAM) == [CHUNK] and recall.done
    raw = RawEvents().feed(STREAM)
    assert b"".join(r for r, _ in raw) == STREAM  # relayed as it came
    assert [v for _, v in raw] == [None, CHUNK, None]
    assert event_problem(events[1].raw, CHAT) is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, len(STREAM)), max_size=8))
def test_bytes_cut_anywhere_give_the_same_events(cuts: list[int]) -> None:
    reader = SseReader()
    events = []
    start = 0
    for cut in sorted(cuts):
        events += reader.feed(STREAM[start:cut])
        start = cut
    events += reader.feed(STREAM[start:])
    assert [(e.raw, e.name, e.data) for e in events] == [
        (e.raw, e.name, e.data) for e in SseReader().feed(STREAM)]
    assert reader.rest() == b""


def test_an_unfinished_event_waits_for_its_blank_line() -> None:
    reader = SseReader()
    assert reader.feed(b"data: " + orjson.dumps(CHUNK)) == []
    assert reader.rest().startswith(b"data: ")
    assert [e.json() for e in reader.feed(b"\n\n")] == [CHUNK]
