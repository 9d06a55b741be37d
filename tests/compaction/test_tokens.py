"""Token accounting: offline tiktoken, plausible counts, images, requests."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from PIL import Image

from gateway.compaction import tokens
from gateway.startup import prepare_environment, tokenizers_dir

ROOT = Path(__file__).resolve().parents[2]

# Run in a fresh interpreter: any socket connection raises, TIKTOKEN_CACHE_DIR comes from env.
_OFFLINE_PRELUDE = """
import json, socket, sys
def _no_network(*args, **kwargs):
    raise OSError("network disabled in this test")
socket.socket.connect = _no_network
socket.create_connection = _no_network
from gateway.compaction import tokens
from gateway.startup import prepare_environment, tokenizers_dir
prepare_environment()  # what start-up does (create_app)
"""


def _run_offline(code: str, env_cache_dir: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR",)}
    env["HTTPS_PROXY"] = env["HTTP_PROXY"] = "http://127.0.0.1:9"
    if env_cache_dir is not None:
        env["TIKTOKEN_CACHE_DIR"] = env_cache_dir
    proc = subprocess.run(
        [sys.executable, "-c", _OFFLINE_PRELUDE + code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_encodings_load_offline_from_litellm_folder_without_importing_litellm() -> None:
    result = _run_offline(
        """
cl = tokens.get_encoding("cl100k_base")
o2 = tokens.get_encoding("o200k_base")
print(json.dumps({
    "cache": __import__("os").environ.get("TIKTOKEN_CACHE_DIR"),
    "litellm": str(tokenizers_dir()),
    "cl": cl.name if cl else None,
    "o2": o2.name if o2 else None,
    "n4o": tokens.count_text_tokens("tiktoken is great!", "gpt-4o"),
    "n4": tokens.count_text_tokens("tiktoken is great!", "gpt-4"),
    "litellm_imported": "litellm" in sys.modules,
}))
""",
        env_cache_dir=None,
    )
    assert result["cache"] == result["litellm"]
    assert str(result["cache"]).endswith("litellm/litellm_core_utils/tokenizers")
    assert result["cl"] == "cl100k_base"
    assert result["o2"] == "o200k_base"
    # The OpenAI cookbook's example: "tiktoken is great!" is 6 tokens (an estimate gives 5).
    assert result["n4"] == 6
    assert result["n4o"] == 6
    assert result["litellm_imported"] is False


def test_missing_o200k_falls_back_to_cl100k(tmp_path: Path) -> None:
    source = tokenizers_dir()
    assert source is not None
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    name = hashlib.sha1(url.encode()).hexdigest()
    shutil.copy(source / name, tmp_path / name)
    result = _run_offline(
        'e = tokens.get_encoding("o200k_base"); print(json.dumps({"name": e.name if e else None}))',
        env_cache_dir=str(tmp_path),
    )
    assert result == {"name": "cl100k_base"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing downloaded


def test_no_encoding_files_means_estimate_and_no_download(tmp_path: Path) -> None:
    result = _run_offline(
        """
print(json.dumps({
    "enc": tokens.get_encoding("cl100k_base") is not None,
    "n": tokens.count_text_tokens("x" * 401, "gpt-4"),
}))
""",
        env_cache_dir=str(tmp_path),
    )
    assert result == {"enc": False, "n": 101}
    assert list(tmp_path.iterdir()) == []


def test_corrupt_cached_file_is_not_handed_to_tiktoken(tmp_path: Path) -> None:
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    bad = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    bad.write_bytes(b"garbage")
    result = _run_offline(
        'print(json.dumps({"enc": tokens.get_encoding("cl100k_base") is not None}))',
        env_cache_dir=str(tmp_path),
    )
    assert result == {"enc": False}
    assert bad.read_bytes() == b"garbage"  # tiktoken would have deleted and re-fetched it


def test_cache_dir_defaults_to_litellm_folder_after_start_up() -> None:
    prepare_environment()  # what create_app does
    assert tokens.count_text_tokens("tiktoken is great!", "gpt-4o") == 6  # real, not len / 4
    folder = tokenizers_dir()
    assert folder is not None
    assert Path(os.environ["TIKTOKEN_CACHE_DIR"]).resolve() == folder.resolve()


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", "o200k_base"),
        ("openai/gpt-4o-mini", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("claude-sonnet-4", "cl100k_base"),
    ],
)
def test_encoding_per_model(model: str, expected: str) -> None:
    assert tokens.encoding_name_for_model(model) == expected


def _png(width: int, height: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _png_header_only(width: int, height: int) -> str:
    """A PNG whose header claims a size (no pixel data): enough for a header read."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)  # a start of pixel data; the rest is never read
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat)
    return "data:image/png;base64," + base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("size", "detail", "expected"),
    [
        ((512, 512), "high", 255),
        ((1024, 1024), "auto", 765),
        ((2048, 4096), "high", 1105),  # fit in 2048, shortest side to 768: 2x3 tiles
        ((4000, 3000), "low", 85),
        ((None, None), "auto", tokens.UNKNOWN_IMAGE_TOKENS),
    ],
)
def test_image_tile_formula(
    size: tuple[int | None, int | None], detail: str, expected: int
) -> None:
    assert tokens.image_tokens(size[0], size[1], detail) == expected


def _image_message(url: str, detail: str | None = None) -> dict[str, object]:
    image: dict[str, object] = {"url": url}
    if detail:
        image["detail"] = detail
    return {"role": "user", "content": [{"type": "image_url", "image_url": image}]}


def test_image_counts_use_data_url_size_and_never_tokenize_base64() -> None:
    url = _png(1024, 1024)
    count = tokens.count_message_tokens([_image_message(url)], "gpt-4o")
    assert count == tokens.MESSAGE_OVERHEAD + 765
    small = tokens.count_message_tokens([_image_message(_png(100, 100))], "gpt-4o")
    assert small == tokens.MESSAGE_OVERHEAD + 255
    low = tokens.count_message_tokens([_image_message(url, "low")], "gpt-4o")
    assert low == tokens.MESSAGE_OVERHEAD + 85
    remote = tokens.count_message_tokens(
        [_image_message("https://example.invalid/cat.png")], "gpt-4o"
    )
    assert remote == tokens.MESSAGE_OVERHEAD + tokens.UNKNOWN_IMAGE_TOKENS


def test_huge_claimed_image_size_is_read_without_a_warning_or_decode() -> None:
    # 10000x10000 is above Pillow's decompression-bomb warning threshold; the suite turns
    # warnings into errors, so a leaked warning would fail here.
    url = _png_header_only(10_000, 10_000)
    assert tokens.data_url_image_size(url) == (10_000, 10_000)
    assert tokens.data_url_image_size("data:image/png;base64,!!notbase64") is None
    assert tokens.data_url_image_size("data:text/plain,hello") is None


def test_large_payload_with_noise_is_not_tokenized() -> None:
    noise = base64.b64encode(os.urandom(3_000_000)).decode()
    url = "data:image/png;base64," + noise
    count = tokens.count_message_tokens([_image_message(url)], "gpt-4o")
    assert count == tokens.MESSAGE_OVERHEAD + tokens.UNKNOWN_IMAGE_TOKENS


def test_tool_calls_results_and_names_are_counted() -> None:
    arguments = json.dumps({"path": "/src/app/" + "deep/" * 50 + "main.py"})
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read_file", "arguments": arguments},
            }
        ],
    }
    bare = {"role": "assistant", "content": None}
    result = {"role": "tool", "tool_call_id": "c1", "content": "line one\nline two " * 40}
    named = {"role": "user", "name": "alice", "content": "hi"}
    model = "gpt-4o"
    call_tokens = tokens.count_message_tokens([call], model)
    assert call_tokens >= tokens.count_text_tokens(arguments, model) + tokens.count_text_tokens(
        "read_file", model
    )
    assert call_tokens > tokens.count_message_tokens([bare], model) + 50
    assert tokens.count_message_tokens([result], model) > 100
    assert tokens.count_message_tokens([named], model) > tokens.count_message_tokens(
        [{"role": "user", "content": "hi"}], model
    )
    # Additive: a list counts as the sum of its messages.
    assert tokens.count_message_tokens([call, result], model) == call_tokens + (
        tokens.count_message_tokens([result], model)
    )


def test_text_parts_and_special_token_text_are_counted() -> None:
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "hello world"},
            {"type": "text", "text": "<|endoftext|>"},
        ],
    }
    assert tokens.count_message_tokens([message], "gpt-4") > tokens.MESSAGE_OVERHEAD + 2


def test_request_count_includes_tool_schemas_and_breakdown_adds_up() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the code base for a symbol and return matching lines. " * 5,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "find foo"},
        ],
    }
    assert tokens.count_tools_tokens(body, "gpt-4o") == 0
    assert tokens.count_tools_tokens({**body, "tools": [tool]}, "gpt-4o") > 60
    assert tokens.count_tools_tokens({**body, "functions": [tool["function"]]}, "gpt-4o") > 60


def test_token_counter_binds_the_model() -> None:
    count = tokens.token_counter("gpt-4o")
    messages = [{"role": "user", "content": "one two three"}]
    assert count(messages) == tokens.count_message_tokens(messages, "gpt-4o")
