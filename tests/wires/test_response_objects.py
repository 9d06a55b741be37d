"""The stored-response resource's pure parts: the retrieved object and input item pages."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import ClientError
from gateway.sessions.response_records import KeptResponse
from gateway.wires.response_objects import input_items_page, not_found, retrieved

_ITEM = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, st.text(max_size=5)),
    st.builds(lambda t, i: {"type": "message", "id": f"msg_{i}", "role": "assistant",
                            "content": [{"type": "output_text", "text": t}]},
              st.text(max_size=5), st.integers(0, 10_000)),
    st.builds(lambda c: {"type": "function_call_output", "call_id": c, "output": "x"},
              st.text(min_size=1, max_size=5)),
)


def _unique_ids(items: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for item in items:  # (a sent input never repeats an item id: the API refuses that)
        if item.get("id") in seen:
            continue
        seen.add(item.get("id", ""))
        out.append(item)
    return out


@given(st.lists(_ITEM, max_size=30).map(_unique_ids), st.integers(1, 7),
       st.sampled_from(["asc", "desc"]))
def test_paging_with_after_lists_every_item_once_in_order(items: list[Any], limit: int,
                                                          order: str) -> None:
    record = KeptResponse("resp_1", "", items, [], 0.0)
    listed: list[Any] = []
    query = {"limit": str(limit), "order": order}
    while True:
        page = input_items_page(record, query)
        listed += page["data"]
        assert len(page["data"]) <= limit
        if not page["has_more"]:
            break
        query = {**query, "after": page["last_id"]}
    expected = items if order == "asc" else items[::-1]
    assert len(listed) == len(items)
    assert len({i["id"] for i in listed}) == len(items)  # every item has its own id
    for got, sent in zip(listed, expected, strict=True):
        assert got.get("call_id") == sent.get("call_id")
        assert got["type"] in ("message", "function_call_output")
        if isinstance(sent.get("content"), str):  # text content is listed as a text part
            assert got["content"] == [{"type": "input_text", "text": sent["content"]}]
    assert record.input == items and all("id" not in i for i in items
                                         if i.get("type") != "message")  # input untouched


@pytest.mark.parametrize("query", [{"limit": "0"}, {"limit": "101"}, {"limit": "x"},
                                   {"order": "sideways"}, {"after": "msg_nope"}])
def test_bad_page_queries_are_400s(query: dict[str, str]) -> None:
    record = KeptResponse("resp_1", "", [{"role": "user", "content": "hi"}], [], 0.0)
    with pytest.raises(ClientError) as refused:
        input_items_page(record, query)
    assert refused.value.status == 400


def test_a_record_kept_without_its_object_is_retrieved_as_completed() -> None:
    output = [{"type": "message", "role": "assistant", "content": []}]
    shown = retrieved(KeptResponse("resp_old", "", [], output, 1_700_000_000.5))
    assert shown == {"id": "resp_old", "object": "response", "created_at": 1_700_000_000,
                     "status": "completed", "output": output}


def test_a_refusal_never_repeats_what_is_not_a_response_id() -> None:
    assert "sk-live-secret" not in not_found("sk-live-secret").message
    assert "resp_abc" in not_found("resp_abc").message
