"""Ladder step 3 end to end: an upstream that refuses large or unsupported images is recovered
by degraded media, and what arrives is within the limits (SPEC §3)."""

from __future__ import annotations

import base64
import io
import random
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from aiohttp import web
from PIL import Image

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.recovery.e2e_support import attempt_spans, client, span_summary, start_gateway

MAX_SIDE = 512
MAX_BYTES = 300_000
MEDIA = {"max_side": MAX_SIDE, "max_bytes": MAX_BYTES, "allowed_formats": ["png", "jpeg"]}


def encode(img: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def picture(size: tuple[int, int]) -> Image.Image:
    gradient = Image.linear_gradient("L").resize(size)
    return Image.merge("RGB", (gradient, gradient.transpose(Image.Transpose.ROTATE_180),
                               gradient.transpose(Image.Transpose.ROTATE_90).resize(size)))


def noise(size: tuple[int, int]) -> Image.Image:
    """Incompressible pixels: a PNG of these is large for its side."""
    rng = random.Random(7)
    return Image.frombytes("RGB", size, rng.randbytes(size[0] * size[1] * 3))


def data_url(raw: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(raw).decode()}"


def ask(url: str, text: str = "what is in this picture?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         {"type": "image_url", "image_url": {"url": url}}]}]


def arrived_images(sent: dict[str, Any]) -> list[tuple[str, bytes, Image.Image]]:
    """(declared media type, bytes, decoded image) of every data-URL image in a body."""
    out = []
    for message in sent["messages"]:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if part.get("type") != "image_url":
                continue
            header, _, payload = part["image_url"]["url"].partition(",")
            assert header.startswith("data:") and header.endswith(";base64"), header[:40]
            raw = base64.b64decode(payload)
            img = Image.open(io.BytesIO(raw))
            img.load()
            out.append((header[5:-7], raw, img))
    return out


def texts(sent: dict[str, Any]) -> list[str]:
    return [p["text"] for m in sent["messages"] if isinstance(m.get("content"), list)
            for p in m["content"] if p.get("type") == "text"]


def assert_within_limits(image: tuple[str, bytes, Image.Image], max_side: int) -> None:
    media_type, raw, img = image
    assert media_type in ("image/png", "image/jpeg")
    assert (img.format or "").lower() == media_type.split("/")[1]
    assert max(img.size) <= max_side
    assert len(raw) <= MAX_BYTES


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict", style="anthropic", max_image_side=MAX_SIDE,
                       allowed_image_formats=["png", "jpeg"], max_image_bytes=MAX_BYTES) as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await start_gateway(gateway_factory, referee.base_url, media=MEDIA)


OVERSIZED = {
    "image too wide": lambda: data_url(encode(picture((2400, 900)), "PNG"), "image/png"),
    "unsupported format (bmp)": lambda: data_url(encode(picture((300, 200)), "BMP"),
                                                 "image/bmp"),
    "too many bytes": lambda: data_url(encode(noise((500, 400)), "PNG"), "image/png"),
    "declared png, really jpeg": lambda: data_url(encode(picture((300, 200)), "JPEG"),
                                                  "image/png"),
}


@pytest.mark.parametrize("case", list(OVERSIZED))
async def test_refused_image_is_degraded_and_arrives_within_limits(
    gw: RunningGateway, referee: Referee, case: str
) -> None:
    url = OVERSIZED[case]()
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=ask(url))
    assert raw.parse().choices[0].message.content.startswith("referee: accepted")
    assert raw.headers["x-gateway-attempts"] == "2"
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    first, second = referee.requests
    assert first.status == 400 and first.situation == "h"
    assert first.json()["messages"] == ask(url)  # the original went out first, untouched
    assert second.status == 200
    [image] = arrived_images(second.json())
    assert_within_limits(image, MAX_SIDE)
    assert "what is in this picture?" in texts(second.json())
    spans = [span_summary(s) for s in attempt_spans(gw)]
    assert [(s["media"], s["status"], s["verdict"]) for s in spans] == [
        ("original", 400, "media"), ("degraded", 200, None)]


async def test_undecodable_image_becomes_a_note(gw: RunningGateway, referee: Referee) -> None:
    url = data_url(b"\x89PNG\r\n\x1a\n this is not really a png", "image/png")
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=ask(url))
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    sent = referee.requests[-1].json()
    assert arrived_images(sent) == []
    assert any(t.startswith("[image removed:") for t in texts(sent))


async def test_model_info_media_overrides_only_the_keys_it_names(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    """``model_info.media: {max_side: 400}`` changes the side; the global formats still
    apply to that model (webp is not among them, though it is in the default list)."""
    gw = await start_gateway(
        gateway_factory, referee.base_url, media=MEDIA,
        extra_models=[model_entry("small", referee.base_url, model="openai/referee",
                                  media={"max_side": 400})],
    )
    wide = data_url(encode(picture((2400, 900)), "PNG"), "image/png")
    webp = data_url(encode(picture((300, 200)), "WEBP"), "image/webp")
    async with client(gw) as c:
        await c.chat.completions.create(model="small", messages=ask(wide))
        await c.chat.completions.create(model="demo", messages=ask(wide))
        raw = await c.chat.completions.with_raw_response.create(model="small",
                                                                messages=ask(webp))
    assert max(arrived_images(referee.requests[1].json())[0][2].size) == 400
    assert max(arrived_images(referee.requests[3].json())[0][2].size) == MAX_SIDE
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    [image] = arrived_images(referee.requests[5].json())
    assert_within_limits(image, 400)


async def test_degraded_that_changes_nothing_is_skipped_then_stripped(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    """Gateway limits looser than the provider's: degrading leaves the image as it is, so
    that identical resend is skipped and the image is stripped instead."""
    gw = await start_gateway(gateway_factory, referee.base_url,
                             media={**MEDIA, "max_side": 4096})
    url = data_url(encode(picture((1000, 300)), "PNG"), "image/png")
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=ask(url))
    assert raw.headers["x-gateway-attempts"] == "2"
    assert raw.headers["x-gateway-recovery"] == "media=strip"
    assert len(referee.requests) == 2
    sent = referee.requests[-1].json()
    assert arrived_images(sent) == []
    assert "what is in this picture?" in texts(sent)
    assert any(t.startswith("[image removed:") for t in texts(sent))


async def test_media_step_disabled_returns_the_refusal(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url, media=MEDIA,
                             recovery={"media": False})
    url = data_url(encode(picture((2400, 900)), "PNG"), "image/png")
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="demo", messages=ask(url))
    assert len(referee.requests) == 1
    got = info.value.response.json()
    assert "image dimensions exceed" in got["error"]["message"]
    assert [a["verdict"] for a in got["gateway"]["attempts"]] == ["media"]


# -- remote image URLs ------------------------------------------------------------------------

BIG_REMOTE = encode(picture((1800, 1200)), "PNG")
NO_URLS = {"error": {"message": "image URLs are not currently supported, please use base64 "
                     "encoded data instead", "type": "invalid_request_error", "param": None,
                     "code": None}}


@pytest.fixture
async def image_host() -> AsyncIterator[tuple[str, list[str]]]:
    """A loopback web server with /big.png; yields its base URL and the paths fetched."""
    fetched: list[str] = []

    async def big(request: web.Request) -> web.Response:
        fetched.append(request.path)
        return web.Response(body=BIG_REMOTE, content_type="image/png")

    app = web.Application()
    app.router.add_get("/big.png", big)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}", fetched
    await runner.cleanup()


async def test_remote_image_is_fetched_shrunk_and_inlined(
    gateway_factory: GatewayFactory, referee: Referee, image_host: tuple[str, list[str]]
) -> None:
    base, fetched = image_host
    gw = await start_gateway(gateway_factory, referee.base_url,
                             media={**MEDIA, "fetch_private": True})
    referee.script(400, NO_URLS)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=ask(f"{base}/big.png"))
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert fetched == ["/big.png"]
    [image] = arrived_images(referee.requests[-1].json())
    assert_within_limits(image, MAX_SIDE)


async def test_loopback_image_url_is_not_fetched_by_default(
    gw: RunningGateway, referee: Referee, image_host: tuple[str, list[str]]
) -> None:
    base, fetched = image_host
    referee.script(400, NO_URLS)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=ask(f"{base}/big.png"))
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert fetched == []  # the gateway is no way into its own network
    sent = referee.requests[-1].json()
    assert arrived_images(sent) == []
    assert "[image removed: could not be fetched]" in texts(sent)


async def test_413_from_a_proxy_is_recovered_by_degraded_media(
    gw: RunningGateway, referee: Referee
) -> None:
    referee.script(413, "<html><head><title>413 Request Entity Too Large</title></head>"
                   "<body><center><h1>413 Request Entity Too Large</h1></center>"
                   "<hr><center>nginx</center></body></html>", {"Content-Type": "text/html"})
    url = data_url(encode(picture((2400, 900)), "PNG"), "image/png")
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=ask(url))
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert [r.status for r in referee.requests] == [413, 200]
    [image] = arrived_images(referee.requests[-1].json())
    assert_within_limits(image, MAX_SIDE)
