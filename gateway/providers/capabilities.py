"""What a model can take: context window, output budget, images, tools.

Resolution order, per field: the operator's ``model_info`` (LiteLLM-style config), then the
model map bundled inside the installed litellm package (read as JSON; litellm itself is NOT
imported; where it lives is ``gateway.runtime_data``'s business), then documented defaults.

Loading the bundled map reads a ~3.5 MB file synchronously. The first call caches it; the
server should call ``load_model_map()`` (or ``resolve_capabilities``) once at startup inside
``asyncio.to_thread`` so no request pays for it on the event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from gateway.runtime_data import model_map_path

DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_MAX_OUTPUT_TOKENS = 4_096
DEFAULT_SUPPORTS_IMAGES = True
DEFAULT_SUPPORTS_TOOLS = True

CapabilitySource = Literal["model_info", "litellm", "default"]


@dataclass(frozen=True, slots=True)
class ModelCapabilities:
    """Limits and features of one upstream model.

    ``source`` names the most specific source that contributed any field: "model_info" when
    the operator's config set at least one, "litellm" when the bundled map knew the model,
    "default" when neither did.
    """

    context_window: int
    max_output_tokens: int
    supports_images: bool
    supports_tools: bool
    source: CapabilitySource


_map_lock = threading.Lock()
_model_map: dict[str, dict[str, Any]] | None = None


def load_model_map() -> Mapping[str, Mapping[str, Any]]:
    """Read (once) and return litellm's bundled model map; empty when litellm is absent."""
    global _model_map
    if _model_map is not None:
        return _model_map
    with _map_lock:
        if _model_map is None:
            _model_map = _read_model_map()
        return _model_map


def _read_model_map() -> dict[str, dict[str, Any]]:
    path = model_map_path()
    if path is None:
        return {}
    try:
        raw = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(v, dict) and k != "sample_spec"}


def _provider_matches(entry: Mapping[str, Any], provider: str) -> bool:
    # Map entries name their provider loosely: "vertex_ai-language-models", "bedrock_converse".
    listed = entry.get("litellm_provider")
    return isinstance(listed, str) and (listed == provider or listed.startswith(provider))


def lookup_model(litellm_model: str) -> Mapping[str, Any] | None:
    """Find the bundled map entry for a litellm model string such as ``anthropic/claude-x``.

    Tries the exact key, then the name without the provider prefix (anthropic models are
    keyed bare), then the last path segment (``bedrock/us-east-1/anthropic.claude-...``);
    a stripped name must belong to the same provider.
    """
    table = load_model_map()
    entry = table.get(litellm_model)
    if entry is not None:
        return entry
    if "/" not in litellm_model:
        return None
    provider, rest = litellm_model.split("/", 1)
    for candidate in (rest, rest.rsplit("/", 1)[-1], f"{provider}/{rest.rsplit('/', 1)[-1]}"):
        entry = table.get(candidate)
        if entry is not None and _provider_matches(entry, provider):
            return entry
    return None


def _base_model(model_info: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The map entry of ``model_info.base_model`` (LiteLLM: the real model behind a
    deployment named otherwise, e.g. an Azure deployment of ``azure/gpt-4o``), looked up
    as given, then by its bare name (the base model is named on purpose: any provider's
    entry of that model will do)."""
    base = (model_info or {}).get("base_model")
    if not isinstance(base, str) or not base:
        return None
    return lookup_model(base) or load_model_map().get(base.rsplit("/", 1)[-1])


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    return None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _fields(info: Mapping[str, Any]) -> dict[str, int | bool]:
    """The capability fields one source states; absent or malformed values are skipped.

    ``max_tokens`` is LiteLLM's legacy name for the output budget and only counts when
    ``max_output_tokens`` is absent.
    """
    found: dict[str, int | bool] = {}
    window = _positive_int(info.get("max_input_tokens"))
    if window is not None:
        found["context_window"] = window
    output = _positive_int(info.get("max_output_tokens"))
    if output is None:
        output = _positive_int(info.get("max_tokens"))
    if output is not None:
        found["max_output_tokens"] = output
    images = _flag(info.get("supports_vision"))
    if images is not None:
        found["supports_images"] = images
    tools = _flag(info.get("supports_function_calling"))
    if tools is not None:
        found["supports_tools"] = tools
    return found


def resolve_capabilities(
    litellm_model: str, model_info: Mapping[str, Any] | None
) -> ModelCapabilities:
    """Capabilities of ``litellm_model``; ``model_info`` keys win field by field.

    Recognised ``model_info`` keys: max_input_tokens, max_output_tokens, max_tokens (legacy
    output budget), supports_vision, supports_function_calling; ``base_model`` names the
    model whose bundled capabilities apply (instead of the deployment's name). Defaults:
    128000 context, 4096 output, images and tools supported.
    """
    configured = _fields(model_info or {})
    bundled_entry = _base_model(model_info) or lookup_model(litellm_model)
    bundled = _fields(bundled_entry) if bundled_entry is not None else {}
    merged: dict[str, int | bool] = {
        "context_window": DEFAULT_CONTEXT_WINDOW,
        "max_output_tokens": DEFAULT_MAX_OUTPUT_TOKENS,
        "supports_images": DEFAULT_SUPPORTS_IMAGES,
        "supports_tools": DEFAULT_SUPPORTS_TOOLS,
    }
    merged.update(bundled)
    merged.update(configured)
    source: CapabilitySource = "default"
    if configured:
        source = "model_info"
    elif bundled_entry is not None:
        source = "litellm"
    return ModelCapabilities(
        context_window=int(merged["context_window"]),
        max_output_tokens=int(merged["max_output_tokens"]),
        supports_images=bool(merged["supports_images"]),
        supports_tools=bool(merged["supports_tools"]),
        source=source,
    )
