"""The optimized pipeline gives exactly what the straightforward one gave.

Same messages (the very same objects where the old pipeline kept an input message), same
anomalies in the same order, for valid, broken and odd-shaped histories, in all modes.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.projection import project, project_strict
from gateway.projection.anomalies import Projection
from gateway.projection.fastpath import is_clean
from gateway.projection.project import run_pipeline
from tests.projection import reference_pipeline as reference
from tests.projection.histories import broken_histories, valid_histories

PROPERTY = settings(max_examples=200, deadline=None)

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(["", " ", "x", "call_a"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)
_ids = st.sampled_from(["call_a", "call_b", "call_c"])
_parts = st.lists(
    st.sampled_from(
        [
            {"type": "text", "text": "x"},
            {"type": "text", "text": " "},
            {"type": "text", "text": ""},
            {"type": "text"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        ]
    )
    | _json,
    max_size=3,
)
_content = (
    st.sampled_from(["", " ", "\u3000", "hi", "<system>ERROR: Tool execution failed.</system>"])
    | st.none()
    | _parts
    | _json
)
_call = st.fixed_dictionaries({"id": _ids | _json, "type": st.just("function")}) | _json
_assistant = st.fixed_dictionaries(
    {"role": st.just("assistant")},
    optional={
        "content": _content,
        "tool_calls": st.lists(_call, max_size=3) | _json,
        "reasoning_content": st.sampled_from(["why", " "]) | _json,
        "refusal": st.sampled_from(["no", " "]) | _json,
        "function_call": _json,
    },
)
_tool = st.fixed_dictionaries(
    {"role": st.just("tool"), "tool_call_id": _ids | _json},
    optional={"content": _content, "is_error": _json, "model_note": _content, "name": _json},
)
_other = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "developer", "function", "critic"]) | _json},
    optional={"content": _content, "name": _json},
)
_odd_message = _assistant | _tool | _other | _other.map(lambda m: {"content": "x"}) | _json


def _perturb(draw: Any, history: list[Any]) -> list[Any]:
    """One small odd change somewhere, the kind that hits the inlined fast checks."""
    history = list(history)
    at = draw(st.integers(0, len(history)))
    kind = draw(st.sampled_from(["insert", "none", "content", "assistant", "tool_field"]))
    if kind == "insert":
        history.insert(at, draw(_odd_message))
    elif kind == "none":
        history.insert(at, None)
    elif kind == "assistant":
        history.insert(at, {"role": "assistant", "content": draw(st.sampled_from(["a", " "]))})
    elif at < len(history) and isinstance(history[at], dict):
        if kind == "content":
            history[at] = {**history[at], "content": draw(_content)}
        else:
            field = draw(st.sampled_from(["is_error", "model_note"]))
            history[at] = {**history[at], field: draw(st.sampled_from([True, "note", " "]))}
    return history


@st.composite
def _histories(draw: Any, base: str) -> list[Any]:
    if base == "odd":
        return draw(st.lists(_odd_message, max_size=10))
    history: list[Any] = draw(valid_histories() if base == "valid" else broken_histories())
    for _ in range(draw(st.integers(0 if base == "broken" else 1, 3))):
        history = _perturb(draw, history)
    return history


def _assert_same(got: Projection, want: Projection, history: list[Any]) -> None:
    assert got.anomalies == want.anomalies
    assert got.messages == want.messages
    inputs = {id(m) for m in history}
    for new, old in zip(got.messages, want.messages, strict=True):
        if id(old) in inputs:
            assert new is old
        else:
            assert id(new) not in inputs


def _check(history: list[Any], mode: str) -> None:
    snapshot = copy.deepcopy(history)
    want = reference.run_pipeline(history, strict=mode == "strict", partial=mode == "partial")
    got = run_pipeline(history, strict=mode == "strict", partial=mode == "partial")
    _assert_same(got, want, history)
    if mode == "strict":
        _assert_same(project_strict(history), want, history)
    else:
        partial = mode == "partial"
        assert is_clean(history, partial=partial) == reference.is_clean(history, partial=partial)
        _assert_same(project(history, partial=partial), reference.project(history, partial=partial),
                     history)
    assert history == snapshot


_MODES = st.sampled_from(["project", "partial", "strict"])


@PROPERTY
@given(_histories("valid"), _MODES)
def test_valid_histories_with_odd_changes_project_as_before(history: list[Any], mode: str) -> None:
    _check(history, mode)


@PROPERTY
@given(_histories("broken"), _MODES)
def test_broken_histories_project_as_before(history: list[Any], mode: str) -> None:
    _check(history, mode)


@PROPERTY
@given(_histories("odd"), _MODES)
def test_odd_shaped_histories_project_as_before(history: list[Any], mode: str) -> None:
    _check(history, mode)
