"""A real aiohttp server speaking the OpenAI Responses API (POST /v1/responses).

It enforces the Responses history rules with the real error texts
(/work/shared/wire-errors.jsonl): every ``function_call`` needs a ``function_call_output``
later in the input, every output needs an earlier call, item ids are unique, a
``previous_response_id`` must name a stored response, a ``conversation`` (Conversations
API, ``POST /v1/conversations``) one it made, whose items come first and which gets the
input and output of each response made in it. Answers are deterministic:
``you said: <last user text>``, ``tool results: ...`` after tool outputs, and a
``function_call`` of the first tool when tools are given and the last user text has "TOOL".
Responses are stored (``store`` defaults to true) so ``previous_response_id`` works, and
served at ``GET`` / ``DELETE /v1/responses/{id}``; ``background: true`` answers ``queued``
and completes once polled ``background_polls`` times (``POST .../cancel`` cancels it before),
``GET ...?stream=true`` replays its events after ``starting_after``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from itertools import count
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.native_base import Canned, FakeServer, RequestRefused, rough_tokens

NO_OUTPUT = "No tool output found for function call {id}."
NO_CALL = "No tool call found for function call output with call_id {id}."
DUPLICATE = ("Duplicate item found with id {id}. Remove duplicate items from your input and "
             "try again.")
EMPTY_CALL_ID = ("Invalid 'input[{i}].call_id': empty string. Expected a string with minimum "
                 "length 1, but got an empty string instead.")


REASONING_ALONE = ("Item '{id}' of type 'reasoning' was provided without its required "
                   "following item.")
REASONING_MISSING = ("Item '{id}' of type '{kind}' was provided without its required "
                     "'reasoning' item: '{rs}'.")
NOT_PERSISTED = ("Item with id '{id}' not found. Items are not persisted when `store` is set "
                 "to false. Try again with `store` set to true, or remove this item from your "
                 "input.")
NOT_FOUND = "Item with id '{id}' not found."
WRONG_PREFIX = "Invalid 'input[{i}].id': '{id}'. Expected an ID that begins with '{prefix}'."
UNVERIFIED = ("The encrypted content for item {id} could not be verified. Reason: Encrypted "
              "content could not be decrypted or parsed.")
NO_SUMMARY = "Missing required parameter: 'input[{i}].summary'."
ASSISTANT_INPUT_TEXT = ("Invalid value: 'input_text'. Supported values are: 'output_text' and "
                        "'refusal'.")
PREFIXES = {"message": "msg", "function_call": "fc", "reasoning": "rs", "custom_tool_call": "ctc"}
CALLS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output",
         "computer_call": "computer_call_output",
         "local_shell_call": "local_shell_call_output", "shell_call": "shell_call_output",
         "apply_patch_call": "apply_patch_call_output"}
# How the API names a call kind in its refusals ("No tool output found for custom tool call").
CALL_WORDS = {"function_call": "function call", "custom_tool_call": "custom tool call",
              "computer_call": "computer call", "local_shell_call": "local shell call",
              "shell_call": "shell call", "apply_patch_call": "apply patch call"}
DUPLICATE_OUTPUT = ("Duplicate function_call_output for call_id '{id}'. Each function_call "
                    "must have exactly one matching function_call_output")
USER_OUTPUT_TEXT = ("Invalid value: 'output_text'. Supported values are: 'input_text', "
                    "'input_image', and 'input_file'.")
MISSING_CALL_ID = "Missing required parameter: 'input[{i}].call_id'."
# orchidfiles/ungate#26, AnswerDotAI/fastllm#45 (code string_above_max_length).
LONG_CALL_ID = ("Invalid 'input[{i}].call_id': string too long. Expected a string with maximum "
                "length 64, but got a string with length {n} instead.")
# A computer call is answered by a screenshot only (browserbase/stagehand-python#149).
COMPUTER_OUTPUT = ("Invalid type for 'input[{i}].output': expected a computer call output, "
                   "but got {got} instead.")
# OpenAI's invalid-type wording (as for the computer call output above): text fields.
NOT_TEXT = ("Invalid type for 'input[{i}].{field}': expected {expected}, but got an object "
            "instead.")
TEXT_FIELDS = {"function_call": ("arguments", "a string"),
               "custom_tool_call": ("input", "a string"),
               "function_call_output": ("output", "a string or an array of input content items"),
               "custom_tool_call_output": ("output", "a string or an array of input content "
                                                     "items")}
# The shell tool's output is a list of runs ({stdout, stderr, outcome}); an apply_patch
# output says whether the patch applied (status completed / failed).
SHELL_OUTPUT = ("Invalid type for 'input[{i}].output': expected an array of shell call "
                "output content, but got a string instead.")
MISSING_STATUS = "Missing required parameter: 'input[{i}].status'."
EMPTY_INPUT = ("Invalid 'input': empty array. Expected an array with minimum length 1, but "
               "got an empty array instead.")
# Items a model produces (what may follow a reasoning item).
OUTPUT_TYPES = ("function_call", "custom_tool_call", "web_search_call", "file_search_call",
                "reasoning", "image_generation_call", "code_interpreter_call", "mcp_call",
                "computer_call", "local_shell_call", "shell_call", "apply_patch_call")
# Encrypted content this API minted (anything else it cannot decrypt).
OWN_ENCRYPTION = "gAAAA"


def _is_output(item: Any) -> bool:
    kind = _kind(item)
    return (kind == "message" and item.get("role") == "assistant") or kind in OUTPUT_TYPES


NO_REASONING = "Reasoning input items are not supported for model '{model}'."
# The input item types the API takes (any other: "Invalid value: 'function_result'").
ITEM_TYPES = ("message", "reasoning", "item_reference", "compaction", "mcp_list_tools",
              "mcp_approval_request", "mcp_approval_response", *OUTPUT_TYPES,
              "function_call_output", "custom_tool_call_output", "computer_call_output",
              "local_shell_call_output", "shell_call_output", "apply_patch_call_output")
UNKNOWN_TYPE = ("Invalid value: '{kind}'. Supported values are: 'message', 'function_call', "
                "'function_call_output', 'reasoning', 'item_reference', and {n} others.")
# A chat-style {"role": "tool"} message (openai/openai-python#2677).
BAD_ROLE = ("Invalid value: '{role}'. Supported values are: 'assistant', 'system', "
            "'developer', and 'user'.")
MISSING_OUTPUT = "Missing required parameter: 'input[{i}].output'."
NULL_OUTPUT = ("Invalid type for 'input[{i}].output': expected a string or an array of input "
               "content items, but got null instead.")
TEXT_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def validate_wire_items(items: list[Any], *, store: bool = True,
                        persisted: dict[str, Any] | None = None,
                        links: dict[str, str] | None = None,
                        reasoning_model: str | None = None,
                        encryption: str = OWN_ENCRYPTION) -> None:
    """The Responses API's own item rules (ids, reasoning, references, encryption), raising
    RequestRefused with its wording. ``persisted``: items the API stored, by id; ``links``:
    output item id -> the id of the reasoning item it was produced with;
    ``reasoning_model``: the name of a model that takes no reasoning items;
    ``encryption``: how the encrypted content this API can decrypt begins."""
    persisted = persisted or {}
    present = {i.get("id") for i in items if isinstance(i, dict)}
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        kind = _kind(item)
        item_id = item.get("id")
        if kind not in ITEM_TYPES:
            raise RequestRefused(400, UNKNOWN_TYPE.format(kind=kind, n=len(ITEM_TYPES) - 5))
        if kind == "message" and item.get("role") not in ("user", "assistant", "system",
                                                           "developer"):
            raise RequestRefused(400, BAD_ROLE.format(role=item.get("role")))
        if kind in TEXT_OUTPUTS and "output" not in item:
            raise RequestRefused(400, MISSING_OUTPUT.format(i=i))
        if kind in TEXT_OUTPUTS and item["output"] is None:
            raise RequestRefused(400, NULL_OUTPUT.format(i=i))
        if kind in TEXT_OUTPUTS and isinstance(item["output"], list) and any(
                isinstance(p, dict) and p.get("type") == "output_text" for p in item["output"]):
            raise RequestRefused(400, USER_OUTPUT_TEXT)
        if "id" in item and kind != "item_reference":
            prefix = PREFIXES.get(kind)
            if not isinstance(item_id, str) or not item_id or (
                    prefix and not item_id.startswith(prefix)):
                raise RequestRefused(400, WRONG_PREFIX.format(i=i, id=item_id,
                                                              prefix=prefix or "?"))
        if kind == "item_reference" and item_id not in persisted:
            raise RequestRefused(404, (NOT_PERSISTED if not store else NOT_FOUND)
                                 .format(id=item_id))
        if kind == "message" and item.get("role") == "assistant" and isinstance(
                item.get("content"), list) and any(
                isinstance(p, dict) and p.get("type") == "input_text" for p in item["content"]):
            raise RequestRefused(400, ASSISTANT_INPUT_TEXT)
        if kind == "message" and item.get("role") in ("user", "system", "developer") and \
                isinstance(item.get("content"), list) and any(
                isinstance(p, dict) and p.get("type") == "output_text" for p in item["content"]):
            raise RequestRefused(400, USER_OUTPUT_TEXT)
        secret = item.get("encrypted_content")
        if secret is not None and not str(secret).startswith(encryption):
            raise RequestRefused(400, UNVERIFIED.format(id=item_id))
        if kind == "reasoning":
            if reasoning_model is not None:
                raise RequestRefused(400, NO_REASONING.format(model=reasoning_model))
            if not isinstance(item.get("summary"), list):
                raise RequestRefused(400, NO_SUMMARY.format(i=i))
            if secret is None and (not store or item_id not in persisted):
                raise RequestRefused(404, (NOT_PERSISTED if not store else NOT_FOUND)
                                     .format(id=item_id))
            following = items[i + 1] if i + 1 < len(items) else None
            if (isinstance(following, dict) and _kind(following) == "item_reference"
                    and store):  # (a reference stands for the stored item)
                following = persisted.get(following.get("id"))
            if following is None or not _is_output(following):
                raise RequestRefused(400, REASONING_ALONE.format(id=item_id))
        needed = (links or {}).get(str(item_id))
        if needed is not None and needed not in present:
            raise RequestRefused(400, REASONING_MISSING.format(id=item_id, kind=kind,
                                                               rs=needed))


# The value rules of the items' fields (OpenAI's wordings for a schema violation).
REASONING_CONTENT = ("Invalid 'input[{i}].content': array too long. Expected an array with "
                     "maximum length 0, but got an array with length {n} instead.")
EMPTY_ARRAY = ("Invalid 'input[{i}].{field}': empty array. Expected an array with minimum "
               "length 1, but got an empty array instead.")
NULL_CONTENT = ("Invalid type for 'input[{i}].content': expected one of a string or an array "
                "of input content items, but got null instead.")
SCALAR_OUTPUT = ("Invalid type for 'input[{i}].output': expected a string or an array of "
                 "input content items, but got {got} instead.")
SHELL_TEXT_OUTPUT = ("Invalid type for 'input[{i}].output': expected a string, but got an "
                     "array instead.")
PART_TYPES = ("input_text", "input_image", "output_text", "refusal", "input_file",
              "computer_screenshot", "summary_text")
UNKNOWN_PART = ("Invalid value: '{kind}'. Supported values are: 'input_text', 'input_image', "
                "'output_text', 'refusal', 'input_file', 'computer_screenshot', and "
                "'summary_text'.")
IMAGE_URL_TYPE = ("Invalid type for 'input[{i}].content[{j}].image_url': expected a string, "
                  "but got an object instead.")
SUMMARY_TYPE = ("Invalid type for 'input[{i}].summary': expected an array of objects, but got "
                "a string instead.")
SUMMARY_PART = "Invalid value: '{kind}'. Supported values are: 'summary_text'."
UNKNOWN_FIELD = "Unknown parameter: 'input[{i}].{field}'."
MISSING_NAME = "Missing required parameter: 'input[{i}].name'."
MISSING_FIELD = "Missing required parameter: 'input[{i}].{field}'."
NULL_TEXT = ("Invalid type for 'input[{i}].{field}': expected a string, but got null "
             "instead.")
# The parts a tool output's list takes (a chat "text" part: "Invalid value: 'text'").
OUTPUT_PARTS = ("input_text", "input_image", "input_file", "output_text")
OUTPUT_PART = ("Invalid value: '{kind}'. Supported values are: 'input_text', 'input_image', "
               "and 'input_file'.")
BOTH_STATES = ("Mutually exclusive parameters: Ensure you are only providing one of: "
               "'previous_response_id' or 'conversation'.")
_JSON_TYPES = {bool: "a boolean", int: "an integer", float: "a number"}
# A tool_choice forcing a built-in tool the request does not declare (Codex's
# image_generation on an account without it, a web_search choice left after a trimmer
# removed the tool): the API's words, param tool_choice.
CHOICE_NOT_IN_TOOLS = "Tool choice '{kind}' not found in 'tools' parameter."
_NAMED_CHOICES = ("function", "custom", "allowed_tools", "mcp")


def validate_item_values(items: list[Any]) -> None:
    """The Responses API's rules on the values of item fields (parts, outputs, summaries),
    raising RequestRefused with its wording."""
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        kind = _kind(item)
        content = item.get("content")
        if kind == "reasoning":
            if isinstance(content, list) and content:
                raise RequestRefused(400, REASONING_CONTENT.format(i=i, n=len(content)))
            summary = item.get("summary")
            if isinstance(summary, str):
                raise RequestRefused(400, SUMMARY_TYPE.format(i=i))
            for part in summary if isinstance(summary, list) else ():
                if isinstance(part, dict) and part.get("type") != "summary_text":
                    raise RequestRefused(400, SUMMARY_PART.format(kind=part.get("type")))
        if kind == "message":
            if "tool_calls" in item:
                raise RequestRefused(400, UNKNOWN_FIELD.format(i=i, field="tool_calls"))
            if content == []:
                raise RequestRefused(400, EMPTY_ARRAY.format(i=i, field="content"))
            if content is None:
                raise RequestRefused(400, NULL_CONTENT.format(i=i))
            for j, part in enumerate(content if isinstance(content, list) else ()):
                if not isinstance(part, dict):
                    continue
                if part.get("type") not in PART_TYPES:
                    raise RequestRefused(400, UNKNOWN_PART.format(kind=part.get("type")))
                if part.get("type") == "input_image" and isinstance(part.get("image_url"),
                                                                      dict):
                    raise RequestRefused(400, IMAGE_URL_TYPE.format(i=i, j=j))
        if kind in ("function_call", "custom_tool_call") and not item.get("name"):
            raise RequestRefused(400, MISSING_NAME.format(i=i))
        if kind in ("function_call", "custom_tool_call"):
            field = TEXT_FIELDS[kind][0]
            if field not in item:  # (an SDK that left an undefined tool input out)
                raise RequestRefused(400, MISSING_FIELD.format(i=i, field=field))
            if item[field] is None:
                raise RequestRefused(400, NULL_TEXT.format(i=i, field=field))
        output = item.get("output")
        if kind in TEXT_OUTPUTS and output == []:
            raise RequestRefused(400, EMPTY_ARRAY.format(i=i, field="output"))
        for part in output if kind in TEXT_OUTPUTS and isinstance(output, list) else ():
            if isinstance(part, dict) and part.get("type") not in OUTPUT_PARTS:
                raise RequestRefused(400, OUTPUT_PART.format(kind=part.get("type")))
        if kind in TEXT_OUTPUTS and type(output) in _JSON_TYPES:
            raise RequestRefused(400, SCALAR_OUTPUT.format(i=i, got=_JSON_TYPES[type(output)]))
        if kind == "local_shell_call_output" and isinstance(output, list):
            raise RequestRefused(400, SHELL_TEXT_OUTPUT.format(i=i))


def validate_stateless_ids(items: list[Any], persisted: dict[str, Any]) -> None:
    """Under ``store: false``, an item id the API never stored is refused as a reference it
    cannot resolve (what it answers some organizations for message and call ids too); a
    reasoning item that carries its encrypted content is the exception."""
    for item in items:
        if not isinstance(item, dict) or _kind(item) == "item_reference":
            continue
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id not in persisted and not (
                _kind(item) == "reasoning" and item.get("encrypted_content")):
            raise RequestRefused(404, NOT_PERSISTED.format(id=item_id))


def responses_error(status: int, message: str, param: str | None = "input",
                    code: str | None = None) -> Canned:
    """A native Responses error answer (the OpenAI envelope)."""
    return Canned(status, {"error": {"message": message, "type": "invalid_request_error",
                                     "param": param, "code": code}})


def _kind(item: dict[str, Any]) -> str:
    kind = item.get("type")
    return kind if isinstance(kind, str) else "message"


def validate_input(items: list[Any]) -> None:
    """Raise RequestRefused like the real API for a broken input history."""
    seen_ids: set[str] = set()
    calls: dict[str, str] = {}  # call_id -> the call's kind
    answered: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RequestRefused(400, f"Invalid type for 'input[{i}]': expected an object.")
        item_id = item.get("id")
        if isinstance(item_id, str):
            if item_id in seen_ids:
                raise RequestRefused(400, DUPLICATE.format(id=item_id))
            seen_ids.add(item_id)
        kind = _kind(item)
        if kind in (*CALLS, *CALLS.values()) and item.get("call_id") == "":
            raise RequestRefused(400, EMPTY_CALL_ID.format(i=i))
        if kind in (*CALLS, *CALLS.values()) and "call_id" not in item:
            raise RequestRefused(400, MISSING_CALL_ID.format(i=i))
        if kind in (*CALLS, *CALLS.values()) and len(str(item.get("call_id"))) > 64:
            raise RequestRefused(400, LONG_CALL_ID.format(i=i, n=len(str(item["call_id"]))))
        if kind in TEXT_FIELDS and isinstance(item.get(TEXT_FIELDS[kind][0]), dict):
            field, expected = TEXT_FIELDS[kind]
            raise RequestRefused(400, NOT_TEXT.format(i=i, field=field, expected=expected))
        output = item.get("output")
        if kind == "shell_call_output" and not isinstance(output, list):
            raise RequestRefused(400, SHELL_OUTPUT.format(i=i))
        if kind == "apply_patch_call_output" and item.get("status") not in ("completed",
                                                                             "failed"):
            raise RequestRefused(400, MISSING_STATUS.format(i=i))
        if kind == "computer_call_output" and not (
                isinstance(output, dict) and output.get("type") == "computer_screenshot"):
            got = "a string" if isinstance(output, str) else "an invalid value"
            raise RequestRefused(400, COMPUTER_OUTPUT.format(i=i, got=got))
        if kind in CALLS:
            calls[str(item.get("call_id"))] = kind
        elif kind in CALLS.values():
            call_id = str(item.get("call_id"))
            # An output pairs with a call of its own kind only (a custom tool call is not
            # answered by a function_call_output).
            if call_id not in calls or CALLS[calls[call_id]] != kind:
                call_kind = next(c for c, o in CALLS.items() if o == kind)
                raise RequestRefused(400, NO_CALL.replace("function call", CALL_WORDS[call_kind])
                                     .format(id=call_id))
            if call_id in answered:
                raise RequestRefused(400, DUPLICATE_OUTPUT.format(id=call_id))
            answered.add(call_id)
    for call_id, call_kind in calls.items():
        if call_id not in answered:
            raise RequestRefused(400, NO_OUTPUT.replace("function call", CALL_WORDS[call_kind])
                                 .format(id=call_id))


# A Responses server that pairs outputs with the calls right before them (DeepSeek's).
NOT_ADJACENT = "No tool output found for tool call {id}."


def validate_adjacent_outputs(items: list[Any]) -> None:
    """Refuse, with DeepSeek's words, an output that does not follow its call's run of calls
    before any other item (OpenAI pairs them by call_id wherever they come)."""
    waiting: list[str] = []  # calls of the current run not answered yet
    for item in items:
        kind = _kind(item) if isinstance(item, dict) else ""
        if kind in CALLS:
            waiting.append(str(item.get("call_id")))
        elif kind in CALLS.values() and str(item.get("call_id")) in waiting:
            waiting.remove(str(item.get("call_id")))
        elif waiting and kind != "reasoning":
            raise RequestRefused(400, NOT_ADJACENT.format(id=waiting[0]))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content
                        if isinstance(p, dict) and p.get("type") in ("input_text", "output_text"))
    return ""


class FakeResponses(FakeServer):
    """The fake Responses API. ``api_key`` (optional) is the only Bearer key accepted."""

    def __init__(self, *, api_key: str | None = None, reasoning: bool = True,
                 adjacent_outputs: bool = False) -> None:
        super().__init__()
        self.api_key = api_key
        self.reasoning = reasoning  # False: a model that refuses reasoning input items
        self.adjacent_outputs = adjacent_outputs  # True: outputs right after their calls
        # True: under store false, ids of items it never stored are refused (not persisted)
        self.stateless_ids = False
        # How the encrypted content it mints begins (another value: another organization or
        # provider, which cannot decrypt this one's reasoning items and vice versa).
        self.encryption = OWN_ENCRYPTION
        self._ids = count(1)
        self.stored: dict[str, list[Any]] = {}
        self.persisted: dict[str, Any] = {}  # stored items by id (item_reference resolves)
        self.links: dict[str, str] = {}  # output item id -> its reasoning item's id
        self.conversations: dict[str, list[Any]] = {}  # the Conversations API's items
        self.responses: dict[str, dict[str, Any]] = {}  # stored response objects by id
        self.under_way: dict[str, dict[str, Any]] = {}  # background ones: their final object
        self.background_polls = 1  # polls answered in_progress before one completes
        # A streamed background response: its connection is cut after this many events (the
        # response goes on upstream, to be polled or its stream resumed).
        self.cut_background_streams: int | None = None
        self._polled: dict[str, int] = {}

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/responses/compact", self._compact)
        app.router.add_post("/v1/conversations", self._conversations)
        app.router.add_get("/v1/responses/{id}", self._retrieve)
        app.router.add_delete("/v1/responses/{id}", self._delete)
        app.router.add_post("/v1/responses/{id}/cancel", self._cancel)

    def _refused_key(self, recorded: Any) -> web.Response | None:
        if self.api_key is not None and \
                recorded.headers.get("authorization", "") != f"Bearer {self.api_key}":
            return Canned(401, {"error": {"message": "Incorrect API key provided.",
                                          "type": "invalid_request_error", "param": None,
                                          "code": "invalid_api_key"}}).response()
        return None

    @staticmethod
    def _unknown(response_id: str) -> web.Response:
        return Canned(404, {"error": {"message": f"Response with id '{response_id}' not found.",
                                      "type": "invalid_request_error", "param": None,
                                      "code": None}}).response()

    async def _retrieve(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/responses/{id}``: a stored response; a background one in progress until
        polled ``background_polls`` times; ``stream=true``: its events, replayed."""
        recorded = await self.record(request)
        scripted = self.next_scripted()
        if isinstance(scripted, Canned):
            return scripted.response()
        if (refused := self._refused_key(recorded)) is not None:
            return refused
        response_id = request.match_info["id"]
        final = self.under_way.get(response_id)
        if final is not None:
            polls = self._polled[response_id] = self._polled.get(response_id, 0) + 1
            if polls > self.background_polls or request.query.get("stream") == "true":
                del self.under_way[response_id]
                self.responses[response_id] = final
            else:
                return web.json_response({**final, "status": "in_progress", "output": [],
                                          "usage": None})
        found = self.responses.get(response_id)
        if found is None:
            return self._unknown(response_id)
        if request.query.get("stream") != "true":
            return web.json_response(found)
        after = int(request.query.get("starting_after", "-1"))
        stream = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await stream.prepare(request)
        async for event in self._events(found):
            if event["sequence_number"] > after:
                await stream.write(f"event: {event['type']}\ndata: ".encode()
                                   + orjson.dumps(event) + b"\n\n")
        await stream.write_eof()
        return stream

    async def _delete(self, request: web.Request) -> web.Response:
        """``DELETE /v1/responses/{id}``."""
        recorded = await self.record(request)
        if (refused := self._refused_key(recorded)) is not None:
            return refused
        response_id = request.match_info["id"]
        if self.responses.pop(response_id, None) is None and \
                self.under_way.pop(response_id, None) is None:
            return self._unknown(response_id)
        self.stored.pop(response_id, None)
        return web.json_response({"id": response_id, "object": "response", "deleted": True})

    async def _cancel(self, request: web.Request) -> web.Response:
        """``POST /v1/responses/{id}/cancel``: a background response under way."""
        recorded = await self.record(request)
        if (refused := self._refused_key(recorded)) is not None:
            return refused
        response_id = request.match_info["id"]
        final = self.under_way.pop(response_id, None)
        if final is None:
            if response_id in self.responses:
                return responses_error(400, "Cannot cancel a response that is not a "
                                       "background response in progress.",
                                       param=None).response()
            return self._unknown(response_id)
        cancelled = {**final, "status": "cancelled", "output": [], "usage": None}
        self.responses[response_id] = cancelled
        self.stored.pop(response_id, None)
        return web.json_response(cancelled)

    async def _compact(self, request: web.Request) -> web.Response:
        """``POST /v1/responses/compact``: the input's user messages, then one compaction
        item (as the API answers: ``response.compaction``)."""
        recorded = await self.record(request)
        scripted = self.next_scripted()
        if isinstance(scripted, Canned):
            return scripted.response()
        body = recorded.body if isinstance(recorded.body, dict) else {}
        auth = recorded.headers.get("authorization", "")
        if self.api_key is not None and auth != f"Bearer {self.api_key}":
            return Canned(401, {"error": {"message": "Incorrect API key provided.",
                                          "type": "invalid_request_error", "param": None,
                                          "code": "invalid_api_key"}}).response()
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        if not items and body.get("previous_response_id") is None:
            return responses_error(400, EMPTY_INPUT, param="input",
                                   code="empty_array").response()
        try:  # the same item rules as /v1/responses (openai/codex#5385)
            validate_item_values(items)
            validate_wire_items(items, persisted=self.persisted, links=self.links,
                                encryption=self.encryption)
            validate_input(items)
        except RequestRefused as exc:
            return responses_error(exc.status, exc.message).response()
        users = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
        number = next(self._ids)
        return web.json_response({
            "id": f"resp_compact_{number:04d}", "object": "response.compaction",
            "created_at": 1700000000,
            "output": [*({"type": "message", "role": "user", "id": f"msg_c{number}_{k}",
                          "status": "completed", "content": u.get("content")}
                         for k, u in enumerate(users)),
                       {"type": "compaction", "id": f"cmp_{number:04d}",
                        "encrypted_content": f"gAAAA-compacted-{len(items)}-items"}],
            "usage": {"input_tokens": 40 * len(items), "output_tokens": 30,
                      "total_tokens": 40 * len(items) + 30,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}})

    async def _conversations(self, request: web.Request) -> web.Response:
        """``POST /v1/conversations``: a new conversation (its ``items`` to start with)."""
        recorded = await self.record(request)
        conversation_id = f"conv_fake_{next(self._ids):04d}"
        body = recorded.body if isinstance(recorded.body, dict) else {}
        self.conversations[conversation_id] = list(body.get("items") or [])
        return web.json_response({"id": conversation_id, "object": "conversation",
                                  "created_at": 1700000000, "metadata": {}})

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        recorded = await self.record(request)
        scripted = self.next_scripted()
        if isinstance(scripted, Canned):
            return scripted.response()
        body = recorded.body
        auth = recorded.headers.get("authorization", "")
        if self.api_key is not None and auth != f"Bearer {self.api_key}":
            return Canned(401, {"error": {"message": "Incorrect API key provided.",
                                          "type": "invalid_request_error", "param": None,
                                          "code": "invalid_api_key"}}).response()
        conversation = body.get("conversation")
        if isinstance(conversation, dict):
            conversation = conversation.get("id")
        if body.get("input") == [] and body.get("previous_response_id") is None \
                and conversation is None:
            return responses_error(400, EMPTY_INPUT, param="input",
                                   code="empty_array").response()
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        previous = body.get("previous_response_id")
        if previous is not None and conversation is not None:
            return responses_error(400, BOTH_STATES, param=None,
                                   code="mutually_exclusive_parameters").response()
        if previous is not None:
            if previous not in self.stored:
                return Canned(400, {"error": {
                    "message": f"Previous response with id '{previous}' not found.",
                    "type": "invalid_request_error", "param": "previous_response_id",
                    "code": "previous_response_not_found"}}).response()
            items = self.stored[previous] + items
        new_items = list(items)
        if conversation is not None:  # the conversation's items come first
            if conversation not in self.conversations:
                return Canned(404, {"error": {
                    "message": f"Conversation with id '{conversation}' not found.",
                    "type": "invalid_request_error", "param": "conversation",
                    "code": None}}).response()
            items = self.conversations[conversation] + items
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") not in _NAMED_CHOICES and not any(
                isinstance(t, dict) and t.get("type") == choice.get("type")
                for t in body.get("tools") or ()):
            return responses_error(400, CHOICE_NOT_IN_TOOLS.format(kind=choice.get("type")),
                                   param="tool_choice").response()
        store = body.get("store", True) is not False
        try:
            validate_item_values(items)  # the schema first, as the API checks it
            validate_wire_items(items, store=store, persisted=self.persisted, links=self.links,
                                reasoning_model=None if self.reasoning else body.get("model"),
                                encryption=self.encryption)
            if self.stateless_ids and not store:
                validate_stateless_ids(items, self.persisted)
            # A reference stands for the stored item (a call it names is paired as one).
            validate_input([self.persisted.get(i.get("id"), i) if isinstance(i, dict)
                            and _kind(i) == "item_reference" else i for i in items])
            if self.adjacent_outputs:
                validate_adjacent_outputs(items)
        except RequestRefused as exc:
            return responses_error(exc.status, exc.message).response()
        output = self._reply(body, items)
        if isinstance(body.get("reasoning"), dict):  # a reasoning model: reasoning first
            reasoning_id = f"rs_fake_{next(self._ids):04d}"
            for item in output:
                self.links[item["id"]] = reasoning_id
            output.insert(0, {"type": "reasoning", "id": reasoning_id, "summary": [],
                              "encrypted_content": f"{self.encryption}-fake-{reasoning_id}"})
        response_id = f"resp_fake_{next(self._ids):04d}"
        if conversation is not None:
            self.conversations[conversation] += new_items + output
        if store:
            self.stored[response_id] = items + output
            self.persisted.update((i["id"], i) for i in items + output
                                  if isinstance(i, dict) and isinstance(i.get("id"), str))
        response = {
            "id": response_id, "object": "response", "created_at": 1700000000,
            "status": "completed", "model": body.get("model"), "output": output,
            "parallel_tool_calls": True, "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []), "error": None, "incomplete_details": None,
            "previous_response_id": previous,
            "usage": {"input_tokens": rough_tokens(items), "output_tokens": 5,
                      "total_tokens": rough_tokens(items) + 5,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }
        if store:
            self.responses[response_id] = response
        if body.get("background") is True:
            response["background"] = True
            if not body.get("stream"):  # queued now, finished once polled
                self.responses.pop(response_id, None)
                self.under_way[response_id] = response
                return web.json_response({**response, "status": "queued", "output": [],
                                          "usage": None})
        if not body.get("stream"):
            return web.json_response(response, dumps=lambda v: orjson.dumps(v).decode())
        stream = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await stream.prepare(request)
        cut = self.cut_background_streams if body.get("background") is True else None
        if cut is not None:
            self.responses.pop(response_id, None)
            self.under_way[response_id] = response
        async for event in self._events(response):
            if cut is not None and event["sequence_number"] >= cut:
                assert request.transport is not None
                request.transport.close()  # the connection drops mid-stream
                return stream
            await stream.write(f"event: {event['type']}\ndata: ".encode()
                               + orjson.dumps(event) + b"\n\n")
        await stream.write_eof()
        return stream

    def _reply(self, body: dict[str, Any], items: list[Any]) -> list[dict[str, Any]]:
        tail: list[Any] = []
        for item in reversed(items):
            if _kind(item) == "message" and item.get("role") == "assistant":
                break
            if _kind(item) == "function_call":
                break
            tail.insert(0, item)
        users = [_text(i.get("content")) for i in tail
                 if _kind(i) == "message" and i.get("role") == "user"]
        text = " ".join(users)
        results = [str(i.get("output")) for i in items if _kind(i) == "function_call_output"]
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
        last_is_output = bool(items) and _kind(items[-1]) == "function_call_output"
        n = next(self._ids)
        if tools and "TOOL" in text and not last_is_output:
            return [{"type": "function_call", "id": f"fc_fake_{n:04d}",
                     "call_id": f"call_fake_{n:04d}", "name": tools[0].get("name"),
                     "arguments": orjson.dumps({"query": text}).decode(),
                     "status": "completed"}]
        said = f"tool results: {'; '.join(results)}" if last_is_output else f"you said: {text}"
        fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) \
            else None
        schema = fmt.get("schema") if isinstance(fmt, dict) else None
        if isinstance(schema, dict) and "said" in (schema.get("properties") or {}):
            said = orjson.dumps({"said": said}).decode()  # a structured answer of its schema
        return [{"type": "message", "id": f"msg_fake_{n:04d}", "status": "completed",
                 "role": "assistant",
                 "content": [{"type": "output_text", "text": said, "annotations": []}]}]

    async def _events(self, response: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        seq = count()
        opened = {**response, "status": "in_progress", "output": []}
        yield {"type": "response.created", "sequence_number": next(seq), "response": opened}
        for index, item in enumerate(response["output"]):
            if item["type"] == "message":
                yield {"type": "response.output_item.added", "sequence_number": next(seq),
                       "output_index": index, "item": {**item, "content": [],
                                                       "status": "in_progress"}}
                part = item["content"][0]
                where = {"item_id": item["id"], "output_index": index, "content_index": 0}
                yield {"type": "response.content_part.added", "sequence_number": next(seq),
                       **where, "part": {**part, "text": ""}}
                text = part["text"]
                for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                    yield {"type": "response.output_text.delta", "sequence_number": next(seq),
                           **where, "delta": piece, "logprobs": []}
                yield {"type": "response.output_text.done", "sequence_number": next(seq),
                       **where, "text": text, "logprobs": []}
                yield {"type": "response.content_part.done", "sequence_number": next(seq),
                       **where, "part": part}
            elif item["type"] == "reasoning":
                yield {"type": "response.output_item.added", "sequence_number": next(seq),
                       "output_index": index, "item": item}
            else:
                yield {"type": "response.output_item.added", "sequence_number": next(seq),
                       "output_index": index, "item": {**item, "arguments": ""}}
                yield {"type": "response.function_call_arguments.delta",
                       "sequence_number": next(seq), "item_id": item["id"],
                       "output_index": index, "delta": item["arguments"]}
            yield {"type": "response.output_item.done", "sequence_number": next(seq),
                   "output_index": index, "item": item}
        yield {"type": "response.completed", "sequence_number": next(seq), "response": response}
