"""Headless Chromium (Debian's package, driven by Playwright through ``executable_path``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Browser, async_playwright


def chromium_path() -> str:
    """The system Chromium; the test is skipped (with the reason) when it is missing."""
    path = os.environ.get("GATEWAY_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    if not path:
        pytest.skip("chromium is not installed (apt-get install chromium; make test does)")
    return path


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless browser, closed on exit."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                           args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            await browser.close()
