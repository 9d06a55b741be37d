"""Start-up safety checks and the admin commands behind them.

* :func:`exposure` refuses an open relay: no client keys on a non-loopback address stops
  ``serve`` (unless ``gateway.allow_unauthenticated: true``); on loopback it is one warning.
* :func:`hygiene_warnings` flags literal secrets in a config file other users can read
  (by key path, never by value).
* :func:`masked_config` is the resolved config with every secret masked
  (``gateway check-config``); :func:`purge_command` is ``gateway purge``.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import stat
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from gateway.config import (
    ALL_SECRET_SECTIONS,
    ENV_PREFIX,
    SECRET_NAME,
    URL_PASSWORD,
    WEBHOOK_URL,
    ConfigError,
    GatewayConfig,
    load_config,
    load_document,
)
from gateway.redact import MIN_SECRET_CHARS, mask
from gateway.routing import entry_notes
from gateway.server.auth import client_keys

MASK = "***"
_URL_PASSWORD = URL_PASSWORD
_ALL_SECRET = ALL_SECRET_SECTIONS


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name or "": may be reachable from elsewhere


def exposure(config: GatewayConfig, host: str, port: int) -> tuple[str | None, str | None]:
    """``(refusal, warning)`` for serving ``config`` on ``host``: a refusal stops start-up
    (exit 2), a warning is logged once."""
    if client_keys(config):
        return None, None
    where = f"{host}:{port}"
    if is_loopback(host):
        return None, (
            f"no client keys (gateway.api_keys is empty): anyone on this machine can use the "
            f"gateway on {where}, and stored session data (archives) is not served. Set "
            "gateway.api_keys: [os.environ/GATEWAY_KEY] to require a key.")
    if config.gateway.allow_unauthenticated:
        return None, (
            f"serving on {where} WITHOUT client keys (gateway.allow_unauthenticated: true): "
            "anyone who can reach this address spends the configured provider keys; stored "
            "session data (archives) is not served.")
    return (
        f"refusing to serve on {where} without client keys: anyone who can reach it would "
        "spend the configured provider keys. Add a key, e.g. 'gateway.api_keys: "
        "[os.environ/GATEWAY_KEY]' and export GATEWAY_KEY, or opt out explicitly with "
        "'gateway.allow_unauthenticated: true'."
    ), None


def _is_secret_name(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def literal_secrets(raw: Any, path: str = "", secret: bool = False) -> list[str]:
    """Key paths of the literal (not ``os.environ/``) secrets in a raw config document."""
    found: list[str] = []
    if isinstance(raw, dict):
        for key, value in raw.items():
            sub = f"{path}.{key}" if path else str(key)
            found += literal_secrets(value, sub, _is_secret_name(str(key))
                                     or path in _ALL_SECRET)
    elif isinstance(raw, list):
        for index, value in enumerate(raw):
            found += literal_secrets(value, f"{path}[{index}]", secret)
    elif (isinstance(raw, str) and not raw.startswith(ENV_PREFIX)
          and ((secret and raw) or _URL_PASSWORD.search(raw) or WEBHOOK_URL.match(raw.strip())
               or (path.startswith("general_settings.alert") and "://" in raw))):
        found.append(path)
    return found


def hygiene_warnings(path: str | Path, _seen: frozenset[Path] = frozenset()) -> list[str]:
    """Warnings for literal secrets in a config file that other users can read: the file
    and each file it names under ``include:`` (and theirs)."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []
    warnings: list[str] = []
    paths = literal_secrets(raw) if mode & (stat.S_IRGRP | stat.S_IROTH) else []
    if paths:
        warnings.append(
            f"{p} is readable by other users (mode {stat.filemode(mode)}) and holds literal "
            f"secrets at: {', '.join(paths)}. Move them to environment variables "
            f"(os.environ/NAME) or run 'chmod 600 {p}'.")
    names = raw.get("include") if isinstance(raw, dict) else None
    seen = _seen | {p.resolve()}
    for name in [names] if isinstance(names, str) else names if isinstance(names, list) else []:
        included = (p.parent / str(name)).resolve()
        if included not in seen:
            warnings += hygiene_warnings(included, seen)
    return warnings


def _mask_value(value: Any, raw: Any, path: str) -> Any:
    """Mask a secret-named value (a list of keys, or a key/owner object by its names)."""
    if isinstance(value, list):
        raws = raw if isinstance(raw, list) else []
        return [_mask_value(v, raws[i] if i < len(raws) else None, f"{path}[{i}]")
                for i, v in enumerate(value)]
    if isinstance(value, dict):
        return _mask(value, raw, path)
    if isinstance(value, str):
        if isinstance(raw, str) and raw.startswith(ENV_PREFIX):
            return f"{MASK} (from {raw})"
        return MASK
    return value


def _mask(node: Any, raw: Any, path: str) -> Any:
    if isinstance(node, dict):
        raws = raw if isinstance(raw, dict) else {}
        out: dict[str, Any] = {}
        for key, value in node.items():
            sub = f"{path}.{key}" if path else str(key)
            if _is_secret_name(str(key)) or path in _ALL_SECRET:
                out[key] = _mask_value(value, raws.get(key), sub)
            else:
                out[key] = _mask(value, raws.get(key), sub)
        return out
    if isinstance(node, list):
        raw_list = raw if isinstance(raw, list) else []
        return [_mask(v, raw_list[i] if i < len(raw_list) else None, f"{path}[{i}]")
                for i, v in enumerate(node)]
    if isinstance(node, str):
        return _URL_PASSWORD.sub(lambda m: m["head"] + MASK + m["at"], node)
    return node


def masked_config(config: GatewayConfig, raw: Any) -> dict[str, Any]:
    """The resolved config (defaults included) with every secret masked; values that came
    from the environment say which variable."""
    dumped = config.model_dump(mode="json")
    masked: dict[str, Any] = _mask(dumped, raw, "")
    masked.update(config.router.describe())  # the LiteLLM settings the gateway honours
    return masked


def check_config_command(path: str) -> int:
    """``gateway check-config FILE``: validate, print the resolved config masked."""
    try:
        config = load_config(path)
        raw = load_document(path)  # its include: files merged in
    except ConfigError as err:
        print(f"gateway check-config: {err}", file=sys.stderr)
        return 2
    for warning in hygiene_warnings(path):
        print(f"warning: {warning}", file=sys.stderr)
    ignored, endpoints = entry_notes(config)
    for key in ignored:
        print(f"warning: {key} is ignored (an OpenAI-compatible deployment does not use it)",
              file=sys.stderr)
    for line in endpoints:
        print(f"note: no api_base: {line}", file=sys.stderr)
    # Masked by key name, then every secret of the config wherever else it appears (a key
    # reused as a model name, a header, a URL).
    text = yaml.safe_dump(masked_config(config, raw), sort_keys=False, allow_unicode=True)
    secrets = sorted((s for s in config.secrets() if len(s) >= MIN_SECRET_CHARS), key=len,
                     reverse=True)
    print(mask(text, secrets), end="")
    return 0


def purge_command(args: argparse.Namespace) -> int:
    """``gateway purge``: remove a session, or sessions older than N days (or the configured
    retention), from the configured store and archive."""
    from gateway.sessions.retention import (
        DAY,
        has_data,
        open_purgeable,
        purge_old_responses,
        purge_older_than,
        purge_session,
    )

    try:
        config = load_config(args.config)
    except ConfigError as err:
        print(f"gateway purge: {err}", file=sys.stderr)
        return 2
    days = args.older_than
    if args.session is None and days is None:
        days = config.sessions.retention_days
        if days is None:
            print("gateway purge: give --session ID or --older-than DAYS (no "
                  "sessions.retention_days is configured)", file=sys.stderr)
            return 2
    if not has_data(config):
        print("nothing stored yet")
        return 0

    async def run() -> str:
        store, archive = open_purgeable(config)
        try:
            if args.session is not None:
                report = await purge_session(store, archive, args.session)
            else:
                cutoff = time.time() - days * DAY
                report = await purge_older_than(store, archive, cutoff)
                report.responses = await purge_old_responses(config, cutoff)
        finally:
            await store.close()
            await archive.close()
        return str(report)

    print(asyncio.run(run()))
    return 0
