"""The repair inspector: ``/ui`` (only with ``gateway.ui: true``, behind client auth).

Plain HTML, CSS and JavaScript shipped in ``gateway/server/static`` (no build, no CDN). The
page reads a small JSON API under ``/ui/api``: recent requests (filters by model, status and
repair kind), one request's anomalies, attempts, compaction and captured messages, and a
session's requests with its compactions and archive.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web

from gateway.server.auth import named_owner, not_readable, owner_only, session_reader
from gateway.server.errors import ClientError, json_response
from gateway.server.keys import STATE
from gateway.server.ui_auth import UI_PREFIX
from gateway.telemetry.advice import advise
from gateway.telemetry.inspector import Inspector

STATIC = Path(__file__).parent / "static"
# The page loads only its own files: no inline script, no third-party origin.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "style-src 'self'; script-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _readable(request: web.Request) -> tuple[str, ...] | None:
    """The owner ids whose requests the reader may see (None: every owner's, for the
    owners of ``gateway.ui_admin_owners``)."""
    principal = session_reader(request)
    # By owner id, not display name: a plain key's name (``api_keys[0]``, ``master_key``)
    # that a team happens to be called makes it no admin.
    admins = request.app[STATE].config.gateway.ui_admin_owners
    if principal.owner in {named_owner(name) for name in admins}:
        return None
    return principal.owner_ids


def _inspector(request: web.Request) -> Inspector:
    inspector = request.app[STATE].telemetry.inspector
    assert inspector is not None  # routes exist only when the inspector does
    return inspector


async def page(request: web.Request) -> web.Response:
    """``GET /ui``: the single page."""
    if request.path == UI_PREFIX:
        raise web.HTTPFound(UI_PREFIX + "/")
    return web.Response(body=(STATIC / "index.html").read_bytes(), content_type="text/html",
                        charset="utf-8", headers=SECURITY_HEADERS)


async def asset(request: web.Request) -> web.Response:
    """``GET /ui/static/{name}``: the page's CSS and JavaScript."""
    name = request.match_info["name"]
    types = {".css": "text/css", ".js": "text/javascript"}
    path = STATIC / name
    if "/" in name or path.suffix not in types or not path.is_file():
        raise ClientError(404, f"no inspector asset {name!r}", code="not_found")
    return web.Response(body=path.read_bytes(), content_type=types[path.suffix],
                        charset="utf-8", headers=SECURITY_HEADERS)


async def list_requests(request: web.Request) -> web.Response:
    """``GET /ui/api/requests?model=&status=&kind=&owner=&session=``: most recent first."""
    q = request.query
    readable = _readable(request)
    entries = await _inspector(request).recent(
        model=q.get("model", ""), status=q.get("status", ""), kind=q.get("kind", ""),
        session=q.get("session", ""), owners=readable, owner=q.get("owner", ""))
    state = request.app[STATE]
    assert state.driver is not None
    # The owner filter offers the owners this key may read: other teams' names stay hidden.
    owners = {name for owner, name in state.driver.owner_names.items()
              if readable is None or owner in readable}
    return json_response({
        "requests": entries,
        "models": sorted(state.routes),
        "owners": sorted(owners),
        "capture_bodies": state.telemetry.capturer is not None,
    }, headers=SECURITY_HEADERS)


async def get_request(request: web.Request) -> web.Response:
    """``GET /ui/api/requests/{id}``: everything about one request."""
    found = await _inspector(request).get(request.match_info["request_id"],
                                          owners=_readable(request))
    if found is None:
        raise ClientError(404, "no such request in the inspector's history (it keeps the "
                          "most recent ones)", code="not_found")
    return json_response(found, headers=SECURITY_HEADERS)


async def get_session(request: web.Request) -> web.Response:
    """``GET /ui/api/sessions/{id}[?owner=NAME]``: the session's requests and its
    compactions, and its prompt-cache advice per owner (teams may use the same id)."""
    session_id = request.match_info["session_id"]
    # As the request list: inspector admins see every owner's (the archive stays the owner's).
    entries = await _inspector(request).recent(session=session_id, owners=_readable(request),
                                               owner=request.query.get("owner", ""))
    by_owner: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:  # most recent first
        by_owner.setdefault(entry.get("owner") or "", []).append(entry)
    # Two teams' requests under one id are two sessions: their prefixes are not compared
    # with each other, and neither is their advice added up.
    caches = [{"owner": own[0].get("owner_name") or "", **advise(own[::-1]).as_dict()}
              for own in by_owner.values()]
    compactions: list[dict[str, Any]] = [
        {"request_id": e["request_id"], "time": e["time"], "how": e["compaction"],
         "header": e.get("compaction_header", ""), "failed": e.get("compaction_failed", "")}
        for e in entries if e.get("compaction")
    ]
    return json_response({"session_id": session_id, "requests": entries,
                          "compactions": compactions,
                          "owners": [cache["owner"] for cache in caches],
                          # (oldest first within each owner's)
                          "cache": caches[0] if len(caches) == 1 else None,
                          "caches": caches,
                          # (a session id is the client's words: "#", "?", "/" included)
                          "archive": f"{UI_PREFIX}/api/sessions/{quote(session_id, safe='')}"
                                     "/archive"},
                         headers=SECURITY_HEADERS)


async def session_archive(request: web.Request) -> web.Response:
    """``GET /ui/api/sessions/{id}/archive``: the archive, for its owner (as the API)."""
    state = request.app[STATE]
    assert state.driver is not None
    session_id = request.match_info["session_id"]
    lines = await state.driver.read_archive(session_id, 1, 1000,
                                              owners=session_reader(request).owner_ids)
    if lines is None:
        raise not_readable(session_id)
    return json_response({"session_id": session_id, "messages": lines},
                         headers=SECURITY_HEADERS)


def register(app: web.Application) -> None:
    """Attach the inspector's routes (call only when ``gateway.ui`` is on). Every one needs
    client auth (``403`` without keys): the inspector shows stored conversations."""
    for path, handler in (
        (UI_PREFIX, page), (UI_PREFIX + "/", page), (UI_PREFIX + "/static/{name}", asset),
        (UI_PREFIX + "/api/requests", list_requests),
        (UI_PREFIX + "/api/requests/{request_id}", get_request),
        (UI_PREFIX + "/api/sessions/{session_id}", get_session),
        (UI_PREFIX + "/api/sessions/{session_id}/archive", session_archive),
    ):
        app.router.add_get(path, owner_only(handler))
