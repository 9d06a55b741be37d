"""Repairs of single Messages content blocks that no history can make valid (pure, no I/O).

What agents' own bookkeeping leaves on a block, and what another wire's habits put in one:

- ``block_field_dropped``: a stream's leftovers, never fields of a block: LangChain's
  ``index`` on every streamed block ("messages.1.content.1.tool_use.index: Extra inputs are
  not permitted", langchain-ai/langchain#31208), a ``partial_json`` left beside the input it
  was building (it becomes the input when the input is empty), a ``text`` merged into a
  ``tool_use`` ("tool_use.text: Extra inputs are not permitted", anthropics/claude-code#4378;
  the words become a text block before the call).
- ``image_part_converted``: an OpenAI-style ``image_url`` part ("Input tag 'image_url' found
  using 'type' does not match any of the expected tags") becomes an ``image`` block: a data
  URL as base64, a web address as a URL source.
- ``image_data_url_unwrapped``: a base64 image whose ``data`` is a whole data URL
  ("image.source.base64: invalid base64 data") keeps only the base64 after the comma; one
  wrapped over lines (MIME-style, ``base64.encodebytes``, ``openssl base64``), written in
  the URL-safe alphabet or without its padding is made plain base64.
- ``tool_result_rendered``: an error ``tool_result`` without content ("content cannot be
  empty if `is_error` is true") says the output was empty.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway.projection.anomalies import TOOL_RESULT_RENDERED
from gateway.projection.render import EMPTY_TOOL_OUTPUT_TEXT

BLOCK_FIELD_DROPPED = "block_field_dropped"
IMAGE_PART_CONVERTED = "image_part_converted"
IMAGE_DATA_URL_UNWRAPPED = "image_data_url_unwrapped"

_STREAM_FIELDS = ("index", "partial_json")
_CALLS = ("tool_use", "server_tool_use")
_DATA_URL = re.compile(r"data:(image/[\w.+-]+)?(?:;[\w=.+-]+)*;base64,", re.I)
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_SPACE = re.compile(r"\s")
_URL_SAFE = str.maketrans("-_", "+/")


def stream_leftovers(block: Any) -> list[Any] | None:
    """The blocks that replace ``block`` without its stream leftovers (its merged words
    first, as a text block), or None when it has none."""
    if type(block) is not dict:
        return None
    call = block.get("type") in _CALLS
    if not any(name in block for name in _STREAM_FIELDS) and not (call and "text" in block):
        return None
    out = {k: v for k, v in block.items()
           if k not in _STREAM_FIELDS and not (call and k == "text")}
    partial = block.get("partial_json")
    if call and not out.get("input") and isinstance(partial, str):
        try:
            value = orjson.loads(partial)
        except orjson.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            out["input"] = value
    said = block.get("text") if call else None
    if isinstance(said, str) and said.strip():
        return [{"type": "text", "text": said}, out]
    return [out]


def image_repaired(block: Any) -> tuple[Any, str | None]:
    """``block`` as an Anthropic image (an ``image_url`` part converted, a data URL in
    base64 data unwrapped) and the repair's kind; the same block and None otherwise."""
    if type(block) is not dict:
        return block, None
    if block.get("type") == "image_url":
        source = _source_of(block.get("image_url"))
        if source is None:
            return block, None
        image: dict[str, Any] = {"type": "image", "source": source}
        if "cache_control" in block:
            image["cache_control"] = block["cache_control"]
        return image, IMAGE_PART_CONVERTED
    source = block.get("source")
    if block.get("type") != "image" or type(source) is not dict \
            or source.get("type") != "base64" or not isinstance(source.get("data"), str):
        return block, None
    found = _DATA_URL.match(source["data"])
    data = _plain_base64(source["data"][found.end():] if found is not None
                         else source["data"])
    if data == source["data"]:
        return block, None
    unwrapped = {**source, "data": data}
    if found is not None and not source.get("media_type") and found.group(1):
        unwrapped["media_type"] = found.group(1).lower()
    return {**block, "source": unwrapped}, IMAGE_DATA_URL_UNWRAPPED


def _plain_base64(data: str) -> str:
    """``data`` as the padded, standard-alphabet base64 on one line the API decodes: line
    breaks taken out (``base64.encodebytes``, ``openssl base64``), the URL-safe alphabet
    mapped back (``toString("base64url")``), the padding put back (Go's ``RawStdEncoding``);
    as it is when it is not base64 at all (nothing here can say what it was)."""
    plain = _SPACE.sub("", data) if _SPACE.search(data) is not None else data
    if "-" in plain or "_" in plain:
        plain = plain.translate(_URL_SAFE)
    if len(plain.rstrip("=")) % 4 == 1:  # no base64 is that long
        return data
    plain += "=" * (-len(plain) % 4)
    return plain if plain == data or _BASE64.fullmatch(plain) else data


def _source_of(image_url: Any) -> dict[str, Any] | None:
    url = image_url.get("url") if type(image_url) is dict else image_url
    if not isinstance(url, str):
        return None
    found = _DATA_URL.match(url)
    if found is not None and found.group(1):
        return {"type": "base64", "media_type": found.group(1).lower(),
                "data": url[found.end():]}
    if url.startswith(("https://", "http://")):
        return {"type": "url", "url": url}
    return None


def result_images_repaired(block: Any) -> tuple[Any, list[str]]:
    """A ``tool_result`` with the images of its content list repaired as by
    :func:`image_repaired`, and the kinds of the repairs."""
    if type(block) is not dict or block.get("type") != "tool_result" \
            or not isinstance(block.get("content"), list):
        return block, []
    kinds: list[str] = []
    inner: list[Any] = []
    for part in block["content"]:
        part, kind = image_repaired(part)
        inner.append(part)
        if kind is not None:
            kinds.append(kind)
    return ({**block, "content": inner}, kinds) if kinds else (block, [])


def error_result_filled(block: Any) -> tuple[Any, str | None]:
    """An error ``tool_result`` without content saying its output was empty."""
    if type(block) is not dict or block.get("type") != "tool_result" \
            or block.get("is_error") is not True:
        return block, None
    content = block.get("content")
    if content is None or content == [] or (isinstance(content, str) and not content.strip()):
        return {**block, "content": EMPTY_TOOL_OUTPUT_TEXT}, TOOL_RESULT_RENDERED
    return block, None
