"""Degraded media (SPEC §3 step 3): gateway.projection.media, pure part."""

from __future__ import annotations

import base64
import copy
import io
import json
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageDraw

from gateway.projection.media import (
    REASON_STRIPPED,
    MediaLimits,
    MediaResult,
    degrade_messages,
    image_urls_to_fetch,
)

LIMITS = MediaLimits()
ROOT = Path(__file__).resolve().parents[2]


# -- helpers ----------------------------------------------------------------------------------


def encode(img: Image.Image, fmt: str, **kw: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def data_url(raw: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(raw).decode()}"


def image_part(url: str, detail: str | None = "high") -> dict[str, Any]:
    image_url: dict[str, Any] = {"url": url}
    if detail:
        image_url["detail"] = detail
    return {"type": "image_url", "image_url": image_url}


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": "look"}, *parts]}


def decode_url(url: str) -> tuple[str, bytes, Image.Image]:
    """(declared media type, bytes, fully loaded image) of a data URL."""
    header, _, payload = url.partition(",")
    assert header.startswith("data:") and header.endswith(";base64")
    raw = base64.b64decode(payload, validate=True)
    img = Image.open(io.BytesIO(raw))
    img.load()
    return header[5:-7], raw, img


def only_image_url(result: MediaResult, message: int = 0, part: int = 1) -> str:
    url = result.messages[message]["content"][part]["image_url"]["url"]
    assert isinstance(url, str)
    return url


def photo(size: tuple[int, int]) -> Image.Image:
    """A photo-like RGB image (gradients + shapes), quick to build at any size."""
    gradient = Image.linear_gradient("L").resize(size)
    img = Image.merge("RGB", (gradient, gradient.transpose(Image.Transpose.ROTATE_180),
                              gradient.transpose(Image.Transpose.ROTATE_90).resize(size)))
    draw = ImageDraw.Draw(img)
    draw.ellipse((size[0] // 4, size[1] // 4, size[0] // 2, size[1] // 2), fill=(250, 10, 10))
    return img


def png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def claimed_png(width: int, height: int) -> bytes:
    """A tiny PNG whose IHDR claims ``width``x``height`` (1-bit grey); the data is one row."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * (width // 8 + 2))
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat)
            + png_chunk(b"IEND", b""))


# -- degraded: shrink and re-encode -----------------------------------------------------------


def test_large_png_arrives_within_side_and_bytes() -> None:
    raw = encode(photo((4000, 3000)), "PNG", compress_level=1)
    messages = [user(image_part(data_url(raw, "image/png")))]
    result = degrade_messages(messages, LIMITS, "degraded")

    media_type, out, img = decode_url(only_image_url(result))
    assert img.size == (1568, 1176)  # longest side at the limit, 4:3 kept
    assert len(out) <= LIMITS.max_bytes
    assert media_type == f"image/{img.format.lower()}"  # type: ignore[union-attr]
    assert result.messages[0]["content"][1]["image_url"]["detail"] == "high"
    [change] = result.changes
    assert (change.action, change.message_index, change.part_index) == ("downscaled", 0, 1)
    assert change.before_size == (4000, 3000) and change.after_size == (1568, 1176)
    assert change.before_bytes == len(raw) and change.after_bytes == len(out)
    assert "4000px > 1568px" in change.reason


def test_tight_byte_limit_lowers_quality_and_size_until_it_fits() -> None:
    noisy = Image.effect_noise((1200, 900), 90).convert("RGB")
    raw = encode(noisy, "PNG")
    limits = MediaLimits(max_bytes=40_000)
    result = degrade_messages([user(image_part(data_url(raw, "image/png")))], limits, "degraded")

    media_type, out, img = decode_url(only_image_url(result))
    assert len(out) <= 40_000
    assert media_type == "image/jpeg" and img.format == "JPEG"
    assert result.changes[0].action == "downscaled"  # q40 at full size was still too big
    assert img.width / img.height == pytest.approx(1200 / 900, rel=0.01)


def test_oversized_jpeg_that_only_needs_recompression_is_reencoded() -> None:
    noisy = Image.effect_noise((800, 600), 90).convert("RGB")
    raw = encode(noisy, "JPEG", quality=100)
    limits = MediaLimits(max_bytes=len(raw) * 2 // 3)
    result = degrade_messages([user(image_part(data_url(raw, "image/jpeg")))], limits, "degraded")

    _, out, img = decode_url(only_image_url(result))
    assert img.size == (800, 600) and img.format == "JPEG"
    assert len(out) <= limits.max_bytes
    assert result.changes[0].action == "reencoded"


@pytest.mark.parametrize(("fmt", "media_type"), [("BMP", "image/bmp"), ("TIFF", "image/tiff")])
def test_unaccepted_format_is_converted(fmt: str, media_type: str) -> None:
    raw = encode(photo((300, 200)), fmt)
    result = degrade_messages([user(image_part(data_url(raw, media_type)))], LIMITS, "degraded")

    out_type, _, img = decode_url(only_image_url(result))
    assert img.format in ("PNG", "JPEG") and out_type == f"image/{img.format.lower()}"
    assert img.size == (300, 200)
    assert result.changes[0].action == "converted"
    assert f"format {fmt.lower()} not accepted" in result.changes[0].reason


def test_palette_image_is_converted_to_png_not_jpeg() -> None:
    diagram = Image.new("P", (200, 100), 0)
    diagram.putpalette([255, 255, 255, 0, 0, 0] + [0] * 762)
    ImageDraw.Draw(diagram).rectangle((20, 20, 80, 80), fill=1)
    raw = encode(diagram, "BMP")
    result = degrade_messages([user(image_part(data_url(raw, "image/bmp")))], LIMITS, "degraded")

    _, _, img = decode_url(only_image_url(result))
    assert img.format == "PNG"
    assert img.convert("RGB").getpixel((50, 50)) == (0, 0, 0)  # lossless: exact colours
    assert img.convert("RGB").getpixel((150, 50)) == (255, 255, 255)


def test_rgba_png_keeps_its_alpha() -> None:
    img = Image.new("RGBA", (3000, 2000), (0, 0, 0, 0))
    ImageDraw.Draw(img).rectangle((0, 0, 1500, 2000), fill=(0, 128, 255, 255))
    raw = encode(img, "PNG")
    result = degrade_messages([user(image_part(data_url(raw, "image/png")))], LIMITS, "degraded")

    media_type, _, out = decode_url(only_image_url(result))
    assert media_type == "image/png" and out.mode == "RGBA"
    assert out.size == (1568, 1045)
    assert out.getpixel((1500, 500))[3] == 0  # transparent half stays transparent
    assert out.getpixel((100, 500)) == (0, 128, 255, 255)


def test_rgba_with_fully_opaque_alpha_becomes_jpeg() -> None:
    img = photo((2000, 1000)).convert("RGBA")
    raw = encode(img, "PNG", compress_level=1)
    result = degrade_messages([user(image_part(data_url(raw, "image/png")))], LIMITS, "degraded")
    media_type, _, _ = decode_url(only_image_url(result))
    assert media_type == "image/jpeg"


def test_alpha_is_flattened_on_white_when_png_is_not_allowed() -> None:
    img = Image.new("RGBA", (2000, 1000), (0, 0, 0, 0))
    limits = MediaLimits(allowed_formats=("jpeg",))
    raw = encode(img, "PNG")
    result = degrade_messages([user(image_part(data_url(raw, "image/png")))], limits, "degraded")
    media_type, _, out = decode_url(only_image_url(result))
    assert media_type == "image/jpeg"
    assert all(c > 245 for c in out.getpixel((500, 500)))  # white, not black


def test_declared_png_that_is_really_jpeg_is_relabelled_without_reencoding() -> None:
    raw = encode(photo((400, 300)), "JPEG", quality=90)
    part = image_part(data_url(raw, "image/png"))
    result = degrade_messages([user(part)], LIMITS, "degraded")

    media_type, out, img = decode_url(only_image_url(result))
    assert media_type == "image/jpeg" and img.format == "JPEG"
    assert out == raw  # lossless fix: same bytes, true label
    [change] = result.changes
    assert change.action == "relabelled"
    assert change.reason == "declared png but data is jpeg"


def test_image_within_limits_is_untouched_same_objects() -> None:
    raw = encode(photo((800, 600)), "PNG")
    ok = user(image_part(data_url(raw, "image/png")))
    big = user(image_part(data_url(encode(photo((2000, 100)), "PNG"), "image/png")))
    messages = [{"role": "system", "content": "be brief"}, ok, big]
    result = degrade_messages(messages, LIMITS, "degraded")

    assert result.messages[0] is messages[0]
    assert result.messages[1] is ok
    assert result.messages[2] is not big
    assert result.messages[2]["content"][0] is big["content"][0]  # untouched text part shared
    assert [c.message_index for c in result.changes] == [2]


def test_input_is_never_mutated() -> None:
    messages = [
        user(image_part(data_url(encode(photo((3000, 200)), "PNG"), "image/png"))),
        user(image_part("data:image/png;base64,AAAA")),
        {"role": "tool", "tool_call_id": "c1",
         "content": [image_part(data_url(encode(photo((10, 10)), "BMP"), "image/bmp"))]},
        user({"type": "image_url", "image_url": "https://example.com/a.png"}),
    ]
    before = copy.deepcopy(messages)
    fetched = {"https://example.com/a.png": encode(photo((2000, 20)), "GIF")}
    for policy in ("degraded", "strip"):
        result = degrade_messages(messages, LIMITS, policy, fetched)  # type: ignore[arg-type]
        assert len(result.changes) == 4
        assert messages == before


# -- degraded: removal notes ------------------------------------------------------------------


def truncated_png() -> str:
    raw = encode(photo((400, 300)), "PNG")
    return data_url(raw[: len(raw) // 2], "image/png")


@pytest.mark.parametrize(
    "url",
    [
        truncated_png(),
        "data:image/png;base64,!!!this is not base64!!!",
        data_url(b"\x00garbage bytes that are no image" * 10, "image/png"),
        data_url(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n", "image/png"),
        "data:image/png;base64",  # no comma at all
    ],
    ids=["truncated", "bad-base64", "garbage", "eps-not-parsed", "malformed"],
)
def test_undecodable_image_is_replaced_by_a_note(url: str) -> None:
    messages = [{"role": "user", "content": [image_part(url)]}]
    result = degrade_messages(messages, LIMITS, "degraded")

    # the message keeps valid, non-empty content: the note
    assert result.messages[0]["content"] == [
        {"type": "text", "text": "[image removed: could not be decoded]"}
    ]
    assert result.changes[0].action == "removed"
    assert result.changes[0].reason.startswith("could not be decoded")


def test_data_larger_than_max_input_bytes_is_refused() -> None:
    raw = encode(photo((300, 300)), "PNG")
    limits = MediaLimits(max_input_bytes=len(raw) // 2)
    result = degrade_messages([user(image_part(data_url(raw, "image/png")))], limits, "degraded")
    assert result.messages[0]["content"][1] == {
        "type": "text", "text": "[image removed: too large to process]"}


def test_unsupported_url_scheme_is_removed() -> None:
    result = degrade_messages([user(image_part("file:///etc/passwd"))], LIMITS, "degraded")
    assert result.messages[0]["content"][1]["text"] == "[image removed: unsupported image source]"


# -- remote images ----------------------------------------------------------------------------


def test_fetched_remote_image_becomes_a_data_url() -> None:
    url = "https://img.example/cat.webp"
    raw = encode(photo((200, 100)), "WEBP")
    messages = [user({"type": "image_url", "image_url": url})]
    result = degrade_messages(messages, LIMITS, "degraded", {url: raw})

    new_url = result.messages[0]["content"][1]["image_url"]
    assert isinstance(new_url, str)  # the string form stays a string
    media_type, out, _ = decode_url(new_url)
    assert (media_type, out) == ("image/webp", raw)
    assert result.changes[0].action == "inlined"


def test_fetched_oversized_remote_image_is_downscaled_and_inlined() -> None:
    url = "http://img.example/big.png"
    messages = [user(image_part(url))]
    result = degrade_messages(messages, LIMITS, "degraded",
                              {url: encode(photo((3136, 100)), "PNG")})
    _, _, img = decode_url(only_image_url(result))
    assert img.size == (1568, 50)
    assert result.changes[0].action == "downscaled"


def test_failed_fetch_is_replaced_by_note_and_unfetched_url_left_alone() -> None:
    failed, unfetched = "https://a.example/1.png", "https://b.example/2.png"
    kept = image_part(unfetched)
    messages = [user(image_part(failed), kept)]
    result = degrade_messages(messages, LIMITS, "degraded", {failed: "HTTP 404"})

    content = result.messages[0]["content"]
    assert content[1] == {"type": "text", "text": "[image removed: could not be fetched]"}
    assert content[2] is kept
    assert result.changes[0].reason == "could not be fetched: HTTP 404"


def test_image_urls_to_fetch_dedups_and_keeps_only_http() -> None:
    messages = [
        user(image_part("https://x.example/a.png"), image_part("data:image/png;base64,AA==")),
        {"role": "assistant", "content": "ok"},
        {"role": "tool", "tool_call_id": "t",
         "content": [{"type": "image_url", "image_url": "HTTP://y.example/b.png"},
                     image_part("https://x.example/a.png"), image_part("ftp://z/c.png")]},
    ]
    assert image_urls_to_fetch(messages) == ["https://x.example/a.png", "HTTP://y.example/b.png"]


# -- strip ------------------------------------------------------------------------------------


def test_strip_removes_every_image_and_keeps_text() -> None:
    small = data_url(encode(photo((10, 10)), "PNG"), "image/png")
    messages = [
        {"role": "system", "content": "sys"},
        user(image_part(small), image_part("https://x.example/a.png")),
        {"role": "tool", "tool_call_id": "t", "content": [image_part(small)]},
    ]
    result = degrade_messages(messages, LIMITS, "strip")

    note = {"type": "text", "text": f"[image removed: {REASON_STRIPPED}]"}
    assert result.messages[0] is messages[0]
    assert result.messages[1]["content"] == [{"type": "text", "text": "look"}, note, note]
    assert result.messages[2]["content"] == [note]
    assert "image_url" not in json.dumps(result.messages)
    assert result.counts() == {"removed": 3}


def test_unknown_policy_and_bad_limits_are_rejected() -> None:
    with pytest.raises(ValueError):
        degrade_messages([], LIMITS, "shrink")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        MediaLimits(max_side=0)
    with pytest.raises(ValueError):
        MediaLimits(allowed_formats=("gif",))
    assert MediaLimits(allowed_formats=("JPG", "PNG")).allowed_formats == ("jpeg", "png")


# -- odd images -------------------------------------------------------------------------------


def test_animated_gif_over_limit_becomes_its_first_frame() -> None:
    frames = [Image.new("P", (2000, 500), i) for i in range(3)]
    for frame in frames:
        frame.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255] + [0] * 759)
    raw = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50)
    result = degrade_messages([user(image_part(data_url(raw, "image/gif")))], LIMITS, "degraded")

    media_type, _, img = decode_url(only_image_url(result))
    assert media_type == "image/png" and img.size == (1568, 392)
    assert getattr(img, "n_frames", 1) == 1
    assert img.convert("RGB").getpixel((10, 10)) == (255, 0, 0)  # frame 0 is red


def test_cmyk_jpeg_is_converted_to_rgb_with_right_colours() -> None:
    cmyk = Image.new("CMYK", (2400, 1200), (0, 255, 255, 0))  # pure red in CMYK
    raw = encode(cmyk, "JPEG", quality=95)
    result = degrade_messages([user(image_part(data_url(raw, "image/jpeg")))], LIMITS, "degraded")

    _, _, img = decode_url(only_image_url(result))
    assert img.mode == "RGB" and img.size == (1568, 784)
    r, g, b = img.getpixel((700, 400))  # type: ignore[misc]
    assert r > 200 and g < 60 and b < 60


def test_16_bit_grey_png_is_scaled_not_clipped() -> None:
    grey = Image.new("I;16", (2000, 1000), 32768)  # mid grey in 16 bits
    raw = encode(grey, "PNG")
    result = degrade_messages([user(image_part(data_url(raw, "image/png")))], LIMITS, "degraded")

    _, _, img = decode_url(only_image_url(result))
    value = img.convert("L").getpixel((500, 500))
    assert isinstance(value, int) and 120 <= value <= 136


def test_exif_orientation_is_applied_when_reencoding() -> None:
    stored = Image.new("RGB", (2000, 1000), (0, 0, 255))
    ImageDraw.Draw(stored).rectangle((0, 0, 999, 999), fill=(255, 0, 0))  # left half red
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    raw = encode(stored, "JPEG", exif=exif.tobytes())
    result = degrade_messages([user(image_part(data_url(raw, "image/jpeg")))], LIMITS, "degraded")

    _, _, img = decode_url(only_image_url(result))
    assert img.size == (784, 1568)  # shown upright: portrait
    assert img.getexif().get(0x0112) in (None, 1)
    r, _, b = img.getpixel((400, 200))  # type: ignore[misc]
    assert r > 200 and b < 60  # the red half is now on top


# -- bounded decoding -------------------------------------------------------------------------


def test_header_claiming_50000x50000_is_refused_with_bounded_memory() -> None:
    raw = claimed_png(50_000, 50_000)
    assert len(raw) < 20_000
    messages = [user(image_part(data_url(raw, "image/png")))]

    tracemalloc.start()
    try:
        result = degrade_messages(messages, LIMITS, "degraded")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert result.messages[0]["content"][1] == {
        "type": "text", "text": "[image removed: too large to process]"}
    decoded_size = 50_000 * 50_000 // 8  # even at 1 bit per pixel: 312 MB
    assert peak < 5_000_000 < decoded_size


_RSS_PROBE = textwrap.dedent(
    """
    import base64, json, struct, sys, zlib
    from gateway.projection.media import MediaLimits, degrade_messages

    def peak_rss_kb():
        # VmHWM belongs to this process image. ru_maxrss would not do: Linux carries it
        # across exec, so a child of a big pytest process starts with the parent's peak.
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    # A real, valid 8000x8000 8-bit grey PNG (64 Mpx), built row by row so this process
    # never holds the pixels: about 64 KB on the wire, 64 MB once decoded.
    side = 8000
    comp = zlib.compressobj(9)
    row = bytes(side + 1)
    idat = b"".join(comp.compress(row) for _ in range(side)) + comp.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    png = (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat)
           + chunk(b"IEND", b""))
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    before = peak_rss_kb()
    result = degrade_messages(messages, MediaLimits(max_pixels=int(sys.argv[1])), "degraded")
    after = peak_rss_kb()
    part = result.messages[0]["content"][0]
    print(json.dumps({"kb": after - before, "part": part.get("text", part["type"]),
                      "wire": len(png)}))
    """
)


def _rss_probe(max_pixels: int) -> dict[str, Any]:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux /proc to read the peak RSS of a process")
    done = subprocess.run([sys.executable, "-c", _RSS_PROBE, str(max_pixels)], cwd=ROOT,
                          capture_output=True, text=True, check=True, timeout=120)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_image_over_max_pixels_is_refused_before_decoding_rss() -> None:
    # 64 Mpx is under Pillow's own bomb threshold (89 Mpx): only our guard stands in the way.
    refused = _rss_probe(max_pixels=50_000_000)
    assert refused["part"] == "[image removed: too large to process]"
    assert refused["wire"] < 200_000
    assert refused["kb"] < 16 * 1024  # far below the 64 MB a decode costs

    # Control: the same image allowed through really is decoded, and the probe sees it.
    decoded = _rss_probe(max_pixels=70_000_000)
    assert decoded["part"] == "image_url"
    assert decoded["kb"] > 60 * 1024


# -- property: whatever comes in, what goes out fits ------------------------------------------

_MODES = ["RGB", "RGBA", "L", "LA", "P", "1", "CMYK", "I;16"]
_FORMATS = {"PNG": "png", "JPEG": "jpeg", "BMP": "bmp", "GIF": "gif", "TIFF": "tiff",
            "WEBP": "webp"}


@settings(max_examples=40, deadline=None)
@given(
    mode=st.sampled_from(_MODES),
    fmt=st.sampled_from(sorted(_FORMATS)),
    width=st.integers(1, 700),
    height=st.integers(1, 700),
    declared=st.sampled_from(["png", "jpeg", "gif", "webp", "bmp"]),
    seed=st.integers(0, 255),
)
def test_output_always_fits_limits(mode: str, fmt: str, width: int, height: int,
                                  declared: str, seed: int) -> None:
    limits = MediaLimits(max_side=256, max_bytes=20_000)
    img = Image.effect_noise((width, height), 40 + seed % 60).convert(mode)
    try:
        raw = encode(img, fmt)
    except (OSError, ValueError, KeyError):
        assume(False)  # a mode/format pair Pillow cannot write
    messages = [user(image_part(data_url(raw, f"image/{declared}")))]
    result = degrade_messages(messages, limits, "degraded")

    part = result.messages[0]["content"][1]
    media_type, out, got = decode_url(part["image_url"]["url"])
    assert max(got.size) <= 256
    assert len(out) <= 20_000
    real = _FORMATS.get(got.format or "", "?")
    assert real in limits.allowed_formats and media_type == f"image/{real}"


# -- image count and file references ----------------------------------------------------------


def test_past_max_images_the_oldest_become_notes_and_the_rest_stay_untouched() -> None:
    parts = [image_part(data_url(encode(Image.new("RGB", (8, 8), (i, 0, 0)), "PNG"),
                                 "image/png")) for i in range(5)]
    messages = [user(*parts[:2]), user(*parts[2:])]
    result = degrade_messages(messages, MediaLimits(max_images=3), "degraded")
    first = result.messages[0]["content"]
    assert [p["type"] for p in first[1:]] == ["text", "text"]
    assert all(p["text"].startswith("[image removed: too many images") for p in first[1:])
    assert result.messages[1] is messages[1]  # the three latest images: nothing to change
    assert result.counts() == {"removed": 2}


def test_an_image_given_by_file_id_is_kept_when_degrading_and_removed_when_stripping() -> None:
    by_id = {"type": "input_image", "file_id": "file-abc", "detail": "auto"}
    messages = [{"role": "user", "content": [{"type": "input_text", "text": "look"}, by_id]}]
    assert degrade_messages(messages, LIMITS, "degraded").messages[0] is messages[0]
    stripped = degrade_messages(messages, LIMITS, "strip").messages[0]["content"]
    assert stripped[1] == {"type": "text", "text": f"[image removed: {REASON_STRIPPED}]"}
