"""Compaction records: what a store remembers about one compaction (pure)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

__all__ = [
    "KINDS",
    "KIND_BACKGROUND",
    "KIND_REDUCED",
    "KIND_SUMMARIZED",
    "KIND_TRIMMED",
    "CompactionRecord",
    "decode_record",
    "encode_record",
]

KIND_SUMMARIZED: Final = "summarized"
KIND_BACKGROUND: Final = "background"
KIND_TRIMMED: Final = "trimmed"  # the safety net: oldest messages dropped, no summary
KIND_REDUCED: Final = "reduced"  # superseded tool results noted, old long ones folded
KINDS: Final = frozenset({KIND_SUMMARIZED, KIND_BACKGROUND, KIND_TRIMMED, KIND_REDUCED})

_META_FIELDS: Final = (
    "session_id",
    "prefix_len",
    "prefix_hash",
    "tokens_before",
    "tokens_after",
    "created_at",
    "archive_from",
    "archive_to",
    "kind",
)


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """One stored compaction of a session's history.

    ``prefix_len`` original messages, whose chain digest is ``prefix_hash``, are
    replaced by ``replacement``. ``replacement_raw`` is the orjson encoding of
    ``replacement`` as first built; stores keep these exact bytes so a replay sends
    what the model saw the first time. ``archive_from``/``archive_to`` are the 1-based
    inclusive archive lines holding the removed messages (``0, 0`` = nothing archived).
    ``kind`` is ``"summarized"`` (compacted in the request path), ``"background"``,
    ``"trimmed"`` (the window-trimming safety net, no summary) or ``"reduced"`` (the cheap
    reductions alone: superseded and old long tool results replaced by short notes).

    Treat ``replacement`` as read-only: records are shared between callers.
    Build new records with :meth:`create`, which derives ``replacement_raw``.
    """

    session_id: str
    prefix_len: int
    prefix_hash: str
    replacement: list[dict[str, Any]]
    replacement_raw: bytes
    tokens_before: int
    tokens_after: int
    created_at: float
    archive_from: int
    archive_to: int
    kind: str

    def __post_init__(self) -> None:
        if not self.session_id:
            raise ValueError("session_id must be non-empty")
        if self.prefix_len < 1:
            raise ValueError(f"prefix_len must be >= 1, got {self.prefix_len}")
        if len(self.prefix_hash) != 64:
            raise ValueError("prefix_hash must be a sha256 hex digest")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {self.kind!r}")
        if self.archive_from < 0 or self.archive_to < 0:
            raise ValueError("archive line numbers must be >= 0")
        if self.archive_from > self.archive_to + 1:
            raise ValueError("archive_from must be <= archive_to + 1")

    @classmethod
    def create(
        cls,
        *,
        session_id: str,
        prefix_len: int,
        prefix_hash: str,
        replacement: Sequence[Mapping[str, Any]],
        tokens_before: int,
        tokens_after: int,
        archive_from: int = 0,
        archive_to: int = 0,
        kind: str = KIND_SUMMARIZED,
        created_at: float | None = None,
    ) -> CompactionRecord:
        """Build a record; ``replacement_raw`` is ``orjson.dumps(replacement)``.

        ``replacement`` is re-read from those bytes, so the record holds exactly what
        a store will give back after a round trip.
        """
        raw = orjson.dumps(list(replacement))
        return cls(
            session_id=session_id,
            prefix_len=prefix_len,
            prefix_hash=prefix_hash,
            replacement=orjson.loads(raw),
            replacement_raw=raw,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            created_at=time.time() if created_at is None else created_at,
            archive_from=archive_from,
            archive_to=archive_to,
            kind=kind,
        )

    def meta(self) -> dict[str, Any]:
        """Every field except the replacement (for logs and storage)."""
        return {name: getattr(self, name) for name in _META_FIELDS}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], replacement_raw: bytes) -> CompactionRecord:
        """Rebuild a record from :meth:`meta` output and the stored raw bytes."""
        return cls(
            session_id=str(meta["session_id"]),
            prefix_len=int(meta["prefix_len"]),
            prefix_hash=str(meta["prefix_hash"]),
            replacement=orjson.loads(replacement_raw),
            replacement_raw=bytes(replacement_raw),
            tokens_before=int(meta["tokens_before"]),
            tokens_after=int(meta["tokens_after"]),
            created_at=float(meta["created_at"]),
            archive_from=int(meta["archive_from"]),
            archive_to=int(meta["archive_to"]),
            kind=str(meta["kind"]),
        )


def encode_record(record: CompactionRecord) -> bytes:
    """Serialize a record to one blob: orjson meta, ``b"\\n"``, replacement_raw.

    orjson never emits a raw newline, so the first ``b"\\n"`` is the separator.
    """
    return orjson.dumps(record.meta()) + b"\n" + record.replacement_raw


def decode_record(blob: bytes) -> CompactionRecord:
    """Inverse of :func:`encode_record`; ``replacement_raw`` comes back byte for byte."""
    meta, sep, raw = bytes(blob).partition(b"\n")
    if not sep:
        raise ValueError("not an encoded CompactionRecord")
    return CompactionRecord.from_meta(orjson.loads(meta), raw)
