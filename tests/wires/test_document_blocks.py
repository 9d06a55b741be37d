"""Anthropic ``document`` blocks are checked like image blocks: a source whose fields are
not strings is a 400 in Anthropic's words, naming the field, and nothing goes upstream (to
a chat-only model it became a garbage data URL before). Valid documents pass as sent."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_fleet import FleetUpstream

PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoKPDwvTGVuZ3RoIDMgMCBSPj4Kc3RyZWFtCg=="


def document(source: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [
        {"type": "document", "title": "spec.pdf", "source": source},
        {"type": "text", "text": "summarize it"}]}]


@pytest.fixture
async def both(gateway_factory: GatewayFactory) -> Any:
    async with FakeAnthropic() as claude, FleetUpstream("local") as local:
        gw = await gateway_factory({"model_list": [
            {"model_name": "claude", "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5", "api_base": claude.base_url,
                "api_key": "sk-ant-doc"}},
            model_entry("local", local.v1, model="openai/qwen3", responses_api=False)]})
        yield gw, claude, local


def client(gw: RunningGateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key="k", max_retries=0)


@pytest.mark.parametrize("model", ["claude", "local"])
@pytest.mark.parametrize(("source", "field"), [
    ({"type": "base64", "media_type": "application/pdf", "data": 12345}, "source.data"),
    ({"type": "base64", "media_type": None, "data": PDF}, "source.media_type"),
    ({"type": "text", "media_type": "text/plain", "data": ["a", "b"]}, "source.data"),
    ({"type": "url", "url": {"href": "https://example.com/a.pdf"}}, "source.url"),
    ({"media_type": "application/pdf", "data": PDF}, "source.type"),
])
async def test_a_malformed_document_source_is_a_400_naming_it(
    both: Any, model: str, source: dict[str, Any], field: str,
) -> None:
    gw, claude, local = both
    async with client(gw) as api:
        with pytest.raises(anthropic.BadRequestError) as info:
            await api.messages.create(model=model, max_tokens=32,
                                      messages=document(source))  # type: ignore[arg-type]
    assert f"messages.0.content.0.{field}" in str(info.value)
    assert claude.requests == [] and local.requests == []


@pytest.mark.parametrize("model", ["claude", "local"])
async def test_a_valid_document_is_answered(both: Any, model: str) -> None:
    gw, claude, local = both
    source = {"type": "base64", "media_type": "application/pdf", "data": PDF}
    async with client(gw) as api:
        message = await api.messages.create(model=model, max_tokens=32,
                                            messages=document(source))  # type: ignore[arg-type]
    assert message.content
    if model == "claude":
        assert claude.requests[-1].body["messages"] == document(source)
    else:
        part = local.requests[-1].body["messages"][0]["content"][0]
        assert part["type"] == "file"
        assert part["file"]["file_data"] == f"data:application/pdf;base64,{PDF}"


@pytest.mark.parametrize(("source", "told"), [
    ({"type": "url", "url": "https://example.com/spec.pdf"},
     "at 'https://example.com/spec.pdf'"),
    ({"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"},
     "Anthropic file 'file_011CNha8iCJcU1wXNR6q4V8w'"),
])
async def test_a_document_a_chat_model_cannot_read_is_named_not_dropped(
    both: Any, source: dict[str, Any], told: str,
) -> None:
    # A chat-only model has no part for a document URL or another provider's file: the
    # model is told a document was attached (and where), rather than never hearing of it.
    gw, _claude, local = both
    async with client(gw) as api:
        await api.messages.create(model="local", max_tokens=32,
                                  messages=document(source))  # type: ignore[arg-type]
    content = local.requests[-1].body["messages"][0]["content"]
    assert isinstance(content, str) and content.endswith("summarize it")
    assert "'spec.pdf'" in content and told in content


async def test_a_document_of_content_blocks_reaches_a_chat_model_as_its_text(
    both: Any,
) -> None:
    gw, _claude, local = both
    source = {"type": "content", "content": [{"type": "text", "text": "Clause 1: pay."},
                                             {"type": "text", "text": "Clause 2: ship."}]}
    async with client(gw) as api:
        await api.messages.create(model="local", max_tokens=32,
                                  messages=document(source))  # type: ignore[arg-type]
    content = local.requests[-1].body["messages"][0]["content"]
    assert content == "Clause 1: pay.\nClause 2: ship.\nsummarize it"


async def test_a_responses_file_url_is_named_to_a_chat_model_not_dropped(both: Any) -> None:
    gw, _claude, local = both
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as api:
        await api.responses.create(model="local", input=[{"role": "user", "content": [
            {"type": "input_file", "file_url": "https://example.com/report.pdf",
             "filename": "report.pdf"},
            {"type": "input_text", "text": "summarize it"}]}])  # type: ignore[list-item]
    content = local.requests[-1].body["messages"][0]["content"]
    assert "'report.pdf'" in content and "at 'https://example.com/report.pdf'" in content
    assert content.endswith("summarize it")
