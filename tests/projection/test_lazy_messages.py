"""Two message lists still unparsed compared by their bytes
(``LazyMessages.leading_shared``): when the bytes tell, the count is what comparing the parsed
messages gives; they never claim more; and nothing is parsed to find out."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.projection.lazy_messages import LazyMessages, dumps_request
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
