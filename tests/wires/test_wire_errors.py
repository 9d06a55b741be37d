"""The real Responses and Anthropic history errors (tests/data/wire-errors.jsonl): the fakes
refuse with these texts, and the ladder reads the tool-pairing ones as structural."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.providers.errors import failure_from_http
from gateway.recovery.classifier import Verdict, classify
from tests.fakes import anthropic_rules, responses_server

RECORDS = [json.loads(line) for line in
           (Path(__file__).resolve().parents[1] / "data" / "wire-errors.jsonl").read_text()
           .splitlines() if line.strip()]


def record(situation: str) -> dict[str, Any]:
    return next(r for r in RECORDS if r["situation"].startswith(situation))


def message_of(body: str) -> str:
    parsed = json.loads(body)
    return str(parsed["error"]["message"])


@pytest.mark.parametrize(("situation", "template", "value"), [
    ("function_call without output", responses_server.NO_OUTPUT,
     "call_U80UaBc1YfQVSXfZiKGqTvN7"),
    ("orphan function_call_output", responses_server.NO_CALL, "call_TnakLSVsqtVt5cJssAhRwMoe"),
])
def test_fake_responses_texts_are_the_real_ones(situation: str, template: str,
                                                value: str) -> None:
    assert template.format(id=value) == message_of(record(situation)["body"])


def test_fake_anthropic_thinking_text_is_the_real_one() -> None:
    real = message_of(record("thinking block modified")["body"])
    assert anthropic_rules.THINKING_MODIFIED.format(i=11, j=11) == real


@pytest.mark.parametrize("situation", [
    "function_call without output", "orphan function_call_output",
    "tool_use without tool_result", "tool_result without tool_use", "duplicate tool_use id",
    "empty text block", "first message not user role",
])
def test_tool_pairing_refusals_are_structural(situation: str) -> None:
    r = record(situation)
    failure = failure_from_http(r["status"] or 400, {}, r["body"].encode(), "upstream")
    assert classify(failure, has_images=False) is Verdict.STRUCTURAL
