"""Property tests: valid histories pass untouched, broken ones come out wire-valid."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings

from gateway.projection import project, project_strict
from gateway.projection.fastpath import is_clean
from gateway.projection.project import run_pipeline
from tests.projection.histories import broken_histories, valid_histories
from tests.projection.rules import project_violations, strict_violations, texts, user_texts

Message = dict[str, Any]

PROPERTY = settings(max_examples=200, deadline=None)


def _user_text_kept(before: list[Message], after: list[Message]) -> list[str]:
    """Input user texts that no output user message contains."""
    out = [t for m in after if m.get("role") == "user" for t in texts(m)]
    return [t for t in user_texts(before) if not any(t in o for o in out)]


SOURCE = "test_source"  # a field no rule reads: projection carries it into its copies


def _needless_copies(history: list[Message], projector: Callable[[list[Message]], Any],
                     ) -> list[Message]:
    """Output messages that are a copy of the input message they come from, equal to it:
    with each input message tagged with its index (an unknown field, which copies keep), a
    copy of message ``i`` equal to message ``i`` should have been message ``i`` itself. (A
    repaired message may equal another input message: that is no needless copy.)"""
    tagged = [{**m, SOURCE: i} if type(m) is dict else m for i, m in enumerate(history)]
    out = projector(tagged).messages
    return [m for m in out if type(m) is dict and isinstance(m.get(SOURCE), int)
            and m is not tagged[m[SOURCE]] and m == tagged[m[SOURCE]]]


@PROPERTY
@given(valid_histories())
def test_valid_history_comes_out_identical(history: list[Message]) -> None:
    snapshot = copy.deepcopy(history)
    result = project(history)
    assert result.anomalies == ()
    assert result.messages == history
    assert result.messages is not history
    assert all(a is b for a, b in zip(result.messages, history, strict=True))
    assert is_clean(history)
    slow = run_pipeline(history, strict=False)
    assert slow.anomalies == ()
    assert all(a is b for a, b in zip(slow.messages, history, strict=True))
    assert history == snapshot


@PROPERTY
@given(valid_histories())
def test_strict_leaves_a_strictly_valid_history_identical(history: list[Message]) -> None:
    result = project_strict(history)
    if strict_violations(history):
        assert result.anomalies
        return
    assert result.anomalies == ()
    assert len(result.messages) == len(history)
    assert all(a is b for a, b in zip(result.messages, history, strict=True))


@PROPERTY
@given(broken_histories())
def test_project_repairs_broken_history(history: list[Message]) -> None:
    snapshot = copy.deepcopy(history)
    result = project(history)
    assert history == snapshot, "input mutated"
    assert project_violations(result.messages) == []
    again = project(result.messages)
    assert again.anomalies == ()
    assert again.messages == result.messages
    assert _user_text_kept(history, result.messages) == []
    assert _needless_copies(history, project) == []
    assert all(a.index is None or 0 <= a.index < len(history) for a in result.anomalies)
    if not result.anomalies:
        assert all(a is b for a, b in zip(result.messages, history, strict=True))
    # The fast path may only call a history clean when the full pipeline agrees.
    if is_clean(history):
        assert run_pipeline(history, strict=False).anomalies == ()
    else:
        assert result.anomalies


@PROPERTY
@given(broken_histories())
def test_project_strict_repairs_broken_history(history: list[Message]) -> None:
    snapshot = copy.deepcopy(history)
    result = project_strict(history)
    assert history == snapshot, "input mutated"
    assert strict_violations(result.messages) == []
    again = project_strict(result.messages)
    assert again.anomalies == ()
    assert again.messages == result.messages
    assert project(result.messages).anomalies == ()
    assert _user_text_kept(history, result.messages) == []
    assert _needless_copies(history, project_strict) == []
    assert all(a.index is None or 0 <= a.index < len(history) for a in result.anomalies)
