"""The ``drop_param`` step (LiteLLM's ``drop_params``): which refusal names a request field
that may be left out, and what the next plan carries."""

from __future__ import annotations

from gateway.providers.failure import UpstreamFailure
from gateway.recovery.drop import unsupported_param
from gateway.recovery.ladder import Ladder

FIELDS = {"model": "o3-mini", "messages": [], "temperature": 0, "stream": True, "top_p": 1}


def refused(param: str | None, code: str | None = "unsupported_value",
            status: int = 400) -> UpstreamFailure:
    return UpstreamFailure(status=status, provider="openai", code=code, param=param,
                           message=f"Unsupported value: '{param}' does not support 0 with this "
                                   "model. Only the default (1) value is supported.")


def test_only_an_unsupported_top_level_field_of_the_request_may_go() -> None:
    assert unsupported_param(refused("temperature"), FIELDS) == "temperature"
    assert unsupported_param(refused("top_p", "unsupported_parameter"), FIELDS) == "top_p"
    assert unsupported_param(refused("stream"), FIELDS) is None  # the request itself stays
    assert unsupported_param(refused("messages"), FIELDS) is None
    assert unsupported_param(refused("seed"), FIELDS) is None  # not sent: nothing to drop
    assert unsupported_param(refused("messages[0].content"), FIELDS) is None
    assert unsupported_param(refused("temperature", "invalid_value"), FIELDS) is None
    assert unsupported_param(refused("temperature", status=500), FIELDS) is None
    assert unsupported_param(refused(None), FIELDS) is None


def test_each_field_is_dropped_once_and_the_drops_carry_over() -> None:
    ladder = Ladder()
    first = ladder.first()
    second = ladder.drop_param(first, refused("temperature"), FIELDS)
    assert second is not None
    assert (second.step, second.dropped, second.number, second.delay) == (
        "drop_param", ("temperature",), 2, 0.0)
    assert ladder.drop_param(second, refused("temperature"), FIELDS) is None
    third = ladder.drop_param(second, refused("top_p", "unsupported_parameter"), FIELDS)
    assert third is not None and third.dropped == ("temperature", "top_p")
    assert ladder.steps_taken == ("drop_param", "drop_param")
