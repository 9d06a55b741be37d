"""The access log: one line per request on the ``gateway.access`` logger, and the JSON log
format (``gateway.log_format: json``) for every gateway log line."""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

import orjson

from gateway.redact import redact
from gateway.telemetry.record import RequestRecord

access_log = logging.getLogger("gateway.access")

# Routes probed or scraped many times a minute: not worth a line each.
QUIET_PATHS = frozenset({"/healthz", "/metrics"})


def access_fields(rec: RequestRecord) -> dict[str, Any]:
    """The access log's fields for one request (never a key: ``client`` is a key id)."""
    fields: dict[str, Any] = {
        "request_id": rec.request_id, "method": rec.method, "path": rec.path,
        "status": rec.status, "ms": round(rec.duration * 1000, 3),
    }
    if rec.client_key_id:
        fields["client"] = rec.client_key_id
    if rec.owner_name or rec.key_owner:
        fields["owner"] = rec.owner_name or rec.key_owner
    if rec.wire:
        fields.update({
            "wire": rec.wire, "model": rec.model, "deployment": rec.deployment,
            "stream": rec.stream, "added_ms": round(rec.added_seconds * 1000, 3),
            "attempts": rec.chat_attempts,
        })
        if rec.repairs:
            fields["repairs"] = rec.repairs
        if rec.would_repair:
            fields["would_repair"] = rec.would_repair
        if rec.violations:
            fields["rejected"] = len(rec.violations)
        if rec.invisible is not None:
            fields["invisible"] = rec.invisible.total
            fields["invisible_action"] = rec.invisible_action
        if rec.condensed_outputs:
            fields["condensed_outputs"] = rec.condensed_outputs
            fields["condensed_saved_chars"] = rec.condensed_saved_chars
            fields["condensed_action"] = rec.condensed_action
        if rec.recovery:
            fields["recovery"] = rec.recovery
        if rec.compaction_how:
            fields["compaction"] = rec.compaction_how
        if rec.input_tokens is not None:
            fields["input_tokens"] = rec.input_tokens
        if rec.output_tokens is not None:
            fields["output_tokens"] = rec.output_tokens
        if rec.session_id:
            fields["session"] = rec.session_id[:64]
        if rec.context is not None:
            fields["context"] = rec.context.level or ""
            if rec.context.used is not None:
                fields["context_used"] = round(rec.context.used, 3)
            fields["context_tokens"] = rec.context.tokens()
        if rec.cache_read_tokens is not None:
            fields["cache_read_tokens"] = rec.cache_read_tokens
            if rec.cache_write_tokens:
                fields["cache_write_tokens"] = rec.cache_write_tokens
        if rec.prefix is not None:
            fields["prefix"] = rec.prefix.cause
            if rec.prefix.broke:
                fields["prefix_index"] = rec.prefix.index
                fields["prefix_lost_tokens"] = rec.prefix.lost_tokens
    if rec.disconnected:
        fields["client_disconnected"] = True
    return fields


def log_access(rec: RequestRecord) -> None:
    """Write the request's line (skipped for health probes and scrapes that succeeded)."""
    if rec.path in QUIET_PATHS and rec.status < 400:
        return
    if not access_log.isEnabledFor(logging.INFO):
        return
    fields = access_fields(rec)
    text = " ".join(f"{k}={_text(v)}" for k, v in fields.items())
    access_log.info("%s", text, extra={"access": fields})


# A value a client chose (a session id from ``x-session-id`` or ``prompt_cache_key``) may
# hold spaces, "=" or line breaks: written bare it would forge fields or whole lines.
_BARE = re.compile(r"[!#-<>-~]*")  # printable ASCII but space, '"' and '='


def _text(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    text = str(value)
    # Quoted (JSON string: ASCII, every control character escaped) when not plain.
    return text if _BARE.fullmatch(text) else json.dumps(text)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON line (access lines carry their fields at top level)."""
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
        }
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            out["msg"] = "access"
            out.update(access)
        else:
            out["msg"] = record.getMessage()
            for key in ("request_id", "repairs"):
                value = getattr(record, key, None)
                if value is not None:
                    out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class RedactingFormatter(logging.Formatter):
    """Another formatter's line with every configured secret masked: tracebacks and
    extra fields included (the message alone is masked when the record is made)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self._inner = inner

    def format(self, record: logging.LogRecord) -> str:
        """The inner formatter's line, redacted."""
        return redact(self._inner.format(record))


def setup_logging(level: str, fmt: str = "text") -> None:
    """Configure the root logger to stderr in the text or JSON format."""
    import sys

    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(RedactingFormatter(JsonFormatter()))
    else:
        handler.setFormatter(RedactingFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
