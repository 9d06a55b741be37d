"""LiteLLMStream: the first chunk decides whether a stream is an answer or a failure."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.providers.base import UpstreamError
from gateway.providers.litellm_adapter import LiteLLMStream
from gateway.recovery.classifier import Verdict, classify


async def test_a_stream_ending_before_its_first_chunk_is_a_retryable_failure() -> None:
    async def nothing() -> AsyncIterator[object]:
        return
        yield  # an async generator that ends at once

    stream = LiteLLMStream(nothing(), "claude")
    with pytest.raises(UpstreamError) as info:
        await stream.receive_first()
    assert info.value.failure.status == 502
    assert classify(info.value.failure) == Verdict.TRANSIENT
