"""The data read from inside the litellm wheel at run time is there, and means what litellm says.

Without it nothing errors: every context window silently becomes 128k and every token count
``len / 4``. These tests are what notices a litellm release (or a slimmed image) that moved
or dropped it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway import runtime_data
from gateway.compaction.tokens import count_text_tokens, get_encoding
from gateway.providers.capabilities import resolve_capabilities

ROOT = Path(__file__).resolve().parents[1]


def test_the_installed_litellm_ships_the_model_map_and_tokenizers() -> None:
    assert runtime_data.problems() == []


@pytest.mark.parametrize("model", ["anthropic/claude-sonnet-4-5", "openai/gpt-4.1",
                                   "gemini/gemini-2.5-pro"])
def test_windows_come_from_the_map_litellm_itself_serves(model: str) -> None:
    import litellm  # its public view of the same data

    caps = resolve_capabilities(model, None)
    public = litellm.get_model_info(model)
    assert caps.source == "litellm"
    assert caps.context_window == public["max_input_tokens"]
    assert caps.context_window != 128_000  # a window the default could not fake


def test_counts_use_the_real_encodings() -> None:
    import tiktoken

    encoding = get_encoding(runtime_data.O200K)
    assert encoding is not None and encoding.name == runtime_data.O200K  # not the fallback
    text = "Räksmörgås: 12 tool calls, €3.50 each — naïve café 🙂"
    assert count_text_tokens(text, "gpt-4o") == len(tiktoken.get_encoding("o200k_base")
                                                    .encode(text))
    assert count_text_tokens(text, "gpt-4o") != -(-len(text) // 4)  # not the estimate


def test_a_litellm_without_the_data_is_reported(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setattr(runtime_data, "litellm_package_dir", lambda: tmp_path)
    found = runtime_data.problems()
    assert len(found) == 3
    assert "model map" in found[0] and "128k" in found[0]
    assert all("tokenizer" in line for line in found[1:])
    monkeypatch.setattr(runtime_data, "litellm_package_dir", lambda: None)
    assert "not installed" in runtime_data.problems()[0]


def test_a_damaged_tokenizer_file_is_reported(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    folder = tmp_path.joinpath(*runtime_data.TOKENIZERS_SUBDIR)
    folder.mkdir(parents=True)
    (tmp_path / runtime_data.MODEL_MAP_FILE).write_text("{}")
    for name in runtime_data.ENCODING_FILES:
        runtime_data.encoding_file(folder, name).write_bytes(b"not a BPE file")
    monkeypatch.setattr(runtime_data, "litellm_package_dir", lambda: tmp_path)
    assert runtime_data.problems(verify=False) == []  # start-up only looks for the files
    assert [line.split()[1] for line in runtime_data.problems()] == ["cl100k_base", "o200k_base"]


def test_the_image_build_check_passes_here() -> None:
    out = subprocess.run([sys.executable, "-m", "gateway.runtime_data"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "present" in out.stdout


def test_the_files_read_are_declared_by_the_litellm_distribution() -> None:
    from importlib import metadata

    dist = metadata.distribution("litellm")
    declared = {dist.locate_file(f).resolve() for f in dist.files or ()}
    tokenizers = runtime_data.tokenizers_dir()
    assert tokenizers is not None
    read = [runtime_data.model_map_path(),
            *(runtime_data.encoding_file(tokenizers, n) for n in runtime_data.ENCODING_FILES)]
    assert [p for p in read if p is None or p.resolve() not in declared] == []
