"""Image rules (situation h): data-URL images checked the way strict providers check them.

Only the image header is read (``PIL.Image.open`` is lazy): format and size, never pixels.
Remote (http/https) image URLs are not fetched and always pass. Checks, per image, in order:
declared media type allowed; base64 and image decodable; actual format equals the declared
one; decoded byte size; longest side.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from PIL import Image

from gateway.referee.rules import Problem, anthropic_layout

_DATA_URL = re.compile(r"data:(?P<mime>[^;,]*)(?P<params>(?:;[^;,]*)*),(?P<data>.*)", re.DOTALL)
_ALIASES = {"jpg": "jpeg"}
# The providers list the usual four in different orders (records #72 and #77).
_OPENAI_ORDER = ("png", "jpeg", "gif", "webp")
_ANTHROPIC_ORDER = ("jpeg", "png", "gif", "webp")


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """What the referee accepts. A None limit is not checked."""

    max_side: int | None = None
    allowed_formats: frozenset[str] | None = None
    max_bytes: int | None = None

    @property
    def active(self) -> bool:
        """Whether any image check is configured (no check decodes anything otherwise)."""
        return (
            self.max_side is not None
            or self.allowed_formats is not None
            or self.max_bytes is not None
        )


def normalize_format(name: str) -> str:
    """'JPG', 'image/jpeg', 'jpeg' -> 'jpeg'."""
    short = name.lower().rsplit("/", 1)[-1]
    return _ALIASES.get(short, short)


def _ordered(formats: frozenset[str], order: tuple[str, ...]) -> list[str]:
    known = [f for f in order if f in formats]
    return known + sorted(formats - set(known))


def _python_list(formats: list[str]) -> str:
    return "[" + ", ".join(f"'{f}'" for f in formats) + "]"


def _media_types(formats: list[str]) -> str:
    quoted = [f"'image/{f}'" for f in formats]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def find_image_problem(body: Mapping[str, Any], limits: ImageLimits) -> Problem | None:
    """The first data-URL image that breaks ``limits``, or None.

    Expects a body that already passed the shape rules (image parts have a string url).
    """
    if not limits.active:
        return None
    messages = body.get("messages") or []
    layout = anthropic_layout(messages)
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for k, part in enumerate(content):
            if part.get("type") != "image_url":
                continue
            url = part["image_url"]["url"]
            if not url.startswith("data:"):
                continue
            problem = _check_one(url, limits, {"ai": layout[i][0], "ci": k})
            if problem is not None:
                return Problem(problem.kind, "h", i, problem.values)
    return None


def _check_one(url: str, limits: ImageLimits, where: dict[str, Any]) -> Problem | None:
    match = _DATA_URL.fullmatch(url)
    mime = match["mime"] if match else ""
    declared = normalize_format(mime) if mime else ""
    media_type = f"image/{declared}" if declared else "image/unknown"
    allowed = limits.allowed_formats
    if allowed is not None and declared not in allowed:
        values = {
            **where,
            "formats": _python_list(_ordered(allowed, _OPENAI_ORDER)),
            "media_types": _media_types(_ordered(allowed, _ANTHROPIC_ORDER)),
        }
        return Problem("image_media_type", "h", values=values)
    invalid = Problem("image_invalid", "h", values={**where, "media_type": media_type})
    if match is None or ";base64" not in match["params"]:
        return invalid
    try:
        raw = base64.b64decode("".join(match["data"].split()), validate=True)
    except (binascii.Error, ValueError):
        return invalid
    header = _read_header(raw)
    if header is None:
        return invalid
    actual, width, height = header
    if actual != declared:
        values = {**where, "media_type": media_type, "actual": f"image/{actual}"}
        return Problem("image_media_type_mismatch", "h", values=values)
    if limits.max_bytes is not None and len(raw) > limits.max_bytes:
        values = {
            **where,
            "mb": f"{limits.max_bytes / 1048576:g}",
            "size": len(raw),
            "limit": limits.max_bytes,
        }
        return Problem("image_too_large", "h", values=values)
    if limits.max_side is not None and max(width, height) > limits.max_side:
        return Problem("image_dimensions", "h", values={**where, "limit": limits.max_side})
    return None


def _read_header(raw: bytes) -> tuple[str, int, int] | None:
    """(format, width, height) from the image header, or None when it is not an image."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw)) as image:
                fmt = image.format or ""
                width, height = image.size
    except (Image.DecompressionBombError, OSError, ValueError, SyntaxError):
        return None
    return normalize_format(fmt), width, height
