"""Lazy, one-time import of litellm, off the event loop.

litellm takes seconds to import and reads environment switches at import time, so nothing in
``gateway/`` imports it at module level: the first provider call awaits ``load_litellm()``.
The environment is prepared at start-up (``gateway.startup``) so that the import and later
calls never reach the network on their own (bundled model cost map, tokenizers and Anthropic
beta-header table).
"""

from __future__ import annotations

import asyncio
import importlib
import threading
import warnings
from types import ModuleType

from gateway.startup import prepare_environment

_module: ModuleType | None = None
_lock = threading.Lock()

def _configure(module: ModuleType) -> None:
    # The gateway's projection repairs histories; litellm must translate, never "fix".
    settings = {
        "modify_params": False,
        "suppress_debug_info": True,
        # Older releases phone home unless told not to; newer ones ignore the attribute.
        "telemetry": False,
        "set_verbose": False,
    }
    for name, value in settings.items():
        setattr(module, name, value)


# pydantic warns once per lazily built litellm schema (TypedDict items marked ``ReadOnly``);
# the warning is harmless noise and, under ``-W error``, it would abort the request that
# happens to build the schema.
READONLY_WARNING = r".*(is|are) using the `ReadOnly` qualifier"


def _silence_schema_warnings() -> None:
    warnings.filterwarnings("ignore", message=READONLY_WARNING, category=UserWarning)


def _import_sync() -> ModuleType:
    global _module
    with _lock:
        if _module is None:
            prepare_environment()  # done at start-up already; a guard for library use
            _silence_schema_warnings()
            module = importlib.import_module("litellm")
            _configure(module)
            _module = module
        return _module


async def load_litellm() -> ModuleType:
    """Return the litellm module, importing and configuring it once in a worker thread.

    Sets ``modify_params = False`` (no silent history rewriting), ``suppress_debug_info``
    and telemetry off. ``drop_params`` is left as configured: the client's fields are
    forwarded, and an unsupported one is the provider's (or litellm's) refusal to report.
    """
    if _module is not None:
        return _module
    return await asyncio.to_thread(_import_sync)


def loaded_litellm() -> ModuleType | None:
    """The litellm module if ``load_litellm`` already ran, else None (never imports)."""
    return _module


async def close_litellm_clients() -> None:
    """Close the HTTP clients litellm cached (at shutdown; nothing when it was never
    imported), so no connection outlives the event loop that opened it."""
    module = loaded_litellm()
    if module is None:
        return
    closer = getattr(module, "close_litellm_async_clients", None)
    if closer is not None:
        await closer()
    cache = getattr(module, "in_memory_llm_clients_cache", None)
    flush = getattr(cache, "flush_cache", None)
    if flush is not None:
        flush()
