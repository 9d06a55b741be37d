"""Degrading media is bounded per request: decoded pixels, and the request's deadline."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PIL import Image

from gateway.projection.media import REASON_DEADLINE, REASON_PIXEL_BUDGET
from gateway.referee import Referee
from tests.conftest import GatewayFactory
from tests.recovery.e2e_support import client, start_gateway
from tests.recovery.test_e2e_media import arrived_images, data_url, texts

MAX_SIDE = 512


def png(size: tuple[int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (40, 120, 200)).save(buf, "PNG")
    return buf.getvalue()


def variant(base: bytes, n: int) -> bytes:
    """``base`` with a text chunk after its header: other bytes, the same pixels to decode."""
    data = b"Comment\x00" + str(n).encode()
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data
    chunk += struct.pack(">I", zlib.crc32(b"tEXt" + data))
    end_of_ihdr = 8 + 4 + 4 + 13 + 4
    return base[:end_of_ihdr] + chunk + base[end_of_ihdr:]


def many_images(base: bytes, count: int) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "compare these"}]
    parts += [{"type": "image_url", "image_url": {"url": data_url(variant(base, i), "image/png")}}
              for i in range(count)]
    return [{"role": "user", "content": parts}]


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict", style="anthropic", max_image_side=MAX_SIDE) as ref:
        yield ref


async def test_decoded_pixels_per_request_are_bounded(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url,
                             media={"max_side": MAX_SIDE, "max_total_pixels": 9_000_000})
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=many_images(png((2000, 2000)), 5))
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    sent = referee.requests[-1].json()
    assert len(arrived_images(sent)) == 2  # 2 x 4 MP decoded; the third would pass 9 MP
    notes = [t for t in texts(sent) if t.startswith("[image removed:")]
    assert len(notes) == 3 and all(REASON_PIXEL_BUDGET in t for t in notes)


async def test_image_processing_stops_at_the_deadline(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url,
                             recovery={"deadline": 1.0},
                             media={"max_side": MAX_SIDE, "max_total_pixels": 10**12})
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=many_images(png((4000, 4000)), 40))
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    sent = referee.requests[-1].json()
    notes = [t for t in texts(sent) if t.startswith("[image removed:")]
    # 40 images of 16 MP cannot all be decoded in a second: the rest were left out.
    assert notes and all(REASON_DEADLINE in t for t in notes)
    assert len(arrived_images(sent)) + len(notes) == 40
