"""Mutated plain histories read in process, as the edge reads them: whole, and added to a
kept plain turn. The plain checks run on bodies before the item-by-item shape checks (a
plain body skips them), so they must take any value: a mutation is refused with a 400 or
read, never a crash (a list where a breakpoint's ``ttl`` belongs once raised a
``TypeError``), and whatever the plain checks take passes the checks it skips. Many
examples: nothing here touches a socket."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from gateway.errors import ClientError
from gateway.projection import project
from gateway.server.kept_slots import KeptSlots
from gateway.server.seen_native import MESSAGES, RESPONSES, SeenNative
from gateway.wires.anthropic_plain import plain_body
from gateway.wires.codecs import anthropic_body, responses_body
from gateway.wires.reading import read_plain_messages, read_plain_responses
from gateway.wires.responses_plain import plain_input
from gateway.wires.shapes import check_messages_blocks, check_responses_items
from gateway.wires.to_chat import anthropic_to_chat, responses_to_chat
from gateway.wires.validation import validate_messages_fields, validate_responses_fields
from tests.fuzz.mutations import ANTHROPIC_PLAIN, RESPONSES_PLAIN, mutate

READS = settings(max_examples=1500, deadline=None, derandomize=True, database=None,
                 suppress_health_check=list(HealthCheck))


def _kept(seed: dict[str, Any], wire: str) -> tuple[SeenNative, bytes]:
    """A reader holding ``seed`` read whole as a plain turn, and its bytes."""
    seen = SeenNative(KeptSlots(1 << 24), MESSAGES if wire == "anthropic" else RESPONSES)
    raw = orjson.dumps(seed)
    read = read_plain_messages if wire == "anthropic" else read_plain_responses
    body, view, plain = read(orjson.loads(raw))
    assert plain is not None  # (the seed is plain: else this searches nothing new)
    seen.learn(raw, "client", body, view, plain, None)
    return seen, raw


def _plain_passes_the_skipped_checks(body: dict[str, Any], wire: str) -> None:
    """A body whose other fields have their types and that the plain check takes passes
    the block or item checks a plain body skips: none it refuses is sent instead."""
    try:
        if wire == "anthropic":
            validate_messages_fields(body)
        else:
            validate_responses_fields(body)
    except ClientError:
        return
    if wire == "anthropic" and plain_body(body) is not None:
        check_messages_blocks(body)
    elif wire == "responses" and plain_input(body) is not None:
        check_responses_items(body)


def _read(body: dict[str, Any], wire: str) -> None:
    """Everything the edge and the Flow do with a body before sending it."""
    if wire == "anthropic":
        repaired, view, _plain = read_plain_messages(body)
        anthropic_body(repaired, view, project(view.messages).messages)
        anthropic_to_chat(repaired, view)
    else:
        repaired, r_view, _plain = read_plain_responses(body)
        responses_body(repaired, r_view, project(r_view.messages).messages)
        responses_to_chat(repaired, r_view)


@pytest.mark.parametrize("wire", ["anthropic", "responses"])
def test_a_mutated_plain_history_is_read_or_refused_never_a_crash(wire: str) -> None:
    seed = ANTHROPIC_PLAIN if wire == "anthropic" else RESPONSES_PLAIN
    key = "messages" if wire == "anthropic" else "input"
    seen, raw = _kept(seed, wire)

    @READS
    @given(mutate(seed))
    def search(body: dict[str, Any]) -> None:
        _plain_passes_the_skipped_checks(body, wire)
        try:
            _read(body, wire)
        except ClientError as err:
            assert 400 <= err.status < 500
        history = body.get(key)
        if isinstance(history, list) and history:
            # The same items added to the kept turn: read over it, or declined.
            added = orjson.dumps(history[-2:])[1:-1]
            close = raw.rindex(b"]")
            seen.read(raw[:close] + b"," + added + raw[close:], "client")

    search()
