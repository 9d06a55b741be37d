"""A refusal that names no window (or one that would have held what it refused) still bounds
it: the size of the refused request (prompt plus the output it asked for) is learned, never
above what is planned already."""

from __future__ import annotations

import json

import pytest

from gateway.compaction.route_windows import RouteWindows
from gateway.compaction.window import MIN_REFUSED_BOUND, WindowBook, asked_output_tokens
from gateway.config import parse_config
from gateway.providers.failure import UpstreamFailure
from gateway.providers.openai_compat import HttpPool
from gateway.routing import ModelRoute, build_route


def route(window: int | None = 100_000) -> ModelRoute:
    info = {"max_input_tokens": window} if window else {}
    config = parse_config({"model_list": [{"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_base": "http://127.0.0.1:9/v1", "api_key": "k"},
        "model_info": info}]})
    return build_route(config.model_list[0], config, HttpPool())


def refusal(message: str) -> UpstreamFailure:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "code": "context_length_exceeded"}})
    return UpstreamFailure(status=400, provider="m", message=message, body=body.encode())


async def test_an_unnumbered_refusal_learns_the_refused_size() -> None:
    windows, r = RouteWindows(WindowBook()), route()
    await windows.learn(r, refusal("Please reduce the length of the messages."), 12_000)
    assert await windows.window(r) == 12_000
    # A later, smaller refusal lowers it again; a larger one changes nothing.
    await windows.learn(r, refusal("Input is too long for requested model."), 7_000)
    await windows.learn(r, refusal("Input is too long for requested model."), 9_000)
    assert await windows.window(r) == 7_000


async def test_a_stated_window_wins_over_the_refused_size() -> None:
    windows, r = RouteWindows(WindowBook()), route()
    await windows.learn(r, refusal("This model's maximum context length is 8192 tokens. "
                                   "However, your messages resulted in 9000 tokens."), 20_000)
    assert await windows.window(r) == 8_192


async def test_a_stated_window_that_held_the_refused_request_is_not_believed() -> None:
    # A proxy in front states the model's nominal window while the server behind it has a
    # smaller one: the window it names would have held the request it refused, so the
    # refused size bounds the window instead (compaction then fits under it, rather than
    # planning for 128,000 tokens again and ending in the provider's 400).
    windows, r = RouteWindows(WindowBook()), route()
    await windows.learn(r, refusal("This model's maximum context length is 128000 tokens. "
                                   "However, your messages resulted in 5407 tokens."), 5_407)
    assert await windows.window(r) == 5_407


@pytest.mark.parametrize("refused", [None, 200_000, 100, MIN_REFUSED_BOUND - 1])
async def test_no_bound_without_a_plausible_size(refused: int | None) -> None:
    windows, r = RouteWindows(WindowBook()), route()
    await windows.learn(r, refusal("Please reduce the length of the messages."), refused)
    assert await windows.window(r) == 100_000


@pytest.mark.parametrize(("body", "asked"), [
    ({"max_tokens": 512}, 512), ({"max_completion_tokens": 64}, 64),
    ({"max_output_tokens": 9}, 9), ({"max_tokens": True}, 0), ({"max_tokens": "5"}, 0),
    ({}, 0), ([], 0), ({"max_tokens": -3}, 0),
])
def test_asked_output_tokens(body: object, asked: int) -> None:
    assert asked_output_tokens(body) == asked
