"""Append-only archive of the messages that compaction removed from a session.

Line numbers are 1-based and inclusive; line ``k`` of a session is the ``k``-th
message ever archived for it. Each line is ``orjson.dumps(message)``: the message as
sent, key order kept. Appending no messages writes nothing and returns the empty
range ``(count + 1, count)``. A read returns at most :data:`MAX_READ_LINES` messages
(the range is clamped, not refused) so a model-facing reader cannot pull a whole
archive in one call.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import re
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final, Protocol, runtime_checkable

import orjson

__all__ = [
    "MAX_READ_LINES",
    "Archive",
    "JsonlArchive",
    "archive_file_name",
    "clamp_range",
]

MAX_READ_LINES: Final = 1000
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
_LOCK_STRIPES: Final = 64
_CHUNK: Final = 1 << 20


@runtime_checkable
class Archive(Protocol):
    """Where compacted-away messages are kept, per session, append-only."""

    async def append(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[int, int]:
        """Append ``messages``; return their ``(from_line, to_line)`` (1-based, inclusive)."""
        ...

    async def read(self, session_id: str, from_line: int, to_line: int) -> list[dict[str, Any]]:
        """Return the messages of lines ``from_line..to_line`` (at most 1000, clamped)."""
        ...

    async def line_count(self, session_id: str) -> int:
        """Return how many lines the session's archive holds (0 if none)."""
        ...

    async def close(self) -> None:
        """Release resources."""
        ...


def clamp_range(from_line: int, to_line: int) -> tuple[int, int] | None:
    """Normalize a requested range: start at >= 1, at most MAX_READ_LINES lines.

    Returns ``None`` for an empty range.
    """
    start = max(1, from_line)
    end = min(to_line, start + MAX_READ_LINES - 1)
    return None if end < start else (start, end)


def archive_file_name(session_id: str) -> str:
    """File name of a session's archive: the id itself if it is plain
    (``[A-Za-z0-9_-]``, 1-128 chars), else ``sha256.<hex of the id>``.

    The ``.`` never appears in a plain name, so the two forms cannot collide, and no
    name can contain a path separator or be ``.``/``..``.
    """
    if not session_id:
        raise ValueError("session_id must be non-empty")
    if _SAFE_NAME.fullmatch(session_id):
        return session_id + ".jsonl"
    return "sha256." + hashlib.sha256(session_id.encode("utf-8")).hexdigest() + ".jsonl"


def _encode_lines(messages: Sequence[Mapping[str, Any]]) -> bytes:
    # orjson escapes newlines inside strings, so each message is exactly one line.
    return b"".join(orjson.dumps(m) + b"\n" for m in messages)


def decode_line(line: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        return value
    # A torn write (crash mid-append) leaves an unreadable line; keep numbering intact.
    return {"role": "system", "content": "[archive line unreadable]"}


def _open_private(path: Path) -> IO[bytes]:
    """``path`` opened for appending and reading, created readable by its owner only."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    return os.fdopen(fd, "a+b")


class JsonlArchive:
    """One JSONL file per session under ``data_dir/archive/``.

    File I/O runs in worker threads. Appends to one session are serialized by an
    asyncio lock (striped by session) and, across processes, by ``flock`` on the file.
    """

    def __init__(self, data_dir: str | Path) -> None:
        self._dir = Path(data_dir) / "archive"
        self._locks = [asyncio.Lock() for _ in range(_LOCK_STRIPES)]
        # path -> ((inode, file size), line count) then: recount only if someone else wrote
        # (or purged the file and a new one was started).
        self._counts: dict[Path, tuple[tuple[int, int], int]] = {}

    def path_for(self, session_id: str) -> Path:
        """Return the archive file of ``session_id`` (always inside ``data_dir/archive``)."""
        return self._dir / archive_file_name(session_id)

    def _lock_for(self, session_id: str) -> asyncio.Lock:
        return self._locks[zlib.crc32(session_id.encode("utf-8")) % _LOCK_STRIPES]

    async def append(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[int, int]:
        """Append ``messages`` as lines; return their 1-based inclusive line range."""
        path = self.path_for(session_id)
        data = _encode_lines(messages)
        n = len(messages)
        async with self._lock_for(session_id):
            return await asyncio.to_thread(self._append_sync, path, data, n)

    def _append_sync(self, path: Path, data: bytes, n: int) -> tuple[int, int]:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # conversations: owner only
        with _open_private(path) as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                count = self._count_locked(path, f)
                if data:
                    f.write(data)
                    f.flush()
                    st = os.fstat(f.fileno())
                    self._counts[path] = ((st.st_ino, st.st_size), count + n)
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return count + 1, count + n

    def _count_locked(self, path: Path, f: IO[bytes]) -> int:
        """Count complete lines; terminate a torn last line so numbering stays exact."""
        st = os.fstat(f.fileno())
        size = st.st_size
        cached = self._counts.get(path)
        if cached is not None and cached[0] == (st.st_ino, size):
            return cached[1]
        f.seek(0)
        count = 0
        last = b"\n"
        while chunk := f.read(_CHUNK):
            count += chunk.count(b"\n")
            last = chunk[-1:]
        if last != b"\n":
            f.write(b"\n")
            f.flush()
            count += 1
            size += 1
        self._counts[path] = ((st.st_ino, size), count)
        return count

    async def read(self, session_id: str, from_line: int, to_line: int) -> list[dict[str, Any]]:
        """Return lines ``from_line..to_line`` (clamped to >= 1 and 1000 lines)."""
        bounds = clamp_range(from_line, to_line)
        if bounds is None:
            return []
        return await asyncio.to_thread(self._read_sync, self.path_for(session_id), *bounds)

    @staticmethod
    def _read_sync(path: Path, start: int, end: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        try:
            f = path.open("rb")
        except FileNotFoundError:
            return out
        with f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
            for number, line in enumerate(f, start=1):
                if number > end or not line.endswith(b"\n"):
                    break
                if number >= start:
                    out.append(decode_line(line))
        return out

    async def line_count(self, session_id: str) -> int:
        """Return the number of lines archived for ``session_id``."""
        path = self.path_for(session_id)
        async with self._lock_for(session_id):
            return await asyncio.to_thread(self._line_count_sync, path)

    def _line_count_sync(self, path: Path) -> int:
        if not path.exists():
            return 0
        with _open_private(path) as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                return self._count_locked(path, f)
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    async def delete(self, session_id: str) -> bool:
        """Remove the session's archive file."""
        path = self.path_for(session_id)
        async with self._lock_for(session_id):
            self._counts.pop(path, None)
            try:
                await asyncio.to_thread(path.unlink)
            except FileNotFoundError:
                return False
        return True

    async def last_write(self, session_id: str) -> float | None:
        """When the session's archive was last appended to (None: it has none)."""
        try:
            return (await asyncio.to_thread(self.path_for(session_id).stat)).st_mtime
        except FileNotFoundError:
            return None

    async def files_before(self, cutoff: float) -> list[Path]:
        """Archive files last written before ``cutoff`` (wall-clock seconds)."""

        def scan() -> list[Path]:
            if not self._dir.is_dir():
                return []
            out = []
            for path in self._dir.glob("*.jsonl"):
                with contextlib.suppress(FileNotFoundError):
                    if path.stat().st_mtime < cutoff:
                        out.append(path)
            return out

        return await asyncio.to_thread(scan)

    async def close(self) -> None:
        """Nothing to release (files are opened per call)."""
