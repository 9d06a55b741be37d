"""Degraded media (SPEC §3 step 3): shrink, re-encode or remove the images of a chat request.

Pure and synchronous: no I/O, no logging. Remote images are only processed when their bytes
are handed in through ``fetched`` (see ``gateway.recovery.media_step`` for the fetching).
Decoding is bounded: the pixel count is read from the header and checked against
``MediaLimits.max_pixels`` before any pixel is decoded, and Pillow's own decompression-bomb
guard is caught. Pillow's process-wide ``Image.MAX_IMAGE_PIXELS`` is left alone.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal

from PIL import Image, ImageOps

from gateway.projection.anomalies import Message
from gateway.projection.exchanges import turn_start

MediaPolicy = Literal["degraded", "strip"]
MediaAction = Literal["downscaled", "reencoded", "converted", "relabelled", "inlined", "removed"]

REASON_UNDECODABLE = "could not be decoded"
REASON_TOO_LARGE = "too large to process"
REASON_NOT_FETCHED = "could not be fetched"
REASON_UNSUPPORTED_SOURCE = "unsupported image source"
REASON_STRIPPED = "images are not accepted by this model"
REASON_DEADLINE = "not processed before the request's deadline"
REASON_PIXEL_BUDGET = "the request's images exceed the gateway's decoding budget"
REASON_TOO_MANY = "too many images in the request; the most recent were kept"
REASON_EARLIER_DOCUMENT = "a document of an earlier turn, left out after a refusal of the request"
REASON_DOCUMENT_STRIPPED = "documents are left out after a refusal of the request"

# Only these Pillow plugins may parse client bytes. The others are attack surface with no
# use here (EPS even runs Ghostscript); bytes in those formats count as undecodable.
_DECODABLE = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "DIB", "TIFF", "ICO", "PPM", "AVIF")
_FORMAT_NAMES = {"MPO": "jpeg", "DIB": "bmp"}
_TYPE_ALIASES = {"jpg": "jpeg", "pjpeg": "jpeg", "x-png": "png", "x-ms-bmp": "bmp", "tif": "tiff"}
_JPEG_QUALITIES = (85, 70, 55, 40)
_MAX_SHRINKS = 6
_EMPTY_FETCHED: Mapping[str, bytes | str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MediaLimits:
    """What a provider accepts. ``max_bytes`` bounds the encoded image as it is sent, in
    base64 (Anthropic measures its 5 MB there: 3.75 MB of PNG is over), ``max_side`` its
    longest side in pixels; ``max_pixels`` and ``max_input_bytes`` bound what is decoded."""

    max_side: int = 1568
    max_bytes: int = 5 * 1024 * 1024
    allowed_formats: tuple[str, ...] = ("png", "jpeg", "gif", "webp")
    max_pixels: int = 50_000_000
    max_input_bytes: int = 20 * 1024 * 1024
    max_total_pixels: int = 100_000_000  # decoded over all images of one request
    max_images: int = 100  # per request (Anthropic's limit, the lowest): the oldest go first
    max_total_bytes: int = 20 * 1024 * 1024  # base64 of all images of a request together
    max_seconds: float | None = None  # one media step (fetch and decode); None: unbounded

    def __post_init__(self) -> None:
        for name in ("max_side", "max_bytes", "max_pixels", "max_input_bytes",
                     "max_total_pixels", "max_images", "max_total_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"MediaLimits.{name} must be positive")
        formats = tuple(_canonical_format(f) for f in self.allowed_formats)
        if "png" not in formats and "jpeg" not in formats:
            raise ValueError("MediaLimits.allowed_formats must include png or jpeg")
        object.__setattr__(self, "allowed_formats", formats)


@dataclass(frozen=True, slots=True)
class MediaChange:
    """One image part that was changed. Indexes point into the input messages/content.

    Sizes are ``(width, height)`` in pixels; byte counts are of the encoded image (None when
    unknown, e.g. a remote image that was never fetched).
    """

    message_index: int
    part_index: int
    action: MediaAction
    reason: str
    before_bytes: int | None = None
    after_bytes: int | None = None
    before_size: tuple[int, int] | None = None
    after_size: tuple[int, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON shape for logs, traces and the dry-run endpoint."""
        return {
            "message_index": self.message_index,
            "part_index": self.part_index,
            "action": self.action,
            "reason": self.reason,
            "before_bytes": self.before_bytes,
            "after_bytes": self.after_bytes,
            "before_size": list(self.before_size) if self.before_size else None,
            "after_size": list(self.after_size) if self.after_size else None,
        }


@dataclass(frozen=True, slots=True)
class MediaResult:
    """New message list (untouched messages are the same dicts) and what changed."""

    messages: list[Message]
    changes: tuple[MediaChange, ...] = ()

    @property
    def changed(self) -> bool:
        """True when any image part was changed."""
        return bool(self.changes)

    def counts(self) -> dict[str, int]:
        """Action -> count, in first-seen order."""
        counts: dict[str, int] = {}
        for change in self.changes:
            counts[change.action] = counts.get(change.action, 0) + 1
        return counts


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What happens to one image: ``data`` None means removed (replaced by a note)."""

    action: MediaAction
    reason: str
    note: str = ""
    data: bytes | None = None
    fmt: str = ""
    before_bytes: int | None = None
    before_size: tuple[int, int] | None = None
    after_size: tuple[int, int] | None = None


class _TooLarge(Exception):
    """The header announces more pixels than ``MediaLimits.max_pixels``."""


class _OverBudget(Exception):
    """The image would take the request past ``MediaLimits.max_total_pixels``."""


def image_urls_to_fetch(messages: Sequence[Message]) -> list[str]:
    """The http(s) image URLs of ``messages``, deduplicated, in first-seen order."""
    urls: dict[str, None] = {}
    for message in messages:
        for part in _image_parts(message):
            url = _part_url(part)
            if url is not None and _is_remote(url):
                urls.setdefault(url, None)
    return list(urls)


def _never() -> bool:
    return False


@dataclass(slots=True)
class _Budget:
    """What one request may still decode: pixels, and whether its deadline has passed."""

    pixels: int
    stopped: Callable[[], bool]


def degrade_messages(
    messages: Sequence[Message],
    limits: MediaLimits,
    policy: MediaPolicy,
    fetched: Mapping[str, bytes | str] = _EMPTY_FETCHED,
    stopped: Callable[[], bool] = _never,
) -> MediaResult:
    """Return ``messages`` with their images made acceptable under ``limits``.

    ``policy="degraded"``: images over ``max_side``/``max_bytes`` are downscaled (LANCZOS,
    aspect kept) and re-encoded (PNG when there is alpha and it fits, else JPEG with falling
    quality/size until under ``max_bytes``); formats outside ``allowed_formats`` are converted;
    a data URL whose declared type lies about the bytes is relabelled; images that cannot be
    decoded, are too large to decode safely, or whose fetch failed become a text part
    ``[image removed: <reason>]``. Images already acceptable stay the same dict. ``fetched``
    maps remote URLs to their bytes (or an error string); such URLs become data URLs, and
    remote URLs without an entry are left as they are. Past ``limits.max_images`` images the
    oldest become removal notes. An image given by file id (the provider's own upload) is kept.

    ``policy="strip"``: every image part becomes a removal note.

    Documents (PDFs and other files sent inline: a chat ``file`` part, an Anthropic
    ``document`` block, a Responses ``input_file``) cannot be shrunk here: with
    ``"degraded"`` those sent before the last assistant message become removal notes (the
    newest turn's are what the model is asked about), with ``"strip"`` all of them.
    A document given by file id or URL is the provider's to fetch and stays.

    Decoding is bounded per request: once ``limits.max_total_pixels`` have been decoded, or
    once ``stopped()`` (checked before each image; the caller's deadline) is true, the
    remaining images that need work become removal notes.

    Never mutates its input.
    """
    if policy not in ("degraded", "strip"):
        raise ValueError(f"unknown media policy: {policy!r}")
    cache: dict[str, _Outcome | None] = {}
    if policy == "degraded":
        limits = _shared_bytes(messages, limits, fetched)
    budget = _Budget(limits.max_total_pixels, stopped)
    out: list[Message] = []
    changes: list[MediaChange] = []
    # Past ``max_images`` the oldest images go: the latest turns are what the model needs.
    excess = 0
    if policy == "degraded":
        excess = max(0, sum(len(_image_parts(m)) for m in messages) - limits.max_images)
    latest = turn_start(messages)
    for mi, message in enumerate(messages):
        if not _media_parts(message):
            out.append(message)
            continue
        content: list[Any] = message["content"]
        parts: list[Any] = []
        for pi, part in enumerate(content):
            if not _is_image_part(part):
                size = _inline_document_bytes(part)
                if size is None or (policy == "degraded" and mi >= latest):
                    parts.append(part)
                    continue
                left_out = _removed(REASON_DOCUMENT_STRIPPED if policy == "strip"
                                    else REASON_EARLIER_DOCUMENT, before_bytes=size)
                parts.append(_document_note(part, size, left_out))
                changes.append(_change(mi, pi, left_out))
                continue
            if excess:
                excess -= 1
                dropped = _removed(REASON_TOO_MANY, f"more than {limits.max_images}")
                parts.append(_rewrite(part, dropped))
                changes.append(_change(mi, pi, dropped))
                continue
            file_id = _file_ref(part)
            url = None if file_id is not None else _part_url(part)
            key = f"\0file:{file_id}" if file_id is not None else url if url is not None else ""
            if key in cache:
                pass
            elif file_id is not None:  # the provider's own bytes: nothing here to degrade
                cache[key] = _removed(REASON_STRIPPED) if policy == "strip" else None
            else:
                cache[key] = _decide(url, limits, policy, fetched, budget)
            outcome = cache[key]
            if outcome is None:
                parts.append(part)
                continue
            parts.append(_rewrite(part, outcome))
            changes.append(_change(mi, pi, outcome))
        changed = any(p is not q for p, q in zip(parts, content, strict=True))
        out.append({**message, "content": parts} if changed else message)
    return MediaResult(messages=out, changes=tuple(changes))


def _shared_bytes(messages: Sequence[Message], limits: MediaLimits,
                  fetched: Mapping[str, bytes | str]) -> MediaLimits:
    """``limits`` for a request whose images together pass ``max_total_bytes``: each image
    may then take an equal share of it (those already under their share stay untouched)."""
    sizes: list[int] = []
    for message in messages:
        for part in _image_parts(message):
            url = _part_url(part)
            if url is None:
                continue
            entry = fetched.get(url)
            if isinstance(entry, bytes):
                sizes.append(_sent_size(len(entry)))
            elif url[:5].lower() == "data:":
                sizes.append(len(url))
    if sum(sizes) <= limits.max_total_bytes:
        return limits
    share = max(1024, limits.max_total_bytes // len(sizes))
    return replace(limits, max_bytes=min(limits.max_bytes, share))


# -- message shapes ---------------------------------------------------------------------------


def _is_image_part(part: Any) -> bool:
    """A chat ``image_url`` part, or the same image on an agent wire as the projection
    sees it there: an Anthropic ``image`` block, a Responses ``input_image`` with a URL."""
    if not isinstance(part, dict):
        return False
    kind = part.get("type")
    if kind == "image":
        source = part.get("source")
        return isinstance(source, dict) and source.get("type") in ("base64", "url", "file")
    if kind == "input_image":
        return isinstance(part.get("image_url"), str) or _file_ref(part) is not None
    return kind == "image_url"


def _file_ref(part: dict[str, Any]) -> str | None:
    """The uploaded file an image part names (Responses ``file_id``, Anthropic ``source.file_id``):
    its bytes are the provider's, so degrading can only keep it or, when stripping, remove it."""
    if part.get("type") == "input_image" and not isinstance(part.get("image_url"), str):
        file_id = part.get("file_id")
        return file_id if isinstance(file_id, str) else None
    source = part.get("source")
    if part.get("type") == "image" and isinstance(source, dict) and source.get("type") == "file":
        file_id = source.get("file_id")
        return file_id if isinstance(file_id, str) else ""
    return None


def _image_parts(message: Message) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [p for p in content if _is_image_part(p)]


def has_media_parts(messages: Sequence[Message]) -> bool:
    """True when any message carries an image part or an inline document (what degraded
    media would touch)."""
    return any(_media_parts(m) for m in messages)


def _media_parts(message: Message) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        _is_image_part(p) or _inline_document_bytes(p) is not None for p in content)


def _inline_document_bytes(part: Any) -> int | None:
    """The characters of a document sent inline in ``part`` (a chat ``file`` part's
    ``file_data``, an Anthropic ``document`` block's base64 or text source, a Responses
    ``input_file``'s ``file_data``); None when ``part`` is no such document."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind == "file":
        file = part.get("file")
        data = file.get("file_data") if isinstance(file, dict) else None
    elif kind == "input_file":
        data = part.get("file_data")
    elif kind == "document":
        source = part.get("source")
        data = (source.get("data") if isinstance(source, dict)
                and source.get("type") in ("base64", "text") else None)
    else:
        return None
    return len(data) if isinstance(data, str) and data else None


def _document_note(part: dict[str, Any], size: int, outcome: _Outcome) -> dict[str, Any]:
    """The text part a left-out document becomes: its name, its size, why."""
    file = part.get("file")
    name = (file.get("filename") if isinstance(file, dict) else None) \
        or part.get("filename") or part.get("title")
    named = f"{name} " if isinstance(name, str) and name else ""
    return {"type": "text",
            "text": f"[document removed: {named}({_size_text(size)}): {outcome.note}]"}


def _size_text(chars: int) -> str:
    """A document's inline size as a person reads it (base64 characters, as sent)."""
    if chars >= 1024 * 1024:
        return f"{chars / (1024 * 1024):.1f} MB"
    return f"{max(1, chars // 1024)} KB"


def _part_url(part: dict[str, Any]) -> str | None:
    if part.get("type") == "image":  # Anthropic: a base64 source reads as its data URL
        source = part["source"]
        if source.get("type") == "file":
            return None
        if source.get("type") == "url":
            url = source.get("url")
            return url if isinstance(url, str) else None
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(data, str):
            return None
        return f"data:{media if isinstance(media, str) else ''};base64,{data}"
    image_url = part.get("image_url")
    if isinstance(image_url, dict):
        image_url = image_url.get("url")
    return image_url if isinstance(image_url, str) else None


def _is_remote(url: str) -> bool:
    return url[:8].lower().startswith(("http://", "https://"))


def _rewrite(part: dict[str, Any], outcome: _Outcome) -> dict[str, Any]:
    if outcome.data is None:
        return {"type": "text", "text": f"[image removed: {outcome.note}]"}
    encoded = base64.b64encode(outcome.data).decode("ascii")
    if part.get("type") == "image":
        return {**part, "source": {"type": "base64", "media_type": f"image/{outcome.fmt}",
                                   "data": encoded}}
    url = f"data:image/{outcome.fmt};base64,{encoded}"
    image_url = part.get("image_url")
    if isinstance(image_url, dict):
        return {**part, "image_url": {**image_url, "url": url}}
    return {**part, "image_url": url}


def _change(mi: int, pi: int, o: _Outcome) -> MediaChange:
    after = len(o.data) if o.data is not None else None
    return MediaChange(mi, pi, o.action, o.reason, o.before_bytes, after, o.before_size,
                       o.after_size if o.data is not None else None)


def _removed(note: str, detail: str = "", before_bytes: int | None = None,
             before_size: tuple[int, int] | None = None) -> _Outcome:
    reason = f"{note}: {detail}" if detail else note
    return _Outcome("removed", reason, note=note, before_bytes=before_bytes,
                    before_size=before_size)


# -- deciding one image -----------------------------------------------------------------------


def _decide(url: str | None, limits: MediaLimits, policy: MediaPolicy,
            fetched: Mapping[str, bytes | str], budget: _Budget) -> _Outcome | None:
    if policy == "strip":
        size = _estimate_data_url_bytes(url) if url else None
        return _removed(REASON_STRIPPED, before_bytes=size)
    if url is None or not url.strip():
        return _removed(REASON_UNDECODABLE, "image part has no url")
    if _is_remote(url):
        entry = fetched.get(url)
        if entry is None:
            return None
        if isinstance(entry, str):
            return _removed(REASON_NOT_FETCHED, entry)
        return _process(entry, None, True, limits, budget)
    if url[:5].lower() != "data:":
        return _removed(REASON_UNSUPPORTED_SOURCE, url.split(":", 1)[0][:20])
    estimate = _estimate_data_url_bytes(url)
    if estimate is not None and estimate > limits.max_input_bytes:
        return _removed(REASON_TOO_LARGE, f"about {estimate} bytes > {limits.max_input_bytes}",
                        before_bytes=estimate)
    parsed = _decode_data_url(url)
    if parsed is None:
        return _removed(REASON_UNDECODABLE, "malformed data URL", before_bytes=estimate)
    declared, raw = parsed
    return _process(raw, declared, False, limits, budget)


def _estimate_data_url_bytes(url: str) -> int | None:
    if url[:5].lower() != "data:":
        return None
    header, _, payload = url.partition(",")
    return len(payload) * 3 // 4 if ";base64" in header.lower() else len(payload)


def _decode_data_url(url: str) -> tuple[str | None, bytes] | None:
    header, sep, payload = url[5:].partition(",")
    if not sep:
        return None
    params = [p.strip().lower() for p in header.split(";")]
    declared = _canonical_media_type(params[0]) if params[0] else None
    label = header.split(";")[0]
    if declared is not None and label != f"image/{declared}":
        # An alias ("image/jpg") or another spelling ("image/PNG", strict providers take
        # the lower-case name only) is relabelled like a wrong type.
        declared = label
    if "base64" not in params[1:]:
        return declared, urllib.parse.unquote_to_bytes(payload)
    payload = "".join(payload.split())
    payload += "=" * (-len(payload) % 4)
    try:
        if "-" in payload or "_" in payload:
            return declared, base64.urlsafe_b64decode(payload)
        return declared, base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None


def _canonical_format(name: str) -> str:
    name = name.strip().lower()
    return _TYPE_ALIASES.get(name, name)


def _canonical_media_type(media_type: str) -> str:
    if media_type.startswith("image/"):
        return _canonical_format(media_type[6:])
    return media_type


@dataclass(frozen=True, slots=True)
class _Decoded:
    fmt: str
    size: tuple[int, int]  # as stored, before EXIF orientation
    source_mode: str
    frame: Image.Image  # first frame, EXIF-oriented, mode L/RGB/RGBA


def _process(raw: bytes, declared: str | None, remote: bool,
             limits: MediaLimits, budget: _Budget) -> _Outcome | None:
    before = len(raw)
    if budget.stopped():
        return _removed(REASON_DEADLINE, before_bytes=before)
    if before > limits.max_input_bytes:
        return _removed(REASON_TOO_LARGE, f"{before} bytes > {limits.max_input_bytes}",
                        before_bytes=before)
    try:
        decoded = _decode(raw, limits, budget)
    except _OverBudget as exc:
        return _removed(REASON_PIXEL_BUDGET, str(exc), before_bytes=before)
    except _TooLarge as exc:
        return _removed(REASON_TOO_LARGE, str(exc), before_bytes=before)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return _removed(REASON_TOO_LARGE, "decompression bomb", before_bytes=before)
    except Exception as exc:  # untrusted bytes: Pillow's plugins raise many error types
        return _removed(REASON_UNDECODABLE, type(exc).__name__, before_bytes=before)
    return _degrade(decoded, raw, declared, remote, limits)


def _decode(raw: bytes, limits: MediaLimits, budget: _Budget) -> _Decoded:
    """Decode the first frame, refusing more than ``max_pixels`` (or more than the request's
    remaining pixel budget) before any pixel is read."""
    with Image.open(io.BytesIO(raw), formats=_DECODABLE) as img:
        fmt = _FORMAT_NAMES.get(img.format or "", (img.format or "unknown").lower())
        w, h = img.size
        if w * h > limits.max_pixels:
            raise _TooLarge(f"{w}x{h} pixels > {limits.max_pixels}")
        if w * h > budget.pixels:
            raise _OverBudget(f"{w}x{h} pixels > {max(0, budget.pixels)} left of "
                              f"{limits.max_total_pixels}")
        budget.pixels -= w * h
        target = _fit((w, h), limits.max_side)
        if fmt == "jpeg" and target != (w, h):
            img.draft(None, target)  # JPEG decodes at 1/2..1/8 scale: less memory and time
        img.load()
        frame = _normalize_mode(ImageOps.exif_transpose(img))
        return _Decoded(fmt, (w, h), img.mode, frame)


def _degrade(decoded: _Decoded, raw: bytes, declared: str | None, remote: bool,
             limits: MediaLimits) -> _Outcome | None:
    fmt, (w, h), before = decoded.fmt, decoded.size, len(raw)
    reasons: list[str] = []
    if fmt not in limits.allowed_formats:
        reasons.append(f"format {fmt} not accepted")
    if max(w, h) > limits.max_side:
        reasons.append(f"longest side {max(w, h)}px > {limits.max_side}px")
    if _sent_size(before) > limits.max_bytes:
        reasons.append(f"{_sent_size(before)} bytes in base64 > {limits.max_bytes} bytes")
    mismatch = f"declared {declared} but data is {fmt}" if declared not in (None, fmt) else ""
    if not reasons:
        if mismatch:
            return _Outcome("relabelled", mismatch, data=raw, fmt=fmt, before_bytes=before,
                            before_size=(w, h), after_size=(w, h))
        if remote:
            return _Outcome("inlined", "remote image inlined", data=raw, fmt=fmt,
                            before_bytes=before, before_size=(w, h), after_size=(w, h))
        return None
    if mismatch:
        reasons.append(mismatch)
    frame = decoded.frame
    fit = _fit(frame.size, limits.max_side)
    if fit != frame.size:
        frame = frame.resize(fit, Image.Resampling.LANCZOS, reducing_gap=3.0)
    if frame.mode == "RGBA" and _min_alpha(frame) == 255:
        frame = frame.convert("RGB")  # alpha that is fully opaque is not worth a PNG
    prefer_png = decoded.source_mode in ("1", "P", "PA")
    encoded = _encode_to_fit(frame, limits, prefer_png)
    if encoded is None:
        return _removed(REASON_TOO_LARGE, f"cannot get under {limits.max_bytes} bytes",
                        before_bytes=before, before_size=(w, h))
    data, out_fmt, size = encoded
    if size not in ((w, h), (h, w)):
        action: MediaAction = "downscaled"
    else:
        action = "converted" if out_fmt != fmt else "reencoded"
    return _Outcome(action, "; ".join(reasons), data=data, fmt=out_fmt, before_bytes=before,
                    before_size=(w, h), after_size=size)


def _sent_size(raw_bytes: int) -> int:
    """Characters of the base64 form of ``raw_bytes`` bytes: what a provider measures."""
    return 4 * math.ceil(raw_bytes / 3)


def _min_alpha(im: Image.Image) -> int:
    low = im.getchannel("A").getextrema()[0]
    return int(low) if isinstance(low, (int, float)) else 0


def _fit(size: tuple[int, int], max_side: int) -> tuple[int, int]:
    w, h = size
    if max(w, h) <= max_side:
        return size
    scale = max_side / max(w, h)
    return max(1, round(w * scale)), max(1, round(h * scale))


def _normalize_mode(im: Image.Image) -> Image.Image:
    """Bring any decoded mode to L, RGB or RGBA (8 bits per channel)."""
    mode = im.mode
    if mode in ("L", "RGB"):
        return im.convert("RGBA") if "transparency" in im.info else im
    if mode == "RGBA":
        return im
    if mode == "P":
        return im.convert("RGBA" if "transparency" in im.info else "RGB")
    if mode in ("LA", "La", "PA", "RGBa"):
        return im.convert("RGBA")
    if mode == "1":
        return im.convert("L")
    if mode.startswith("I") or mode == "F":
        base = im if mode in ("I", "F") else im.convert("I")
        extrema = base.getextrema()
        high = float(extrema[1]) if isinstance(extrema[1], (int, float)) else 65535.0
        if mode.startswith("I;16") or 255 < high <= 65535:
            scale = 1 / 256
        else:
            scale = 1.0 if high <= 255 else 255 / high
        return base.point(lambda v: v * scale).convert("L")
    return im.convert("RGB")  # CMYK, YCbCr, LAB, HSV, ...


def _save(im: Image.Image, fmt: str, quality: int = 85) -> bytes:
    buf = io.BytesIO()
    if fmt == "jpeg":
        im.save(buf, "JPEG", quality=quality, optimize=True)
    else:
        im.save(buf, "PNG", optimize=False)
    return buf.getvalue()


def _flatten(im: Image.Image) -> Image.Image:
    if im.mode != "RGBA":
        return im
    background = Image.new("RGB", im.size, (255, 255, 255))
    background.paste(im, mask=im.getchannel("A"))
    return background


def _encode_to_fit(im: Image.Image, limits: MediaLimits,
                   prefer_png: bool) -> tuple[bytes, str, tuple[int, int]] | None:
    """Encode ``im`` under ``limits.max_bytes``: PNG first when it has alpha (or is a
    palette/bilevel image) and PNG is allowed, else JPEG with falling quality, shrinking the
    image when even the lowest quality is too big. None when nothing fits."""
    allowed = limits.allowed_formats
    if "png" in allowed and (im.mode == "RGBA" or prefer_png):
        data = _save(im, "png")
        if _sent_size(len(data)) <= limits.max_bytes:
            return data, "png", im.size
    if "jpeg" in allowed:
        im = _flatten(im)
        attempts = [("jpeg", q) for q in _JPEG_QUALITIES]
    else:
        attempts = [("png", 0)]
    for _ in range(_MAX_SHRINKS + 1):
        data = b""
        for fmt, quality in attempts:
            data = _save(im, fmt, quality)
            if _sent_size(len(data)) <= limits.max_bytes:
                return data, fmt, im.size
        factor = min(0.75, math.sqrt(limits.max_bytes / _sent_size(len(data))))
        size = (max(1, int(im.width * factor)), max(1, int(im.height * factor)))
        if size == im.size:
            break
        im = im.resize(size, Image.Resampling.LANCZOS)
    return None


__all__ = [
    "REASON_NOT_FETCHED",
    "REASON_STRIPPED",
    "REASON_TOO_LARGE",
    "REASON_TOO_MANY",
    "REASON_UNDECODABLE",
    "REASON_UNSUPPORTED_SOURCE",
    "MediaAction",
    "MediaChange",
    "MediaLimits",
    "MediaPolicy",
    "MediaResult",
    "degrade_messages",
    "image_urls_to_fetch",
]
