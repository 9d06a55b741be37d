"""Two message lists still unparsed compared by their bytes
(``LazyMessages.leading_shared``): when the bytes tell, the count is what comparing the parsed
messages gives; they never claim more; and nothing is parsed to find out."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.projection.lazy_messages import LazyMessages, dumps_request, last_value_ends
from gateway.telemetry.context import common_prefix

_TEXT = st.text(alphabet=st.sampled_from('ab ,]["\\{}\u00e9\u2014'), max_size=12)
_MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]),
                                  "content": _TEXT})
_STYLES = {
    "compact": lambda m: orjson.dumps(m),
    "spaced": lambda m: json.dumps(m).encode(),
    "indented": lambda m: json.dumps(m, indent=2, ensure_ascii=False).encode(),
}


def lazy(messages: list[Any], style: str, pad: bytes = b"") -> LazyMessages:
    # (a view into a larger body, as the edge holds it)
    raw = pad + _STYLES[style](messages) + b"}"
    return LazyMessages(memoryview(raw)[len(pad):-1], len(messages))


def parsed_prefix(a: list[Any], b: list[Any]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=300, deadline=None)
@given(st.lists(_MESSAGE, max_size=8), st.data(), st.sampled_from(sorted(_STYLES)))
def test_a_history_and_its_cut_share_the_cut_told_by_bytes(
        history: list[Any], data: st.DataObject, style: str) -> None:
    cut = data.draw(st.integers(0, len(history)))
    longer, shorter = lazy(history, style, b'{"messages": '), lazy(history[:cut], style)
    assert longer.leading_shared(shorter) == cut
    assert shorter.leading_shared(longer) == cut
    assert common_prefix(longer, shorter) == cut
    assert longer.after_cut(shorter) == history[cut:]
    # (the longer is no cut of the shorter, unless they are the same messages)
    assert shorter.after_cut(longer) == (None if cut < len(history) else [])
    assert not longer.parsed and not shorter.parsed


@settings(max_examples=300, deadline=None)
@given(st.lists(_MESSAGE, max_size=6), st.lists(_MESSAGE, max_size=6),
       st.sampled_from(sorted(_STYLES)), st.sampled_from(sorted(_STYLES)))
def test_never_more_than_the_messages_share(a: list[Any], b: list[Any], style_a: str,
                                            style_b: str) -> None:
    told = lazy(a, style_a).leading_shared(lazy(b, style_b))
    if told is not None:
        assert told == parsed_prefix(a, b)
    rest = lazy(a, style_a).after_cut(lazy(b, style_b))
    if rest is not None:
        assert a[:len(b)] == b and rest == a[len(b):]
    assert common_prefix(lazy(a, style_a), lazy(b, style_b)) == parsed_prefix(a, b)


def test_a_parsed_list_is_compared_as_messages() -> None:
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    whole, cut = lazy(history, "compact"), lazy(history[:1], "compact")
    cut.fill()
    assert whole.leading_shared(cut) is None
    assert common_prefix(whole, cut) == 1


def test_a_body_holding_unparsed_history_is_written_with_the_clients_json() -> None:
    written = b'[{"role": "user", "content": "hi", "n": 123456789012345678901234567890}]'
    for key in ("messages", "input"):
        lazy = LazyMessages(written, 1)
        body = {"model": "m", key: lazy, "stream": True}
        out = dumps_request(body)
        assert not lazy.parsed and written in out
        assert json.loads(out) == {"model": "m", key: json.loads(written), "stream": True}


# -- where an array's last values end, read backwards -------------------------------------

_VALUE = st.recursive(
    st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6)


def value_ends_forwards(raw: bytes, start: int) -> list[int]:
    """Each value's end in the array opening at ``start``, read forwards (the reference)."""
    decoder = json.JSONDecoder()
    ends, at = [], start + 1
    while True:
        while raw[at:at + 1] in (b" ", b"\n", b"\t", b"\r", b","):
            at += 1
        if raw[at:at + 1] == b"]":
            return ends
        _, at = decoder.raw_decode(raw.decode("latin-1"), at)
        ends.append(at)


@settings(max_examples=400, deadline=None)
@given(st.lists(_VALUE, min_size=1, max_size=8), st.sampled_from(sorted(_STYLES)),
       st.integers(min_value=1, max_value=6), st.integers(min_value=0, max_value=3))
def test_the_last_values_ends_read_backwards_are_the_forward_ones(
        values: list[Any], style: str, most: int, long: int) -> None:
    # (``long``: a string longer than the first window, in the middle or last, with a run of
    # backslashes across where the window cuts)
    if long:
        values = [*values, "x" * (20_000 * long) + "\\" * 9 + '"', *values[:long]]
    raw = b'{"model": "m", "messages": ' + _STYLES[style](values) + b', "z": [1]}'
    start = raw.index(b"[")
    close = raw.rindex(b"]", 0, raw.rindex(b'"z"'))
    forwards = value_ends_forwards(raw, start)
    assert last_value_ends(raw, start, close, most) == forwards[-most:]


def test_a_window_cutting_a_run_of_backslashes_reads_it_whole() -> None:
    # The first window ends 16 KB before the close: every cut across an escaped quote's run
    # of backslashes (which says whether the quote ends its string) is read right.
    for after in range(16_250, 16_420, 3):
        values = ["a" * 50, "b" + "\\" * 40 + '"' + "c" * after, ["d", {"e": "]"}]]
        raw = b'{"messages": ' + orjson.dumps(values) + b"}"
        start, close = raw.index(b"["), len(raw) - 2
        forwards = value_ends_forwards(raw, start)
        for most in (2, 3):
            assert last_value_ends(raw, start, close, most) == forwards[-most:], after
