"""Token accounting with tiktoken, strictly offline.

tiktoken fetches its BPE files from the network on a cache miss. The gateway never lets it:
at start-up ``gateway.startup`` defaults ``TIKTOKEN_CACHE_DIR`` to the tokenizer folder shipped
inside the litellm package, which holds the cl100k_base, o200k_base and p50k_base files under
tiktoken's cache names. tiktoken loads them itself and checks their expected SHA-256; an
encoding is only asked of it once its cached file is known to be there and intact, because on
a miss or a mismatch tiktoken would delete the file and download it. When o200k_base is
unavailable cl100k_base is used; when neither is, counts fall back to ``len(text) / 4``.

Counts are estimates of what a provider bills, good enough for budgets: content text, tool
calls (name + arguments), tool results, names, a small per-message overhead, images by the
OpenAI tile formula, and tool schemas. Base64 image data is never tokenized as text.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import os
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from gateway.projection.anomalies import Message
from gateway.runtime_data import CL100K, O200K, encoding_file_ok

# Model-name prefixes (after any "provider/" prefix) that use o200k_base.
_O200K_PREFIXES = (
    "gpt-4o",
    "chatgpt-4o",
    "gpt-4.1",
    "gpt-4.5",
    "gpt-5",
    "gpt-oss",
    "o1",
    "o3",
    "o4",
    "codex",
)

MESSAGE_OVERHEAD = 3  # role and separators around every message
NAME_OVERHEAD = 1
TOOL_CALL_OVERHEAD = 3
TOOLS_OVERHEAD = 12
IMAGE_LOW_TOKENS = 85
IMAGE_TILE_TOKENS = 170
UNKNOWN_IMAGE_TOKENS = 765  # a 1024x1024 image at high detail: 85 + 170 * 4
NON_TEXT_PART_TOKENS = 256  # audio, files and other parts of unknown size
_HEADER_PROBE_CHARS = (65_536, 1_048_576)  # base64 prefix sizes tried to read image headers

_lock = threading.Lock()
_encodings: dict[str, Any] = {}  # encoding name -> tiktoken Encoding, or None when unusable


def _load(name: str) -> Any:
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if not cache_dir or not encoding_file_ok(cache_dir, name):
        return None
    try:
        import tiktoken

        return tiktoken.get_encoding(name)
    except Exception:  # a broken install must degrade to estimates, never fail a request
        return None


def get_encoding(name: str) -> Any:
    """The tiktoken encoding ``name`` loaded from the offline cache, or None (lazy, cached).

    ``o200k_base`` falls back to ``cl100k_base`` when its file is missing.
    """
    with _lock:
        return _get_locked(name)


def _get_locked(name: str) -> Any:
    if name not in _encodings:
        encoding = _load(name)
        if encoding is None and name == O200K:
            encoding = _get_locked(CL100K)
        _encodings[name] = encoding
    return _encodings[name]


def encoding_name_for_model(model: str) -> str:
    """``o200k_base`` for the gpt-4o / 4.1 / 4.5 / 5 / o-series families, else ``cl100k_base``."""
    base = model.lower().rsplit("/", 1)[-1]
    return O200K if base.startswith(_O200K_PREFIXES) else CL100K


# Texts longer than this are counted from three samples (start, middle, end) scaled to their
# length: tokenizing a 10 MB text exactly takes seconds, wherever it runs.
EXACT_COUNT_MAX_CHARS = 64 * 1024
_SAMPLE_CHARS = 8 * 1024


def count_text_tokens(text: str, model: str) -> int:
    """Tokens in ``text`` for ``model`` (``ceil(len / 4)`` when no encoding is available).

    Exact up to EXACT_COUNT_MAX_CHARS characters; above, an estimate from samples, so a
    count never costs more than tokenizing about 100 KB.
    """
    if not text:
        return 0
    encoding = get_encoding(encoding_name_for_model(model))
    if encoding is None:
        return math.ceil(len(text) / 4)
    size = len(text)
    if size <= EXACT_COUNT_MAX_CHARS:
        return len(encoding.encode_ordinary(text))
    half, middle = _SAMPLE_CHARS // 2, size // 2
    samples = (text[:_SAMPLE_CHARS], text[middle - half:middle + half], text[-_SAMPLE_CHARS:])
    sampled = sum(len(encoding.encode_ordinary(sample)) for sample in samples)
    return math.ceil(sampled * size / (3 * _SAMPLE_CHARS))


def image_tokens(width: int | None, height: int | None, detail: str | None = "auto") -> int:
    """OpenAI's image estimate: 85 at low detail, else 85 + 170 per 512px tile after scaling.

    Scaling fits the image in 2048x2048, then brings the shortest side down to 768. An
    unknown size gives a fixed estimate (a 1024x1024 image).
    """
    if detail == "low":
        return IMAGE_LOW_TOKENS
    if not width or not height or width <= 0 or height <= 0:
        return UNKNOWN_IMAGE_TOKENS
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return IMAGE_LOW_TOKENS + IMAGE_TILE_TOKENS * tiles


def data_url_image_size(url: str) -> tuple[int, int] | None:
    """(width, height) of a base64 data-URL image from its header bytes only, or None.

    Only a prefix of the payload is decoded and Pillow reads the header without decoding
    pixels; any failure (not base64, unknown format, header beyond the probe) gives None.
    """
    if not url.startswith("data:"):
        return None
    comma = url.find(",", 0, 512)
    if comma < 0 or ";base64" not in url[:comma]:
        return None
    payload_len = len(url) - comma - 1
    for probe in _HEADER_PROBE_CHARS:
        chunk = url[comma + 1 : comma + 1 + min(probe, payload_len)]
        chunk = chunk[: len(chunk) - len(chunk) % 4]
        size = _header_size(chunk)
        if size is not None or probe >= payload_len:
            return size
    return None


def _header_size(chunk: str) -> tuple[int, int] | None:
    try:
        raw = base64.b64decode(chunk, validate=False)
    except (binascii.Error, ValueError):
        return None
    try:
        from PIL import Image

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # decompression-bomb warnings: size is all we read
            with Image.open(io.BytesIO(raw)) as image:
                width, height = image.size
    except Exception:  # Pillow raises many types for truncated or unknown data
        return None
    return int(width), int(height)


def _image_part_tokens(part: Mapping[str, Any]) -> int:
    image = part.get("image_url")
    if isinstance(image, str):
        url, detail = image, "auto"
    elif isinstance(image, Mapping):
        url, detail = str(image.get("url") or ""), image.get("detail") or "auto"
    else:
        return UNKNOWN_IMAGE_TOKENS
    if detail == "low":
        return IMAGE_LOW_TOKENS
    size = data_url_image_size(url)
    return image_tokens(*size, detail) if size else UNKNOWN_IMAGE_TOKENS


def _block_image_tokens(part: Mapping[str, Any]) -> int:
    """An Anthropic ``image`` block: its base64 source read like a data URL (its header
    only), never its bytes counted as text."""
    source = part.get("source")
    if not isinstance(source, Mapping) or source.get("type") != "base64":
        return UNKNOWN_IMAGE_TOKENS
    data = source.get("data")
    if not isinstance(data, str):
        return UNKNOWN_IMAGE_TOKENS
    head = data[: max(_HEADER_PROBE_CHARS) + 4]
    size = data_url_image_size(f"data:{source.get('media_type')};base64,{head}")
    return image_tokens(*size, "auto") if size else UNKNOWN_IMAGE_TOKENS


def _content_tokens(content: Any, model: str) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return count_text_tokens(content, model)
    if not isinstance(content, list):
        return count_text_tokens(json.dumps(content, default=str), model)
    total = 0
    for part in content:
        if isinstance(part, str):
            total += count_text_tokens(part, model)
        elif not isinstance(part, Mapping):
            continue
        elif part.get("type") in ("text", "input_text", "output_text"):
            total += count_text_tokens(str(part.get("text") or ""), model)
        elif part.get("type") == "refusal":
            total += count_text_tokens(str(part.get("refusal") or ""), model)
        elif part.get("type") in ("image_url", "input_image"):
            total += _image_part_tokens(part)
        elif part.get("type") == "image":
            total += _block_image_tokens(part)
        elif part.get("type") == "tool_result":  # Anthropic-style result pasted into content
            total += _content_tokens(part.get("content"), model)
        elif part.get("type") in ("input_audio", "file", "input_file", "document"):
            total += NON_TEXT_PART_TOKENS
        else:
            total += count_text_tokens(json.dumps(part, default=str), model)
    return total


def _tool_call_tokens(calls: Any, model: str) -> int:
    if not isinstance(calls, list):
        return 0
    total = 0
    for call in calls:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        if isinstance(function, Mapping):
            total += count_text_tokens(str(function.get("name") or ""), model)
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, default=str)
            total += count_text_tokens(arguments, model)
        total += TOOL_CALL_OVERHEAD
    return total


def count_message_tokens(messages: Sequence[Message], model: str) -> int:
    """Estimated input tokens of ``messages`` (additive: the sum over single messages).

    Counts content (strings, text parts, tool-result parts), images by size and detail,
    assistant tool calls (name + arguments) and legacy ``function_call``, tool results,
    ``name`` fields, reasoning text carried back to the provider, and a per-message overhead.
    """
    total = 0
    for message in messages:
        total += MESSAGE_OVERHEAD + _content_tokens(message.get("content"), model)
        if message.get("name"):
            total += NAME_OVERHEAD + count_text_tokens(str(message["name"]), model)
        total += _tool_call_tokens(message.get("tool_calls"), model)
        function_call = message.get("function_call")
        if isinstance(function_call, Mapping):
            total += _tool_call_tokens([{"function": function_call}], model)
        reasoning = message.get("reasoning_content")
        if isinstance(reasoning, str):
            total += count_text_tokens(reasoning, model)
    return total


def count_tools_tokens(body: Mapping[str, Any], model: str) -> int:
    """Estimated tokens of the tool schemas (``tools`` and legacy ``functions``) of a body."""
    schemas = [body[key] for key in ("tools", "functions") if body.get(key)]
    if not schemas:
        return 0
    text = json.dumps(schemas, separators=(",", ":"), ensure_ascii=False, default=str)
    return TOOLS_OVERHEAD + count_text_tokens(text, model)


def token_counter(model: str) -> Callable[[Sequence[Message]], int]:
    """``count_message_tokens`` bound to ``model``: the ``count_tokens`` callable used here."""
    return partial(count_message_tokens, model=model)
