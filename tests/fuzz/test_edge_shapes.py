"""The crash sites the fuzzer found, each now a 400 in the wire's error shape naming the
field; and the shapes a repair handles later, which the edge must still accept."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.wires.chat_validation import MAX_JSON_DEPTH
from tests.conftest import RunningGateway
from tests.fuzz.conftest import Upstreams
from tests.fuzz.mutations import ANTHROPIC, CHAT, RESPONSES, nested
from tests.http import post_json


def with_field(seed: dict[str, Any], path: tuple[Any, ...], value: Any,
               **fields: Any) -> dict[str, Any]:
    body = copy.deepcopy(seed) | fields
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


async def refused(gw: RunningGateway, path: str, body: Any, field: str) -> str:
    """Assert a 400 in the route's wire shape naming ``field``; its message."""
    status, _, error = await post_json(gw.root + path, body)
    assert status == 400, error
    if path.startswith("/v1/messages"):
        assert error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
    assert field in error["error"]["message"], error
    return str(error["error"]["message"])


@pytest.mark.parametrize(("body", "field"), [
    ({"messages": [{"role": ["user"], "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": {"a": 1}, "content": "hi"}], "system": "s"}, "messages.0.role"),
    ({"system": "s", "messages": [{"role": "user", "content": [{"type": ["x"]}]}]},
     "messages.0.content.0"),
])
async def test_dry_run_detects_any_shape(gw: RunningGateway, body: Any, field: str) -> None:
    await refused(gw, "/v1/gateway/project", body, field)


@pytest.mark.parametrize("model", ["claude", "local"])
async def test_tool_result_parts_must_be_objects(gw: RunningGateway, model: str) -> None:
    body = with_field(ANTHROPIC, ("messages", 2, "content", 0, "content"), ["text", 5],
                      model=model)
    await refused(gw, "/v1/messages", body, "messages.2.content.0.content.0")


@pytest.mark.parametrize("model", ["gpt", "local"])
async def test_responses_parts_must_be_objects(gw: RunningGateway, model: str) -> None:
    body = with_field(RESPONSES, ("input", 1, "content"), [3, "x"], model=model)
    message = await refused(gw, "/v1/responses", body, "input[1].content[0]")
    assert message == ("Invalid type for 'input[1].content[0]': expected an object, got an "
                       "integer.")


@pytest.mark.parametrize("item", [5, "hi", None, ["user"]], ids=["int", "str", "null", "list"])
@pytest.mark.parametrize(("path", "seed", "key", "model", "field", "said"), [
    ("/v1/messages", ANTHROPIC, "messages", "claude", "messages.1", "messages.1: Expected an "
     "object"),
    ("/v1/messages", ANTHROPIC, "messages", "local", "messages.1", "messages.1: Expected an "
     "object"),
    ("/v1/responses", RESPONSES, "input", "gpt", "input[1]", "Invalid type for 'input[1]': "
     "expected an object"),
    ("/v1/responses", RESPONSES, "input", "local", "input[1]", "Invalid type for 'input[1]': "
     "expected an object"),
])
async def test_a_history_item_that_is_not_an_object_is_named(
        gw: RunningGateway, path: str, seed: dict[str, Any], key: str, model: str, field: str,
        said: str, item: Any) -> None:
    body = copy.deepcopy(seed) | {"model": model}
    body[key] = [body[key][0], item, *body[key][1:]]
    assert (await refused(gw, path, body, field)).startswith(said)


@pytest.mark.parametrize(("path", "seed", "where", "value", "field"), [
    ("/v1/messages", ANTHROPIC, ("tool_choice", "type"), ["tool"], "tool_choice.type"),
    ("/v1/messages", ANTHROPIC, ("tool_choice",), "auto", "tool_choice"),
    ("/v1/messages", ANTHROPIC, ("messages", 0, "content", 1, "source"), [{}],
     "messages.0.content.1.source"),
    ("/v1/messages", ANTHROPIC, ("messages", 0, "content", 1, "source", "data"), 5,
     "messages.0.content.1.source.data"),
    ("/v1/messages", ANTHROPIC, ("tools",), "read_file", "tools"),
    ("/v1/messages", ANTHROPIC, ("tools", 0), ["read_file"], "tools.0"),
    ("/v1/messages/count_tokens", ANTHROPIC, ("tools", 0, "input_schema"), [],
     "tools.0.input_schema"),
    ("/v1/responses", RESPONSES, ("tool_choice", "type"), {"a": 1}, "tool_choice.type"),
    ("/v1/responses", RESPONSES, ("tools", 0), 5, "tools[0]"),
    ("/v1/responses", RESPONSES, ("text", "format", "schema"), [1], "text.format.schema"),
    ("/v1/chat/completions", CHAT, ("tools", 0, "function"), [], "tools[0].function"),
    ("/v1/chat/completions", CHAT, ("tools", 0), {"type": "function"}, "tools[0].function"),
    ("/v1/chat/completions", CHAT, ("tools", 0, "type"), "", "tools[0].type"),
    ("/v1/chat/completions", CHAT, ("messages", 2, "tool_calls", 0, "function"), None,
     "messages[2].tool_calls[0].function"),
    ("/v1/responses", RESPONSES, ("tools", 0), {"type": "function"}, "tools[0].name"),
    ("/v1/responses", RESPONSES, ("text", "format"), {"type": "json_schema", "name": "o"},
     "text.format.schema"),
    ("/v1/chat/completions", CHAT, ("tool_choice", "function"), "x", "tool_choice.function"),
    ("/v1/chat/completions", CHAT, ("messages", 2, "tool_calls", 0, "id"), {"a": 1},
     "messages[2].tool_calls[0].id"),
    ("/v1/chat/completions", CHAT, ("messages", 1, "content", 1, "image_url"), 5,
     "messages[1].content[1].image_url"),
])
@pytest.mark.parametrize("model", ["local", "gpt", "claude"])
async def test_fields_the_gateway_reads_are_typed(
    gw: RunningGateway, path: str, seed: dict[str, Any], where: tuple[Any, ...], value: Any,
    field: str, model: str,
) -> None:
    await refused(gw, path, with_field(seed, where, value, model=model), field)


@pytest.mark.parametrize("stream", [False, True])
async def test_echoed_field_at_the_depth_limit_is_refused_not_crashed(
    gw: RunningGateway, stream: bool,
) -> None:
    # metadata's value sits at level 2 of the request, level 3 of a response event: the
    # request is at the limit exactly (accepted by the parser), the event one past it.
    deep = nested(MAX_JSON_DEPTH - 3, [], as_object=False)
    body = dict(RESPONSES, metadata={"k": deep}, stream=stream)
    message = await refused(gw, "/v1/responses", body, "nested too deep")
    assert "echoed" in message


@pytest.mark.parametrize(("path", "seed", "where", "refused_as"), [
    # Responses tools are echoed too, which is checked first.
    ("/v1/responses", RESPONSES, ("tools", 0, "parameters"), "echoed"),
    ("/v1/messages", ANTHROPIC, ("tools", 0, "input_schema"), "Chat Completions"),
])
async def test_translated_field_at_the_depth_limit_is_refused_not_crashed(
    gw: RunningGateway, path: str, seed: dict[str, Any], where: tuple[Any, ...],
    refused_as: str,
) -> None:
    body = with_field(seed, where, nested(MAX_JSON_DEPTH - len(where) - 1, {},
                                          as_object=True), metadata={})
    message = await refused(gw, path, body, "nested too deep")
    assert refused_as in message


ACCEPTED: list[tuple[str, dict[str, Any], tuple[Any, ...], Any]] = [
    ("responses", RESPONSES, ("input", 3, "call_id"), ""),
    ("responses", RESPONSES, ("input", 2), {"type": "reasoning", "id": "rs_2"}),
    ("responses", RESPONSES, ("input", 5, "content", 0, "type"), "input_text"),
    ("responses", RESPONSES, ("input", 6), {"type": "item_reference", "id": "msg_0"}),
    ("responses", RESPONSES, ("input", 3, "id"), 5),
    ("anthropic", ANTHROPIC, ("messages", 0), {"role": "system", "content": "be kind"}),
    ("anthropic", ANTHROPIC, ("messages", 1, "content", 0),
     {"type": "thinking", "thinking": "hmm"}),
    ("anthropic", ANTHROPIC, ("messages", 1, "content", 3, "id"), "toolu_ odd/ü"),
    ("anthropic", ANTHROPIC, ("messages", 2, "content", 0, "cache_control"),
     {"type": "ephemeral", "ttl": "1h"}),
    ("anthropic", ANTHROPIC, ("messages", 0, "content", 0),
     {"type": "search_result", "source": "https://example.invalid", "title": "t",
      "content": [{"type": "text", "text": "found"}]}),
]


@pytest.mark.parametrize(("wire", "seed", "where", "value"), ACCEPTED)
async def test_shapes_a_repair_handles_pass_the_edge(
    gw: RunningGateway, wire: str, seed: dict[str, Any], where: tuple[Any, ...], value: Any,
) -> None:
    status, _, answer = await post_json(gw.root + f"/v1/gateway/project?wire={wire}",
                                with_field(seed, where, value))
    assert status == 200, answer


async def test_a_type_that_is_not_a_string_is_read_past(gw: RunningGateway) -> None:
    # The invisible-character scan walks every object of a body, unknown fields included.
    body = {"model": "local", "messages": [
        {"role": "user", "content": "hi\U000e0041 there", "type": {"a": 1}}]}
    status, _, answer = await post_json(gw.root + "/v1/chat/completions", body)
    assert status == 200, answer


@pytest.mark.parametrize("stream", [False, True])
async def test_a_part_litellm_refuses_is_a_400_not_a_500(gw: RunningGateway,
                                                          stream: bool) -> None:
    # Chat content parts of any type pass the edge (OpenAI-compatible servers take their own,
    # such as video_url); a provider reached through LiteLLM refuses the others.
    body = with_field(CHAT, ("messages", 1, "content", 1, "type"), "tool_use", model="claude",
                      stream=stream)
    message = await refused(gw, "/v1/chat/completions", body, "messages[1].content[1].type")
    assert "tool_use" in message and "Traceback" not in message


async def test_unknown_fields_pass_through_untouched(gw: RunningGateway,
                                                    upstreams: Upstreams) -> None:
    # The edge validates; it never rebuilds: what it does not model arrives as sent.
    items = [{"role": "user", "content": "hi", "x_note": {"kept": [1, {"as": "is"}]}},
             {"type": "message", "role": "user", "x_flag": True,
              "content": [{"type": "input_text", "text": "again", "x_part": "p"}]}]
    body = {"model": "gpt", "input": items, "x_top": {"deep": [[{}]]},
            "tools": [{"type": "function", "name": "f", "x_tool": 1,
                       "parameters": {"type": "object"}}]}
    status, _, answer = await post_json(gw.root + "/v1/responses", body)
    assert status == 200, answer
    sent = upstreams[1].requests[-1].body
    assert sent["input"] == items
    assert sent["x_top"] == body["x_top"] and sent["tools"] == body["tools"]
