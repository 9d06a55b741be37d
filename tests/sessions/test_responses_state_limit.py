"""A previous_response_id lookup waits no longer than the share of the request's deadline it
is given: a response store that hangs is one that failed."""

from __future__ import annotations

import asyncio

import pytest

from gateway.sessions import responses_state
from gateway.sessions.response_records import KeptResponse
from gateway.sessions.responses_state import ResponseState


class HungStore:
    """A response store whose reads never answer (a Redis that stopped answering)."""

    async def put_response(self, record: KeptResponse) -> None:
        return None

    async def get_response(self, response_id: str) -> KeptResponse | None:
        await asyncio.Event().wait()
        return None

    async def purge_responses(self, before: float) -> int:
        return 0

    async def close(self) -> None:
        return None


async def test_a_lookup_gives_up_within_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(responses_state, "LOOKUP_TIMEOUT", 600.0)  # only the limit bounds it
    state = ResponseState(HungStore())
    found = await asyncio.wait_for(state.lookup(["owner"], "resp_1", limit=0.05), 30)
    assert found.failed and found.kept is None


async def test_without_a_limit_the_fixed_timeout_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(responses_state, "LOOKUP_TIMEOUT", 0.05)
    state = ResponseState(HungStore())
    found = await asyncio.wait_for(state.lookup(["owner"], "resp_1"), 30)
    assert found.failed
