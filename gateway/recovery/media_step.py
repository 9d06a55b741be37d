"""Recovery step 3 (SPEC §3): resend with degraded media.

The async driver around ``gateway.projection.media``: fetch the remote images of a request
(bounded in size, time, concurrency and target address), then run the pure, CPU-bound
``degrade_messages`` in a worker thread so the event loop never blocks on Pillow.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import aiohttp
from yarl import URL

from gateway.projection.anomalies import Message
from gateway.projection.media import (
    MediaLimits,
    MediaPolicy,
    MediaResult,
    degrade_messages,
    image_urls_to_fetch,
)

_CHUNK = 64 * 1024
_MAX_REDIRECTS = 3
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(slots=True)
class _Budget:
    """Bytes all fetches of one request may still read (shared, single event loop)."""

    remaining: int


async def degrade_request_media(
    messages: Sequence[Message],
    limits: MediaLimits,
    policy: MediaPolicy,
    session: aiohttp.ClientSession | None,
    *,
    fetch_timeout: float = 10.0,
    max_concurrency: int = 4,
    max_total_fetch_bytes: int = 64 * 1024 * 1024,
    allow_private_addresses: bool = False,
) -> MediaResult:
    """Degrade the media of ``messages`` for a resend (see ``degrade_messages``).

    With ``policy="degraded"`` and a ``session``, remote http(s) images are fetched first:
    each body is read in chunks and refused past ``limits.max_input_bytes``; each fetch
    (redirects included) has ``fetch_timeout`` seconds; at most ``max_concurrency`` run at
    once. A failed fetch becomes an error string (its image is then replaced by a note).
    Once ``max_total_fetch_bytes`` have been read, remaining URLs are left as they are.
    Unless ``allow_private_addresses``, URLs whose host is or resolves to a non-global
    address (loopback, private, link-local, ...) are not fetched: the gateway must not be a
    way into its own network. Without a session nothing is fetched.

    The step is bounded by ``limits.max_seconds``: fetches still running then are cancelled
    and decoding stops before the next image (the rest become removal notes); at most
    MAX_CONCURRENT_DECODES requests decode at once in this process.
    """
    loop = asyncio.get_running_loop()
    deadline = None if limits.max_seconds is None else loop.time() + limits.max_seconds
    fetched: dict[str, bytes | str] = {}
    if policy == "degraded" and session is not None:
        urls = image_urls_to_fetch(messages)
        if urls:
            budget = _Budget(max_total_fetch_bytes)
            semaphore = asyncio.Semaphore(max(1, max_concurrency))

            async def bounded(url: str) -> bytes | str | None:
                async with semaphore:
                    return await _fetch(session, url, limits.max_input_bytes, fetch_timeout,
                                        budget, allow_private_addresses)

            fetched = await _fetch_until(urls, bounded, deadline)
    stop = threading.Event()
    timer = loop.call_at(deadline, stop.set) if deadline is not None else None
    try:
        # Decoding is CPU- and memory-bound: a few at a time per process, each stopping
        # between images once the deadline has passed.
        async with _decode_slots():
            return await asyncio.to_thread(degrade_messages, messages, limits, policy,
                                           fetched, stop.is_set)
    finally:
        if timer is not None:
            timer.cancel()


MAX_CONCURRENT_DECODES = 2
_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary())


def _decode_slots() -> asyncio.Semaphore:
    """The process's decode slots (one semaphore per event loop)."""
    loop = asyncio.get_running_loop()
    slots = _SLOTS.get(loop)
    if slots is None:
        slots = _SLOTS[loop] = asyncio.Semaphore(MAX_CONCURRENT_DECODES)
    return slots


async def _fetch_until(urls: list[str],
                       fetch: Callable[[str], Awaitable[bytes | str | None]],
                       deadline: float | None) -> dict[str, bytes | str]:
    """Fetch every URL; those still running at ``deadline`` are cancelled (error strings)."""
    tasks = {url: asyncio.ensure_future(fetch(url)) for url in urls}
    timeout = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
    done, pending = await asyncio.wait(tasks.values(), timeout=timeout)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    fetched: dict[str, bytes | str] = {}
    for url, task in tasks.items():
        if task not in done:
            fetched[url] = "not fetched before the request's deadline"
        elif (result := task.result()) is not None:
            fetched[url] = result
    return fetched


async def _fetch(session: aiohttp.ClientSession, url: str, max_bytes: int, timeout: float,
                 budget: _Budget, allow_private: bool) -> bytes | str | None:
    """Bytes of ``url``, an error string, or None when the request's budget ran out."""
    try:
        async with asyncio.timeout(timeout):
            return await _fetch_following(session, url, max_bytes, budget, allow_private)
    except TimeoutError:
        return f"timed out after {timeout:g}s"
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"[:200]


async def _fetch_following(session: aiohttp.ClientSession, url: str, max_bytes: int,
                           budget: _Budget, allow_private: bool) -> bytes | str | None:
    current = URL(url)
    for _ in range(_MAX_REDIRECTS + 1):
        if current.scheme not in ("http", "https"):
            return f"redirected to unsupported scheme {current.scheme!r}"
        if not allow_private:
            refused = await _refuse_non_global(current)
            if refused:
                return refused
        async with session.get(current, allow_redirects=False) as resp:
            if resp.status in _REDIRECTS:
                location = resp.headers.get("Location")
                if not location:
                    return f"HTTP {resp.status} without Location"
                current = current.join(URL(location))
                continue
            if resp.status != 200:
                return f"HTTP {resp.status}"
            if resp.content_length is not None and resp.content_length > max_bytes:
                return f"body of {resp.content_length} bytes exceeds {max_bytes}"
            return await _read_bounded(resp, max_bytes, budget)
    return f"more than {_MAX_REDIRECTS} redirects"


async def _read_bounded(resp: aiohttp.ClientResponse, max_bytes: int,
                        budget: _Budget) -> bytes | str | None:
    body = bytearray()
    async for chunk in resp.content.iter_chunked(_CHUNK):
        body += chunk
        budget.remaining -= len(chunk)
        if len(body) > max_bytes:
            return f"body exceeds {max_bytes} bytes"
        if budget.remaining < 0:
            return None
    return bytes(body)


async def _refuse_non_global(url: URL) -> str | None:
    """An error string when ``url``'s host is, or resolves to, a non-global address."""
    host = url.raw_host
    if not host:
        return "URL has no host"
    try:
        addresses = [ipaddress.ip_address(host.strip("[]").split("%")[0])]
    except ValueError:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, url.port, type=socket.SOCK_STREAM)
        except OSError:
            return f"could not resolve {host}"
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for address in addresses:
        mapped = getattr(address, "ipv4_mapped", None)
        if not address.is_global or (mapped is not None and not mapped.is_global):
            return f"address {address} is not public"
    return None


__all__ = ["degrade_request_media"]
