"""Start-up environment work happens once, in ``gateway.startup``, not on import or parse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(code: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TIKTOKEN_CACHE_DIR", "LITELLM_LOCAL_MODEL_COST_MAP", "FROM_CONFIG")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_nothing_is_exported_before_start_up_and_everything_after() -> None:
    report = run(
        "import json, os\n"
        "import gateway.compaction.tokens, gateway.providers.litellm_loader, gateway.config\n"
        "from gateway.config import parse_config\n"
        "cfg = parse_config({'environment_variables': {'FROM_CONFIG': 'v'},\n"
        "                    'gateway': {'api_keys': ['os.environ/FROM_CONFIG']}})\n"
        "before = {k: os.environ.get(k) for k in ('TIKTOKEN_CACHE_DIR',\n"
        "          'LITELLM_LOCAL_MODEL_COST_MAP', 'FROM_CONFIG')}\n"
        "from gateway.startup import prepare_environment, tokenizers_dir\n"
        "prepare_environment(cfg)\n"
        "after = {k: os.environ.get(k) for k in before}\n"
        "print(json.dumps({'before': before, 'after': after, 'keys': cfg.gateway.api_keys,\n"
        "                  'tokenizers': str(tokenizers_dir())}))\n"
    )
    assert report["keys"] == ["v"]  # the reference resolved from environment_variables
    assert report["before"] == {"TIKTOKEN_CACHE_DIR": None, "LITELLM_LOCAL_MODEL_COST_MAP": None,
                                "FROM_CONFIG": None}
    assert report["after"] == {"TIKTOKEN_CACHE_DIR": report["tokenizers"],
                               "LITELLM_LOCAL_MODEL_COST_MAP": "True", "FROM_CONFIG": "v"}
