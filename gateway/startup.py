"""Process start-up: the environment work done once, in one place, before serving.

* The config's ``environment_variables`` (LiteLLM's section) are exported over the
  process environment's values, as LiteLLM does (a replaced value is named, never shown).
* litellm is switched to its bundled data (model cost map, Anthropic beta-header table), so
  neither its import nor its first call reaches the network.
* ``TIKTOKEN_CACHE_DIR`` defaults to the tokenizer folder shipped inside the litellm package
  (found without importing litellm): tiktoken reads its BPE files from there, by its own
  cache naming, and checks their expected SHA-256 (``gateway.compaction.tokens``). Where
  that data lives is ``gateway.runtime_data``'s business; a missing piece is logged.

``create_app`` calls :func:`prepare_environment`; ``load_litellm`` calls it again as a guard
(it runs once per process).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

from gateway.runtime_data import litellm_package_dir, problems, tokenizers_dir

if TYPE_CHECKING:
    from gateway.config import GatewayConfig

__all__ = ["OFFLINE_ENV", "litellm_package_dir", "prepare_environment", "tokenizers_dir"]

# Environment switches set (setdefault: an operator's explicit choice wins) before litellm
# is imported.
OFFLINE_ENV: dict[str, str] = {
    # Use the model cost map shipped in the package instead of fetching it at import.
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    # The first Anthropic call would otherwise fetch the beta-header table synchronously.
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
}

log = logging.getLogger("gateway.startup")
_lock = threading.Lock()
_done = False


def prepare_environment(config: GatewayConfig | None = None) -> None:
    """Export the config's ``environment_variables`` and the offline switches (once)."""
    global _done
    with _lock:
        if config is not None:
            for key, value in config.environment_variables.items():
                if os.environ.get(key, value) != value:
                    log.warning("environment_variables.%s from the config file replaces the "
                                "value already set in the process environment", key)
                os.environ[key] = value
        if _done:
            return
        for key, value in OFFLINE_ENV.items():
            os.environ.setdefault(key, value)
        tokenizers = tokenizers_dir()
        if tokenizers is not None:
            os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(tokenizers))
        for problem in problems(verify=False):
            log.warning("%s", problem)
        _done = True
