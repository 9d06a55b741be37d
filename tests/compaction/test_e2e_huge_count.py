"""Counting the tokens of a huge message never tokenizes it whole on the event loop."""

from __future__ import annotations

import threading
from typing import Any

import aiohttp
import pytest

from gateway.compaction import tokens
from gateway.referee import Referee
from tests.compaction.conftest import Session, compaction_header, demo_config
from tests.conftest import GatewayFactory
from tests.factories import calls, tool, user


class RecordingEncoding:
    """A tiktoken encoding that records how much text each call tokenized, and where."""

    def __init__(self, inner: Any, calls: list[tuple[bool, int]]) -> None:
        self.inner = inner
        self.calls = calls

    def encode_ordinary(self, text: str) -> list[int]:
        on_loop = threading.current_thread() is threading.main_thread()
        self.calls.append((on_loop, len(text)))
        result: list[int] = self.inner.encode_ordinary(text)
        return result


async def test_a_10_mb_message_is_never_tokenized_whole_on_the_loop(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[bool, int]] = []
    real = tokens.get_encoding

    def recording(name: str) -> Any:
        inner = real(name)
        return None if inner is None else RecordingEncoding(inner, seen)

    monkeypatch.setattr(tokens, "get_encoding", recording)
    async with Referee(rules="openai", context_window=2_000_000) as ref:
        gw = await gateway_factory(demo_config(ref, window=1_000_000))
        s = Session(gw)
        huge = "\n".join(f"{i:08d} " + "log data, more log data; " * 16 for i in range(25_000))
        assert len(huge) > 10_000_000
        raw = await s.send([user("read the log"), calls("call_log"), tool("call_log", huge),
                            user("what went wrong?")])
        header = compaction_header(raw)
        # (The old, huge log is folded to a card: the cheap reduction needs no summary.)
        assert header is not None and header[0] == "reduced", raw.headers
        # The gateway stayed responsive and nothing big was tokenized on its loop.
        async with aiohttp.ClientSession() as c, c.get(gw.root + "/healthz") as r:
            assert r.status == 200
    assert seen, "the tokenizer was used"
    big_on_loop = [n for on_loop, n in seen if on_loop and n > tokens.EXACT_COUNT_MAX_CHARS]
    assert big_on_loop == []
    assert max(n for _, n in seen) <= tokens.EXACT_COUNT_MAX_CHARS
