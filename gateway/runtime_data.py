"""The data the gateway reads at run time from inside the litellm package, in one place.

Two things are not the gateway's own but ship in the litellm wheel (pinned in
``requirements.lock``), and are read without importing litellm (its import takes seconds):

* the model map ``model_prices_and_context_window_backup.json`` at the package root: the
  context windows, output limits, image and tool support of known models. It is the file
  litellm itself loads under ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (its public
  ``litellm.model_cost``); ``tests/test_runtime_data.py`` checks the two agree.
* tiktoken's BPE files under ``litellm_core_utils/tokenizers/``, named as tiktoken names its
  cache (``sha1(url)``), checked against the SHA-256 tiktoken expects.

Without them nothing fails, but every window falls back to 128k tokens and every count to
``len / 4``. So a litellm release that moves either must be noticed: :func:`problems` lists
what is missing, the start-up log warns with it, ``python -m gateway.runtime_data`` exits 1
with it (the Docker build runs it) and the test suite fails on it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

__all__ = [
    "CL100K",
    "ENCODING_FILES",
    "MODEL_MAP_FILE",
    "O200K",
    "encoding_file",
    "litellm_package_dir",
    "model_map_path",
    "problems",
    "tokenizers_dir",
]

MODEL_MAP_FILE = "model_prices_and_context_window_backup.json"
TOKENIZERS_SUBDIR = ("litellm_core_utils", "tokenizers")

CL100K = "cl100k_base"
O200K = "o200k_base"

# tiktoken's source URL (the cache file is named sha1(url)) and the SHA-256 it expects.
ENCODING_FILES: dict[str, tuple[str, str]] = {
    CL100K: (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    O200K: (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}


def litellm_package_dir() -> Path | None:
    """The installed litellm package directory, found without importing litellm."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def model_map_path() -> Path | None:
    """Where litellm's bundled model map should be (None without litellm)."""
    package = litellm_package_dir()
    return None if package is None else package / MODEL_MAP_FILE


def tokenizers_dir() -> Path | None:
    """The tokenizer folder shipped in the litellm package (tiktoken's cache layout)."""
    package = litellm_package_dir()
    if package is None:
        return None
    folder = package.joinpath(*TOKENIZERS_SUBDIR)
    return folder if folder.is_dir() else None


def encoding_file(cache_dir: str | Path, name: str) -> Path:
    """The file tiktoken reads encoding ``name`` from, in its cache folder ``cache_dir``."""
    url, _ = ENCODING_FILES[name]
    return Path(cache_dir) / hashlib.sha1(url.encode()).hexdigest()


def encoding_file_ok(cache_dir: str | Path, name: str) -> bool:
    """Whether ``cache_dir`` holds encoding ``name`` with the bytes tiktoken expects."""
    try:
        data = encoding_file(cache_dir, name).read_bytes()
    except OSError:
        return False
    return hashlib.sha256(data).hexdigest() == ENCODING_FILES[name][1]


def problems(*, verify: bool = True) -> list[str]:
    """What of the run-time data is missing or damaged (empty when all is there).

    ``verify=False`` only looks for the files (start-up: no hashing of ~5 MB).
    """
    package = litellm_package_dir()
    if package is None:
        return ["litellm is not installed: no model map (windows default to 128k tokens) "
                "and no tokenizer files (counts are estimated)"]
    found: list[str] = []
    model_map = package / MODEL_MAP_FILE
    if not model_map.is_file():
        found.append(f"litellm's model map is not at {model_map}: every context window "
                     "falls back to 128k tokens unless model_info states it")
    tokenizers = package.joinpath(*TOKENIZERS_SUBDIR)
    for name in ENCODING_FILES:
        present = (encoding_file_ok(tokenizers, name) if verify
                   else encoding_file(tokenizers, name).is_file())
        if not present:
            found.append(f"the {name} tokenizer file is missing or damaged under "
                         f"{tokenizers}: token counts fall back to estimates")
    return found


def main() -> int:
    """``python -m gateway.runtime_data``: print what is missing; exit 1 if anything is."""
    found = problems()
    for line in found:
        print(f"runtime data: {line}", file=sys.stderr)
    if not found:
        print("runtime data: model map and tokenizer files present")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
