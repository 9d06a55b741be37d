"""Held-out round on the media rung (SPEC §3 step 3) across the three wires.

Each case goes through a real gateway with the real ``openai`` / ``anthropic`` SDK, against a
fake on loopback that refuses with the provider's own error body. What a user notices is
asserted: an answer, ``x-gateway-recovery`` naming the media step, a retry the provider can
take (sizes, formats, placeholders), a bounded number of attempts, and images nobody refused
arriving byte for byte.
"""

from __future__ import annotations

import base64
import io
import random
import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web
from PIL import Image

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, serve_app
from tests.fakes.anthropic_rules import MAX_IMAGE_BYTES, MAX_IMAGE_SIDE
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.native_base import image_size
from tests.fakes.responses_server import FakeResponses, responses_error
from tests.recovery.e2e_support import client, start_gateway
from tests.recovery.test_e2e_media import (
    MAX_BYTES,
    MAX_SIDE,
    MEDIA,
    arrived_images,
    ask,
    assert_within_limits,
    data_url,
    encode,
    picture,
    texts,
)
from tests.wires.test_wire_refusals_heldout import CLAUDE, GPT, gateway_config

REMOVED = "[image removed:"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def animated_gif(size: tuple[int, int]) -> bytes:
    frames = [Image.new("P", size, i * 40) for i in range(4)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=80, loop=0)
    return buf.getvalue()


def noise(size: tuple[int, int], seed: int) -> Image.Image:
    """Incompressible pixels: a PNG of these is large for its side."""
    return Image.frombytes("RGB", size, random.Random(seed).randbytes(size[0] * size[1] * 3))


def bomb_png(width: int, height: int) -> bytes:
    """A PNG of a few hundred bytes whose header declares ``width`` x ``height`` pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    row = zlib.compress(b"\x00" * (width + 1), 9)[:200]  # a start of the rows; never decoded
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", row) + chunk(b"IEND", b"")


HEIC = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64
SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40">'
       b'<rect width="40" height="40" fill="red"/></svg>')
SMALL_PNG = encode(picture((64, 48)), "PNG")

OPENAI_FORMAT = {"error": {
    "message": "You uploaded an unsupported image. Please make sure your image has of one the "
    "following formats: ['png', 'jpeg', 'gif', 'webp'].", "type": "invalid_request_error",
    "param": None, "code": "invalid_image_format"}}
UNSUPPORTED = {"error": {"message": "Unsupported image format", "type": "invalid_request_error",
                         "param": None, "code": None}}
TIMEOUT_DOWNLOAD = {"error": {"message": "Timeout while downloading {url}.",
                              "type": "invalid_request_error", "param": None,
                              "code": "invalid_image_url"}}


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict", style="anthropic", max_image_side=MAX_SIDE,
                       allowed_image_formats=["png", "jpeg"], max_image_bytes=MAX_BYTES) as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await start_gateway(gateway_factory, referee.base_url, media=MEDIA)


# -- Chat Completions ---------------------------------------------------------------------

FORMATS = {
    "animated gif": (lambda: animated_gif((300, 200)), "image/gif"),
    "tiff": (lambda: encode(picture((300, 200)), "TIFF"), "image/tiff"),
    "webp": (lambda: encode(picture((300, 200)), "WEBP"), "image/webp"),
}


@pytest.mark.parametrize("case", list(FORMATS))
async def test_refused_format_is_converted_to_one_the_provider_takes(
    gw: RunningGateway, referee: Referee, case: str
) -> None:
    make, media_type = FORMATS[case]
    raw_image = make()
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=ask(data_url(raw_image, media_type)))
    assert raw.parse().choices[0].message.content.startswith("referee: accepted")
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert [r.status for r in referee.requests] == [400, 200]
    [image] = arrived_images(referee.requests[-1].json())
    assert_within_limits(image, MAX_SIDE)
    assert image[2].size == (300, 200)  # converted, not shrunk: it was small enough


UNDECODABLE = {
    "heic": data_url(HEIC, "image/heic"),
    "svg": data_url(SVG, "image/svg+xml"),
    "truncated base64": data_url(SMALL_PNG, "image/png")[:-37],
    "corrupt base64": data_url(SMALL_PNG, "image/png")[:60] + "%%%not*base64%%%",
    "decompression bomb 50000x50000": data_url(bomb_png(50_000, 50_000), "image/png"),
}


@pytest.mark.parametrize("case", list(UNDECODABLE))
async def test_image_that_cannot_be_saved_becomes_a_placeholder(
    gw: RunningGateway, referee: Referee, case: str
) -> None:
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=ask(UNDECODABLE[case], "describe it"))
    assert raw.parse().choices[0].message.content.startswith("referee: accepted")
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert [r.status for r in referee.requests] == [400, 200]
    sent = referee.requests[-1].json()
    assert arrived_images(sent) == []
    assert "describe it" in texts(sent)
    assert [t for t in texts(sent) if t.startswith(REMOVED)] != []


async def test_unrefused_image_goes_byte_for_byte_beside_a_refused_one(
    gw: RunningGateway, referee: Referee
) -> None:
    good = data_url(SMALL_PNG, "image/png")
    wide = data_url(encode(picture((2000, 400)), "PNG"), "image/png")
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "compare"},
        {"type": "image_url", "image_url": {"url": good}},
        {"type": "image_url", "image_url": {"url": wide}}]}]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=messages)
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    parts = referee.requests[-1].json()["messages"][0]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": good}}
    assert max(arrived_images(referee.requests[-1].json())[1][2].size) == MAX_SIDE


async def test_valid_image_never_refused_is_never_touched(
    gw: RunningGateway, referee: Referee
) -> None:
    body = {"model": "demo", "messages": ask(data_url(SMALL_PNG, "image/png"))}
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(**body)
    assert "x-gateway-recovery" not in raw.headers
    [sent] = referee.requests
    assert sent.json()["messages"] == body["messages"]


async def test_image_in_a_tool_message_is_shrunk(gw: RunningGateway, referee: Referee) -> None:
    wide = data_url(encode(picture((1600, 900)), "PNG"), "image/png")
    messages = [
        {"role": "user", "content": "take a screenshot"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "screenshot", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": [
            {"type": "text", "text": "here it is"},
            {"type": "image_url", "image_url": {"url": wide}}]}]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=messages)
    # chat takes images from users only: the strict rung moves it after the tool message,
    # where it is still too wide, and the media rung shrinks it there
    assert raw.headers["x-gateway-recovery"] == "strict,media=degraded"
    assert [r.situation for r in referee.requests] == ["shape", "h", None]
    sent = referee.requests[-1].json()
    [image] = arrived_images(sent)
    assert_within_limits(image, MAX_SIDE)
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool", "user"]


@pytest.fixture
async def image_host() -> AsyncIterator[str]:
    """A loopback host whose /gone.png is a 404 (the provider's download failed too)."""
    async def gone(_: web.Request) -> web.Response:
        return web.Response(status=404, text="no such image")

    app = web.Application()
    app.router.add_get("/gone.png", gone)
    runner, base = await serve_app(app)
    yield base
    await runner.cleanup()


async def test_remote_image_the_provider_could_not_download_becomes_a_placeholder(
    gateway_factory: GatewayFactory, referee: Referee, image_host: str
) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url,
                             media={**MEDIA, "fetch_private": True})
    url = f"{image_host}/gone.png"
    referee.script(400, {"error": {**TIMEOUT_DOWNLOAD["error"],
                                   "message": f"Timeout while downloading {url}."}})
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=ask(url))
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    sent = referee.requests[-1].json()
    assert arrived_images(sent) == [] and url not in str(sent)
    assert "[image removed: could not be fetched]" in texts(sent)


async def test_streamed_request_refused_for_media_streams_the_answer(
    gw: RunningGateway, referee: Referee
) -> None:
    url = data_url(encode(picture((300, 200)), "BMP"), "image/bmp")
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=ask(url), stream=True)
        text = "".join([ch.choices[0].delta.content or "" async for ch in raw.parse()
                        if ch.choices])
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert text.startswith("referee: accepted")
    [image] = arrived_images(referee.requests[-1].json())
    assert_within_limits(image, MAX_SIDE)


async def test_a_provider_that_refuses_every_image_is_not_retried_forever(
    gw: RunningGateway, referee: Referee
) -> None:
    for _ in range(10):
        referee.script(400, UNSUPPORTED)
    url = data_url(SMALL_PNG, "image/png")
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="demo", messages=ask(url))
    # a valid image degrades to itself (that resend is skipped); stripped, it is still refused:
    # the provider's refusal comes back after those two attempts, nothing more
    assert "Unsupported image format" in str(info.value)
    assert len(referee.requests) == 2
    assert arrived_images(referee.requests[-1].json()) == []
    assert REMOVED in str(texts(referee.requests[-1].json()))


async def test_images_over_the_total_size_share_it_and_stay(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    """Each image is under the provider's per-image limit, together they are over the request
    limit: each gets an equal share of it instead of all being stripped."""
    gw = await start_gateway(gateway_factory, referee.base_url,
                             media={**MEDIA, "max_total_bytes": 600_000})
    referee.script(413, {"error": {
        "message": "Request Entity Too Large: the request body exceeds the maximum request "
        "size of 20 MB.", "type": "invalid_request_error", "param": None, "code": None}})
    small = data_url(SMALL_PNG, "image/png")
    urls = [data_url(encode(noise((260, 260), seed), "PNG"), "image/png") for seed in range(3)]
    assert all(200_000 < len(u) < MAX_BYTES for u in urls)
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "compare"},
        *({"type": "image_url", "image_url": {"url": u}} for u in [small, *urls])]}]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=messages)
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    sent = referee.requests[-1].json()
    assert sent["messages"][0]["content"][1]["image_url"]["url"] == small  # under its share
    images = arrived_images(sent)
    assert len(images) == 4
    assert sum(len(base64.b64encode(raw_image)) for _, raw_image, _ in images) <= 600_000


# -- Anthropic Messages ---------------------------------------------------------------------


def image_block(raw: bytes, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": b64(raw)}}


def native_images(value: Any) -> list[dict[str, Any]]:
    """Every Anthropic image block of ``value``, tool results included."""
    if isinstance(value, list):
        return [b for v in value for b in native_images(v)]
    if isinstance(value, dict):
        own = [value] if value.get("type") == "image" else []
        return own + native_images(value.get("content"))
    return []


@pytest.fixture
async def claude(gateway_factory: GatewayFactory) -> AsyncIterator[tuple[FakeAnthropic,
                                                                        anthropic.AsyncAnthropic]]:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(gateway_config(fake.base_url, "http://127.0.0.1:9"))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            yield fake, c


async def test_anthropic_png_over_8000_px_is_scaled_down(
    claude: tuple[FakeAnthropic, anthropic.AsyncAnthropic]
) -> None:
    fake, c = claude
    tall = encode(Image.new("RGB", (300, 9000), (10, 90, 200)), "PNG")
    raw = await c.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": [
            {"type": "text", "text": "read this page"}, image_block(tall)]}])
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert (await raw.parse()).content[0].type == "text"
    assert fake.requests[0].body["messages"][0]["content"][1]["source"]["data"] == b64(tall)
    [block] = native_images(fake.requests[-1].body["messages"])
    assert max(image_size(base64.b64decode(block["source"]["data"]))) <= MAX_IMAGE_SIDE


async def test_anthropic_png_under_5_mb_but_over_it_in_base64_is_reencoded(
    claude: tuple[FakeAnthropic, anthropic.AsyncAnthropic]
) -> None:
    fake, c = claude
    fake.context_window = 10_000_000  # the fake counts JSON bytes as tokens, image data too
    # incompressible pixels: about 4.1 MB of PNG, 5.5 MB once in base64 (what the API counts)
    side = 1180
    raw_png = encode(Image.frombytes("RGB", (side, side), random.Random(3).randbytes(
        side * side * 3)), "PNG")
    assert 3 * 1024 * 1024 < len(raw_png) < MAX_IMAGE_BYTES < len(b64(raw_png))
    raw = await c.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": [
            {"type": "text", "text": "what is this?"}, image_block(raw_png)]}])
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert len(fake.requests) == 2
    [block] = native_images(fake.requests[-1].body["messages"])
    assert len(block["source"]["data"]) <= MAX_IMAGE_BYTES
    assert max(image_size(base64.b64decode(block["source"]["data"]))) > 0


async def test_anthropic_image_in_a_tool_result_is_scaled_down(
    claude: tuple[FakeAnthropic, anthropic.AsyncAnthropic]
) -> None:
    fake, c = claude
    tall = encode(Image.new("RGB", (1440, 8570), (240, 240, 240)), "PNG")
    messages: list[Any] = [
        {"role": "user", "content": "screenshot the page"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "screenshot", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "full page"},
                                                  image_block(tall)]}]}]
    raw = await c.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=64, messages=messages,
        tools=[{"name": "screenshot", "input_schema": {"type": "object"}}])
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert (await raw.parse()).content
    [block] = native_images(fake.requests[-1].body["messages"])
    assert max(image_size(base64.b64decode(block["source"]["data"]))) <= MAX_IMAGE_SIDE


async def test_anthropic_more_than_100_images_gets_an_answer(
    claude: tuple[FakeAnthropic, anthropic.AsyncAnthropic]
) -> None:
    fake, c = claude
    frames = [encode(Image.new("RGB", (32, 32), (i, 0, 0)), "PNG") for i in range(103)]
    blocks: list[Any] = [{"type": "text", "text": "what changed across these frames?"}]
    blocks += [image_block(frame) for frame in frames]
    raw = await c.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": blocks}])
    assert (await raw.parse()).content
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert len(fake.requests) == 2
    sent = fake.requests[-1].body["messages"][0]["content"]
    # the 100 most recent frames go as they were; the 3 oldest are placeholders
    assert [b["source"]["data"] for b in native_images(sent)] == [b64(f) for f in frames[3:]]
    assert [b["type"] for b in sent[1:4]] == ["text"] * 3
    assert all(b["text"].startswith(REMOVED) for b in sent[1:4])


async def test_anthropic_pdf_too_large_is_refused_once_not_looped(
    claude: tuple[FakeAnthropic, anthropic.AsyncAnthropic]
) -> None:
    fake, c = claude
    fake.script(*[anthropic_error(400, "messages.0.content.1.document.source.base64.data: "
                                  "The PDF specified was too large. PDFs must be under 32MB.")
                  for _ in range(5)])
    pdf = b64(b"%PDF-1.4\n" + b"0" * 2000 + b"\n%%EOF")
    with pytest.raises(anthropic.BadRequestError) as info:
        await c.messages.create(model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": [
            {"type": "text", "text": "summarize"},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                            "data": pdf}}]}])
    assert "PDF" in str(info.value)
    # The newest turn's PDF stays on the degraded step (nothing changes: not resent); the
    # strip step sends it once without it; that refused too, the refusal comes as it came.
    assert len(fake.requests) == 2
    note = fake.requests[-1].body["messages"][0]["content"][1]
    assert note["type"] == "text" and note["text"].startswith("[document removed:")


# -- OpenAI Responses -----------------------------------------------------------------------


@pytest.fixture
async def gpt(gateway_factory: GatewayFactory) -> AsyncIterator[tuple[FakeResponses,
                                                                     openai.AsyncOpenAI]]:
    async with FakeResponses(api_key="upstream-openai-key") as fake:
        config = gateway_config("http://127.0.0.1:9", fake.base_url)
        config["media"] = MEDIA
        gw = await gateway_factory(config)
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            yield fake, c


def input_images(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [b for v in value for b in input_images(v)]
    if isinstance(value, dict):
        own = [value] if value.get("type") == "input_image" else []
        return own + input_images(value.get("content")) + input_images(value.get("output"))
    return []


def decoded(part: dict[str, Any]) -> Image.Image:
    header, _, payload = part["image_url"].partition(",")
    img = Image.open(io.BytesIO(base64.b64decode(payload)))
    img.load()
    assert header == f"data:image/{(img.format or '').lower()};base64"
    return img


async def test_responses_input_image_in_a_refused_format_is_converted(
    gpt: tuple[FakeResponses, openai.AsyncOpenAI]
) -> None:
    fake, c = gpt
    fake.script(responses_error(400, OPENAI_FORMAT["error"]["message"], param=None,
                                code="invalid_image_format"))
    url = data_url(encode(picture((900, 300)), "BMP"), "image/bmp")
    raw = await c.responses.with_raw_response.create(model=GPT, input=[{
        "role": "user", "content": [{"type": "input_text", "text": "what is it?"},
                                    {"type": "input_image", "image_url": url, "detail": "auto"}]}])
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert raw.parse().output_text
    [part] = input_images(fake.requests[-1].body["input"])
    img = decoded(part)
    assert img.format in ("PNG", "JPEG") and max(img.size) <= MAX_SIDE


async def test_responses_image_in_a_function_call_output_is_shrunk(
    gpt: tuple[FakeResponses, openai.AsyncOpenAI]
) -> None:
    fake, c = gpt
    fake.script(responses_error(400, "Image too large: the image dimensions exceed the "
                                "maximum allowed.", param=None))
    wide = data_url(encode(picture((1800, 600)), "PNG"), "image/png")
    items: list[Any] = [
        {"role": "user", "content": "screenshot it"},
        {"type": "function_call", "call_id": "call_1", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": [
            {"type": "input_text", "text": "the page"},
            {"type": "input_image", "image_url": wide, "detail": "auto"}]}]
    raw = await c.responses.with_raw_response.create(
        model=GPT, input=items,
        tools=[{"type": "function", "name": "shot", "parameters": {"type": "object"}}])
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    [part] = input_images(fake.requests[-1].body["input"])
    assert max(decoded(part).size) <= MAX_SIDE


async def test_responses_image_by_file_id_that_fails_to_download_gets_an_answer(
    gpt: tuple[FakeResponses, openai.AsyncOpenAI]
) -> None:
    fake, c = gpt
    fake.script(responses_error(400, "Failed to download image from file-img_1.", param=None,
                                code="invalid_image_url"))
    raw = await c.responses.with_raw_response.create(model=GPT, input=[{
        "role": "user", "content": [{"type": "input_text", "text": "what is it?"},
                                    {"type": "input_image", "file_id": "file-img_1",
                                     "detail": "auto"}]}])
    assert raw.parse().output_text
    # the file is the provider's: nothing to degrade, so the image is stripped
    assert raw.headers["x-gateway-recovery"] == "media=strip"
    assert len(fake.requests) == 2
    sent = fake.requests[-1].body["input"]
    assert input_images(sent) == []
    assert REMOVED in str(sent)


async def test_responses_data_url_whose_type_lies_is_relabelled_not_reencoded(
    gpt: tuple[FakeResponses, openai.AsyncOpenAI]
) -> None:
    fake, c = gpt
    fake.script(responses_error(400, "You uploaded an unsupported image. Please make sure "
                                "your image is valid.", param=None, code="invalid_image"))
    raw = await c.responses.with_raw_response.create(model=GPT, input=[{
        "role": "user", "content": [{"type": "input_text", "text": "what is it?"},
                                    {"type": "input_image", "detail": "auto",
                                     "image_url": data_url(SMALL_PNG, "image/jpeg")}]}])
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    [part] = input_images(fake.requests[-1].body["input"])
    assert part["image_url"] == data_url(SMALL_PNG, "image/png")  # the same bytes, true label


async def test_responses_streamed_request_refused_for_media_streams_the_answer(
    gpt: tuple[FakeResponses, openai.AsyncOpenAI]
) -> None:
    fake, c = gpt
    fake.script(responses_error(400, OPENAI_FORMAT["error"]["message"], param=None,
                                code="invalid_image_format"))
    url = data_url(encode(picture((300, 200)), "TIFF"), "image/tiff")
    raw = await c.responses.with_raw_response.create(model=GPT, stream=True, input=[{
        "role": "user", "content": [{"type": "input_text", "text": "what is it?"},
                                    {"type": "input_image", "image_url": url, "detail": "auto"}]}])
    kinds = [event.type async for event in raw.parse()]
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
    [part] = input_images(fake.requests[-1].body["input"])
    assert decoded(part).format in ("PNG", "JPEG")


async def test_anthropic_url_image_the_api_could_not_download_becomes_a_placeholder(
    claude: tuple[FakeAnthropic, anthropic.AsyncAnthropic], image_host: str
) -> None:
    fake, c = claude
    fake.script(anthropic_error(400, "Unable to download the file. Please verify the URL and "
                                "try again."))
    url = f"{image_host}/gone.png"
    raw = await c.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "url", "url": url}}]}])
    assert (await raw.parse()).content
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    sent = fake.requests[-1].body["messages"][0]["content"]
    assert native_images(sent) == []
    assert sent[1]["text"].startswith(REMOVED)
