"""litellm is imported lazily, once, off the event loop, and configured to translate only."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    parsed: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


def test_importing_provider_modules_does_not_import_litellm() -> None:
    report = run_python(
        "import json, sys\n"
        "import gateway.providers.litellm_adapter as a\n"
        "import gateway.providers.litellm_loader\n"
        "import gateway.providers.prompt_cache as p\n"
        "from gateway.providers.capabilities import resolve_capabilities\n"
        "a.LiteLLMProvider('x', {'model': 'anthropic/claude-sonnet-4-5'})\n"
        "caps = resolve_capabilities('anthropic/claude-sonnet-4-5', None)\n"
        "p.wire_style('gemini/gemini-2.5-flash')\n"
        "print(json.dumps({'loaded': sorted(m for m in sys.modules if m.split('.')[0] == "
        "'litellm'), 'source': caps.source}))\n"
    )
    assert report == {"loaded": [], "source": "litellm"}


def test_load_litellm_configures_once_and_keeps_operator_env() -> None:
    report = run_python(
        "import asyncio, json, os\n"
        "from gateway.providers.litellm_loader import load_litellm, loaded_litellm\n"
        "async def main():\n"
        "    assert loaded_litellm() is None\n"
        "    first, second = await asyncio.gather(load_litellm(), load_litellm())\n"
        "    return first, second\n"
        "first, second = asyncio.run(main())\n"
        "print(json.dumps({'same': first is second is loaded_litellm(),\n"
        "  'modify_params': first.modify_params, 'quiet': first.suppress_debug_info,\n"
        "  'cost_map': os.environ['LITELLM_LOCAL_MODEL_COST_MAP'],\n"
        "  'beta': os.environ['LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS'],\n"
        "  'tiktoken': os.environ['TIKTOKEN_CACHE_DIR'],\n"
        "  'package': os.path.dirname(first.__file__)}))\n",
        env={"LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "False", "LITELLM_MODIFY_PARAMS": "True"},
    )
    assert report["same"] is True
    assert report["modify_params"] is False
    assert report["quiet"] is True
    assert report["cost_map"] == "True"
    assert report["beta"] == "False"
    assert str(report["tiktoken"]).startswith(str(report["package"]))


def _module_level_litellm_imports(tree: ast.Module) -> list[int]:
    found: list[int] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if (
            isinstance(node, ast.Import)
            and any(alias.name.split(".")[0] == "litellm" for alias in node.names)
        ) or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "litellm"):
            found.append(node.lineno)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    pending.append(child)
                elif isinstance(child, ast.ExceptHandler):
                    pending.extend(child.body)
    return found


def test_no_module_level_litellm_import_anywhere_in_gateway() -> None:
    offenders = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "gateway").rglob("*.py"))
        if (lines := _module_level_litellm_imports(ast.parse(path.read_text())))
    }
    assert offenders == {}
